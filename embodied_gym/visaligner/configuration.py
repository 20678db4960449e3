"""VisAligner configurations: the ``tiny`` preset (CPU, from scratch) and ``svd`` (GPU fine-tune)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The base model that ships with the package (``VisAlignerTrainConfig(init="base")``): the tiny preset
#: on the pose estimator's crop, trained on randomised sim looks by ``scripts/make_visaligner_base.py``.
BASE_MODEL_DIR = Path(__file__).resolve().parent / "base_model"


@dataclass
class VisAlignerConfig:
    """Everything that defines a VisAligner model and how it reads clips.

    Clips are ``num_frames`` frames taken every ``frame_stride`` recorded steps (50 Hz recordings:
    stride 4 is 12.5 fps). The denoiser's input per frame is the noisy latent, the condition
    latent and (``use_masks``) the object mask downsampled to latent size by max-pooling.

    The trainer builds the networks from it and saves it as ``visaligner_config.json`` beside the
    pipeline; the pipeline itself keeps only the settings inference needs (``image_size``,
    ``num_frames``, ``frame_stride``, ``use_masks``, ``fps``, ``num_inference_steps``: see
    :func:`embodied_gym.visaligner.pipeline.pipeline_settings`), the rest lives in its components'
    configs.
    """

    preset: str = "tiny"
    image_size: tuple[int, int] = (64, 80)  # (H, W) of the frames the model works on
    # The region of the camera frame the model works on, (top, left, bottom, right) as fractions
    # (embodied_gym.rendering.crop_box); None: the whole frame. A crop keeps small objects large
    # at a small image_size: the table region of a 240x320 cam_high frame, (0.3, 0.2, 0.8, 0.8),
    # at 80x128 shows the 5 cm cup about 9 px wide, against 3 px in a whole 64x80 frame.
    crop: tuple[float, float, float, float] | None = None
    num_frames: int = 8
    frame_stride: int = 4
    use_masks: bool = True  # False: the no-mask ablation (condition = plain sim render, mask channel 0)
    mask_source: str = "real"  # training masks: "real" (segmenter on the real video, as the paper) or "sim"
    # VAE (tiny: trained here); spatial factor 2 ** (len(vae_block_out_channels) - 1)
    latent_channels: int = 4
    vae_block_out_channels: tuple[int, ...] = (16, 32, 32)
    # UNetSpatioTemporalConditionModel
    unet_block_out_channels: tuple[int, ...] = (32, 64)
    unet_layers_per_block: int = 1
    unet_attention_heads: tuple[int, ...] = (2, 4)
    cross_attention_dim: int = 64
    addition_time_embed_dim: int = 32
    reference_patch: int = 2  # reference-latent patch size of the cross-attention tokens
    # diffusion
    num_train_timesteps: int = 1000
    prediction_type: str = "v_prediction"
    num_inference_steps: int = 20
    fps: int = 12  # the first of the three added_time_ids
    # svd preset only
    pretrained_path: str | None = None
    gradient_checkpointing: bool = False
    mixed_precision: str = "no"  # accelerate's: "no", "bf16", "fp16"

    def __post_init__(self):
        self.image_size = tuple(int(x) for x in self.image_size)
        if self.crop is not None:
            from embodied_gym.rendering import crop_box

            self.crop = tuple(float(x) for x in self.crop)
            if len(self.crop) != 4:
                raise ValueError(f"crop must be (top, left, bottom, right) fractions, got {self.crop}")
            crop_box((1, 1), self.crop)  # validates the fractions
        for name in ("vae_block_out_channels", "unet_block_out_channels", "unet_attention_heads"):
            setattr(self, name, tuple(int(x) for x in getattr(self, name)))
        if self.preset not in PRESET_NAMES:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {sorted(PRESET_NAMES)}")
        if self.mask_source not in ("real", "sim"):
            raise ValueError(f"mask_source must be 'real' or 'sim', got {self.mask_source!r}")
        if self.num_frames < 2:
            raise ValueError(f"num_frames must be >= 2 (frame 0 is the reference), got {self.num_frames}")
        f = self.vae_scale_factor * 2 ** (len(self.unet_block_out_channels) - 1)
        if self.preset == "tiny" and (self.image_size[0] % f or self.image_size[1] % f):
            raise ValueError(f"image_size {self.image_size} must be divisible by {f} (VAE factor x UNet downsampling)")

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.vae_block_out_channels) - 1)

    @property
    def unet_in_channels(self) -> int:
        return 2 * self.latent_channels + 1

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | os.PathLike) -> None:
        from embodied_gym.atomic import write_json

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> VisAlignerConfig:
        with open(path) as f:
            return cls(**json.load(f))


PRESET_NAMES = ("tiny", "svd")


def preset(name: str, **overrides) -> VisAlignerConfig:
    """The named preset with ``overrides`` applied.

    - ``tiny``: 64x80 frames, 8-frame clips, a 3-level AutoencoderKL trained here (factor 4), a
      2-level UNetSpatioTemporalConditionModel (~1.3M parameters); trains on a CPU in minutes.
    - ``svd``: fine-tunes a user-supplied Stable Video Diffusion folder (diffusers layout, ``unet/``
      and ``vae/``; ``pretrained_path``), 256x320 frames, 14-frame clips, bf16, gradient
      checkpointing; ``conv_in`` gets one zero-initialised channel for the mask.
    """
    cfg: dict[str, Any]
    if name == "tiny":
        cfg = {}
    elif name == "svd":
        cfg = dict(
            image_size=(256, 320),
            num_frames=14,
            frame_stride=7,
            latent_channels=4,
            vae_block_out_channels=(128, 256, 512, 512),
            cross_attention_dim=1024,
            fps=7,
            gradient_checkpointing=True,
            mixed_precision="bf16",
            num_inference_steps=25,
        )
    else:
        raise ValueError(f"unknown preset {name!r}; choose one of {list(PRESET_NAMES)}")
    cfg.update(overrides)
    return VisAlignerConfig(preset=name, **cfg)
