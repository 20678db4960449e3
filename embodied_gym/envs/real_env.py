"""The real-robot envs: the simulated envs' exact interface over any LeRobot ``Robot``.

``gym.make("EmbodieDreamer-PickCup-Real-v0")`` drives the stand-in robot
(:mod:`embodied_gym.robots.stand_in`) by default; pass ``robot=`` (a ``lerobot.robots.Robot`` or a
``RobotConfig``) to drive real hardware. Observation space, action space, control modes, cameras
and kwargs are those of :class:`~embodied_gym.envs.aloha_env.AlohaTaskEnv`, so a policy moves
between sim and real by changing the id string.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import cv2
import gymnasium as gym
import numpy as np

from embodied_gym.envs import spaces as sp
from embodied_gym.envs.base import AlohaEnv
from embodied_gym.sim import robot as layout
from embodied_gym.sim.kinematics import ArmKinematics
from embodied_gym.sim.physics import resolve_physics
from embodied_gym.sim.scene import CONTROL_DT, compile_scene
from embodied_gym.sim.tasks import make_task
from embodied_gym.sim.timing import camera_period

#: Default largest change of a joint target per control step sent to the robot (rad; m for grippers),
#: like LeRobot's ``max_relative_target``: 5 rad/s and 0.5 m/s at 50 Hz.
DEFAULT_MAX_RELATIVE_TARGET = np.where(np.isin(np.arange(14), layout.GRIPPER_INDICES), 0.01, 0.1)
_RESET_STEPS = 100  # 2 s to bring the arms to the start pose on robots that cannot teleport


class RobotError(RuntimeError):
    """The robot failed; it was disconnected before this was raised."""


class AlohaRealEnv(AlohaEnv):
    """``EmbodieDreamer-<Task>-Real-v0``: a task on a real (or stand-in) ALOHA robot.

    Keyword arguments: those of :class:`~embodied_gym.envs.aloha_env.AlohaTaskEnv` (``obs_type``,
    ``cameras``, ``image_size``, ``control_mode``, ``physics``, ``render_mode``,
    ``terminate_on_success``), plus:

    - ``robot``: a ``lerobot.robots.Robot`` or ``RobotConfig``; default: the stand-in robot.
    - ``robot_config``: path of a stand-in config (YAML/JSON) when ``robot`` is not given.
    - ``joint_map``: our joint name (``left_waist`` ... ``right_gripper``) -> the robot's motor name;
      default identity. The robot must offer ``<motor>.pos`` in its observation and action features.
    - ``camera_map``: our camera name -> the robot's camera key; default identity.
    - ``max_relative_target``: largest per-step change of the joint targets sent (scalar or 14
      values; default 0.1 rad, 0.01 m); ``None`` disables it.
    - ``realtime``: hold the 50 Hz control rate with a clock (default True); ``info["overruns"]``
      counts steps that took longer than 20 ms. The stand-in may run faster with ``realtime=False``.
    - ``camera_fps``: the cameras' frame rate (default None: a frame per control step); between two
      frames the observation holds the last one. The stand-in then renders only the due frames.
    - ``success_fn``: ``f(obs, info) -> bool`` for robots that cannot tell success themselves.
    - ``reset_fn``: ``f(robot, seed)`` called at reset after the arms reach the start pose, e.g. to
      ask an operator to place the objects. Robots with ``reset_scene(seed)`` (the stand-in) use that.

    ``physics`` only matters for ``ee_delta``: the IK uses the (calibrated) simulator's kinematics.

    Reward and success: from the robot when it can tell (``robot.task_status()``, which the
    stand-in has), else from ``success_fn`` (reward = success), else ``info["is_success"]`` is
    None and the reward 0.

    Safety: targets are clipped to the joint limits and rate-limited by ``max_relative_target``;
    an exception from the robot disconnects it and is re-raised as :class:`RobotError` with
    context. The env is a context manager; ``close()`` is idempotent and disconnects the robot.
    """

    is_simulated = False

    def __init__(
        self,
        task: str = "PickCup",
        robot=None,
        robot_config: str | os.PathLike | None = None,
        obs_type: str = "pixels_state",
        cameras=("cam_high",),
        image_size=(240, 320),
        control_mode: str = "joint_pos",
        physics=None,
        render_mode: str | None = None,
        terminate_on_success: bool = True,
        joint_map: dict[str, str] | None = None,
        camera_map: dict[str, str] | None = None,
        max_relative_target=DEFAULT_MAX_RELATIVE_TARGET,
        realtime: bool = True,
        success_fn: Callable[[dict, dict], bool] | None = None,
        reset_fn: Callable[[Any, int | None], None] | None = None,
        camera_fps: float | None = None,
    ):
        task_model = make_task(task)
        opts = sp.EnvOptions.validate(obs_type, cameras, image_size, control_mode, render_mode)
        self.camera_fps, self._camera_period = camera_fps, camera_period(camera_fps)
        # Kinematics for ee_delta come from the (calibrated) simulator's model of the arm.
        model, idx, _ = compile_scene(task_model, resolve_physics(physics))
        self._init_contract(task_model, opts, terminate_on_success, ArmKinematics(model, idx))
        self.realtime = realtime
        self.success_fn = success_fn
        self.reset_fn = reset_fn

        self.joint_map = {j: j for j in layout.JOINT_NAMES}
        if joint_map:
            unknown = sorted(set(joint_map) - set(layout.JOINT_NAMES))
            if unknown:
                raise ValueError(f"joint_map names unknown joints {unknown}; valid: {list(layout.JOINT_NAMES)}")
            self.joint_map.update(joint_map)
        self.camera_map = {c: c for c in self.cameras}
        self.camera_map.update(camera_map or {})
        if max_relative_target is None:
            self.max_relative_target = None
        else:
            mrt = np.broadcast_to(np.asarray(max_relative_target, dtype=np.float64), (14,)).copy()
            if (mrt <= 0).any():
                raise ValueError("max_relative_target must be positive (or None to disable it)")
            self.max_relative_target = mrt

        self.robot = self._make_robot(robot, robot_config)
        self._owns_connection = False
        self._checked = False
        self._sent = layout.START_QPOS.copy()
        self._prev_q: np.ndarray | None = None
        self._last_frames: dict[str, np.ndarray] = {}
        self._elapsed = 0
        self._reads = 0
        self._overruns = 0
        self._episode_start = 0.0
        self._next_tick = 0.0
        self._closed = False

    # ------------------------------------------------------------------ robot plumbing
    def _make_robot(self, robot, robot_config):
        from lerobot.robots import Robot, RobotConfig

        if isinstance(robot, Robot):
            return robot
        if isinstance(robot, RobotConfig):
            from lerobot.robots.utils import make_robot_from_config

            robot_task = getattr(robot, "task", None)  # a robot that sets a task's scene itself (the stand-in)
            if robot_task is not None and robot_task != self.task.name:
                raise ValueError(
                    f"the robot config sets up task {robot_task!r} but the env runs {self.task.name}; pass "
                    f"--robot.task={self.task.name}"
                )
            return make_robot_from_config(robot)
        if robot is not None:
            raise TypeError(f"robot must be a lerobot Robot or RobotConfig, got {type(robot).__name__}")
        from embodied_gym.robots.stand_in import StandInRobot, StandInRobotConfig

        # Only cameras the env shows (observation or render) are rendered by the stand-in.
        cams = self.cameras if (self.obs_type != "state" or self.render_mode) else ()
        return StandInRobot(
            StandInRobotConfig(
                task=self.task.name,
                config_path=str(robot_config) if robot_config else None,
                camera_names=cams,
                image_size=self.image_size,
                camera_fps=self.camera_fps,
            )
        )

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            self._safe_disconnect()
            raise RobotError(
                f"robot {self.robot} failed during {what}: {type(e).__name__}: {e}; it has been disconnected"
            ) from e

    def _safe_disconnect(self) -> None:
        try:
            if self.robot.is_connected:
                self.robot.disconnect()
        except Exception:  # the original error matters more than a failed disconnect
            pass

    def _check_features(self) -> None:
        obs_f, act_f = self.robot.observation_features, self.robot.action_features
        want = {f"{m}.pos" for m in self.joint_map.values()}
        problems = []
        missing_obs = sorted(want - set(obs_f))
        missing_act = sorted(want - set(act_f))
        extra_act = sorted(k for k in act_f if k not in want)
        missing_cams = sorted(
            self.camera_map[c] for c in self.cameras if self.obs_type != "state" and self.camera_map[c] not in obs_f
        )
        if missing_obs:
            problems.append(f"observation lacks {missing_obs}")
        if missing_act:
            problems.append(f"action features lack {missing_act}")
        if extra_act:
            problems.append(f"action features have keys the env would never send: {extra_act}")
        if missing_cams:
            problems.append(f"cameras missing: {missing_cams}")
        if problems:
            raise ValueError(
                f"robot {self.robot} does not match the env's joint layout: "
                + "; ".join(problems)
                + ". Map names with joint_map= / camera_map= (our joints: "
                + ", ".join(layout.JOINT_NAMES)
                + ")"
            )
        self._has_vel = all(f"{m}.vel" in obs_f for m in self.joint_map.values())
        self._checked = True

    def _send(self, targets: np.ndarray) -> None:
        if self.max_relative_target is not None:
            targets = self._sent + np.clip(targets - self._sent, -self.max_relative_target, self.max_relative_target)
        targets = np.clip(targets, layout.JOINT_LOW, layout.JOINT_HIGH)
        action = {f"{self.joint_map[j]}.pos": float(x) for j, x in zip(layout.JOINT_NAMES, targets)}
        self._call("send_action", self.robot.send_action, action)
        self._sent = targets

    def _read(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        raw = self._call("get_observation", self.robot.get_observation)
        q = np.array([raw[f"{self.joint_map[j]}.pos"] for j in layout.JOINT_NAMES], dtype=np.float64)
        if self._has_vel:
            v = np.array([raw[f"{self.joint_map[j]}.vel"] for j in layout.JOINT_NAMES], dtype=np.float64)
        else:
            v = np.zeros(14) if self._prev_q is None else (q - self._prev_q) / CONTROL_DT
        self._prev_q = q
        obs: dict[str, np.ndarray] = {}
        if self.obs_type != "pixels":
            obs["joint_pos"], obs["joint_vel"] = q, v
        frames = {}
        # Between two camera frames the observation holds the last one (a robot whose cameras run
        # faster than camera_fps is subsampled; the stand-in captures only when a frame is due).
        hold = self._last_frames if self._reads % self._camera_period else None
        self._reads += 1
        for cam in self.cameras:
            if hold is not None and cam in hold:
                frames[cam] = hold[cam].copy()
                continue
            key = self.camera_map[cam]
            if key in raw:
                img: np.ndarray = np.asarray(raw[key], dtype=np.uint8)
                if img.shape[:2] != self.image_size:
                    img = cv2.resize(img, self.image_size[::-1], interpolation=cv2.INTER_AREA)
                frames[cam] = img
        self._last_frames = frames
        if self.obs_type != "state":
            obs.update({c: frames[c] for c in self.cameras})
        return sp.clip_observation(self.observation_space, obs), q

    def _status(self, obs, info) -> tuple[bool | None, float]:
        if hasattr(self.robot, "task_status"):
            st = self._call("task_status", self.robot.task_status)
            for k in ("object_poses", "tcp_poses", "reward_terms"):
                if k in st:
                    info[k] = st[k]
            return bool(st["is_success"]), float(st.get("reward", float(st["is_success"])))
        if self.success_fn is not None:
            ok = bool(self.success_fn(obs, info))
            return ok, float(ok)
        return None, 0.0

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("this env was closed; make a new one")
        if not self.robot.is_connected:
            self._call("connect", self.robot.connect)
            self._owns_connection = True
        if not self._checked:
            self._check_features()
        self._report_overruns()
        # what robots.stand_in.scene_seed_of(seed) computes, so a stand-in connected with episode_seed=seed
        # (lerobot-record's) sets the same table
        scene_seed = int(self.np_random.integers(2**31 - 1))
        if options and options.get("scene_seed") is not None:  # a given table (a twin of another stand-in)
            scene_seed = int(options["scene_seed"])
        if hasattr(self.robot, "reset_scene"):
            self._call("reset_scene", self.robot.reset_scene, scene_seed)
            self._sent = layout.START_QPOS.copy()
        else:
            _, q = self._read()
            self._sent = q
            for k in range(1, _RESET_STEPS + 1):
                self._send(q + (layout.START_QPOS - q) * k / _RESET_STEPS)
                self._tick(True)
            if self.reset_fn is not None:
                self.reset_fn(self.robot, scene_seed)
        self.controller.reset(layout.START_QPOS)
        self._prev_q = None
        self._elapsed = 0
        self._reads = 0
        self._overruns = 0
        obs, _ = self._read()
        info = {"task": self.task.description, "step": 0, "scene_seed": scene_seed}
        info["is_success"], _ = self._status(obs, info)
        self._next_tick = self._episode_start = time.perf_counter()
        self._next_tick += CONTROL_DT
        return obs, info

    def _report_overruns(self) -> None:
        """Once per episode (at the next reset, or close): how many steps overran the 50 Hz period, and
        the rate achieved, so a slow robot, camera or policy is not a silent change of the control rate."""
        if self.realtime and self._overruns and self._elapsed:
            rate = self._elapsed / max(time.perf_counter() - self._episode_start, 1e-9)
            gym.logger.warn(
                f"{self._overruns} of {self._elapsed} steps of the last episode overran the {1 / CONTROL_DT:.0f} Hz "
                f"control period (achieved {rate:.1f} Hz): the robot ran slower than the policy was trained at; "
                f"check the policy's and the cameras' time per step"
            )
        self._overruns = 0

    def _tick(self, realtime: bool) -> bool:
        """Wait for the next control tick; True if this step overran it."""
        if not realtime:
            return False
        now = time.perf_counter()
        overran = now > self._next_tick
        if not overran:
            time.sleep(self._next_tick - now)
        self._next_tick = max(self._next_tick + CONTROL_DT, time.perf_counter() if overran else 0.0)
        return overran

    def step(self, action):
        if not self.robot.is_connected:
            raise RuntimeError("the robot is not connected: call reset() first (or make a new env after an error)")
        targets, clipped = self.controller(action)
        self._send(targets)
        overran = self._tick(self.realtime)
        self._overruns += overran
        obs, _ = self._read()
        self._elapsed += 1
        info = {
            "task": self.task.description,
            "step": self._elapsed,
            "action_clipped": clipped,
            "overruns": self._overruns,
        }
        success, reward = self._status(obs, info)
        info["is_success"] = success
        terminated = bool(success and self.terminate_on_success)
        return obs, reward, terminated, False, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        cam = self.cameras[0] if self.cameras else None
        if cam is None or cam not in self._last_frames:
            return np.zeros((*self.image_size, 3), dtype=np.uint8)
        return self._last_frames[cam].copy()

    # The sim env's introspection, where a real robot can offer it.
    @property
    def commanded_targets(self) -> np.ndarray:
        """The 14 joint targets last sent to the robot, after clipping and rate limiting."""
        return self._sent.copy()

    def joint_positions(self) -> np.ndarray:
        return self._prev_q.copy() if self._prev_q is not None else layout.START_QPOS.copy()

    def close(self):
        if self._closed:
            return
        self._report_overruns()
        self._closed = True
        if self._owns_connection:
            self._safe_disconnect()
