"""Record episodes from any embodied-gym env (sim or Real) into a local LeRobotDataset v3.0.

Each frame holds the observation at step t and the action taken there: ``action`` is the 14
joint targets the controllers were given (whatever the env's control mode), the convention of
LeRobot's ALOHA datasets. ``observation.ee_pose`` holds both TCP poses (position + quaternion
wxyz), which calibration needs. Episodes are written one at a time and the dataset is finalised
after each, so a crash loses at most the episode in progress; ``resume=True`` continues.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gymnasium as gym
import mujoco
import numpy as np

from embodied_gym.data.features import FPS, SIDECAR, dataset_features
from embodied_gym.envs import robot as layout


@dataclass
class RecordingSummary:
    root: str
    episodes: int  # total in the dataset
    recorded: int  # in this run
    success_rate: float  # of this run's episodes


def _ee_pose(env, info, q) -> np.ndarray:
    if "tcp_poses" in info:
        return np.asarray(info["tcp_poses"], dtype=np.float32).reshape(14)
    # Robots that cannot report their TCP: forward kinematics of the measured joints.
    kin = env.controller.kinematics
    out = []
    for arm in range(2):
        pos, rot = kin.tcp_pose(q[layout.ARM_INDICES], arm)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rot.ravel())
        out.append(np.concatenate([pos, quat]))
    return np.concatenate(out).astype(np.float32)


def _read_sidecar(root: Path) -> list[dict]:
    path = root / SIDECAR
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_sidecar(root: Path, rows: list[dict]) -> None:
    path = root / SIDECAR
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)


def _jsonable(poses: dict) -> dict:
    return {k: [float(x) for x in v] for k, v in poses.items()}


def video_encoder(vcodec: str = "h264"):
    """LeRobot's RGB encoder config for ``vcodec``; libx264's statistics (a dozen log lines per
    saved episode) are switched off."""
    from lerobot.configs.video import RGBEncoderConfig

    from embodied_gym.video import quiet_libav

    quiet_libav()  # and libavcodec's banner line, printed once per episode after LeRobot restores FFmpeg's logger
    extra = {"x264-params": "log=-1"} if vcodec in ("h264", "libx264") else {}
    return RGBEncoderConfig(vcodec=vcodec, extra_options=extra)


def record(env: gym.Env, policy: Callable, root: str | os.PathLike, episodes: int, *, seed: int = 0,
           resume: bool = False, repo_id: str | None = None, env_id: str | None = None,
           progress: bool = True, vcodec: str = "h264") -> RecordingSummary:
    """Record ``episodes`` episodes of ``policy(obs, info) -> action`` acting in ``env``.

    ``env`` must have ``obs_type="pixels_state"`` (joint state plus the cameras to record), or
    ``obs_type="state"`` for a dataset without video (enough for calibration).
    Episode ``i`` of the dataset is reset with seed ``seed + i``, so a resumed run continues the
    same sequence. Videos are H.264 by default (several times faster to encode on a CPU than
    LeRobot's default AV1); pass ``vcodec="libsvtav1"`` for Hub-style files.
    """
    from lerobot.datasets import LeRobotDataset
    from tqdm import tqdm

    encoder = video_encoder(vcodec)

    u = env.unwrapped
    if getattr(u, "obs_type", None) not in ("state", "pixels_state"):
        raise ValueError("record() needs an env made with obs_type='pixels_state' (joint state and camera frames) "
                         "or obs_type='state' (no video)")
    root = Path(root)
    repo_id = repo_id or f"embodied_gym/{root.name}"
    cameras = tuple(u.cameras) if u.obs_type == "pixels_state" else ()
    existing = root / "meta" / "info.json"
    if existing.exists() and not resume:
        raise FileExistsError(f"{root} already holds a dataset; pass resume=True (--resume) to add episodes, "
                              f"or choose another output folder")
    if root.exists() and not existing.exists():
        if any(root.iterdir()):
            raise FileExistsError(f"{root} exists and is not a LeRobotDataset; choose an empty or new folder")
        root.rmdir()

    rows = _read_sidecar(root) if existing.exists() else []
    if existing.exists():
        ds = LeRobotDataset.resume(repo_id, root=root, video_backend="pyav", rgb_encoder=encoder)
        have = ds.meta.total_episodes
        if ds.meta.fps != FPS or set(ds.meta.camera_keys) != {f"observation.images.{c}" for c in cameras}:
            raise ValueError(f"{root} was recorded with other settings (fps {ds.meta.fps}, cameras "
                             f"{ds.meta.camera_keys}); resume with the same cameras")
        rows = rows[:have]  # an episode may have been saved without its sidecar row, never the reverse
        ds.finalize()
    else:
        have = 0
        ds = None
    features = dataset_features(cameras, u.image_size)
    results = []
    bar = tqdm(range(have, have + episodes), desc="recording", unit="ep", disable=not progress)
    for index in bar:
        if ds is None or ds._is_finalized:
            ds = (LeRobotDataset.create(repo_id, fps=FPS, features=features, root=root, robot_type="aloha",
                                        use_videos=True, video_backend="pyav", rgb_encoder=encoder)
                  if not (root / "meta" / "info.json").exists()
                  else LeRobotDataset.resume(repo_id, root=root, video_backend="pyav", rgb_encoder=encoder))
        ep_seed = seed + index
        obs, info = env.reset(seed=ep_seed)
        layout_at_start = _jsonable(info.get("object_poses", {}))
        done = False
        success = False
        try:
            while not done:
                action = policy(obs, info)
                q = np.asarray(obs["joint_pos"], dtype=np.float32)
                frame = {"observation.state": q,
                         "observation.velocity": np.asarray(obs["joint_vel"], dtype=np.float32),
                         "observation.ee_pose": _ee_pose(u, info, q.astype(np.float64))}
                frame.update({f"observation.images.{cam}": obs[cam] for cam in cameras})
                obs, reward, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                success = bool(info.get("is_success"))
                frame.update({
                    "action": np.asarray(u.commanded_targets, dtype=np.float32),
                    "next.reward": np.array([reward], dtype=np.float32),
                    "next.success": np.array([success]),
                    "next.done": np.array([done]),
                    "task": u.task.description,
                })
                ds.add_frame(frame)
        except BaseException:
            if ds.has_pending_frames():
                ds.clear_episode_buffer()
            ds.finalize()
            raise
        ds.save_episode()
        ds.finalize()
        rows.append({"episode_index": index, "seed": ep_seed, "success": success, "length": int(info["step"]),
                     "env_id": env_id, "control_mode": u.control_mode, "layout": layout_at_start})
        _write_sidecar(root, rows)
        results.append(success)
        bar.set_postfix(success=f"{np.mean(results):.0%}")
    return RecordingSummary(str(root), have + episodes, episodes, float(np.mean(results)) if results else 0.0)
