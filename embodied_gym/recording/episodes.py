"""Record episodes from any embodied-gym env (sim or Real) into a local LeRobotDataset v3.0.

Each frame holds the observation at step t and the action taken there: ``action`` is the 14
joint targets the controllers were given (whatever the env's control mode), the convention of
LeRobot's ALOHA datasets. ``observation.ee_pose`` holds both TCP poses (position + quaternion
wxyz), which calibration needs. Episodes go through :class:`~embodied_gym.data.writer.EpisodeWriter`:
written one at a time and the dataset finalised after each, so a crash loses at most the episode in
progress; ``resume=True`` continues. The sidecar row of an episode holds its reset seed, success,
the first success step, length, env id, control mode and start layout.

Recording is two steps: :func:`rollout_episode` rolls one episode and returns its frames (nothing
written), :func:`write_episode` adds it to the writer. :func:`record` does both in turn in this
process; :func:`embodied_gym.recording.parallel.record_expert_demos` rolls the scripted expert's episodes
in worker processes (or Ray tasks) and writes them here in seed order, so both give the same dataset.

Recording goes on past success: an episode ends ``after_success_steps`` control steps after the
task first succeeds (or at the time limit), so demonstrations hold what the expert does once the
task is done (a cup lifted the rest of the way and held, a released pen left in its cup), not only
the approach; ``next.success`` marks every frame on which the task is in its success state.

When the observation holds ``object_pose_estimate`` (the env is wrapped with
:class:`~embodied_gym.wrappers.pose.PoseEstimateWrapper`), the estimate is stored as
``observation.environment_state`` (float32, named by the estimator's outputs), and the sidecar row
names the estimator (folder, weights hash, camera, frame size) so a policy trained on the dataset
can rebuild the same observation. A sim env wrapped with
:class:`~embodied_gym.wrappers.pose.GroundTruthPoseWrapper` stores the simulator's true poses
there instead, in the estimator's layout; its row names the estimator too, with
``"values": "ground_truth"``, and the policy runs on the estimator's estimate.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gymnasium as gym
import mujoco
import numpy as np
from tqdm import tqdm

from embodied_gym.data import features as F
from embodied_gym.data.features import AFTER_SUCCESS_STEPS, dataset_features
from embodied_gym.data.writer import DEFAULT_CRF, EpisodeWriter, video_encoder
from embodied_gym.envs.base import AlohaEnv, aloha_env
from embodied_gym.sim import robot as layout

__all__ = [
    "AFTER_SUCCESS_STEPS",
    "DEFAULT_CRF",
    "RecordingPlan",
    "RecordingSummary",
    "RolledEpisode",
    "plan_recording",
    "record",
    "rollout_episode",
    "video_encoder",
    "write_episode",
]


@dataclass
class RecordingSummary:
    root: str
    episodes: int  # total in the dataset
    recorded: int  # in this run
    success_rate: float  # of this run's episodes


def tool_poses(kinematics, q: np.ndarray) -> np.ndarray:
    """Both TCP poses (position + quaternion wxyz, 14 numbers) by forward kinematics of the 14 joints ``q``."""
    out = []
    for arm in range(2):
        pos, rot = kinematics.tcp_pose(q[layout.ARM_INDICES], arm)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rot.ravel())
        out.append(np.concatenate([pos, quat]))
    return np.concatenate(out).astype(np.float32)


def _ee_pose(env, info, q) -> np.ndarray:
    if "tcp_poses" in info:
        return np.asarray(info["tcp_poses"], dtype=np.float32).reshape(14)
    # Robots that cannot report their TCP: forward kinematics of the measured joints.
    return tool_poses(env.controller.kinematics, q)


def _jsonable(poses: dict) -> dict:
    return {k: [float(x) for x in v] for k, v in poses.items()}


def _pose_estimate(env: gym.Env) -> tuple[str, list[str], dict | None] | None:
    """(observation key, entry names, estimator description) of the env's pose estimate, or None."""
    from embodied_gym.perception.pose_entry import KEY  # the perception package loads torch
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper, PoseEstimateWrapper

    space = getattr(env.observation_space, "spaces", {})
    e = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, (PoseEstimateWrapper, GroundTruthPoseWrapper)):
            cfg = e.config
            about = dict(
                e.source or {},
                camera=cfg.camera,
                image_size=list(aloha_env(env).image_size),
                names=list(cfg.output_names),
            )
            return e.key, list(cfg.output_names), about
        e = e.env
    if KEY in space:  # another wrapper added it: unnamed entries
        return KEY, [f"{KEY}_{i}" for i in range(int(np.prod(space[KEY].shape)))], None
    return None


