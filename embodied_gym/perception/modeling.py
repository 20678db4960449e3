"""A small CNN that estimates the task objects' poses from one camera frame.

:class:`PoseEstimator` is four conv layers (three of stride 2, so the keypoint maps are 1/8 of the input), a spatial soft-argmax over learned
keypoint maps (the expected image position of each map, which keeps the object's location that
global pooling would discard; Levine et al., "End-to-end training of deep visuomotor policies",
2016) concatenated with globally pooled features, and an MLP head. In training, keypoint ``k`` is
also pulled onto object ``k``'s image position and its map onto a Gaussian there
(:mod:`embodied_gym.perception.training`), which makes the model find the object from far fewer frames.
At the default 100x160 input it runs in a few milliseconds per frame on one CPU core.

Saved as a folder: ``config.json`` (:class:`~embodied_gym.perception.configuration.PoseEstimatorConfig`)
and ``model.safetensors`` (no pickle), through :meth:`PoseEstimator.save_pretrained` /
:meth:`PoseEstimator.from_pretrained`, as LeRobot and diffusers models are.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from embodied_gym.atomic import atomic_dir
from embodied_gym.perception.configuration import CONFIG_NAME, WEIGHTS_NAME, PoseEstimatorConfig


def _conv(cin: int, cout: int, k: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class SpatialSoftArgmax(nn.Module):
    """(B, K, H, W) maps -> (B, 2K) expected (x, y) positions in [-1, 1] under each map's softmax."""

    grid: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, height: int, width: int):
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1), persistent=False)

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        b, k = maps.shape[:2]
        p = torch.softmax(maps.reshape(b, k, -1), dim=-1)
        return (p @ self.grid).reshape(b, 2 * k)


class PoseEstimator(nn.Module):
    """Object poses from a camera frame (see the module docstring).

    ``forward`` takes the preprocessed input as float (B, 3, H, W) in [0, 1] and returns the
    normalised targets (B, output_dim); :meth:`estimate` takes raw camera frames and returns the
    physical estimate (:attr:`PoseEstimatorConfig.output_names`).
    """

    def __init__(self, config: PoseEstimatorConfig):
        super().__init__()
        self.config = config
        c = config.channels
        self.backbone = nn.Sequential(
            _conv(3, c[0], 5, 2), _conv(c[0], c[1], 3, 2), _conv(c[1], c[2], 3, 2), _conv(c[2], c[3], 3, 1)
        )
        h, w = config.input_size
        fh, fw = h, w
        for _ in range(3):  # three stride-2 convs (padding k // 2: ceil halving)
            fh, fw = (fh + 1) // 2, (fw + 1) // 2
        self.keypoint_maps = nn.Conv2d(c[3], config.keypoints, 1)
        self.soft_argmax = SpatialSoftArgmax(fh, fw)
        self.head = nn.Sequential(
            nn.Linear(2 * config.keypoints + c[3], config.hidden),
            nn.ReLU(inplace=True),
            nn.Linear(config.hidden, config.hidden),
            nn.ReLU(inplace=True),
            nn.Linear(config.hidden, config.output_dim),
        )

    def forward(self, x: torch.Tensor, return_keypoints: bool = False):
        """Normalised targets (B, output_dim); with ``return_keypoints`` also the keypoints' expected
        image positions (B, keypoints, 2) as (x, y) in [-1, 1] over the network input and their maps'
        logits (B, keypoints, h, w) (the softmax over each map is where the keypoint looks)."""
        f = self.backbone(x - 0.5)
        maps = self.keypoint_maps(f)
        keypoints = self.soft_argmax(maps)
        out = self.head(torch.cat([keypoints, f.mean(dim=(2, 3))], dim=1))
        return (out, keypoints.view(x.shape[0], -1, 2), maps) if return_keypoints else out

    # ------------------------------------------------------------------ inference on frames
    @staticmethod
    def to_tensor(inputs: np.ndarray) -> torch.Tensor:
        """(B, H, W, 3) uint8 network inputs -> (B, 3, H, W) float in [0, 1]."""
        return torch.from_numpy(np.ascontiguousarray(inputs)).permute(0, 3, 1, 2).float().div_(255.0)

    @torch.inference_mode()
    def estimate(self, frames: np.ndarray) -> np.ndarray:
        """Physical estimates from camera frames: (H, W, 3) -> (output_dim,), (B, H, W, 3) -> (B, output_dim).

        The frames are cropped and resized by :meth:`PoseEstimatorConfig.preprocess`; runs in eval mode.
        """
        frames = np.asarray(frames)
        single = frames.ndim == 3
        batch = frames[None] if single else frames
        inputs = np.stack([self.config.preprocess(f) for f in batch])
        was_training = self.training
        self.eval()
        try:
            out = self(self.to_tensor(inputs).to(self._device())).cpu().double().numpy()
        finally:
            self.train(was_training)
        est = self.config.denormalise(out).astype(np.float32)
        return est[0] if single else est

    def _device(self) -> torch.device:
        return next(self.parameters()).device

    # ------------------------------------------------------------------ files
    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``folder`` (atomically, whole or not at all)."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with atomic_dir(folder) as tmp:
            self.write_files(tmp)
        return folder

    def write_files(self, folder: Path) -> None:
        """Write the two files into an existing ``folder`` (for a checkpoint that holds more)."""
        from safetensors.torch import save_file

        from embodied_gym.atomic import write_json

        write_json(folder / CONFIG_NAME, self.config.to_dict())
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(folder / WEIGHTS_NAME))

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> PoseEstimator:
        """Load a folder written by :meth:`save_pretrained` (or a training checkpoint folder).

        Raises:
            FileNotFoundError: the folder or one of its two files is missing.
            ValueError: the config is invalid or the weights do not fit it.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"no pose estimator folder at {folder}: pass the folder that "
                f"save_pretrained() or `train_pose_estimator` wrote (it holds {CONFIG_NAME} "
                f"and {WEIGHTS_NAME})"
            )
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (folder / name).is_file():
                raise FileNotFoundError(
                    f"{folder} is not a pose estimator folder: {name} is missing "
                    f"(it should hold {CONFIG_NAME} and {WEIGHTS_NAME})"
                )
        model = cls(PoseEstimatorConfig.from_json(folder / CONFIG_NAME))
        try:
            state = load_file(str(folder / WEIGHTS_NAME))
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{folder / WEIGHTS_NAME} is not a readable safetensors file: {e}") from None
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ValueError(f"{folder / WEIGHTS_NAME} does not fit {folder / CONFIG_NAME}: {e}") from None
        return model.to(device).eval()


__all__ = ["PoseEstimator", "SpatialSoftArgmax"]
