"""``VisAlignerPipeline``: condition video in, generated real-camera video out.

One call generates one clip of N frames from (reference image, N sim renders, N object masks):
frame 0 of the output is the reference itself, frames 1..N-1 are generated.
:meth:`VisAlignerPipeline.generate_video` covers episodes of any length chunk by chunk: chunk k+1
starts at the last frame of chunk k and uses that *generated* frame as its reference (SPEC §2), so
chunks overlap by one frame and each one adds N-1 new frames.

Saved as a folder: ``model_index.json``, ``visaligner_config.json``, ``vae/``, ``unet/``,
``reference_encoder/`` (diffusers model folders with safetensors weights) and ``scheduler/``.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, DDIMScheduler, UNetSpatioTemporalConditionModel

from embodied_gym.visaligner.conditioning import condition_video
from embodied_gym.visaligner.model import ReferenceEncoder, added_time_ids, build_models, temporal_layers_off
from embodied_gym.visaligner.presets import VisAlignerConfig

CONFIG_NAME = "visaligner_config.json"
REFERENCE_NAME = "reference.png"


def make_scheduler(cfg: VisAlignerConfig) -> DDIMScheduler:
    """DDIM with v-prediction, zero terminal SNR and trailing timesteps (few-step sampling works)."""
    return DDIMScheduler(num_train_timesteps=cfg.num_train_timesteps, beta_schedule="scaled_linear",
                         beta_start=0.00085, beta_end=0.012, prediction_type=cfg.prediction_type,
                         timestep_spacing="trailing", rescale_betas_zero_snr=True, clip_sample=False,
                         set_alpha_to_one=False)


def _resize(frames: np.ndarray, size: tuple[int, int], nearest: bool = False) -> np.ndarray:
    import cv2

    if frames.shape[1:3] == tuple(size):
        return frames
    interp = cv2.INTER_NEAREST if nearest else cv2.INTER_AREA
    return np.stack([cv2.resize(f, (size[1], size[0]), interpolation=interp) for f in frames])


class VisAlignerPipeline:
    """Sim render + object masks + a real reference image -> the real camera's video.

    Components: ``vae`` (encodes condition and target frames), ``unet``
    (``UNetSpatioTemporalConditionModel``), ``reference_encoder`` (cross-attention tokens of the
    reference latent), ``scheduler`` (DDIM) and ``config`` (:class:`VisAlignerConfig`).
    Frames of another size than ``config.image_size`` are resized in and out.
    """

    def __init__(self, vae, unet: UNetSpatioTemporalConditionModel, reference_encoder: ReferenceEncoder,
                 scheduler: DDIMScheduler, config: VisAlignerConfig):
        self.vae, self.unet, self.reference_encoder = vae, unet, reference_encoder
        self.scheduler, self.config = scheduler, config
        self.reference_image: np.ndarray | None = None  # the default real reference (reference.png), if saved

    @classmethod
    def from_config(cls, config: VisAlignerConfig) -> "VisAlignerPipeline":
        vae, unet, ref = build_models(config)
        return cls(vae, unet, ref, make_scheduler(config), config)

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name in ("vae", "unet", "reference_encoder"):
            getattr(self, name).save_pretrained(path / name, safe_serialization=True)
        self.scheduler.save_pretrained(path / "scheduler")
        self.config.save(path / CONFIG_NAME)
        index = {"_class_name": type(self).__name__, "vae": type(self.vae).__name__,
                 "unet": type(self.unet).__name__, "reference_encoder": type(self.reference_encoder).__name__,
                 "scheduler": type(self.scheduler).__name__}
        tmp = path / "model_index.json.tmp"
        tmp.write_text(json.dumps(index, indent=2))
        os.replace(tmp, path / "model_index.json")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, torch_dtype: torch.dtype | None = None) -> "VisAlignerPipeline":
        """Load a folder written by :meth:`save_pretrained` (local files only)."""
        from diffusers import AutoencoderKLTemporalDecoder

        path = Path(path)
        if not (path / CONFIG_NAME).exists():
            raise FileNotFoundError(f"{path} is not a VisAligner model folder (no {CONFIG_NAME}); pass the folder "
                                    f"that `embodied-gym visaligner train` wrote (its model/ subfolder)")
        config = VisAlignerConfig.load(path / CONFIG_NAME)
        index = json.loads((path / "model_index.json").read_text())
        vae_classes = {"AutoencoderKL": AutoencoderKL, "AutoencoderKLTemporalDecoder": AutoencoderKLTemporalDecoder}
        vae_cls = vae_classes[index["vae"]]
        kw = dict(local_files_only=True, torch_dtype=torch_dtype)
        vae = vae_cls.from_pretrained(path / "vae", **kw)
        unet = UNetSpatioTemporalConditionModel.from_pretrained(path / "unet", **kw)
        ref = ReferenceEncoder.from_pretrained(path / "reference_encoder", **kw)
        scheduler = DDIMScheduler.from_pretrained(path / "scheduler", local_files_only=True)
        pipe = cls(vae.eval(), unet.eval(), ref.eval(), scheduler, config)
        if (path / REFERENCE_NAME).exists():
            import cv2

            pipe.reference_image = np.ascontiguousarray(cv2.imread(str(path / REFERENCE_NAME))[..., ::-1])
        return pipe

    def to(self, device=None, dtype=None) -> "VisAlignerPipeline":
        for m in (self.vae, self.unet, self.reference_encoder):
            m.to(device=device, dtype=dtype)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.unet.parameters()).device

    @property
    def temporal_vae(self) -> bool:
        """Whether the VAE decodes whole clips (SVD's temporal decoder needs ``num_frames``)."""
        import inspect

        # inspect.signature follows the __wrapped__ of diffusers' forward hooks; __code__ would not
        return "num_frames" in inspect.signature(self.vae.decode).parameters

    @property
    def dtype(self) -> torch.dtype:
        return next(self.unet.parameters()).dtype

    # ------------------------------------------------------------------ latents
    def encode_frames(self, frames: np.ndarray, batch: int = 32) -> torch.Tensor:
        """``(N, H, W, 3)`` uint8 -> ``(N, C, h, w)`` scaled latents (the posterior mode)."""
        frames = _resize(np.asarray(frames), self.config.image_size)
        out = []
        with torch.no_grad():
            for i in range(0, len(frames), batch):
                x = torch.from_numpy(frames[i:i + batch]).to(self.device, self.dtype).permute(0, 3, 1, 2) / 127.5 - 1
                out.append(self.vae.encode(x).latent_dist.mode() * self.vae.config.scaling_factor)
        return torch.cat(out)

    def decode_latents(self, latents: torch.Tensor, batch: int = 32) -> np.ndarray:
        """``(N, C, h, w)`` -> ``(N, H, W, 3)`` uint8 frames."""
        out = []
        with torch.no_grad():
            for i in range(0, len(latents), batch):
                z = latents[i:i + batch].to(self.device, self.dtype) / self.vae.config.scaling_factor
                kw = {"num_frames": len(z)} if self.temporal_vae else {}
                x = self.vae.decode(z, **kw).sample
                out.append(((x.float().clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy())
        return np.concatenate(out)

    def mask_latents(self, masks: np.ndarray | None, n: int) -> torch.Tensor:
        """Object masks ``(N, H, W)`` max-pooled to latent size ``(N, 1, h, w)`` (zeros when masks
        are off), so that an object of a few pixels still marks its latent cell."""
        h, w = (s // self.config.vae_scale_factor for s in self.config.image_size)
        if masks is None or not self.config.use_masks:
            return torch.zeros(n, 1, h, w, device=self.device, dtype=self.dtype)
        m = _resize(np.asarray(masks, dtype=np.uint8), self.config.image_size, nearest=True)
        m = torch.from_numpy(m).to(self.device, torch.float32)[:, None]
        return F.adaptive_max_pool2d(m, (h, w)).to(self.dtype)

    def condition_latents(self, reference: np.ndarray, sim_frames: np.ndarray, masks: np.ndarray | None):
        """(condition latents ``(N, C, h, w)``, mask latents ``(N, 1, h, w)``) of one clip."""
        size = self.config.image_size
        sim = _resize(np.asarray(sim_frames), size)
        ref = _resize(np.asarray(reference)[None], size)[0]
        m = _resize(np.asarray(masks, dtype=np.uint8), size, nearest=True).astype(bool) \
            if masks is not None and self.config.use_masks else None
        return self.encode_frames(condition_video(ref, sim, m)), self.mask_latents(m, len(sim))

    # ------------------------------------------------------------------ denoising
    def unet_input(self, noisy: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([noisy, cond, mask], dim=2)

    def predict(self, noisy, t, cond, mask, ref_tokens) -> torch.Tensor:
        ids = added_time_ids(self.config, noisy.shape[0], noisy.device, noisy.dtype)
        return self.unet(self.unet_input(noisy, cond, mask), t, ref_tokens, ids).sample

    def training_loss(self, target: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor,
                      generator: torch.Generator | None = None) -> torch.Tensor:
        """Diffusion loss of a batch of clips (``(B, N, C, h, w)`` latents; ``mask`` ``(B, N, 1, h, w)``).
        The reference is condition frame 0."""
        b = target.shape[0]
        noise = torch.randn(target.shape, generator=generator, device=target.device, dtype=target.dtype)
        t = torch.randint(0, self.scheduler.config.num_train_timesteps, (b,), generator=generator,
                          device=target.device)
        flat_t = t.repeat_interleave(target.shape[1])
        noisy = self.scheduler.add_noise(target.flatten(0, 1), noise.flatten(0, 1), flat_t).view_as(target)
        if self.scheduler.config.prediction_type == "v_prediction":
            goal = self.scheduler.get_velocity(target.flatten(0, 1), noise.flatten(0, 1), flat_t).view_as(target)
        else:
            goal = noise
        ref_tokens = self.reference_encoder(cond[:, 0])
        pred = self.predict(noisy, t, cond, mask, ref_tokens)
        return F.mse_loss(pred.float(), goal.float())

    @torch.no_grad()
    def sample_latents(self, cond: torch.Tensor, mask: torch.Tensor, num_inference_steps: int | None = None,
                       generator=None, temporal: bool = True) -> torch.Tensor:
        """Denoise ``(B, N, C, h, w)`` latents given condition and mask latents; ``generator`` is one
        ``torch.Generator`` for the batch or a list of B, one per clip."""
        steps = num_inference_steps or self.config.num_inference_steps
        self.scheduler.set_timesteps(steps, device=cond.device)
        if isinstance(generator, (list, tuple)):  # one per clip: a clip's noise does not depend on its batch
            latents = torch.stack([torch.randn(cond.shape[1:], generator=g, device=cond.device, dtype=cond.dtype)
                                   for g in generator])
        else:
            latents = torch.randn(cond.shape, generator=generator, device=cond.device, dtype=cond.dtype)
        latents = latents * self.scheduler.init_noise_sigma
        ref_tokens = self.reference_encoder(cond[:, 0])
        ctx = temporal_layers_off(self.unet) if not temporal else contextlib.nullcontext()
        with ctx:
            for t in self.scheduler.timesteps:
                pred = self.predict(self.scheduler.scale_model_input(latents, t), t, cond, mask, ref_tokens)
                latents = self.scheduler.step(pred.flatten(0, 1), t, latents.flatten(0, 1)).prev_sample.view_as(latents)
        return latents

    def __call__(self, reference: np.ndarray, sim_frames: np.ndarray, masks: np.ndarray | None = None,
                 num_inference_steps: int | None = None, generator: torch.Generator | None = None,
                 temporal: bool = True) -> np.ndarray:
        """One clip: ``(N, H, W, 3)`` uint8 frames; frame 0 is ``reference``.

        ``temporal=False`` runs the same network per frame (its temporal layers off; an ablation).
        """
        return self.generate_clips([reference], [sim_frames], [masks], num_inference_steps, generator, temporal)[0]

    def generate_clips(self, references, sim_clips, masks=None, num_inference_steps: int | None = None,
                       generator=None, temporal: bool = True) -> list[np.ndarray]:
        """Several independent clips of equal length, denoised as one batch (see :meth:`__call__`);
        ``generator``: one for the batch, or a list with one per clip."""
        sim_clips = [np.asarray(s) for s in sim_clips]
        masks = list(masks) if masks is not None else [None] * len(sim_clips)
        if len({s.shape for s in sim_clips}) != 1 or sim_clips[0].ndim != 4 or len(sim_clips[0]) < 2:
            raise ValueError(f"sim clips must share one shape (N >= 2, H, W, 3), got {[s.shape for s in sim_clips]}")
        was_training = self.unet.training
        self.unet.eval()
        conds, mask_lats = zip(*(self.condition_latents(r, s, m) for r, s, m in zip(references, sim_clips, masks)))
        lat = self.sample_latents(torch.stack(conds), torch.stack(mask_lats), num_inference_steps, generator,
                                  temporal)
        self.unet.train(was_training)
        n = len(sim_clips[0])
        # a temporal VAE decoder (SVD's) must see one clip per call; the tiny VAE decodes frames alone
        per_call = n if self.temporal_vae else 32
        frames = _resize(self.decode_latents(lat.flatten(0, 1), batch=per_call), sim_clips[0].shape[1:3])
        out = [frames[i * n:(i + 1) * n] for i in range(len(sim_clips))]
        for clip, ref in zip(out, references):
            if np.asarray(ref).shape == clip.shape[1:]:
                clip[0] = ref
        return out

    def generate_video(self, reference: np.ndarray, sim_frames: np.ndarray, masks: np.ndarray | None = None,
                       num_inference_steps: int | None = None, generator: torch.Generator | None = None,
                       temporal: bool = True, progress: bool = False) -> np.ndarray:
        """A whole episode ``(T, H, W, 3)``, chunk by chunk (see the module docstring)."""
        return self.generate_videos([reference], [sim_frames], [masks], num_inference_steps, generator, temporal,
                                    progress)[0]

    def generate_videos(self, references, sim_videos, masks=None, num_inference_steps: int | None = None,
                        generator=None, temporal: bool = True, progress: bool = False) -> list[np.ndarray]:
        """Several episodes at once (any lengths): chunk k of every episode that has one is denoised in
        one batch. With ``generator`` a list (one per episode) every episode's frames are the same as
        when generated alone, whatever it is batched with."""
        from tqdm import tqdm

        sims = [np.asarray(s) for s in sim_videos]
        masks = list(masks) if masks is not None else [None] * len(sims)
        n = self.config.num_frames
        outs = [np.empty_like(s) for s in sims]
        for out, ref in zip(outs, references):
            out[0] = ref
        starts = [list(range(0, max(len(s) - 1, 1), n - 1)) for s in sims]
        for k in tqdm(range(max(map(len, starts))), desc="visaligner chunks", unit="chunk", disable=not progress):
            groups: dict[int, list[tuple[int, int, int]]] = {}  # clip length -> (episode, start, end)
            for i, s in enumerate(sims):
                if k < len(starts[i]):
                    a = starts[i][k]
                    e = min(a + n, len(s))
                    if e - a >= 2:
                        groups.setdefault(e - a, []).append((i, a, e))
            for items in groups.values():
                gens = [generator[i] for i, _, _ in items] if isinstance(generator, (list, tuple)) else generator
                clips = self.generate_clips([outs[i][a] for i, a, _ in items], [sims[i][a:e] for i, a, e in items],
                                            [None if masks[i] is None else masks[i][a:e] for i, a, e in items],
                                            num_inference_steps, gens, temporal)
                for (i, a, e), clip in zip(items, clips):
                    outs[i][a + 1:e] = clip[1:]
        return outs