@dataclass
class RolledEpisode:
    """One episode rolled out by :func:`rollout_episode`: its frames (the dataset's features plus
    ``task``) and what its sidecar row says about it."""

    seed: int
    frames: list[dict]
    success_step: int | None  # index of the first frame whose next.success is true
    length: int  # the env's step counter at the end
    layout: dict  # start poses of the task objects
    control_mode: str

    @property
    def success(self) -> bool:
        return self.success_step is not None


def rollout_episode(
    env: gym.Env,
    policy: Callable,
    seed: int,
    *,
    after_success_steps: int = AFTER_SUCCESS_STEPS,
    cameras: tuple[str, ...] = (),
    estimate_key: str | None = None,
) -> RolledEpisode:
    """Roll one episode of ``policy`` in ``env`` from ``env.reset(seed=seed)`` and return its frames;
    nothing is written (:func:`record` and :func:`~embodied_gym.recording.parallel.record_expert_demos`
    write them). Same rules as :func:`record`: the episode ends ``after_success_steps`` steps after
    the first success, at the time limit, or when the env terminates otherwise (the env's own
    ``terminate_on_success`` is off for the call). ``cameras``: the frames stored per step;
    ``estimate_key``: the observation key stored as ``observation.environment_state`` (None: none).
    """
    u = aloha_env(env)
    terminate_on_success = getattr(u, "terminate_on_success", None)
    if terminate_on_success is not None:
        u.terminate_on_success = False  # the episode ends here, after_success_steps after success
    try:
        obs, info = env.reset(seed=seed)
        layout_at_start = _jsonable(info.get("object_poses", {}))
        frames: list[dict] = []
        done = False
        first_success = None  # frame index
        while not done:
            action = policy(obs, info)
            q = np.asarray(obs["joint_pos"], dtype=np.float32)
            frame: dict[str, np.ndarray | str] = {
                F.STATE: q,
                F.VELOCITY: np.asarray(obs["joint_vel"], dtype=np.float32),
                F.EE_POSE: _ee_pose(u, info, q.astype(np.float64)),
            }
            frame.update({F.image_key(cam): obs[cam] for cam in cameras})
            if estimate_key:
                frame[F.ENV_STATE] = np.asarray(obs[estimate_key], dtype=np.float32)
            obs, reward, terminated, truncated, info = env.step(action)
            success = bool(info.get("is_success"))  # on this frame
            if success and first_success is None:
                first_success = len(frames)
            done = (
                terminated
                or truncated
                or (first_success is not None and len(frames) - first_success >= after_success_steps)
            )
            frame.update(
                {
                    F.ACTION: np.asarray(u.commanded_targets, dtype=np.float32),
                    F.REWARD: np.array([reward], dtype=np.float32),
                    F.SUCCESS: np.array([success]),
                    F.DONE: np.array([done]),
                    F.TASK: u.task.description,
                }
            )
            frames.append(frame)
    finally:
        if terminate_on_success is not None:
            u.terminate_on_success = terminate_on_success
    return RolledEpisode(
        seed=seed,
        frames=frames,
        success_step=first_success,
        length=int(info["step"]),
        layout=layout_at_start,
        control_mode=u.control_mode,
    )


@dataclass
class RecordingPlan:
    """What a recording of an env stores, checked against the env (:func:`plan_recording`)."""

    cameras: tuple[str, ...]
    image_size: tuple[int, int]
    estimate: tuple[str, list[str], dict | None] | None  # (observation key, names, estimator description)
    camera_fps: float | None = None  # the env's camera rate, when it renders cameras at their own rate

    @property
    def features(self) -> dict:
        return dataset_features(self.cameras, self.image_size, self.estimate[1] if self.estimate else None)

    @property
    def estimate_key(self) -> str | None:
        return self.estimate[0] if self.estimate else None

    def row(self, episode: RolledEpisode, env_id: str | None) -> dict:
        """The episode's sidecar row (its ``episode_index`` is added by the writer)."""
        extra: dict[str, object] = {"pose_estimator": self.estimate[2]} if self.estimate and self.estimate[2] else {}
        if self.camera_fps is not None:
            extra["camera_fps"] = self.camera_fps  # frames (and estimates) are held between camera frames
        return {
            "seed": episode.seed,
            "success": episode.success,
            "success_step": episode.success_step,
            "length": episode.length,
            "env_id": env_id,
            "control_mode": episode.control_mode,
            "layout": episode.layout,
            **extra,
        }


