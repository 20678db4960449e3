"""ACT's training data: every frame of a dataset decoded once into memory, and its normalisation.

Every training frame (its camera images resized once to the preset's image size, its state, and its
chunk of future actions with LeRobot's padding mask) is decoded from the dataset's videos once,
episode by episode. Random-access video decoding per sample would dominate a CPU run; with the
cache a step costs only the model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from embodied_gym.data import features as F
from embodied_gym.data.reader import RecordedDataset

#: Smallest standard deviation a state or action entry is normalised by (rad; m for grippers).
#: A joint that never moves in the demonstrations (the idle arm of a one-arm task) has std 0, and
#: LeRobot's ``(x - mean) / (std + 1e-8)`` would turn its numerical jitter into values of 1e5 and
#: a loss in the hundreds; below 1 cm or 0.01 rad of spread a joint is treated as still.
STD_FLOOR = 1e-2


@dataclass
class TrainingFrames:
    """Every frame of a dataset in memory: what ACT's ``forward`` needs per sample."""

    images: dict[str, torch.Tensor]  # key -> (N, 3, H, W) uint8
    state: torch.Tensor  # (N, 14) float32
    actions: torch.Tensor  # (N, chunk, 14) float32, future actions of the frame's episode
    action_is_pad: torch.Tensor  # (N, chunk) bool, True past the episode's end
    env_state: torch.Tensor | None = None  # (N, D) float32 observation.environment_state, when an input

    def __len__(self) -> int:
        return self.state.shape[0]

    def batch(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        b = {F.STATE: self.state[idx], F.ACTION: self.actions[idx], F.ACTION_IS_PAD: self.action_is_pad[idx]}
        b.update({k: v[idx].float().div_(255.0) for k, v in self.images.items()})
        if self.env_state is not None:
            b[F.ENV_STATE] = self.env_state[idx]
        return b


def normalisation_stats(ds: RecordedDataset, floor: float = STD_FLOOR) -> dict:
    """The dataset's statistics for LeRobot's normaliser, with the state, environment-state and action
    standard deviations floored at ``floor`` (see :data:`STD_FLOOR`; for estimated object positions
    1 cm, so an object that never moves, e.g. a cup's height before the lift, stays finite)."""
    stats = copy.deepcopy(ds.meta.stats)
    for key in (F.STATE, F.ENV_STATE, F.ACTION):
        if key in stats and "std" in stats[key]:
            stats[key]["std"] = np.maximum(np.asarray(stats[key]["std"], dtype=np.float64), floor)
    return stats


def resize_images(frames: torch.Tensor, size: tuple[int, int] | None) -> torch.Tensor:
    """(N, 3, H, W) uint8 -> (N, 3, h, w) uint8 with antialiasing; the same function at training and
    at inference, so the policy sees identically resized frames in both."""
    if size is None or tuple(frames.shape[-2:]) == tuple(size):
        return frames
    out = torch.nn.functional.interpolate(
        frames.float(), size=tuple(size), mode="bilinear", antialias=True, align_corners=False
    )
    return out.round_().clamp_(0, 255).to(torch.uint8)


def select_cameras(ds: RecordedDataset, cameras) -> list[str]:
    """Camera names of ``ds`` for ``cameras`` (names like ``cam_high``), all cameras by default."""
    available = ds.cameras
    if not available:
        raise ValueError(f"dataset {ds.root} has no camera; ACT needs at least one (record with --cameras)")
    if not cameras:
        return available
    missing = [c for c in cameras if c not in available]
    if missing:
        raise ValueError(f"camera(s) {missing} are not in dataset {ds.root}; it has {available}")
    return list(cameras)


def load_training_frames(
    ds: RecordedDataset,
    episodes: list[int] | None,
    cameras: list[str],
    chunk_size: int,
    image_size: tuple[int, int] | None,
    progress: bool = True,
    *,
    env_state: bool = False,
) -> TrainingFrames:
    """Decode ``episodes`` (all by default) of the dataset once: images (resized), state, action
    chunks with LeRobot's padding rule (indices past the episode's end repeat its last action and
    are flagged ``action_is_pad``), and ``observation.environment_state`` when ``env_state``."""
    from embodied_gym.progress import progress_bar

    hf = ds.table(episodes)
    ep_index = np.asarray(hf["episode_index"])
    state = torch.as_tensor(np.stack(hf[F.STATE]), dtype=torch.float32)
    action = torch.as_tensor(np.stack(hf[F.ACTION]), dtype=torch.float32)
    n = len(ep_index)
    chunks = torch.empty(n, chunk_size, action.shape[1])
    pad = torch.empty(n, chunk_size, dtype=torch.bool)
    images: dict[str, list[torch.Tensor]] = {F.image_key(c): [] for c in cameras}
    order = []
    in_order = list(dict.fromkeys(ep_index.tolist()))
    for ep in progress_bar(in_order, progress=progress, desc="decoding dataset", unit="ep"):
        rows = np.flatnonzero(ep_index == ep)
        order.append(rows)
        offsets = np.arange(chunk_size)
        for j, r in enumerate(rows):
            k = j + offsets
            pad[r] = torch.as_tensor(k >= len(rows))
            chunks[r] = action[rows[np.minimum(k, len(rows) - 1)]]
        for cam in cameras:
            frames = torch.from_numpy(ds.frames(cam, int(ep))).permute(0, 3, 1, 2)
            if len(frames) != len(rows):
                raise ValueError(
                    f"dataset {ds.root}: episode {ep} has {len(rows)} frames but its {cam} video {len(frames)}"
                )
            images[F.image_key(cam)].append(resize_images(frames, image_size).contiguous())
    rows = np.concatenate(order)
    inverse = torch.as_tensor(np.argsort(rows))
    imgs = {k: torch.cat(v)[inverse] for k, v in images.items()}
    env = None
    if env_state:
        ds.require([F.ENV_STATE], "ACT with the environment-state input")
        env = torch.as_tensor(np.stack(hf[F.ENV_STATE]), dtype=torch.float32)
    return TrainingFrames(images=imgs, state=state, actions=chunks, action_is_pad=pad, env_state=env)


__all__ = [
    "STD_FLOOR",
    "TrainingFrames",
    "load_training_frames",
    "normalisation_stats",
    "resize_images",
    "select_cameras",
]
