"""VisAligner's networks: a VAE, diffusers' ``UNetSpatioTemporalConditionModel`` and a reference encoder.

Inputs of the UNet per frame (channels): the noisy target latent, the condition frame's latent
(frame 0: the real reference image; later frames: sim render + white object silhouettes) and the
object mask max-pooled to latent size. Spatial attention, temporal attention (across the clip's
frames) and cross-attention are the UNet's own.

What feeds the UNet's two extra inputs (our choice; SVD uses a CLIP image embedding and its
micro-conditioning):

- ``encoder_hidden_states`` (cross-attention): :class:`ReferenceEncoder` tokens of the reference
  frame's latent — one token per ``reference_patch`` x ``reference_patch`` latent patch plus a learned
  position embedding — so every frame can attend to the real look of any part of the scene.
- ``added_time_ids``: SVD's triplet ``(fps, motion_bucket_id=127, noise_aug_strength=0)``; constant
  here, kept so that SVD weights see the inputs they were trained with.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from diffusers import AutoencoderKL, UNetSpatioTemporalConditionModel
from diffusers.configuration_utils import ConfigMixin, register_to_config

# ModelMixin must stay importable from this module by that name: diffusers' pipeline loader finds a
# custom component's load method by looking up its base classes in the component's module
# (model_index.json names this module as the library of "reference_encoder").
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.resnet import AlphaBlender

from embodied_gym.visaligner.configuration import VisAlignerConfig

MOTION_BUCKET_ID = 127


class ReferenceEncoder(ModelMixin, ConfigMixin):
    """Cross-attention tokens ``(B, L, dim)`` from a reference-frame latent ``(B, C, h, w)``."""

    @register_to_config
    def __init__(self, latent_channels: int = 4, dim: int = 64, patch: int = 2, max_tokens: int = 4096):
        super().__init__()
        self.proj = torch.nn.Conv2d(latent_channels, dim, kernel_size=patch, stride=patch)
        self.pos = torch.nn.Parameter(torch.zeros(1, max_tokens, dim))
        torch.nn.init.normal_(self.pos, std=0.02)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, reference_latent: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(reference_latent).flatten(2).transpose(1, 2)
        if tokens.shape[1] > self.pos.shape[1]:
            raise ValueError(
                f"{tokens.shape[1]} reference tokens exceed max_tokens={self.pos.shape[1]}; "
                f"use a larger reference_patch"
            )
        return self.norm(tokens + self.pos[:, : tokens.shape[1]])


def build_tiny_models(
    cfg: VisAlignerConfig,
) -> tuple[AutoencoderKL, UNetSpatioTemporalConditionModel, ReferenceEncoder]:
    """Randomly initialised networks of the ``tiny`` preset (the VAE is trained locally too)."""
    n = len(cfg.vae_block_out_channels)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        block_out_channels=cfg.vae_block_out_channels,
        layers_per_block=1,
        latent_channels=cfg.latent_channels,
        norm_num_groups=8,
        sample_size=cfg.image_size[0],
        scaling_factor=1.0,
        mid_block_add_attention=False,
    )
    m = len(cfg.unet_block_out_channels)
    unet = UNetSpatioTemporalConditionModel(
        sample_size=None,
        in_channels=cfg.unet_in_channels,
        out_channels=cfg.latent_channels,
        down_block_types=("CrossAttnDownBlockSpatioTemporal",) * (m - 1) + ("DownBlockSpatioTemporal",),
        up_block_types=("UpBlockSpatioTemporal",) + ("CrossAttnUpBlockSpatioTemporal",) * (m - 1),
        block_out_channels=cfg.unet_block_out_channels,
        layers_per_block=cfg.unet_layers_per_block,
        cross_attention_dim=cfg.cross_attention_dim,
        num_attention_heads=cfg.unet_attention_heads,
        addition_time_embed_dim=cfg.addition_time_embed_dim,
        projection_class_embeddings_input_dim=3 * cfg.addition_time_embed_dim,
        num_frames=cfg.num_frames,
    )
    ref = ReferenceEncoder(cfg.latent_channels, cfg.cross_attention_dim, cfg.reference_patch)
    return vae, unet, ref


def widen_conv_in(unet: UNetSpatioTemporalConditionModel, in_channels: int) -> UNetSpatioTemporalConditionModel:
    """Give ``unet.conv_in`` ``in_channels`` inputs; the new ones start at zero weight, so the
    widened network computes exactly what it did before until training moves them."""
    old = unet.conv_in
    if in_channels < old.in_channels:
        raise ValueError(f"cannot narrow conv_in from {old.in_channels} to {in_channels} channels")
    if in_channels == old.in_channels:
        return unet
    new = torch.nn.Conv2d(
        in_channels,
        old.out_channels,
        old.kernel_size,
        old.stride,
        old.padding,
        dtype=old.weight.dtype,
        device=old.weight.device,
    )
    if new.bias is None:
        raise RuntimeError("the widened conv_in was made without a bias")
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:, : old.in_channels] = old.weight
        new.bias.copy_(old.bias)
    unet.conv_in = new
    unet.register_to_config(in_channels=in_channels)
    return unet


def load_svd_models(cfg: VisAlignerConfig, torch_dtype: torch.dtype = torch.float32):
    """UNet and VAE from a user-supplied Stable Video Diffusion folder (diffusers layout), with
    ``conv_in`` widened for the mask channel and a new :class:`ReferenceEncoder`. Never downloads."""
    from diffusers import AutoencoderKLTemporalDecoder

    if not cfg.pretrained_path:
        raise ValueError(
            "the svd preset fine-tunes Stable Video Diffusion: pass pretrained_path / --pretrained DIR, "
            "a local folder in diffusers layout (unet/, vae/), e.g. a downloaded copy of "
            "stabilityai/stable-video-diffusion-img2vid-xt; nothing is downloaded"
        )
    root = Path(cfg.pretrained_path)
    missing = [d for d in ("unet", "vae") if not (root / d / "config.json").exists()]
    if missing:
        raise FileNotFoundError(
            f"Stable Video Diffusion folder {root} lacks {missing} (each a diffusers model folder "
            f"with config.json and weights); supply the full pipeline folder"
        )
    unet = UNetSpatioTemporalConditionModel.from_pretrained(
        root / "unet", torch_dtype=torch_dtype, local_files_only=True
    )
    vae_cls = (
        AutoencoderKLTemporalDecoder
        if "TemporalDecoder" in (root / "vae" / "config.json").read_text()
        else AutoencoderKL
    )
    vae = vae_cls.from_pretrained(root / "vae", torch_dtype=torch_dtype, local_files_only=True)
    if vae.config.latent_channels != cfg.latent_channels:
        cfg.latent_channels = vae.config.latent_channels
    # SVD's conv_in takes 4 noisy + 4 image-latent channels; our condition latent takes the image
    # latent's slot and the mask is one extra, zero-initialised channel.
    unet = widen_conv_in(unet, cfg.unet_in_channels)
    cross = unet.config.cross_attention_dim
    cfg.cross_attention_dim = cross if isinstance(cross, int) else cross[0]
    ref = ReferenceEncoder(cfg.latent_channels, cfg.cross_attention_dim, cfg.reference_patch)
    return vae, unet, ref.to(torch_dtype)


def build_models(cfg: VisAlignerConfig):
    """(vae, unet, reference_encoder) of ``cfg``'s preset."""
    return build_tiny_models(cfg) if cfg.preset == "tiny" else load_svd_models(cfg)


