"""The simulator core: one task scene, its state, its actuators and its cameras.

:class:`SimCore` is the one object that knows how the 14-D joint vector maps onto the MuJoCo
model (arm joints, mirrored fingers, their actuators) and what happens between a commanded joint
target and the actuator that tracks it (:class:`ActuatorEffects`: actuation delay, backlash,
velocity-dependent friction). Three clients share it, so every mapping and every actuator effect
exists once:

- the simulated envs (:class:`~embodied_gym.envs.aloha_env.AlohaTaskEnv`) add the action space,
  observation and episode logic on top;
- the stand-in robot (:mod:`embodied_gym.robots`) drives one with its
  hidden physics, effects and look;
- calibration's one-step simulator (:mod:`embodied_gym.physaligner.transitions`) puts it in
  recorded states and steps it.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from embodied_gym.sim import robot as layout
from embodied_gym.sim.physics import PhysicsParams, apply_physics
from embodied_gym.sim.scene import N_SUBSTEPS, SceneLook, compile_scene
from embodied_gym.sim.tasks import Task, TaskStatus

#: 0.1 s of physics for the objects to come to rest on the table after placement.
SETTLE_SUBSTEPS = 50
# Velocity scale of the tanh that smooths the sign of the velocity in Coulomb friction (rad/s).
_COULOMB_SMOOTHING = 0.01


@dataclass(frozen=True)
class StribeckFriction:
    """Velocity-dependent joint friction on the 12 arm joints (N·m; rad/s).

    ``tau = -(coulomb + (static - coulomb) * exp(-(v / stribeck_velocity)^2)) * tanh(v / 0.01) - viscous * v``:
    friction that breaks away at ``static``, drops to ``coulomb`` above ``stribeck_velocity`` and
    grows linearly with speed, as geared servos show (a Stribeck curve).
    """

    static: np.ndarray  # (12,) arm-joint order of the 14-D vector without the grippers
    coulomb: np.ndarray
    viscous: np.ndarray
    stribeck_velocity: float = 0.1

    def torque(self, v: np.ndarray) -> np.ndarray:
        fs, fc, vs = self.static, self.coulomb, self.stribeck_velocity
        return -(fc + (fs - fc) * np.exp(-((v / vs) ** 2))) * np.tanh(v / _COULOMB_SMOOTHING) - self.viscous * v


@dataclass(frozen=True)
class ActuatorEffects:
    """What happens between a commanded joint target and the actuator that tracks it.

    Real ALOHA arms (Dynamixel servos over USB) have all three; the defaults (none) are an ideal
    actuator, the nominal simulator's behaviour.

    - ``latency_steps``: the actuators track the target commanded this many control steps ago
      (20 ms each).
    - ``backlash``: per joint (14), the half-width of a dead band on the target: the target the
      actuator tracks only follows the command once the command leaves the band around it.
      Applied before the delay.
    - ``friction``: :class:`StribeckFriction` on the arm joints, or None.
    """

    latency_steps: int = 0
    backlash: np.ndarray = field(default_factory=lambda: np.zeros(14))
    friction: StribeckFriction | None = None

    def __post_init__(self):
        if int(self.latency_steps) != self.latency_steps or self.latency_steps < 0:
            raise ValueError(f"latency_steps must be a whole number of control steps >= 0, got {self.latency_steps!r}")
        b = np.broadcast_to(np.asarray(self.backlash, dtype=np.float64), (14,)).copy()
        if not np.all(np.isfinite(b)) or (b < 0).any():
            raise ValueError(f"backlash must be 14 finite values >= 0 (rad; m for grippers), got {b.tolist()}")
        object.__setattr__(self, "latency_steps", int(self.latency_steps))
        object.__setattr__(self, "backlash", b)

    @property
    def is_ideal(self) -> bool:
        return self.latency_steps == 0 and not self.backlash.any() and self.friction is None


def backlash_step(effective, command, backlash, xp=np):
    """The target the actuator tracks after ``command`` passes a dead band of half-width ``backlash``
    around the previously tracked ``effective`` target: it follows the command only by as much as the
    command leaves the band. Works on numpy arrays (``xp=np``) and torch tensors (``xp=torch``,
    differentiable in ``backlash``); shapes broadcast, so one call can run many backlash vectors."""
    gap = command - effective
    return xp.where(gap > backlash, command - backlash, xp.where(gap < -backlash, command + backlash, effective))


def applied_targets(commands, initial, latency_steps: int, backlash, xp=np):
    """The targets the actuators track at each control step of a command sequence.

    ``commands`` (T, J): the commanded targets of steps 0..T-1; ``initial`` (J): the target held
    before step 0 (:meth:`SimCore.hold`); ``backlash`` (J) or (B, J) for B backlash vectors at once.
    Step t tracks the backlash-filtered command of step t - ``latency_steps`` (``initial`` before
    the first one arrives). Returns (T, J), or (T, B, J) for batched backlash. :meth:`SimCore.command`
    applies the same band (:func:`backlash_step`) and delay one step at a time.
    """
    if int(latency_steps) != latency_steps or latency_steps < 0:
        raise ValueError(f"latency_steps must be a whole number >= 0, got {latency_steps!r}")
    latency_steps = int(latency_steps)
    effective = initial + 0 * backlash  # broadcast to the batch
    filtered = []
    for t in range(len(commands)):
        effective = backlash_step(effective, commands[t], backlash, xp)
        filtered.append(effective)
    held = [effective * 0 + initial] * min(latency_steps, len(commands))
    return xp.stack(held + filtered[: len(commands) - len(held)])


def effects_from_physics(physics: PhysicsParams, friction: StribeckFriction | None = None) -> ActuatorEffects:
    """The :class:`ActuatorEffects` of a :class:`PhysicsParams`: its ``latency_steps`` and its
    per-arm-joint ``backlash`` (the grippers have none)."""
    backlash = np.zeros(14)
    backlash[layout.ARM_INDICES] = physics.backlash
    return ActuatorEffects(latency_steps=physics.latency_steps, backlash=backlash, friction=friction)


class SimCore:
    """One compiled task scene with the robot's joint vector, actuators and cameras.

    Args:
        task: the task (objects, start ranges, success).
        physics: the physical parameters written into the model.
        look: how the scene renders (default: the simulator's flat, fast look).
        effects: actuator effects; default: those of ``physics`` (its ``latency_steps`` and
            ``backlash``, :func:`effects_from_physics`), which then follow every :meth:`set_physics`.
            Given explicitly (the stand-in robot's hidden effects), they stay until :meth:`set_effects`.

    Attributes ``model`` / ``data`` are the ``mujoco.MjModel`` / ``MjData``; ``idx`` the
    :class:`~embodied_gym.sim.scene.SceneIndex` of named joints, actuators, sites and cameras.
    """

    def __init__(
        self, task: Task, physics: PhysicsParams, look: SceneLook | None = None, effects: ActuatorEffects | None = None
    ):
        self.task = task
        self.physics = physics
        self.model, self.idx, self._handles = compile_scene(task, physics, look)
        self.data = mujoco.MjData(self.model)
        self._effects_follow_physics = effects is None
        self.effects = effects if effects is not None else effects_from_physics(physics)
        # The hot path: with neither delay nor backlash a command goes straight to the actuators.
        self._direct_command = self.effects.latency_steps == 0 and not self.effects.backlash.any()
        idx = self.idx
        fingers = idx.finger_actuators
        # x[source] * sign goes to [arm joints, first fingers, mirrored second fingers].
        self.ctrl_index = np.concatenate([idx.arm_actuators, fingers[:, 0], fingers[:, 1]])
        self.ctrl_source = np.concatenate([layout.ARM_INDICES, layout.GRIPPER_INDICES, layout.GRIPPER_INDICES])
        self.ctrl_sign = np.r_[np.ones(14), -np.ones(2)]
        self.qpos_index = np.concatenate([idx.arm_qpos, idx.finger_qpos[:, 0], idx.finger_qpos[:, 1]])
        self.dof_index = np.concatenate([idx.arm_dof, idx.finger_dof[:, 0], idx.finger_dof[:, 1]])
        self._object_items = [(name, int(b)) for name, b in idx.object_bodies.items()]
        self._gripper_body_ids = self.model.site_bodyid[idx.tcp_sites]
        self._renderer: mujoco.Renderer | None = None
        self._instabilities = 0
        self._reset_effects(layout.START_QPOS)

    # ------------------------------------------------------------------ physics
    def set_physics(self, physics: PhysicsParams) -> None:
        """Write new physical parameters into the model (no recompilation), and their latency and
        backlash into the actuator effects unless the effects were given explicitly."""
        self.physics = physics
        apply_physics(self.model, physics, self._handles)
        if self._effects_follow_physics:
            effects = effects_from_physics(physics, self.effects.friction)
            if effects.latency_steps != self.effects.latency_steps or not np.array_equal(
                effects.backlash, self.effects.backlash
            ):
                self._install_effects(effects)

    def set_effects(self, effects: ActuatorEffects) -> None:
        """Swap the actuator effects; the delay line and backlash band restart at the current targets.
        From then on :meth:`set_physics` leaves the effects alone."""
        self._effects_follow_physics = False
        self._install_effects(effects)

    def _install_effects(self, effects: ActuatorEffects) -> None:
        self.effects = effects
        self._direct_command = effects.latency_steps == 0 and not effects.backlash.any()
        self._reset_effects(self._effective)

    # ------------------------------------------------------------------ state
    def reset_scene(self, rng: np.random.Generator, layout_overrides: dict | None = None) -> None:
        """Arms in the start pose tracking it, objects placed from ``rng`` (then ``layout_overrides``:
        object name -> 7-D pose), settled for 0.1 s; time restarts at 0."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        self.write_joint_state(layout.START_QPOS)
        self._reset_effects(layout.START_QPOS)
        self.write_ctrl(layout.START_QPOS)
        objects = self.task.sample_layout(rng)
        if layout_overrides:
            objects.update({k: np.asarray(v, float) for k, v in layout_overrides.items()})
        self.task.place(m, d, objects)
        mujoco.mj_forward(m, d)
        mujoco.mj_step(m, d, nstep=SETTLE_SUBSTEPS)
        d.time = 0.0
        self._instabilities = _instability_count(d)

    def write_joint_state(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Put the 14 joints at ``qpos`` (and velocities ``qvel``); objects stay where they are."""
        d = self.data
        d.qpos[self.qpos_index] = np.asarray(qpos, dtype=np.float64)[self.ctrl_source] * self.ctrl_sign
        if qvel is not None:
            d.qvel[self.dof_index] = np.asarray(qvel, dtype=np.float64)[self.ctrl_source] * self.ctrl_sign

    def hold(self, targets: np.ndarray) -> None:
        """Make the actuators track ``targets`` (14) now, as if they had been commanded all along:
        the backlash band and the delay line restart at ``targets``."""
        targets = np.asarray(targets, dtype=np.float64)
        self._reset_effects(targets)
        self.write_ctrl(targets)

    def command(self, targets: np.ndarray) -> np.ndarray:
        """Command joint targets (14) for the next control step, through the actuator effects.

        Returns the target the actuators track during that step (after backlash and delay).
        """
        if self._direct_command:
            self.data.ctrl[self.ctrl_index] = targets[self.ctrl_source] * self.ctrl_sign
            return targets
        cmd = np.asarray(targets, dtype=np.float64)
        self._effective: np.ndarray = backlash_step(self._effective, cmd, self.effects.backlash)
        self._pending.append(self._effective.copy())
        applied = self._pending.popleft()
        self.write_ctrl(applied)
        return applied

    def write_ctrl(self, targets: np.ndarray) -> None:
        """Write joint targets (14) straight into the actuators' controls (no effects)."""
        self.data.ctrl[self.ctrl_index] = targets[self.ctrl_source] * self.ctrl_sign

    def step(self, nstep: int = N_SUBSTEPS) -> None:
        """Advance ``nstep`` physics steps (default: one 20 ms control step)."""
        friction = self.effects.friction
        if friction is None:
            mujoco.mj_step(self.model, self.data, nstep=nstep)
            return
        m, d, dofs = self.model, self.data, self.idx.arm_dof
        for _ in range(nstep):
            d.qfrc_applied[dofs] = friction.torque(d.qvel[dofs])
            mujoco.mj_step(m, d)

    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self.idx.joint_qpos].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self.idx.joint_dof].copy()

    def physics_error(self, t_before: float) -> str | None:
        """Why the last step blew up (NaN, inf, MuJoCo's own reset), or None."""
        d = self.data
        # On NaN, inf or huge qpos/qvel/qacc MuJoCo warns and resets the state: count the warnings.
        n = _instability_count(d)
        if n > self._instabilities:
            self._instabilities = n
            return (
                f"MuJoCo instability (NaN, inf or huge qpos/qvel/qacc) after t={t_before:.3f}s; MuJoCo reset the state"
            )
        if not math.isfinite(d.qvel.sum() + d.qpos.sum()):
            return f"non-finite state at t={d.time:.3f}s"
        return None

    # ------------------------------------------------------------------ task
    def evaluate(self) -> TaskStatus:
        """The task's success, reward and reward terms in the current state."""
        return self.task.evaluate(self.model, self.data, self.idx)

    def privileged_info(self, status: TaskStatus) -> dict[str, Any]:
        """``is_success``, ``task``, ``reward_terms`` and the privileged ``object_poses`` and
        ``tcp_poses`` (rows ``[x, y, z, qw, qx, qy, qz]``) of the current state."""
        d = self.data
        xpos, xquat = d.xpos, d.xquat
        poses = {name: np.concatenate((xpos[b], xquat[b])) for name, b in self._object_items}
        # The TCP sites are not rotated against their gripper body, so they share its quaternion.
        tcp = np.concatenate([d.site_xpos[self.idx.tcp_sites], d.xquat[self._gripper_body_ids]], axis=1)
        return {
            "is_success": bool(status.success),
            "task": self.task.description,
            "reward_terms": status.terms,
            "object_poses": poses,
            "tcp_poses": tcp,
        }

    # ------------------------------------------------------------------ cameras
    def render_camera(self, camera: str, image_size: tuple[int, int]) -> np.ndarray:
        """An RGB frame (H, W, 3) of ``camera`` in the current state."""
        renderer = self._get_renderer(image_size)
        renderer.update_scene(self.data, camera=self.idx.cameras[camera])
        return renderer.render().copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ internals
    def _reset_effects(self, targets: np.ndarray) -> None:
        self._effective = np.array(targets, dtype=np.float64)
        self._pending = collections.deque([self._effective.copy()] * self.effects.latency_steps)

    def _get_renderer(self, size) -> mujoco.Renderer:
        r = self._renderer
        if r is None or (r.height, r.width) != tuple(size):
            if r is not None:
                r.close()
            from embodied_gym.rendering import make_renderer

            self._renderer = r = make_renderer(self.model, *size)
        return r


_BADQPOS, _BADQVEL, _BADQACC = (
    int(w)
    for w in (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADQACC)
)


def _instability_count(d: mujoco.MjData) -> int:
    w = d.warning
    return int(w[_BADQPOS].number + w[_BADQVEL].number + w[_BADQACC].number)


__all__ = [
    "SETTLE_SUBSTEPS",
    "ActuatorEffects",
    "SimCore",
    "StribeckFriction",
    "applied_targets",
    "backlash_step",
    "effects_from_physics",
]
