"""Paired real/sim episodes: the training data of VisAligner.

For every recorded episode of a LeRobotDataset with a camera (the stand-in robot's by default),
the recorded joint trajectory is replayed open-loop in the sim (the same start layout and seed,
calibrated physics when given; see :mod:`embodied_gym.data.replay`) and the same camera is
rendered in the sim's flat look at the recording's image size, together with MuJoCo's
segmentation render, from which the task objects' masks are cut. Real-video object masks come
from :func:`~embodied_gym.visaligner.conditioning.make_object_masker`.

Frame ``t`` of a paired episode is aligned with recorded frame ``t`` (the observation before
action ``t``): sim frame 0 is the recorded start state, sim frame ``t + 1`` the state after the
sim executes recorded action ``t``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import numpy as np

from embodied_gym.atomic import write_npz
from embodied_gym.data.reader import Episode, open_dataset
from embodied_gym.visaligner.conditioning import make_object_masker, object_mask_from_segmentation

log = logging.getLogger(__name__)


@dataclass
class PairedEpisode:
    """One episode's aligned real and sim frames (T frames of size H x W)."""

    index: int
    real: np.ndarray  # (T, H, W, 3) uint8, the recorded camera
    sim: np.ndarray  # (T, H, W, 3) uint8, the sim render of the replay
    sim_mask: np.ndarray  # (T, H, W) bool, task objects in the sim render
    real_mask: np.ndarray  # (T, H, W) bool, task objects in the real frames
    # control steps between stored frames: 1 for a recording (every 50 Hz step); the base model's
    # randomised-look episodes keep only the steps its clips read (embodied_gym.visaligner.base)
    step_stride: int = 1

    def __post_init__(self):
        if not (len(self.real) == len(self.sim) == len(self.sim_mask) == len(self.real_mask)):
            raise ValueError(f"episode {self.index}: real, sim and mask lengths differ")
        if self.step_stride < 1:
            raise ValueError(f"episode {self.index}: step_stride must be >= 1, got {self.step_stride}")


def crop_paired(episode: PairedEpisode, crop) -> PairedEpisode:
    """``episode`` with every frame and mask cut to the region ``crop`` (``(top, left, bottom, right)``
    fractions, :func:`embodied_gym.rendering.crop_box`): the data of a model trained on part of the frame."""
    from embodied_gym.rendering import crop_frames

    return PairedEpisode(
        episode.index,
        crop_frames(episode.real, crop),
        crop_frames(episode.sim, crop),
        crop_frames(episode.sim_mask, crop, channels=False),
        crop_frames(episode.real_mask, crop, channels=False),
        episode.step_stride,
    )


def resize_paired(episode: PairedEpisode, size: tuple[int, int]) -> PairedEpisode:
    """``episode`` with every frame resized to ``size`` (H, W): area averaging for frames, nearest for masks."""
    import cv2

    h, w = size

    def frames(v: np.ndarray) -> np.ndarray:
        return np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in v])

    def masks(v: np.ndarray) -> np.ndarray:
        return np.stack([cv2.resize(m.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) for m in v]) > 0

    if episode.real.shape[1:3] == (h, w):
        return episode
    return PairedEpisode(
        episode.index,
        frames(episode.real),
        frames(episode.sim),
        masks(episode.sim_mask),
        masks(episode.real_mask),
        episode.step_stride,
    )


def dataset_task(root: str | os.PathLike) -> str:
    """The task name of a recording (from its sidecar's env id; see
    :meth:`~embodied_gym.data.reader.RecordedDataset.require_task`)."""
    return open_dataset(root).require_task()


def read_episode_frames(
    root: str | os.PathLike, camera: str, episodes: list[int] | None = None
) -> dict[int, np.ndarray]:
    """A camera's frames of each episode as ``(T, H, W, 3)`` uint8 (see
    :meth:`~embodied_gym.data.reader.RecordedDataset.frames_of`)."""
    return open_dataset(root).frames_of(camera, episodes)


class SimCameraRenderer:
    """Renders one camera of a sim env in its flat look, plus the task objects' mask."""

    def __init__(self, env, camera: str, image_size: tuple[int, int]):
        from embodied_gym.rendering import make_renderer

        u = env.unwrapped
        if camera not in u.idx.cameras:
            raise ValueError(f"unknown camera {camera!r}; the sim has {sorted(u.idx.cameras)}")
        self.env, self.camera_id = u, u.idx.cameras[camera]
        self.object_geoms = np.concatenate(list(u.idx.object_geoms.values())) if u.idx.object_geoms else np.zeros(0)
        self.renderer = make_renderer(u.model, *image_size)

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        r, d = self.renderer, self.env.data
        r.disable_segmentation_rendering()
        r.update_scene(d, camera=self.camera_id)
        rgb = r.render().copy()
        r.enable_segmentation_rendering()
        r.update_scene(d, camera=self.camera_id)
        mask = object_mask_from_segmentation(r.render(), self.object_geoms)
        r.disable_segmentation_rendering()
        return rgb, mask

    def close(self):
        self.renderer.close()


