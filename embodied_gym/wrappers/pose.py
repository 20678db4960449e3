"""Wrappers that add the object-pose entry to a policy's observation, ``obs["object_pose_estimate"]``
(its contract: :mod:`embodied_gym.perception.pose_entry`).

- :class:`PoseEstimateWrapper` reads the camera frame that is already in the observation, runs the
  :class:`~embodied_gym.perception.modeling.PoseEstimator` on it and adds the estimate. It never
  reads ``info`` or any simulator state, so it works identically on sim ids and ``-Real-`` ids
  (where the frame is the stand-in robot's or a real robot's camera) and never hands a policy
  privileged state: in the paper's Real2Sim2Real loop (arXiv 2507.05198) a policy trained in the
  simulator must run on the robot from what the robot can observe. Evaluation and deployment
  always use it.
- :class:`GroundTruthPoseWrapper` (sim ids only) fills the same entry, in the same layout, with the
  simulator's *true* object poses, for recording demonstrations in the simulator: a dataset
  recorded with it trains a policy on exact labels, and the policy then runs on the estimator's
  estimate (its dataset names the estimator, as an estimate-recorded one does). The simulator is the
  one place such labels exist; on PickCup they train a better policy than the estimate does
  (BENCHMARKS.md, policy section).
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from embodied_gym.envs.real_env import AlohaRealEnv
from embodied_gym.perception.modeling import PoseEstimator
from embodied_gym.perception.pose_entry import KEY, check_pose_update, estimator_source, true_pose_entry
from embodied_gym.sim.timing import camera_period


class PoseEstimateWrapper(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Add ``obs["object_pose_estimate"]`` (the estimated object poses) to a Dict observation.

    Args:
        env: an embodied-gym env (sim or real) made with the estimator's camera in ``cameras`` and
            ``obs_type="pixels"`` or ``"pixels_state"``, at an ``image_size`` with the estimator's
            aspect ratio whose crop is at least its input size (its training ``frame_size`` always works).
        estimator: a :class:`PoseEstimator` or the folder it was saved in.
        key: the observation key of the estimate.
        device: torch device when ``estimator`` is a folder.
        update: :data:`~embodied_gym.perception.pose_entry.POSE_UPDATES`: ``"every_frame"`` (the default) estimates every observation's
            frame; ``"at_reset"`` estimates the reset frame only and holds it for the episode.

    The estimate is a ``Box`` of shape ``(estimator.config.output_dim,)`` float32 whose entries are
    ``estimator.config.output_names``, in physical units: per object ``x``, ``y`` (m, world frame),
    ``z`` (m, when the model predicts height) and, for objects with visible yaw, ``cos``/``sin`` of
    ``k * yaw`` (``k`` its symmetry order). For the default PickCup estimator that is 3 values:
    ``[cup.x, cup.y, cup.z]``. Bounds: x in [-1, 1], y in [-0.5, 1.5], z in [-0.5, 1], cos/sin in
    [-1, 1]; the estimate is clipped into them. The other observation entries are unchanged.

    For LeRobot's ACT: record the wrapped env, storing ``obs["object_pose_estimate"]`` (the
    estimate, never the ground truth, so the policy learns with the estimator's errors) as the
    feature ``observation.environment_state`` (dtype float32, shape ``(output_dim,)``, names
    ``output_names``) next to ``observation.state`` (``joint_pos``); ACT feeds it through its
    ``encoder_env_state_input_proj`` token. ACT's default ``normalization_mapping`` has no ``ENV``
    entry (the feature would enter unnormalised): set ``"ENV": MEAN_STD`` (with the std floor) or
    store ``estimator.config.normalise(estimate)`` instead, which maps the start ranges to [-1, 1].

    Raises:
        ValueError: the observation is not a Dict, lacks the camera frame (the message names the
            ``gym.make`` arguments that add it), the frame size does not fit the estimator, or the
            env's task is not the estimator's.
    """

    def __init__(
        self,
        env: gym.Env,
        estimator: PoseEstimator | str | os.PathLike,
        key: str = KEY,
        device: str = "cpu",
        update: str = "every_frame",
    ):
        gym.utils.RecordConstructorArgs.__init__(self, estimator=estimator, key=key, device=device, update=update)
        gym.ObservationWrapper.__init__(self, env)
        self.update = check_pose_update(update)
        self._held: np.ndarray | None = None
        self.source = None
        if not isinstance(estimator, PoseEstimator):
            folder = estimator
            estimator = PoseEstimator.from_pretrained(folder, device=device)
            self.source = estimator_source(folder)
        self.estimator = estimator.eval()
        self.key = key
        cfg = estimator.config
        space = env.observation_space
        cam = cfg.camera
        if not isinstance(space, spaces.Dict):
            raise ValueError(
                f"PoseEstimateWrapper needs a Dict observation with the {cam!r} frame, got "
                f"{type(space).__name__}: make the env with obs_type='pixels_state', cameras=({cam!r},)"
            )
        if cam not in space.spaces:
            raise ValueError(
                f"the observation has no {cam!r} frame (keys: {list(space.spaces)}), which the pose "
                f"estimator reads: make the env with obs_type='pixels_state' (or 'pixels') and "
                f"cameras=({cam!r},), e.g. gym.make(id, obs_type='pixels_state', cameras=({cam!r},), "
                f"image_size={tuple(cfg.frame_size)})"
            )
        if key in space.spaces:
            raise ValueError(f"the observation already has a {key!r} entry; pass another key=")
        task = getattr(env.unwrapped, "task", None)
        if task is not None and getattr(task, "name", cfg.task) != cfg.task:
            raise ValueError(f"the pose estimator was trained for {cfg.task}, but the env runs {task.name}")
        cfg.crop_box(space.spaces[cam].shape)  # raises with the image_size fix when the frame does not fit
        low, high = cfg.output_bounds()
        self._low, self._high = low, high
        self.observation_space = spaces.Dict({**space.spaces, key: spaces.Box(low, high, dtype=np.float32)})

    @property
    def config(self):
        """The estimator's :class:`~embodied_gym.perception.configuration.PoseEstimatorConfig`."""
        return self.estimator.config

    @property
    def source(self) -> dict | None:
        """Where the estimator was loaded from (:func:`~embodied_gym.perception.pose_entry.estimator_source`), plus ``"update"`` unless it is
        ``every_frame``: what a recording names, so a policy trained on it is evaluated the same way.
        None for an in-memory model."""
        if self._estimator_source is None or self.update == "every_frame":
            return self._estimator_source
        return {**self._estimator_source, "update": self.update}

    @source.setter
    def source(self, value: dict | None) -> None:
        self._estimator_source = value

    def reset(self, **kwargs):
        self._held = None
        return super().reset(**kwargs)

    def observation(self, observation: dict) -> dict:
        if self._held is None or self.update == "every_frame":
            estimate = self.estimator.estimate(observation[self.estimator.config.camera])
            if not np.all(np.isfinite(estimate)):
                raise RuntimeError(f"the pose estimator returned a non-finite estimate {estimate}; check its weights")
            self._held = np.clip(estimate, self._low, self._high).astype(np.float32)
        return {**observation, self.key: self._held.copy()}


class GroundTruthPoseWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Sim ids only: add ``obs["object_pose_estimate"]`` holding the simulator's true object poses, in the
    layout a pose estimator's estimate has, for recording demonstrations with exact labels.

    Args:
        env: an embodied-gym *sim* env (its ``info["object_poses"]`` is the ground truth).
        estimator: the :class:`PoseEstimator` (or its folder) the policy will run on: it fixes the
            entry's layout (``config.output_names``: ``[cup.x, cup.y, cup.z]`` for PickCup) and is
            named in the recording (:attr:`source`) so evaluation wraps the env with it. It is not
            run here, so the env needs no camera.
        key: the observation key.
        update: :data:`~embodied_gym.perception.pose_entry.POSE_UPDATES`, as :class:`PoseEstimateWrapper`'s (``"at_reset"``: the true start poses).

    The entry is what the estimator would be trained to output (``config.targets`` of the poses),
    clipped into the same Box as :class:`PoseEstimateWrapper`'s. It is read at the env's camera rate
    (``camera_fps``; every control step when None) and held in between, as an estimate from a camera
    at that rate is, so training and deployment see the pose refreshed at the same times.

    Raises:
        ValueError: a ``-Real-`` env (a robot has no ground truth to give a policy; use
            :class:`PoseEstimateWrapper`), a Dict observation that already has ``key``, or another task.
    """

    def __init__(
        self, env: gym.Env, estimator: PoseEstimator | str | os.PathLike, key: str = KEY, update: str = "every_frame"
    ):
        gym.utils.RecordConstructorArgs.__init__(self, estimator=estimator, key=key, update=update)
        gym.Wrapper.__init__(self, env)
        self.update = check_pose_update(update)
        if isinstance(env.unwrapped, AlohaRealEnv):
            raise ValueError(
                "GroundTruthPoseWrapper gives the simulator's true object poses, and a robot has none to "
                "give a policy: record a -Real- id with the pose estimator's estimate "
                "(pose_source='estimate', PoseEstimateWrapper)"
            )
        self.source = None
        if not isinstance(estimator, PoseEstimator):
            folder = estimator
            estimator = PoseEstimator.from_pretrained(folder)
            self.source = estimator_source(folder)
        self.config = estimator.config
        self.key = key
        task = getattr(env.unwrapped, "task", None)
        if task is not None and getattr(task, "name", self.config.task) != self.config.task:
            raise ValueError(f"the pose estimator was trained for {self.config.task}, but the env runs {task.name}")
        space = env.observation_space
        if not isinstance(space, spaces.Dict):
            raise ValueError(f"GroundTruthPoseWrapper needs a Dict observation, got {type(space).__name__}")
        if key in space.spaces:
            raise ValueError(f"the observation already has a {key!r} entry; pass another key=")
        self._low, self._high = self.config.output_bounds()
        self.observation_space = spaces.Dict({**space.spaces, key: spaces.Box(self._low, self._high, dtype=np.float32)})
        self._period = camera_period(getattr(env.unwrapped, "camera_fps", None))
        self._held: np.ndarray | None = None

    @property
    def source(self) -> dict | None:
        """Where the estimator was loaded from (:func:`~embodied_gym.perception.pose_entry.estimator_source`) plus ``"values": "ground_truth"``,
        what a recording names; None for an in-memory model."""
        if self._estimator_source is None:
            return None
        extra = {} if self.update == "every_frame" else {"update": self.update}
        return {**self._estimator_source, "values": "ground_truth", **extra}

    @source.setter
    def source(self, value: dict | None) -> None:
        self._estimator_source = value

    def _with_pose(self, obs: dict, info: dict) -> dict:
        refresh = self.update == "every_frame" and int(info.get("step", 0)) % self._period == 0
        if self._held is None or refresh:
            self._held = true_pose_entry(self.config, info["object_poses"])
        return {**obs, self.key: self._held.copy()}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._held = None
        return self._with_pose(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_pose(obs, info), reward, terminated, truncated, info


__all__ = ["GroundTruthPoseWrapper", "PoseEstimateWrapper"]
