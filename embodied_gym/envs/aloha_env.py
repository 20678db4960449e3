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
from embodied_gym.sim.tasks import Task, make_task


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
        self.camera_fps, self._camera_period = camera_fps, sp.camera_period(camera_fps)
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
# Made from the task registry (embodied_gym/sim/tasks/__init__.py): ``<Task>Env`` for every task, its
# docstring (gymnasium's MuJoCo env sections) from the task module. PickCupEnv, PenInCupEnv,
# RemoteInBoxEnv and CupOnMatEnv are module attributes like any hand-written class.
from embodied_gym.sim.tasks import TASKS  # noqa: E402  (the registry; tasks never import this module)

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

_SHARED_SECTIONS = {
    "Action Space": (
        "14-D ``[left arm 6, left gripper, right arm 6, right gripper]``; its meaning follows "
        "``control_mode`` (``joint_pos``, ``joint_delta`` or ``ee_delta``), see :class:`AlohaTaskEnv`."
    ),
    "Observation Space": (
        "A flat ``Dict`` of ``joint_pos`` (14), ``joint_vel`` (14) and one ``(H, W, 3)`` uint8 "
        "image per camera, as ``obs_type`` asks; object poses are in ``info`` only."
    ),
    "Arguments": (
        "``gym.make(id, obs_type=..., cameras=..., image_size=..., control_mode=..., physics=..., "
        "render_mode=..., terminate_on_success=...)``, see :class:`AlohaTaskEnv`."
    ),
}


def _env_docstring(task) -> str:
    sections = dict(_SHARED_SECTIONS, **task.doc_sections())
    head = f"``EmbodieDreamer-{task.name}-v0``: {task.summary}."
    return "\n\n".join([head] + [f"## {name}\n\n{sections[name]}" for name in ENV_DOC_SECTIONS]) + "\n"


def _task_env_class(task_cls) -> type[AlohaTaskEnv]:
    task = task_cls()
    name = f"{task.name}Env"
    return type(
        name,
        (AlohaTaskEnv,),
        {"task_name": task.name, "__doc__": _env_docstring(task), "__module__": __name__, "__qualname__": name},
    )


TASK_ENVS: dict[str, type[AlohaTaskEnv]] = {name: _task_env_class(cls) for name, cls in TASKS.items()}
globals().update({cls.__name__: cls for cls in TASK_ENVS.values()})