def replay_render(episode: Episode, env, camera: str, image_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Replay ``episode`` open-loop in ``env`` (a joint_pos sim env) and render ``camera`` at every
    recorded frame: ``(T, H, W, 3)`` frames and ``(T, H, W)`` object masks."""
    from embodied_gym.sim.tasks import layout_from_poses

    u = env.unwrapped
    if u.control_mode != "joint_pos":
        raise ValueError("paired replay needs control_mode='joint_pos' (recorded actions are joint targets)")
    options = {"layout": layout_from_poses(episode.layout)} if episode.layout else None
    u.reset(seed=episode.seed if episode.seed is not None else 0, options=options)
    u.set_joint_state(episode.state[0], episode.velocity[0])
    cam = SimCameraRenderer(env, camera, image_size)
    try:
        frames, masks = [], []
        for t in range(len(episode.action)):
            rgb, mask = cam()
            frames.append(rgb)
            masks.append(mask)
            if t < len(episode.action) - 1:
                u.step(episode.action[t])
    finally:
        cam.close()
    return np.stack(frames), np.stack(masks)


def build_paired_episodes(
    root: str | os.PathLike,
    camera: str = "cam_high",
    *,
    task: str | None = None,
    physics=None,
    episodes: list[int] | None = None,
    sam_checkpoint: str | None = None,
    progress: bool = True,
) -> list[PairedEpisode]:
    """Paired episodes of a recorded dataset (see the module docstring)."""
    import gymnasium as gym

    import embodied_gym
    from embodied_gym.progress import progress_bar

    ds = open_dataset(root)
    task = task or ds.require_task()
    ds.camera_key(camera)  # before the replay: a missing camera fails now
    recorded = ds.episodes(episodes)
    frames = ds.frames_of(camera, [e.index for e in recorded])
    masker = make_object_masker(sam_checkpoint)
    env = gym.make(embodied_gym.env_id(task), obs_type="state", physics=physics, terminate_on_success=False)
    out = []
    try:
        for ep in progress_bar(recorded, progress=progress, desc="paired replay", unit="ep"):
            real = frames[ep.index]
            sim, sim_mask = replay_render(ep, env, camera, real.shape[1:3])
            out.append(PairedEpisode(ep.index, real, sim, sim_mask, masker(real, sim_mask)))
    finally:
        env.close()
    return out


def save_paired(path: str | os.PathLike, episodes: list[PairedEpisode], meta: dict | None = None) -> None:
    """Write paired episodes to one ``.npz`` file atomically (``meta`` is stored as JSON)."""
    arrays = {"meta": np.frombuffer(json.dumps(meta or {}).encode(), dtype=np.uint8)}
    for ep in episodes:
        for k in ("real", "sim", "sim_mask", "real_mask"):
            arrays[f"{ep.index}/{k}"] = getattr(ep, k)
        arrays[f"{ep.index}/step_stride"] = np.array(ep.step_stride)
    write_npz(path, compressed=True, **arrays)


def load_paired(path: str | os.PathLike) -> tuple[list[PairedEpisode], dict]:
    with np.load(path) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        idx = sorted({int(k.split("/")[0]) for k in z.files if "/" in k})
        eps = [
            PairedEpisode(
                i,
                z[f"{i}/real"],
                z[f"{i}/sim"],
                z[f"{i}/sim_mask"],
                z[f"{i}/real_mask"],
                int(z[f"{i}/step_stride"]) if f"{i}/step_stride" in z.files else 1,
            )
            for i in idx
        ]
    return eps, meta


def paired_episodes_cached(
    root: str | os.PathLike, cache: str | os.PathLike, camera: str = "cam_high", **kwargs
) -> list[PairedEpisode]:
    """:func:`build_paired_episodes`, reusing ``cache`` when it was built with the same arguments."""
    meta = {
        "dataset": os.path.abspath(root),
        "camera": camera,
        **{
            k: (v if isinstance(v, (str, int, float, list, type(None))) else str(v))
            for k, v in kwargs.items()
            if k != "progress"
        },
    }
    if os.path.exists(cache):
        eps, old = load_paired(cache)
        if old == meta:
            log.info("paired episodes from cache %s", cache)
            return eps
    eps = build_paired_episodes(root, camera, **kwargs)
    save_paired(cache, eps, meta)
    return eps