@contextlib.contextmanager
def temporal_layers_off(unet: torch.nn.Module):
    """Run ``unet`` per frame: every spatial/temporal blend (``AlphaBlender``) passes the spatial
    branch only, so no information crosses frames. Weights are restored on exit."""
    saved = []
    with torch.no_grad():
        for mod in unet.modules():
            if isinstance(mod, AlphaBlender):
                saved.append((mod, mod.mix_factor.detach().clone()))
                if mod.merge_strategy == "fixed":
                    mod.mix_factor.fill_(1.0)
                else:
                    mod.mix_factor.fill_(60.0)  # sigmoid(60) == 1 in float32
    try:
        yield unet
    finally:
        with torch.no_grad():
            for mod, value in saved:
                mod.mix_factor.copy_(value)


def added_time_ids(fps: float, batch: int, device, dtype) -> torch.Tensor:
    """SVD's micro-conditioning ``(fps, motion_bucket_id, noise_aug_strength)``, one row per clip."""
    return torch.tensor([[fps, MOTION_BUCKET_ID, 0.0]], device=device, dtype=dtype).repeat(batch, 1)


def denoiser_output(
    unet, noisy: torch.Tensor, t, cond: torch.Tensor, mask: torch.Tensor, reference_tokens: torch.Tensor, fps: float
) -> torch.Tensor:
    """The UNet's prediction for ``(B, N, C, h, w)`` noisy latents: its input per frame is
    ``[noisy | condition latent | mask]`` (see the module docstring). ``unet`` may be wrapped (by
    accelerate / DDP); the pipeline's sampling loop and the trainer's loss both call this."""
    ids = added_time_ids(fps, noisy.shape[0], noisy.device, noisy.dtype)
    return unet(torch.cat([noisy, cond, mask], dim=2), t, reference_tokens, ids).sample


def make_scheduler(cfg: VisAlignerConfig):
    """DDIM with v-prediction, zero terminal SNR and trailing timesteps (few-step sampling works)."""
    from diffusers import DDIMScheduler

    return DDIMScheduler(
        num_train_timesteps=cfg.num_train_timesteps,
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type=cfg.prediction_type,
        timestep_spacing="trailing",
        rescale_betas_zero_snr=True,
        clip_sample=False,
        set_alpha_to_one=False,
    )


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