def plan_recording(
    env: gym.Env, cameras: tuple[str, ...] | None = None, after_success_steps: int = AFTER_SUCCESS_STEPS
) -> RecordingPlan:
    """Check that ``env`` can be recorded (see :func:`record`) and say what is stored.

    Raises:
        ValueError: an env with another ``obs_type``, cameras it does not render, or a negative
            ``after_success_steps``.
    """
    u = env.unwrapped
    if getattr(u, "obs_type", None) not in ("state", "pixels_state"):
        raise ValueError(
            "record() needs an env made with obs_type='pixels_state' (joint state and camera frames) "
            "or obs_type='state' (no video)"
        )
    if not isinstance(u, AlohaEnv):
        raise TypeError(f"record() needs an embodied-gym ALOHA env (AlohaEnv), got {type(u).__name__}")
    if after_success_steps < 0:
        raise ValueError(f"after_success_steps must be >= 0 (0 stops at the first success), got {after_success_steps}")
    rendered = tuple(u.cameras) if u.obs_type == "pixels_state" else ()
    if cameras is None:
        cameras = rendered
    missing = [c for c in cameras if c not in rendered]
    if missing:
        raise ValueError(
            f"record(cameras={tuple(cameras)}): the env renders {list(rendered)}, not {missing}; make "
            f"it with obs_type='pixels_state' and those cameras"
        )
    estimate = _pose_estimate(env)
    # The camera rate matters where frames, or poses seen through the camera, are held between frames.
    fps = getattr(u, "camera_fps", None) if (rendered or estimate) else None
    return RecordingPlan(tuple(cameras), u.image_size, estimate, fps)


@contextlib.contextmanager
def _interrupt_after() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then raise
    ``KeyboardInterrupt``: LeRobot cannot drop an episode whose save was cut half-way. Only in the
    main thread, and only while SIGINT has Python's default handler."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def write_episode(writer: EpisodeWriter, episode: RolledEpisode, row: dict) -> int:
    """Add a rolled-out episode to ``writer`` and save it with its sidecar ``row``; returns its index.
    A failure part-way drops the episode (the saved ones stay valid); a Ctrl-C while it is written
    takes effect once it is saved (a second or two), so an interrupted recording keeps it."""
    with _interrupt_after():
        try:
            for frame in episode.frames:
                writer.add_frame(frame)
            return writer.save_episode(row)
        except BaseException:
            writer.discard_episode()
            raise


def record(
    env: gym.Env,
    policy: Callable,
    root: str | os.PathLike,
    episodes: int,
    *,
    seed: int = 0,
    resume: bool = False,
    repo_id: str | None = None,
    env_id: str | None = None,
    progress: bool = True,
    vcodec: str = "h264",
    after_success_steps: int = AFTER_SUCCESS_STEPS,
    crf: int | None = DEFAULT_CRF,
    cameras: tuple[str, ...] | None = None,
) -> RecordingSummary:
    """Record ``episodes`` episodes of ``policy(obs, info) -> action`` acting in ``env``, one after
    another in this process (:func:`~embodied_gym.recording.parallel.record_expert_demos` rolls the
    scripted expert's episodes in worker processes and writes the same dataset).

    ``env`` must have ``obs_type="pixels_state"`` (joint state plus the cameras to record), or
    ``obs_type="state"`` for a dataset without video (enough for calibration).
    Episode ``i`` of the dataset is reset with seed ``seed + i``, so a resumed run continues the
    same sequence. Videos are H.264 by default (several times faster to encode on a CPU than
    LeRobot's default AV1); pass ``vcodec="libsvtav1"`` for Hub-style files. ``crf`` is the video
    quality (lower keeps more; 0 lossless, see :func:`~embodied_gym.data.writer.video_encoder`).
    ``cameras``: the env's cameras whose videos are stored (default all; ``()`` for none, e.g. when a
    pose estimator reads the camera and only its estimate is kept).

    An episode ends ``after_success_steps`` steps after the first success, at the time limit, or
    when the env terminates otherwise; ``after_success_steps=0`` ends it at the first success, as
    an env made with ``terminate_on_success=True`` does. For the duration of each episode the env's own
    ``terminate_on_success`` is switched off (and restored after), so this works for any sim or
    Real env as made. The sidecar's ``success`` is whether the task succeeded at all,
    ``success_step`` the index of the first frame whose ``next.success`` is true (None if never).

    Raises:
        ValueError: an env with another ``obs_type``, or a negative ``after_success_steps``.
    """
    plan = plan_recording(env, cameras, after_success_steps)
    writer = EpisodeWriter(root, plan.features, repo_id=repo_id, vcodec=vcodec, resume=resume, crf=crf)
    have = writer.episodes
    results = []
    bar = tqdm(range(have, have + episodes), desc="recording", unit="ep", disable=None if progress else True)
    for index in bar:
        episode = rollout_episode(
            env,
            policy,
            seed + index,
            after_success_steps=after_success_steps,
            cameras=plan.cameras,
            estimate_key=plan.estimate_key,
        )
        write_episode(writer, episode, plan.row(episode, env_id))
        results.append(episode.success)
        bar.set_postfix(success=f"{np.mean(results):.0%}")
    return RecordingSummary(str(writer.root), have + episodes, episodes, float(np.mean(results)) if results else 0.0)
