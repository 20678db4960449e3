"""The simulated bimanual ALOHA envs, one class per task.

:class:`AlohaTaskEnv` holds everything the four tasks share; the task classes at the bottom
only name their task and document it, as gymnasium's MuJoCo envs do.
"""

from __future__ import annotations

import os
from typing import Any

import mujoco
import numpy as np

from embodied_gym.envs import spaces as sp
from embodied_gym.envs.base import AlohaEnv
from embodied_gym.sim import robot
from embodied_gym.sim.core import SimCore
from embodied_gym.sim.kinematics import ArmKinematics
from embodied_gym.sim.physics import PhysicsParams, resolve_physics
from embodied_gym.sim.scene import SceneLook
from embodied_gym.sim.tasks import TASKS, Task, make_task
from embodied_gym.sim.timing import camera_period


class AlohaTaskEnv(AlohaEnv):
    """Base class of the simulated ALOHA task envs (see the task classes for each task).

    Keyword arguments (all envs):

    - ``obs_type``: ``"state"``, ``"pixels"`` or ``"pixels_state"`` (default).
    - ``cameras``: any of ``cam_high``, ``cam_front``, ``cam_left_wrist``, ``cam_right_wrist``
      (default ``("cam_high",)``). Only these are rendered.
    - ``image_size``: ``(height, width)``, default ``(240, 320)``.
    - ``control_mode``: ``"joint_pos"`` (default), ``"joint_delta"`` or ``"ee_delta"``.
    - ``physics``: a :class:`~embodied_gym.sim.physics.PhysicsParams`, a dict of parameters or a
      path to a JSON file of them (a calibration result works too); default: nominal.
    - ``render_mode``: ``None`` or ``"rgb_array"`` (the first requested camera, else ``cam_high``).
    - ``terminate_on_success``: end the episode when the task succeeds (default True).
    - ``camera_fps``: the cameras' frame rate (default None: a new frame every 50 Hz control step);
      e.g. 10 renders every 5th step and the observation holds the last frame in between, as a
      real 10 Hz camera would (and rendering costs a fifth).

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
    ``env.unwrapped.data``; the simulator core that owns them (joint mapping, actuators, cameras)
    is ``env.unwrapped.sim`` (:class:`~embodied_gym.sim.core.SimCore`).
    """

    is_simulated = True
    task_name: str = ""

    def __init__(
        self,
        obs_type: str = "pixels_state",
        cameras=("cam_high",),
        image_size=(240, 320),
        control_mode: str = "joint_pos",
        physics: PhysicsParams | str | os.PathLike | dict | None = None,
        render_mode: str | None = None,
        terminate_on_success: bool = True,
        task: Task | str | None = None,
        look: SceneLook | None = None,
        camera_fps: float | None = None,
    ):
        task = make_task(task or self.task_name) if not isinstance(task, Task) else task
        opts = sp.EnvOptions.validate(obs_type, cameras, image_size, control_mode, render_mode)
        self.camera_fps, self._camera_period = camera_fps, camera_period(camera_fps)
        self.physics = resolve_physics(physics)
        self.sim = SimCore(task, self.physics, look)
        self.model, self.data, self.idx = self.sim.model, self.sim.data, self.sim.idx
        self._init_contract(task, opts, terminate_on_success, ArmKinematics(self.model, self.idx))
        self._last_obs: dict[str, np.ndarray] | None = None
        self._elapsed = 0

    # ------------------------------------------------------------------ public state
    @property
    def commanded_targets(self) -> np.ndarray:
        """The 14 joint targets last sent to the actuators (what a recording stores as action)."""
        return self.controller.targets.copy()

    def set_physics(self, physics) -> None:
        """Swap physical parameters without rebuilding the scene."""
        self.physics = resolve_physics(physics)
        self.sim.set_physics(self.physics)

    def apply_joint_targets(self, targets: np.ndarray) -> None:
        """Make the controllers track ``targets`` (14) from now on, bypassing the action space."""
        self.controller.targets = np.asarray(targets, dtype=np.float64).copy()
        self.sim.command(self.controller.targets)

    def set_joint_state(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Put the robot at joint positions ``qpos`` (14) with velocities ``qvel`` and track them;
        objects stay where they are."""
        qpos = np.asarray(qpos, dtype=np.float64)
        self.sim.write_joint_state(qpos, qvel)
        self.controller.reset(qpos)
        self.sim.hold(self.controller.targets)
        mujoco.mj_forward(self.model, self.data)

    def task_info(self) -> dict[str, Any]:
        """Success, reward (and its terms) and privileged poses of the current state, as ``info``."""
        status = self.sim.evaluate()
        return dict(self._info(status), reward=status.reward)

    def joint_positions(self) -> np.ndarray:
        return self.sim.joint_positions()

    def joint_velocities(self) -> np.ndarray:
        return self.sim.joint_velocities()

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.controller.reset(robot.START_QPOS)
        self.sim.reset_scene(self.np_random, (options or {}).get("layout"))
        self._elapsed = 0
        obs = self._observation()
        self._last_obs = obs
        return obs, self._info(self.sim.evaluate())

    def step(self, action):
        targets, clipped = self.controller(action)
        sim = self.sim
        sim.command(targets)
        t_before = self.data.time
        sim.step()
        self._elapsed += 1

        error = sim.physics_error(t_before)
        if error is not None:
            info = {
                "is_success": False,
                "task": self.task.description,
                "physics_error": error,
                "action_clipped": clipped,
                "step": self._elapsed,
            }
            return {k: v.copy() for k, v in self._last_obs.items()}, 0.0, False, True, info

        status = sim.evaluate()
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
        return self.sim.render_camera(camera, image_size or self.image_size)

    def close(self):
        self.sim.close()

    # ------------------------------------------------------------------ internals
    def _observation(self) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        if self.obs_type != "pixels":
            obs["joint_pos"] = self.sim.joint_positions()
            obs["joint_vel"] = self.sim.joint_velocities()
        if self.obs_type != "state":
            held = self._last_obs if self._elapsed % self._camera_period else None  # between camera frames
            for cam in self.cameras:
                obs[cam] = held[cam].copy() if held is not None else self.sim.render_camera(cam, self.image_size)
        return sp.clip_observation(self.observation_space, obs)

    def _info(self, status) -> dict[str, Any]:
        info = self.sim.privileged_info(status)
        info["step"] = self._elapsed
        return info


# ----------------------------------------------------------------------------- one env class per task
#: The sections of a task env's docstring (gymnasium's MuJoCo env layout); the task-specific ones
#: restate the task module's :meth:`~embodied_gym.sim.tasks.base.Task.doc_sections`.
ENV_DOC_SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Rewards",
    "Starting State",
    "Success",
    "Episode End",
    "Arguments",
)


class PickCupEnv(AlohaTaskEnv):
    """``EmbodieDreamer-PickCup-v0``: grab a paper cup and lift it at least 5 cm.

    ## Description

    Grab a paper cup and lift it at least 5 cm. Instruction: "Grab the paper cup and lift it."

    ## Action Space

    A ``Box`` of shape ``(14,)``, float32: ``[left arm 6, left gripper, right arm 6, right gripper]``, read by
    ``control_mode``:

    - ``joint_pos`` (default): absolute joint targets, bounded by the joint limits (rad) and the
      finger rail (0.021 m closed to 0.057 m open).
    - ``joint_delta``: in [-1, 1]; times 0.05 rad (arms) or 4 mm (grippers) is added to the current targets.
    - ``ee_delta``: per arm ``[dx, dy, dz, rx, ry, rz, gripper]`` in [-1, 1]: the TCP target moves by
      up to 1 cm and turns by up to 0.05 rad per step, solved to joint targets by damped
      least-squares IK; ``gripper`` is absolute (-1 closed, 1 open).

    Actions outside the space are clipped (``info["action_clipped"]`` counts the entries); NaN/inf or a wrong
    shape raises ``ValueError``. One action is one 50 Hz control step (0.02 s, 10 physics substeps).

    ## Observation Space

    A flat ``Dict`` (stable-baselines3's ``MultiInputPolicy`` takes it), by ``obs_type``:

    - ``joint_pos`` (14, float32; a gripper entry is its finger's rail position in m) and
      ``joint_vel`` (14, float32), unless ``obs_type="pixels"``;
    - one ``(H, W, 3)`` uint8 image per camera of ``cameras`` at ``image_size``, unless
      ``obs_type="state"``.

    Object poses and other privileged state are in ``info`` only (``object_poses``: name -> ``[x, y, z, qw, qx,
    qy, qz]``; ``tcp_poses``; ``reward_terms``), never in the observation: a real robot cannot observe them.

    ## Rewards

    In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to a point 3 cm below the rim),
    grasp (1 while both pads of one gripper touch the cup), lift (height / 5 cm while grasped) and success
    (counted twice).

    ## Starting State

    Both arms in the folded sleep pose with open grippers (the arms' bases are at x = ±0.469 m, y = 0.5 m); each
    object on the table at a pose drawn uniformly from the reset seed, then settled for 0.1 s:

    - ``cup`` (paper cup, radius 2.5 cm, 8 cm tall, 15 g): x in [-0.15, 0.15] m, y in [0.42, 0.58] m

    Either arm may take it (the expert uses the arm on the cup's side).

    ## Success

    The cup's base is at least 5 cm above the table, both finger pads of one gripper touch it, and it does not
    touch the table.

    ## Episode End

    Terminated on success (if ``terminate_on_success``); truncated after 200 steps (4 s) or on a
    physics blow-up.

    ## Arguments

    ``gym.make("EmbodieDreamer-PickCup-v0", ...)`` with the keyword arguments of :class:`AlohaTaskEnv`:
    ``obs_type`` (``"state"``, ``"pixels"``, ``"pixels_state"``: default), ``cameras`` (default
    ``("cam_high",)``), ``image_size`` (default ``(240, 320)``), ``control_mode`` (``"joint_pos"``: default,
    ``"joint_delta"``, ``"ee_delta"``), ``physics`` (a ``PhysicsParams``, dict or JSON path; default nominal),
    ``render_mode`` (``None`` or ``"rgb_array"``), ``terminate_on_success`` (default True), ``look`` (a
    ``SceneLook``) and ``camera_fps`` (default None: a frame every step).
    """

    task_name = "PickCup"


class PenInCupEnv(AlohaTaskEnv):
    """``EmbodieDreamer-PenInCup-v0``: put a pen into a pen cup.

    ## Description

    Put a pen into a pen cup. Instruction: "Put the pen into the pen cup."

    ## Action Space

    A ``Box`` of shape ``(14,)``, float32: ``[left arm 6, left gripper, right arm 6, right gripper]``, read by
    ``control_mode``:

    - ``joint_pos`` (default): absolute joint targets, bounded by the joint limits (rad) and the
      finger rail (0.021 m closed to 0.057 m open).
    - ``joint_delta``: in [-1, 1]; times 0.05 rad (arms) or 4 mm (grippers) is added to the current targets.
    - ``ee_delta``: per arm ``[dx, dy, dz, rx, ry, rz, gripper]`` in [-1, 1]: the TCP target moves by
      up to 1 cm and turns by up to 0.05 rad per step, solved to joint targets by damped
      least-squares IK; ``gripper`` is absolute (-1 closed, 1 open).

    Actions outside the space are clipped (``info["action_clipped"]`` counts the entries); NaN/inf or a wrong
    shape raises ``ValueError``. One action is one 50 Hz control step (0.02 s, 10 physics substeps).

    ## Observation Space

    A flat ``Dict`` (stable-baselines3's ``MultiInputPolicy`` takes it), by ``obs_type``:

    - ``joint_pos`` (14, float32; a gripper entry is its finger's rail position in m) and
      ``joint_vel`` (14, float32), unless ``obs_type="pixels"``;
    - one ``(H, W, 3)`` uint8 image per camera of ``cameras`` at ``image_size``, unless
      ``obs_type="state"``.

    Object poses and other privileged state are in ``info`` only (``object_poses``: name -> ``[x, y, z, qw, qx,
    qy, qz]``; ``tcp_poses``; ``reward_terms``), never in the observation: a real robot cannot observe them.

    ## Rewards

    In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to the pen's middle), grasp (pen
    held or inside), transport (pen tip to above the cup), inside, and success (counted twice).

    ## Starting State

    Both arms in the folded sleep pose with open grippers (the arms' bases are at x = ±0.469 m, y = 0.5 m); each
    object on the table at a pose drawn uniformly from the reset seed, then settled for 0.1 s:

    - ``pen`` (15 cm long, 12 mm thick, 12 g, lying on the table, its long axis near the x axis): x in [0.10, 0.18] m, y in [0.40, 0.46] m, yaw in [-0.30, 0.30] rad
    - ``pencup`` (inner radius 3 cm, 9 cm tall, 300 g): x in [0.00, 0.06] m, y in [0.55, 0.60] m

    Meant for the right arm.

    ## Success

    The pen's lower tip is inside the pen cup's inner volume and no gripper touches the pen.

    ## Episode End

    Terminated on success (if ``terminate_on_success``); truncated after 350 steps (7 s) or on a
    physics blow-up.

    ## Arguments

    ``gym.make("EmbodieDreamer-PenInCup-v0", ...)`` with the keyword arguments of :class:`AlohaTaskEnv`:
    ``obs_type`` (``"state"``, ``"pixels"``, ``"pixels_state"``: default), ``cameras`` (default
    ``("cam_high",)``), ``image_size`` (default ``(240, 320)``), ``control_mode`` (``"joint_pos"``: default,
    ``"joint_delta"``, ``"ee_delta"``), ``physics`` (a ``PhysicsParams``, dict or JSON path; default nominal),
    ``render_mode`` (``None`` or ``"rgb_array"``), ``terminate_on_success`` (default True), ``look`` (a
    ``SceneLook``) and ``camera_fps`` (default None: a frame every step).
    """

    task_name = "PenInCup"


class RemoteInBoxEnv(AlohaTaskEnv):
    """``EmbodieDreamer-RemoteInBox-v0``: put a TV remote into an open box.

    ## Description

    Put a TV remote into an open box. Instruction: "Put the TV remote into the box."

    ## Action Space

    A ``Box`` of shape ``(14,)``, float32: ``[left arm 6, left gripper, right arm 6, right gripper]``, read by
    ``control_mode``:

    - ``joint_pos`` (default): absolute joint targets, bounded by the joint limits (rad) and the
      finger rail (0.021 m closed to 0.057 m open).
    - ``joint_delta``: in [-1, 1]; times 0.05 rad (arms) or 4 mm (grippers) is added to the current targets.
    - ``ee_delta``: per arm ``[dx, dy, dz, rx, ry, rz, gripper]`` in [-1, 1]: the TCP target moves by
      up to 1 cm and turns by up to 0.05 rad per step, solved to joint targets by damped
      least-squares IK; ``gripper`` is absolute (-1 closed, 1 open).

    Actions outside the space are clipped (``info["action_clipped"]`` counts the entries); NaN/inf or a wrong
    shape raises ``ValueError``. One action is one 50 Hz control step (0.02 s, 10 physics substeps).

    ## Observation Space

    A flat ``Dict`` (stable-baselines3's ``MultiInputPolicy`` takes it), by ``obs_type``:

    - ``joint_pos`` (14, float32; a gripper entry is its finger's rail position in m) and
      ``joint_vel`` (14, float32), unless ``obs_type="pixels"``;
    - one ``(H, W, 3)`` uint8 image per camera of ``cameras`` at ``image_size``, unless
      ``obs_type="state"``.

    Object poses and other privileged state are in ``info`` only (``object_poses``: name -> ``[x, y, z, qw, qx,
    qy, qz]``; ``tcp_poses``; ``reward_terms``), never in the observation: a real robot cannot observe them.

    ## Rewards

    In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to the middle of the remote's
    top face), grasp (held or inside), transport (remote to the box centre, horizontally), inside, and success
    (counted twice).

    ## Starting State

    Both arms in the folded sleep pose with open grippers (the arms' bases are at x = ±0.469 m, y = 0.5 m); each
    object on the table at a pose drawn uniformly from the reset seed, then settled for 0.1 s:

    - ``remote`` (17 x 4.5 x 2 cm, 100 g): x in [0.14, 0.20] m, y in [0.38, 0.45] m, yaw in [-0.30, 0.30] rad
    - ``box`` (open cardboard box, inner 26 x 14 cm, 7 cm tall, 400 g): x in [-0.02, 0.04] m, y in [0.56, 0.62] m, yaw in [-0.15, 0.15] rad

    Meant for the right arm.

    ## Success

    The remote's centre is inside the box's inner footprint, its highest corner is below the rim, and no gripper
    touches it.

    ## Episode End

    Terminated on success (if ``terminate_on_success``); truncated after 350 steps (7 s) or on a
    physics blow-up.

    ## Arguments

    ``gym.make("EmbodieDreamer-RemoteInBox-v0", ...)`` with the keyword arguments of :class:`AlohaTaskEnv`:
    ``obs_type`` (``"state"``, ``"pixels"``, ``"pixels_state"``: default), ``cameras`` (default
    ``("cam_high",)``), ``image_size`` (default ``(240, 320)``), ``control_mode`` (``"joint_pos"``: default,
    ``"joint_delta"``, ``"ee_delta"``), ``physics`` (a ``PhysicsParams``, dict or JSON path; default nominal),
    ``render_mode`` (``None`` or ``"rgb_array"``), ``terminate_on_success`` (default True), ``look`` (a
    ``SceneLook``) and ``camera_fps`` (default None: a frame every step).
    """

    task_name = "RemoteInBox"


class CupOnMatEnv(AlohaTaskEnv):
    """``EmbodieDreamer-CupOnMat-v0``: place a cup upright on a mat.

    ## Description

    Place a cup upright on a mat. Instruction: "Place the cup upright on the mat."

    ## Action Space

    A ``Box`` of shape ``(14,)``, float32: ``[left arm 6, left gripper, right arm 6, right gripper]``, read by
    ``control_mode``:

    - ``joint_pos`` (default): absolute joint targets, bounded by the joint limits (rad) and the
      finger rail (0.021 m closed to 0.057 m open).
    - ``joint_delta``: in [-1, 1]; times 0.05 rad (arms) or 4 mm (grippers) is added to the current targets.
    - ``ee_delta``: per arm ``[dx, dy, dz, rx, ry, rz, gripper]`` in [-1, 1]: the TCP target moves by
      up to 1 cm and turns by up to 0.05 rad per step, solved to joint targets by damped
      least-squares IK; ``gripper`` is absolute (-1 closed, 1 open).

    Actions outside the space are clipped (``info["action_clipped"]`` counts the entries); NaN/inf or a wrong
    shape raises ``ValueError``. One action is one 50 Hz control step (0.02 s, 10 physics substeps).

    ## Observation Space

    A flat ``Dict`` (stable-baselines3's ``MultiInputPolicy`` takes it), by ``obs_type``:

    - ``joint_pos`` (14, float32; a gripper entry is its finger's rail position in m) and
      ``joint_vel`` (14, float32), unless ``obs_type="pixels"``;
    - one ``(H, W, 3)`` uint8 image per camera of ``cameras`` at ``image_size``, unless
      ``obs_type="state"``.

    Object poses and other privileged state are in ``info`` only (``object_poses``: name -> ``[x, y, z, qw, qx,
    qy, qz]``; ``tcp_poses``; ``reward_terms``), never in the observation: a real robot cannot observe them.

    ## Rewards

    In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to a point 3 cm below the cup's
    rim), grasp (held or on the mat), transport (cup to the mat centre, horizontally), on_mat, and success
    (counted twice).

    ## Starting State

    Both arms in the folded sleep pose with open grippers (the arms' bases are at x = ±0.469 m, y = 0.5 m); each
    object on the table at a pose drawn uniformly from the reset seed, then settled for 0.1 s:

    - ``cup`` (radius 2.5 cm, 8 cm tall, 30 g): x in [0.10, 0.18] m, y in [0.40, 0.46] m
    - ``mat`` (12 x 12 cm, 4 mm thick, 200 g): x in [-0.04, 0.04] m, y in [0.56, 0.62] m, yaw in [-0.30, 0.30] rad

    Meant for the right arm.

    ## Success

    The cup is upright (tilt under 15 degrees), its base centre lies within the mat and rests on it (less than
    1.5 cm above), and no gripper touches it.

    ## Episode End

    Terminated on success (if ``terminate_on_success``); truncated after 350 steps (7 s) or on a
    physics blow-up.

    ## Arguments

    ``gym.make("EmbodieDreamer-CupOnMat-v0", ...)`` with the keyword arguments of :class:`AlohaTaskEnv`:
    ``obs_type`` (``"state"``, ``"pixels"``, ``"pixels_state"``: default), ``cameras`` (default
    ``("cam_high",)``), ``image_size`` (default ``(240, 320)``), ``control_mode`` (``"joint_pos"``: default,
    ``"joint_delta"``, ``"ee_delta"``), ``physics`` (a ``PhysicsParams``, dict or JSON path; default nominal),
    ``render_mode`` (``None`` or ``"rgb_array"``), ``terminate_on_success`` (default True), ``look`` (a
    ``SceneLook``) and ``camera_fps`` (default None: a frame every step).
    """

    task_name = "CupOnMat"


def _task_envs(*classes: type[AlohaTaskEnv]) -> dict[str, type[AlohaTaskEnv]]:
    """``{task: env class}`` in the order of the task registry, checked to cover it: a task added to
    ``embodied_gym.sim.tasks.TASKS`` needs its ``<Task>Env`` class here."""
    envs = {cls.task_name: cls for cls in classes}
    missing = [name for name in TASKS if name not in envs]
    if missing or set(envs) - set(TASKS):
        raise TypeError(
            f"the task env classes {sorted(envs)} do not match the task registry {list(TASKS)}: write a "
            f"class <Task>Env(AlohaTaskEnv) in {__name__} for each of {missing}"
        )
    return {name: envs[name] for name in TASKS}


#: Task name -> env class; ``embodied_gym.registration`` registers ``EmbodieDreamer-<Task>-v0`` for each.
TASK_ENVS: dict[str, type[AlohaTaskEnv]] = _task_envs(PickCupEnv, PenInCupEnv, RemoteInBoxEnv, CupOnMatEnv)
