"""The calibration parameter space: named scalars with box bounds, normalised to [0, 1].

Names are ``<field>.<joint>`` for the per-joint fields of
:class:`~embodied_gym.sim.physics.PhysicsParams` (``kp.left_waist``, ``damping.right_elbow``,
``backlash.right_wrist_rotate``, …) and the field name for scalars (``gripper_kp``,
``object_friction``, ``pad_friction``, ``object_mass_scale``): 64 continuous parameters in all.
Inside the optimisers every free parameter lives on [0, 1]: linearly, or logarithmically where its
box spans a factor of 4 or more (the default 0.5x-2x boxes, so the nominal value sits in the middle).
Frozen parameters keep the base value.

The actuation delay (``latency_steps``) is a whole number of control steps, so it is not a box
dimension: it is part of the base physics (:meth:`ParameterSpace.with_base`), and calibration
profiles it over a few values (:func:`embodied_gym.physaligner.calibrate.calibrate`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_gym.sim.physics import ARM_JOINT_NAMES, PhysicsParams

PER_JOINT_FIELDS = ("kp", "damping", "frictionloss", "armature", "backlash")
SCALAR_FIELDS = ("gripper_kp", "object_friction", "pad_friction", "object_mass_scale")
_LOG_RATIO = 4.0  # ranges with high/low >= this are searched on a log scale
#: Default free set: these fields of every arm joint the recording moves (see default_free).
DEFAULT_FREE_FIELDS = ("kp", "damping", "frictionloss", "backlash")
#: A joint counts as moved when its recorded position spans at least this much (rad).
MOVED_JOINT_RANGE = 0.05
#: Default backlash box (rad): up to 1.7 degrees of play.
BACKLASH_BOX = (0.0, 0.03)


@dataclass(frozen=True)
class Parameter:
    name: str
    low: float
    high: float

    @property
    def log(self) -> bool:
        return self.low > 0 and self.high / self.low >= _LOG_RATIO


def _default_bounds(name: str, nominal: float) -> tuple[float, float]:
    """0.5x-2x the nominal value (real arms of one model differ by tens of percent, not by orders of
    magnitude); parameters whose nominal value is 0 get an absolute box instead."""
    field = name.split(".")[0]
    if field == "backlash":
        return BACKLASH_BOX
    if nominal > 0:
        return nominal * 0.5, nominal * 2.0
    if field == "frictionloss":
        return 0.0, 1.0  # N·m
    if field == "armature":
        return 0.0, 0.1  # kg·m²
    return 0.0, 1.0


def parameter_names() -> list[str]:
    return [f"{f}.{j}" for f in PER_JOINT_FIELDS for j in ARM_JOINT_NAMES] + list(SCALAR_FIELDS)


def get_value(params: PhysicsParams, name: str) -> float:
    field, _, joint = name.partition(".")
    v = getattr(params, field)
    return float(v[ARM_JOINT_NAMES.index(joint)]) if joint else float(v)


def default_free(episodes, threshold: float = MOVED_JOINT_RANGE) -> list[str]:
    """The default free set for recordings ``episodes``: :data:`DEFAULT_FREE_FIELDS` of every arm
    joint whose recorded position spans at least ``threshold`` rad. A joint the data never moves
    cannot tell its gain from its damping, so fitting it only adds noise (and search cost)."""
    states = np.concatenate([np.asarray(e.state) for e in episodes])
    from embodied_gym.sim import robot as layout

    span = np.ptp(states[:, layout.ARM_INDICES], axis=0)
    moved = [j for j, s_ in zip(ARM_JOINT_NAMES, span) if s_ >= threshold]
    return [f"{f}.{j}" for f in DEFAULT_FREE_FIELDS for j in moved]


class ParameterSpace:
    """Free parameters with bounds around a base :class:`PhysicsParams` (nominal by default)."""

    def __init__(
        self,
        base: PhysicsParams | None = None,
        bounds: Mapping[str, Sequence[float]] | None = None,
        frozen: Iterable[str] = (),
    ):
        self.base = base or PhysicsParams()
        names = parameter_names()
        known = set(names)
        bounds = dict(bounds or {})
        frozen = set(frozen)
        unknown = sorted((set(bounds) | frozen) - known)
        if unknown:
            raise ValueError(
                f"unknown parameter name(s) {unknown}; valid names look like 'kp.left_waist', "
                f"'damping.right_elbow', 'gripper_kp' (all: {names})"
            )
        problems = []
        params = []
        for n in names:
            lo, hi = bounds.get(n, _default_bounds(n, get_value(self.base, n)))
            lo, hi = float(lo), float(hi)
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
                problems.append(f"{n}: low {lo} must be below high {hi}")
            elif lo < 0:
                problems.append(f"{n}: low {lo} must not be negative")
            if n not in frozen:
                params.append(Parameter(n, lo, hi))
        if problems:
            raise ValueError("invalid bounds: " + "; ".join(problems))
        self.frozen = tuple(sorted(frozen))
        self.params = tuple(params)

    @classmethod
    def with_free(cls, free: Iterable[str] | None, base: PhysicsParams | None = None) -> ParameterSpace:
        """The space where only ``free`` (parameter names) are calibrated; all of them when None or ``["all"]``.

        Raises:
            ValueError: a name that is no parameter (the message lists the valid form).
        """
        if free is None:
            return cls(base=base)
        free = list(free)
        if free == ["all"]:
            return cls(base=base)
        unknown = [n for n in free if n not in parameter_names()]
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown}; names look like kp.left_waist, damping.right_elbow, "
                f"gripper_kp (all: {parameter_names()})"
            )
        return cls(base=base, frozen=[n for n in parameter_names() if n not in free])

    def with_base(self, base: PhysicsParams) -> ParameterSpace:
        """The same free parameters, boxes and frozen set around another base (e.g. another delay)."""
        bounds = {p.name: (p.low, p.high) for p in self.params}
        for n in self.frozen:  # frozen parameters keep their own default box, around the new base
            bounds.pop(n, None)
        return ParameterSpace(base, bounds, self.frozen)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def dim(self) -> int:
        return len(self.params)

    # ------------------------------------------------------------------ scaling
    def normalise(self, values: np.ndarray) -> np.ndarray:
        """Physical values (..., dim) -> [0, 1]."""
        v = np.asarray(values, dtype=np.float64)
        out = np.empty_like(v)
        for i, p in enumerate(self.params):
            if p.log:
                out[..., i] = np.log(v[..., i] / p.low) / np.log(p.high / p.low)
            else:
                out[..., i] = (v[..., i] - p.low) / (p.high - p.low)
        return out

    def denormalise(self, u: np.ndarray) -> np.ndarray:
        """[0, 1] (..., dim) -> physical values (clipped into the box)."""
        u = np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0)
        out = np.empty_like(u)
        for i, p in enumerate(self.params):
            out[..., i] = p.low * (p.high / p.low) ** u[..., i] if p.log else p.low + u[..., i] * (p.high - p.low)
        return out

    def values_of(self, params: PhysicsParams) -> np.ndarray:
        return np.array([get_value(params, p.name) for p in self.params])

    def to_physics(self, values: np.ndarray) -> PhysicsParams:
        """The base parameters with the free ones set to ``values`` (physical units)."""
        per_joint = {f: list(getattr(self.base, f)) for f in PER_JOINT_FIELDS}
        scalars: dict[str, Any] = {}
        for p, v in zip(self.params, np.asarray(values, dtype=np.float64)):
            field, _, joint = p.name.partition(".")
            if joint:
                per_joint[field][ARM_JOINT_NAMES.index(joint)] = float(v)
            else:
                scalars[field] = float(v)
        joints: dict[str, Any] = {f: tuple(v) for f, v in per_joint.items()}
        return dataclasses.replace(self.base, **joints, **scalars)

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` points of a scrambled Sobol sequence on [0, 1]^dim (normalised)."""
        from scipy.stats import qmc

        return qmc.Sobol(d=self.dim, scramble=True, seed=seed).random(n)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        return {
            "bounds": {p.name: [p.low, p.high] for p in self.params},
            "frozen": list(self.frozen),
            "base": self.base.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> ParameterSpace:
        return cls(PhysicsParams.from_dict(d.get("base", {})), d.get("bounds"), d.get("frozen", ()))

    def fingerprint(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
