"""Every physical parameter that calibration may touch, as one typed object.

:class:`PhysicsParams` holds per-joint position gain, damping, dry friction and armature for the
12 arm joints, the gripper's gain, the sliding friction of task objects and gripper pads, a
mass scale for task objects, and two actuator effects real arms have: an actuation delay in whole
control steps (``latency_steps``) and a per-joint backlash dead band on the commanded target
(``backlash``); both default to zero, an ideal actuator. :func:`apply_physics` writes it into a
compiled ``mujoco.MjModel`` in place, so a calibrator can try thousands of parameter sets without
recompiling the scene.

Nominal values are MuJoCo Menagerie's system-identified ALOHA figures (``aloha/aloha.xml``):
gains 43 / 265 / 227 / 78 / 37 / 10.4, damping 5.76 / 20 / 18.49 / 6.78 / 6.28 / 1.2, armature and
frictionloss as there, gripper kp 2000. gym-aloha's much stiffer gains (kp 800-1600, frictionloss
30-60) are tuned for a scripted demo, not measured on a robot.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from embodied_gym.sim.robot import ARM_JOINTS, ARMS

ARM_JOINT_NAMES: tuple[str, ...] = tuple(f"{a}_{j}" for a in ARMS for j in ARM_JOINTS)

_KP = (43.0, 265.0, 227.0, 78.0, 37.0, 10.4)
_DAMPING = (5.76, 20.0, 18.49, 6.78, 6.28, 1.2)
_FRICTIONLOSS = (0.0, 2.0, 1.15, 0.0, 0.0, 0.0)
_ARMATURE = (0.0, 0.395, 0.383, 0.14, 0.008, 0.0)

# Allowed ranges: wide enough for any real arm, narrow enough to catch unit mistakes.
_PER_JOINT_RANGES = {
    "kp": (1e-3, 1e5),
    "damping": (0.0, 1e4),
    "frictionloss": (0.0, 1e3),
    "armature": (0.0, 100.0),
    "backlash": (0.0, 0.5),
}
_SCALAR_RANGES = {
    "gripper_kp": (1e-3, 1e6),
    "object_friction": (1e-3, 10.0),
    "pad_friction": (1e-3, 10.0),
    "object_mass_scale": (1e-3, 100.0),
}


_MAX_LATENCY = 50  # 1 s of actuation delay


def _both_arms(values: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(values) * 2


def _describe(v: Any) -> str:
    """``v`` as the user wrote it (JSON spelling for JSON values) and its type."""
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(v).__name__})"


def _number(where: str, v: Any) -> float:
    """``v`` as a float if it is a real number; strings, booleans and null are refused."""
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    hint = " (write the number without quotes)" if isinstance(v, str) else ""
    raise ValueError(f"{where} must be a number, got {_describe(v)}{hint}")


def _per_joint_values(name: str, v: Any) -> tuple[float, ...]:
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, (list, tuple, np.ndarray)):
        raise ValueError(
            f"{name} must be a list of {len(ARM_JOINT_NAMES)} numbers (ordered "
            f"{', '.join(ARM_JOINT_NAMES)}) or a {{joint name: number}} mapping, got {_describe(v)}"
        )
    items = v.reshape(-1).tolist() if isinstance(v, np.ndarray) else v
    names = ARM_JOINT_NAMES if len(items) == len(ARM_JOINT_NAMES) else range(len(items))
    return tuple(_number(f"{name}[{j}]", x) for j, x in zip(names, items))


@dataclass(frozen=True)
class PhysicsParams:
    """Physical parameters of the scene. Per-joint fields have 12 entries ordered as
    :data:`ARM_JOINT_NAMES` (left arm waist..wrist_rotate, then right arm)."""

    kp: tuple[float, ...] = field(default_factory=lambda: _both_arms(_KP))
    """Position-actuator gain per arm joint (N·m/rad)."""
    damping: tuple[float, ...] = field(default_factory=lambda: _both_arms(_DAMPING))
    """Viscous joint damping (N·m·s/rad)."""
    frictionloss: tuple[float, ...] = field(default_factory=lambda: _both_arms(_FRICTIONLOSS))
    """Dry (Coulomb) joint friction (N·m)."""
    armature: tuple[float, ...] = field(default_factory=lambda: _both_arms(_ARMATURE))
    """Reflected rotor inertia (kg·m²)."""
    gripper_kp: float = 2000.0
    """Position gain of each finger actuator (N/m)."""
    object_friction: float = 1.0
    """Sliding friction coefficient of the task objects."""
    pad_friction: float = 1.0
    """Sliding friction coefficient of the gripper finger pads."""
    object_mass_scale: float = 1.0
    """Multiplies every task object's nominal mass (and inertia)."""
    latency_steps: int = 0
    """Actuation delay in whole 20 ms control steps: the actuators track the target commanded this
    many steps ago (USB round trips and servo firmware on real ALOHA arms)."""
    backlash: tuple[float, ...] = field(default_factory=lambda: (0.0,) * 12)
    """Dead-band half-width on each arm joint's commanded target (rad): the tracked target follows
    the command only once it leaves the band around it (gear play in the servos)."""

    def __post_init__(self) -> None:
        problems = []
        for name, (lo, hi) in _PER_JOINT_RANGES.items():
            values = _per_joint_values(name, getattr(self, name))
            object.__setattr__(self, name, values)
            if len(values) != len(ARM_JOINT_NAMES):
                problems.append(
                    f"{name} has {len(values)} values, expected {len(ARM_JOINT_NAMES)} "
                    f"(one per arm joint: {', '.join(ARM_JOINT_NAMES)})"
                )
                continue
            for joint, v in zip(ARM_JOINT_NAMES, values):
                if not (math.isfinite(v) and lo <= v <= hi):
                    problems.append(f"{name}[{joint}]={v} is outside [{lo}, {hi}]")
        for name, (lo, hi) in _SCALAR_RANGES.items():
            v = _number(name, getattr(self, name))
            object.__setattr__(self, name, v)
            if not (math.isfinite(v) and lo <= v <= hi):
                problems.append(f"{name}={v} is outside [{lo}, {hi}]")
        latency = self.latency_steps
        if (
            isinstance(latency, bool)
            or not isinstance(latency, (int, np.integer, float))
            or not math.isfinite(float(latency))
            or int(latency) != latency
            or not 0 <= latency <= _MAX_LATENCY
        ):
            problems.append(f"latency_steps={latency!r} must be a whole number of control steps in [0, {_MAX_LATENCY}]")
        else:
            object.__setattr__(self, "latency_steps", int(latency))
        if problems:
            raise ValueError("invalid physics parameters: " + "; ".join(problems))

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """Per-joint fields as ``{joint name: value}``, readable in a JSON file."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = dict(zip(ARM_JOINT_NAMES, v)) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], base: PhysicsParams | None = None) -> PhysicsParams:
        """Build from a (possibly partial) dict; missing fields and joints keep ``base``'s values.

        Per-joint fields accept a list of 12 numbers or a ``{joint name: number}`` mapping; the
        others a number. Unknown field or joint names and values of the wrong type (``null``,
        ``true``, ``"0.8"``, a nested mapping) raise ``ValueError`` naming the parameter, what was
        given and the valid form.
        """
        if not isinstance(values, dict):
            raise ValueError(
                f"physics parameters must be a mapping of parameter name to value, got {_describe(values)}"
            )
        base = base or cls()
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known, key=str)
        if unknown:
            raise ValueError(f"unknown physics parameter(s) {unknown}; valid names: {sorted(known)}")
        updates: dict[str, Any] = {}
        for name, v in values.items():
            if name in _PER_JOINT_RANGES and isinstance(v, dict):
                bad = sorted(set(v) - set(ARM_JOINT_NAMES), key=str)
                if bad:
                    raise ValueError(f"unknown joint(s) {bad} in '{name}'; valid joints: {list(ARM_JOINT_NAMES)}")
                merged = dict(zip(ARM_JOINT_NAMES, getattr(base, name)))
                merged.update({j: _number(f"{name}[{j}]", x) for j, x in v.items()})
                updates[name] = tuple(merged[j] for j in ARM_JOINT_NAMES)
            elif name in _PER_JOINT_RANGES:
                updates[name] = _per_joint_values(name, v)
            else:
                updates[name] = _number(name, v)
        return dataclasses.replace(base, **updates)

    def save(self, path: str | os.PathLike) -> None:
        from embodied_gym.atomic import write_json

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> PhysicsParams:
        """Read a JSON file of parameters.

        Either a plain parameter dict (as written by :meth:`save`) or a calibration result whose
        ``"values"`` entry holds one.
        """
        if os.path.isdir(path):
            inside = sorted(p for p in os.listdir(path) if p.endswith(".json"))[:5]
            raise ValueError(
                f"physics file {path!s} is a directory; pass a JSON file of parameters"
                + (f" (it holds {', '.join(inside)})" if inside else "")
            )
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"physics file {path!s} does not exist") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"physics file {path!s} is not valid JSON: {e}") from None
        except UnicodeDecodeError:
            raise ValueError(f"physics file {path!s} is not a text (JSON) file") from None
        except OSError as e:
            raise ValueError(f"physics file {path!s} cannot be read: {e.strerror or e}") from None
        if not isinstance(values, dict):
            raise ValueError(f"physics file {path!s} must hold a JSON object of parameters, got {_describe(values)}")
        if "values" in values and isinstance(values["values"], dict):
            values = values["values"]
        try:
            return cls.from_dict(values)
        except ValueError as e:
            raise ValueError(f"physics file {path!s}: {e}") from None


def resolve_physics(physics: PhysicsParams | str | os.PathLike | dict | None) -> PhysicsParams:
    """Accept what ``gym.make(..., physics=...)`` accepts: None, an object, a dict or a JSON path."""
    if physics is None:
        return PhysicsParams()
    if isinstance(physics, PhysicsParams):
        return physics
    if isinstance(physics, dict):
        try:
            return PhysicsParams.from_dict(physics)
        except ValueError as e:
            raise ValueError(f"physics (dict): {e}") from None
    if isinstance(physics, (str, os.PathLike)):
        return PhysicsParams.load(physics)
    raise TypeError(f"physics must be a PhysicsParams, a dict or a path to a JSON file, got {_describe(physics)}")


@dataclass(frozen=True)
class PhysicsHandles:
    """Indices into a compiled model that :func:`apply_physics` writes to."""

    arm_actuators: np.ndarray  # (12,)
    arm_dofs: np.ndarray  # (12,)
    finger_actuators: np.ndarray  # (4,)
    object_geoms: np.ndarray
    pad_geoms: np.ndarray
    object_bodies: np.ndarray
    nominal_body_mass: np.ndarray
    nominal_body_inertia: np.ndarray


def apply_physics(model: mujoco.MjModel, params: PhysicsParams, h: PhysicsHandles) -> None:
    """Write ``params`` into ``model`` in place (no recompilation)."""
    kp = np.asarray(params.kp)
    model.actuator_gainprm[h.arm_actuators, 0] = kp
    model.actuator_biasprm[h.arm_actuators, 1] = -kp
    model.dof_damping[h.arm_dofs] = params.damping
    model.dof_frictionloss[h.arm_dofs] = params.frictionloss
    model.dof_armature[h.arm_dofs] = params.armature
    model.actuator_gainprm[h.finger_actuators, 0] = params.gripper_kp
    model.actuator_biasprm[h.finger_actuators, 1] = -params.gripper_kp
    model.geom_friction[h.object_geoms, 0] = params.object_friction
    model.geom_friction[h.pad_geoms, 0] = params.pad_friction
    model.body_mass[h.object_bodies] = h.nominal_body_mass * params.object_mass_scale
    model.body_inertia[h.object_bodies] = h.nominal_body_inertia * params.object_mass_scale
    # latency_steps and backlash act between the command and the actuator, not in the model:
    # SimCore derives its ActuatorEffects from them (embodied_gym.sim.core.effects_from_physics).
