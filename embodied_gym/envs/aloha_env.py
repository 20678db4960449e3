"""The simulated bimanual ALOHA envs, one class per task.

:class:`AlohaTaskEnv` holds everything the four tasks share; the task classes at the bottom
only name their task and document it, as gymnasium's MuJoCo envs do.
"""

from __future__ import annotations

import math
import os
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from embodied_gym.envs import robot, spaces as sp
from embodied_gym.envs.control import JointTargetController
from embodied_gym.envs.kinematics import ArmKinematics
from embodied_gym.envs.physics import PhysicsParams, apply_physics, resolve_physics
from embodied_gym.envs.scene import N_SUBSTEPS, CONTROL_DT, SceneLook, compile_scene
from embodied_gym.envs.tasks import Task, make_task

_SETTLE_SUBSTEPS = 50  # 0.1 s for objects to come to rest on the table after placement


class AlohaTaskEnv(gym.Env):
    """Base class of the simulated ALOHA task envs (see the task classes for each task).

    Keyword arguments (all envs):

    - ``obs_type``: ``"state"``, ``"pixels"`` or ``"pixels_state"`` (default).
    - ``cameras``: any of ``cam_high``, ``cam_front``, ``cam_left_wrist``, ``cam_right_wrist``
      (default ``("cam_high",)``). Only these are rendered.
    - ``image_size``: ``(height, width)``, default ``(240, 320)``.
    - ``control_mode``: ``"joint_pos"`` (default), ``"joint_delta"`` or ``"ee_delta"``.
    - ``physics``: a :class:`~embodied_gym.envs.physics.PhysicsParams`, a dict of parameters or a
      path to a JSON file of them (a calibration result works too); default: nominal.
    - ``render_mode``: ``None`` or ``"rgb_array"`` (the first requested camera, else ``cam_high``).
    - ``terminate_on_success``: end the episode when the task succeeds (default True).

    Action space (14-D, ``[left arm 6, left gripper, right arm 6, right gripper]``):

    - ``joint_pos``: absolute joint targets, bounded by the joint limits (rad) and the finger
      rail (0.021 m closed to 0.057 m open).
    - ``joint_delta``: in [-1, 1]; times 0.05 rad (arms) or 4 mm (grippers) is added to the
      current targets.
    - ``ee_delta``: per arm ``[dx, dy, dz, rx, ry, rz, gripper]`` in [-1, 1]: the TCP target
      moves by up to 1 cm and turns by up to 0.05 rad (world-frame axis-angle) per step, solved
      to joint targets by damped least-squares IK; ``gripper`` is absolute (-1 closed, 1 open).

    Actions outside the space are clipped to it; ``info["action_clipped"]`` counts the clipped
    entries. NaN/inf or a wrong shape raises ``ValueError``.

    Observation space (a flat ``Dict``, which stable-baselines3's ``MultiInputPolicy`` takes):
    ``joint_pos`` (14, float32; the gripper entry is the finger's rail position in m),
    ``joint_vel`` (14, float32) and one ``(H, W, 3)`` uint8 image per camera. Object poses and other
    privileged state are in ``info`` (``object_poses``: name -> ``[x, y, z, qw, qx, qy, qz]``,
    ``tcp_poses``), never in the observation: a real robot cannot observe them.

    Timing: 50 Hz control (``CONTROL_DT`` = 0.02 s) over a 2 ms physics step (10 substeps).

    Episode end: ``terminated`` on success (if ``terminate_on_success``); ``truncated`` at the
    task's time limit (by gymnasium's ``TimeLimit`` via ``gym.make``) or on a physics blow-up,
    which also sets ``info["physics_error"]`` and returns the last valid observation.

    Start state: both arms in the folded sleep pose with open grippers; objects placed at poses
    drawn from the reset seed within the task's ranges, then settled for 0.1 s.

    The compiled ``mujoco.MjModel`` and ``mujoco.MjData`` are ``env.unwrapped.model`` and
    ``env.unwrapped.data``.
    """

    metadata = {"render_modes": list(sp.RENDER_MODES), "render_fps": round(1 / CONTROL_DT)}
    task_name: str = ""

    def __init__(self, obs_type: str = "pixels_state", cameras=("cam_high",), image_size=(240, 320),
                 control_mode: str = "joint_pos", physics: PhysicsParams | str | os.PathLike | dict | None = None,
                 render_mode: str | None = None, terminate_on_success: bool = True,
                 task: Task | str | None = None, look: SceneLook | None = None):
        self.task = make_task(task or self.task_name) if not isinstance(task, Task) else task
        opts = sp.EnvOptions.validate(obs_type, cameras, image_size, control_mode, render_mode)
        self.obs_type, self.cameras, self.image_size = opts.obs_type, opts.cameras, opts.image_size
        self.control_mode, self.render_mode = opts.control_mode, opts.render_mode
        self.observation_space = opts.observation_space()
        self.terminate_on_success = terminate_on_success
        self.physics = resolve_physics(physics)

        self.model, self.idx, self._handles = compile_scene(self.task, self.physics, look)
        self.data = mujoco.MjData(self.model)
        self.kinematics = ArmKinematics(self.model, self.idx)
        self.controller = JointTargetController(control_mode, self.kinematics)
        self.action_space = self.controller.action_space
        self._renderer: mujoco.Renderer | None = None
        self._object_body_ids = np.array(list(self.idx.object_bodies.values()), dtype=int)
        self._gripper_body_ids = self.model.site_bodyid[self.idx.tcp_sites]
        self._last_obs: dict[str, np.ndarray] | None = None
        self._elapsed = 0
        self._instabilities = 0
        # ctrl[_ctrl_index] = targets[_ctrl_source] * _ctrl_sign: arms, then both fingers (mirrored).
        fingers = self.idx.finger_actuators
        self._ctrl_index = np.concatenate([self.idx.arm_actuators, fingers[:, 0], fingers[:, 1]])
        self._ctrl_source = np.concatenate([robot.ARM_INDICES, robot.GRIPPER_INDICES, robot.GRIPPER_INDICES])
        self._ctrl_sign = np.r_[np.ones(14), -np.ones(2)]

    # ------------------------------------------------------------------ public state
    @property
    def joint_targets(self) -> np.ndarray:
        """The 14 joint targets the controllers track now."""
        return self.controller.targets.copy()

    @property
    def commanded_targets(self) -> np.ndarray:
        """The 14 joint targets last sent to the actuators (what a recording stores as action)."""
        return self.controller.targets.copy()

    @property
    def ee_targets(self) -> tuple[np.ndarray, np.ndarray]:
        """(2x3 positions, 2x3x3 rotations) of the ``ee_delta`` TCP targets."""
        return self.controller.ee_pos.copy(), self.controller.ee_rot.copy()

    def set_physics(self, physics) -> None:
        """Swap physical parameters without rebuilding the scene."""
        self.physics = resolve_physics(physics)
        apply_physics(self.model, self.physics, self._handles)

    def apply_joint_targets(self, targets: np.ndarray) -> None:
        """Make the controllers track ``targets`` (14) from now on, bypassing the action space."""
        self.controller.targets = np.asarray(targets, dtype=np.float64).copy()
        self._apply_targets()

    def set_joint_state(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Put the robot at joint positions ``qpos`` (14) with velocities ``qvel`` and track them;
        objects stay where they are."""
        self._write_joint_state(np.asarray(qpos, dtype=np.float64))
        if qvel is not None:
            v = np.asarray(qvel, dtype=np.float64)
            self.data.qvel[self.idx.arm_dof] = v[robot.ARM_INDICES]
            g = v[robot.GRIPPER_INDICES]
            self.data.qvel[self.idx.finger_dof[:, 0]] = g
            self.data.qvel[self.idx.finger_dof[:, 1]] = -g
        self.controller.reset(qpos)
        self._apply_targets()
        mujoco.mj_forward(self.model, self.data)

    def task_info(self) -> dict[str, Any]:
        """Success, reward (and its terms) and privileged poses of the current state, as ``info``."""
        status = self.task.evaluate(self.model, self.data, self.idx)
        return dict(self._info(status), reward=status.reward)

    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self.idx.joint_qpos].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self.idx.joint_dof].copy()

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        self.controller.reset(robot.START_QPOS)
        self._write_joint_state(robot.START_QPOS)
        self._apply_targets()
        layout = self.task.sample_layout(self.np_random)
        if options and "layout" in options:
            layout.update({k: np.asarray(v, float) for k, v in options["layout"].items()})
        self.task.place(m, d, layout)
        mujoco.mj_forward(m, d)
        mujoco.mj_step(m, d, nstep=_SETTLE_SUBSTEPS)
        d.time = 0.0
        self._instabilities = _instability_count(d)
        self._elapsed = 0
        obs = self._observation()
        self._last_obs = obs
        info = self._info(self.task.evaluate(m, d, self.idx))
        return obs, info

    def step(self, action):
        _, clipped = self.controller(action)
        self._apply_targets()
        t_before = self.data.time
        mujoco.mj_step(self.model, self.data, nstep=N_SUBSTEPS)
        self._elapsed += 1

        error = self._physics_error(t_before)
        if error is not None:
            info = {"is_success": False, "task": self.task.description, "physics_error": error,
                    "action_clipped": clipped, "step": self._elapsed}
            return {k: v.copy() for k, v in self._last_obs.items()}, 0.0, False, True, info

        status = self.task.evaluate(self.model, self.data, self.idx)
        obs = self._observation()
        self._last_obs = obs
        info = self._info(status)
        info["action_clipped"] = clipped
        terminated = bool(status.success and self.terminate_on_success)
        return obs, status.reward, terminated, False, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self.render_camera(self.cameras[0] if self.cameras else "cam_high")

    def render_camera(self, camera: str, image_size: tuple[int, int] | None = None) -> np.ndarray:
        """An RGB frame of ``camera`` now (any camera, whatever the observation holds)."""
        sp.check_choice("camera", camera, list(self.idx.cameras))
        size = image_size or self.image_size
        renderer = self._get_renderer(size)
        renderer.update_scene(self.data, camera=self.idx.cameras[camera])
        return renderer.render().copy()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ internals
    def _get_renderer(self, size) -> mujoco.Renderer:
        r = self._renderer
        if r is None or (r.height, r.width) != tuple(size):
            if r is not None:
                r.close()
            from embodied_gym.rendering import make_renderer

            self._renderer = r = make_renderer(self.model, *size)
        return r

    def _apply_targets(self) -> None:
        self.data.ctrl[self._ctrl_index] = self.controller.targets[self._ctrl_source] * self._ctrl_sign

    def _write_joint_state(self, q14: np.ndarray) -> None:
        d = self.data
        d.qpos[self.idx.arm_qpos] = q14[robot.ARM_INDICES]
        g = q14[robot.GRIPPER_INDICES]
        d.qpos[self.idx.finger_qpos[:, 0]] = g
        d.qpos[self.idx.finger_qpos[:, 1]] = -g

    def _physics_error(self, t_before: float) -> str | None:
        d = self.data
        # On NaN, inf or huge qpos/qvel/qacc MuJoCo warns and resets the state: count the warnings.
        n = _instability_count(d)
        if n > self._instabilities:
            self._instabilities = n
            return f"MuJoCo instability (NaN, inf or huge qpos/qvel/qacc) after t={t_before:.3f}s; MuJoCo reset the state"
        if not math.isfinite(d.qvel.sum() + d.qpos.sum()):
            return f"non-finite state at t={d.time:.3f}s"
        return None

    def _observation(self) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        if self.obs_type != "pixels":
            obs["joint_pos"] = self.joint_positions()
            obs["joint_vel"] = self.joint_velocities()
        if self.obs_type != "state":
            for cam in self.cameras:
                obs[cam] = self.render_camera(cam)
        return sp.clip_observation(self.observation_space, obs)

    def _info(self, status) -> dict[str, Any]:
        d = self.data
        bodies = self._object_body_ids
        poses = dict(zip(self.idx.object_bodies, np.concatenate([d.xpos[bodies], d.xquat[bodies]], axis=1)))
        # The TCP sites are not rotated against their gripper body, so they share its quaternion.
        tcp = np.concatenate([d.site_xpos[self.idx.tcp_sites], d.xquat[self._gripper_body_ids]], axis=1)
        return {
            "is_success": bool(status.success),
            "task": self.task.description,
            "reward_terms": status.terms,
            "object_poses": poses,
            "tcp_poses": tcp,
            "step": self._elapsed,
        }


_BADQPOS, _BADQVEL, _BADQACC = (int(w) for w in (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                                                  mujoco.mjtWarning.mjWARN_BADQACC))


def _instability_count(d: mujoco.MjData) -> int:
    n = d.warning.number
    return int(n[_BADQPOS] + n[_BADQVEL] + n[_BADQACC])


class PickCupEnv(AlohaTaskEnv):
    """``EmbodieDreamer-PickCup-v0``: grab a paper cup and lift it at least 5 cm.

    Start state: a paper cup (radius 2.5 cm, 8 cm tall, 15 g) upright at x in [-0.15, 0.15] m,
    y in [0.42, 0.58] m (the arms' bases are at x = ±0.469, y = 0.5); either arm may take it.

    Success: the cup's base is at least 5 cm above the table, both finger pads of one gripper
    touch it, and it does not touch the table.

    Reward, in [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to a
    point 3 cm below the rim), grasp (1 while both pads touch), lift (height / 5 cm while
    grasped) and success (counted twice).

    Episode end: success, or 200 steps (4 s).
    """

    task_name = "PickCup"


class PenInCupEnv(AlohaTaskEnv):
    """``EmbodieDreamer-PenInCup-v0``: put a pen into a pen cup.

    Start state: a pen (15 cm, 12 mm thick, 12 g) lying on the table at x in [0.10, 0.18],
    y in [0.40, 0.46], yaw in [-0.3, 0.3] rad (long axis near the x axis); a pen cup (inner
    radius 3 cm, 9 cm tall, 300 g) at x in [0.00, 0.06], y in [0.55, 0.60]. Meant for the right arm.

    Success: the pen's lower tip is inside the pen cup's inner volume and no gripper touches
    the pen.

    Reward, in [0, 1]: mean of reach (TCP to the pen's middle), grasp (pen held or inside),
    transport (pen tip to above the cup), inside, and success (counted twice).

    Episode end: success, or 350 steps (7 s).
    """

    task_name = "PenInCup"


class RemoteInBoxEnv(AlohaTaskEnv):
    """``EmbodieDreamer-RemoteInBox-v0``: put a TV remote into an open box.

    Start state: a remote (17 x 4.5 x 2 cm, 100 g) at x in [0.14, 0.20], y in [0.38, 0.45],
    yaw in [-0.3, 0.3] rad; an open box (inner 26 x 14 cm, 7 cm tall, 400 g) at x in [-0.02, 0.04],
    y in [0.56, 0.62], yaw in [-0.15, 0.15] rad. Meant for the right arm.

    Success: the remote's centre is inside the box's inner footprint, its highest corner is
    below the rim, and no gripper touches it.

    Reward, in [0, 1]: mean of reach, grasp (held or inside), transport (remote to the box
    centre, horizontally), inside, and success (counted twice).

    Episode end: success, or 350 steps (7 s).
    """

    task_name = "RemoteInBox"


class CupOnMatEnv(AlohaTaskEnv):
    """``EmbodieDreamer-CupOnMat-v0``: place a cup upright on a mat.

    Start state: a cup (radius 2.5 cm, 8 cm tall, 30 g) at x in [0.10, 0.18], y in [0.40, 0.46];
    a mat (12 x 12 cm, 4 mm, 200 g) at x in [-0.04, 0.04], y in [0.56, 0.62], yaw in [-0.3, 0.3] rad.
    Meant for the right arm.

    Success: the cup is upright (tilt under 15 degrees), its base centre lies within the mat
    and rests on it (less than 1.5 cm above), and no gripper touches it.

    Reward, in [0, 1]: mean of reach, grasp (held or on the mat), transport (cup to the mat
    centre, horizontally), on_mat, and success (counted twice).

    Episode end: success, or 350 steps (7 s).
    """

    task_name = "CupOnMat"


TASK_ENVS: dict[str, type[AlohaTaskEnv]] = {
    cls.task_name: cls for cls in (PickCupEnv, PenInCupEnv, RemoteInBoxEnv, CupOnMatEnv)
}
