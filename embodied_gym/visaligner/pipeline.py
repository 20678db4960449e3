"""``VisAlignerPipeline``: condition video in, generated real-camera video out (a diffusers pipeline).

One call generates clips of N frames from (reference image, N sim renders, N object masks): frame 0
of each output clip is its reference, frames 1..N-1 are generated.
:meth:`VisAlignerPipeline.generate_video` covers episodes of any length chunk by chunk: chunk k+1
starts at the last frame of chunk k and uses that *generated* frame as its reference (the paper's
chunked autoregression, arXiv 2507.05198 §2), so chunks overlap by one frame and each one adds N-1
new frames.

The pipeline is inference only; the diffusion loss lives in :mod:`embodied_gym.visaligner.training`.

**The model folder** is written by diffusers' ``DiffusionPipeline.save_pretrained``:
``model_index.json`` (``_class_name`` ``"VisAlignerPipeline"``, each component as a
``[library, class]`` pair, and the pipeline settings ``image_size``, ``num_frames``,
``frame_stride``, ``use_masks``, ``fps``, ``num_inference_steps``), ``vae/``, ``unet/``,
``reference_encoder/`` (diffusers model folders, safetensors weights), ``scheduler/`` and, when the
pipeline has one, ``reference.png`` (the default real reference). ``visaligner_config.json``, when
present, is the trainer's record of its :class:`~embodied_gym.visaligner.configuration.VisAlignerConfig`
(read back only for folders of the old layout, below).

**Loading.**

- ``VisAlignerPipeline.from_pretrained(folder)`` (local folders only, nothing downloaded) first
  checks ``model_index.json`` against :data:`ALLOWED_COMPONENTS` (each component's
  ``[library, class]``) and the known setting keys, then lets diffusers load it. It refuses
  ``custom_pipeline`` and ``trust_remote_code``. Folders of the layout written before this class
  became a ``DiffusionPipeline`` (bare class names in ``model_index.json`` plus
  ``visaligner_config.json``) load too, their bare names mapped through the same allow-list.
- ``diffusers.DiffusionPipeline.from_pretrained(folder)`` works once this module is imported.
  What diffusers allows (0.42): it resolves ``_class_name`` only as an attribute of the
  ``diffusers`` package, unless the folder ships pipeline code (``_class_name`` ``[file, class]``
  with ``file.py`` beside it, or ``custom_pipeline=``), which it runs only with
  ``trust_remote_code=True``; we never use that. A component's library is imported only when it is
  one diffusers loads from (``diffusers``, ``transformers``, ...); any other library name, such as
  ``embodied_gym.visaligner.modeling`` for our ``ReferenceEncoder``, must already be imported by the
  caller. So importing this module registers ``VisAlignerPipeline`` as ``diffusers.VisAlignerPipeline``
  (nothing else in diffusers' namespace is touched), and our :meth:`extract_init_dict` (which
  diffusers calls with the folder's ``model_index.json`` before it loads any component) runs the
  same allow-list check, so both loading paths refuse a folder that names other classes.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DiffusionPipeline
from diffusers.utils import BaseOutput

from embodied_gym.atomic import atomic_path
from embodied_gym.visaligner.conditioning import condition_video
from embodied_gym.visaligner.configuration import VisAlignerConfig
from embodied_gym.visaligner.modeling import (
    ReferenceEncoder,
    build_models,
    denoiser_output,
    make_scheduler,
    temporal_layers_off,
)

__all__ = [
    "ALLOWED_COMPONENTS",
    "CONFIG_NAME",
    "REFERENCE_NAME",
    "VisAlignerPipeline",
    "VisAlignerPipelineOutput",
    "build_pipeline",
    "check_model_index",
    "make_scheduler",
    "pipeline_settings",
    "save_png",
]

CONFIG_NAME = "visaligner_config.json"
REFERENCE_NAME = "reference.png"
OUTPUT_TYPES = ("np", "pt", "pil", "latent")

#: The ``[library, class]`` pairs ``model_index.json`` may name, per component. Schedulers: those
#: whose ``set_timesteps`` / ``scale_model_input`` / ``step`` loop the sampler runs (training needs
#: ``add_noise`` and, for v-prediction, ``get_velocity``: DDIM and DDPM).
ALLOWED_COMPONENTS: dict[str, frozenset[tuple[str, str]]] = {
    "vae": frozenset({("diffusers", "AutoencoderKL"), ("diffusers", "AutoencoderKLTemporalDecoder")}),
    "unet": frozenset({("diffusers", "UNetSpatioTemporalConditionModel")}),
    "reference_encoder": frozenset({(ReferenceEncoder.__module__, "ReferenceEncoder")}),
    "scheduler": frozenset(
        ("diffusers", n)
        for n in (
            "DDIMScheduler",
            "DDPMScheduler",
            "DPMSolverMultistepScheduler",
            "EulerDiscreteScheduler",
            "EulerAncestralDiscreteScheduler",
            "UniPCMultistepScheduler",
        )
    ),
}
_DEFAULTS = VisAlignerConfig()
SETTING_KEYS = ("image_size", "num_frames", "frame_stride", "use_masks", "fps", "num_inference_steps", "crop")
_DIFFUSERS_KEYS = ("_class_name", "_diffusers_version", "_name_or_path")


def pipeline_settings(cfg: VisAlignerConfig) -> dict:
    """The pipeline-level settings (``model_index.json`` keys) of a model trained with ``cfg``."""
    return {k: getattr(cfg, k) for k in SETTING_KEYS}


def build_pipeline(cfg: VisAlignerConfig) -> VisAlignerPipeline:
    """A new pipeline with ``cfg``'s networks (randomly initialised, or svd's loaded weights)."""
    vae, unet, ref = build_models(cfg)
    return VisAlignerPipeline(vae, unet, ref, make_scheduler(cfg), **pipeline_settings(cfg))


def check_model_index(index: dict, source: str | os.PathLike = "model_index.json") -> None:
    """Raise ``ValueError`` unless ``index`` (a ``model_index.json``) names only allow-listed
    components (:data:`ALLOWED_COMPONENTS`) and known settings. Run before anything is imported or
    loaded from a folder."""
    name = index.get("_class_name")
    if name != VisAlignerPipeline.__name__:
        raise ValueError(
            f"{source}: _class_name is {name!r}, expected 'VisAlignerPipeline' (a folder written by "
            f"VisAlignerPipeline.save_pretrained); pipeline code shipped with a folder is never run"
        )
    for key, value in index.items():
        if key in ALLOWED_COMPONENTS:
            pair = tuple(value) if isinstance(value, (list, tuple)) else None
            if pair not in ALLOWED_COMPONENTS[key]:
                raise ValueError(
                    f"{source}: component {key!r} is {value!r}; allowed: "
                    f"{sorted(list(p) for p in ALLOWED_COMPONENTS[key])}"
                )
        elif key not in SETTING_KEYS and key not in _DIFFUSERS_KEYS:
            raise ValueError(
                f"{source}: unknown key {key!r}; a VisAligner model_index.json holds the components "
                f"{sorted(ALLOWED_COMPONENTS)}, the settings {list(SETTING_KEYS)} and diffusers' "
                f"{list(_DIFFUSERS_KEYS)}"
            )
    missing = sorted(set(ALLOWED_COMPONENTS) - set(index))
    if missing:
        raise ValueError(f"{source}: components {missing} are missing; save the pipeline with save_pretrained")


def save_png(path: str | os.PathLike, image: np.ndarray, scale: int = 1) -> None:
    """Write an RGB uint8 image as PNG (through a temporary file, so a crash leaves no partial file)."""
    import cv2

    if scale > 1:
        image = cv2.resize(image, (image.shape[1] * scale, image.shape[0] * scale), interpolation=cv2.INTER_NEAREST)
    with atomic_path(path) as tmp:
        cv2.imwrite(str(tmp), np.ascontiguousarray(image[..., ::-1]))


def _read_png(path: Path) -> np.ndarray:
    import cv2

    image = cv2.imread(str(path))
    if image is None:
        raise ValueError(f"{path} is not a readable image; replace it with a PNG of a real camera frame")
    return np.ascontiguousarray(image[..., ::-1])


def _resize(frames: np.ndarray, size: tuple[int, ...], nearest: bool = False) -> np.ndarray:
    import cv2

    if frames.shape[1:3] == tuple(size):
        return frames
    interp = cv2.INTER_NEAREST if nearest else cv2.INTER_AREA
    return np.stack([cv2.resize(f, (size[1], size[0]), interpolation=interp) for f in frames])


@dataclass
class VisAlignerPipelineOutput(BaseOutput):
    """Output of :class:`VisAlignerPipeline`.

    Args:
        frames: one clip per input clip, frame 0 its reference, at the input frames' size.
            ``output_type="np"``: uint8 ``(B, N, H, W, 3)`` (the camera-frame format of the envs and
            datasets, not diffusers' float ``[0, 1]``); ``"pt"``: float ``(B, N, 3, H, W)`` in
            ``[0, 1]``; ``"pil"``: B lists of N ``PIL.Image``; ``"latent"``: the denoised latents
            ``(B, N, C, h, w)`` at the model's size.
    """

    frames: np.ndarray | torch.Tensor | list


@contextlib.contextmanager
def _loading_bar_on_terminal_only():
    """diffusers draws a "Loading pipeline components" bar on every load (the TPO and eval workers load
    a model each): switch its bars off while loading when stderr is not a terminal, as ours are."""
    from diffusers.utils import logging as diffusers_logging

    from embodied_gym.progress import on_terminal

    if on_terminal() or not diffusers_logging.is_progress_bar_enabled():
        yield
        return
    diffusers_logging.disable_progress_bar()
    try:
        yield
    finally:
        diffusers_logging.enable_progress_bar()


class VisAlignerPipeline(DiffusionPipeline):
    """Sim render + object masks + a real reference image -> the real camera's video.

    Args:
        vae: ``AutoencoderKL`` (tiny preset) or SVD's ``AutoencoderKLTemporalDecoder``; encodes
            condition frames and decodes generated latents.
        unet: ``UNetSpatioTemporalConditionModel`` with ``2 * latent_channels + 1`` input channels
            (noisy latent, condition latent, object mask).
        reference_encoder: :class:`~embodied_gym.visaligner.modeling.ReferenceEncoder`, the
            cross-attention tokens of the reference latent.
        scheduler: a diffusers scheduler (DDIM as trained; see :data:`ALLOWED_COMPONENTS`).
        image_size: ``(H, W)`` the networks work at; frames of another size are resized in and out.
        num_frames: frames per clip (frame 0 the reference) in :meth:`generate_video`.
        frame_stride: recorded steps between the frames of a training clip (the frame rate the
            model knows; the wrapper and the renderer default to it).
        use_masks: whether the condition holds object silhouettes and the mask channel (False: the
            no-mask ablation).
        fps: the first of SVD's ``added_time_ids``, constant as in training.
        num_inference_steps: default denoising steps.
        crop: the region of the camera frame the model was trained on (``(top, left, bottom,
            right)`` fractions, :func:`embodied_gym.rendering.crop_box`), or None for the whole
            frame. The pipeline itself takes frames of that region (``crop_frames(frames, crop)``);
            it is recorded so that callers cut the same region.

    ``pipe.config`` holds the components' ``[library, class]`` pairs and the settings above.
    """

    model_cpu_offload_seq = "reference_encoder->unet->vae"

    def __init__(
        self,
        vae,
        unet,
        reference_encoder: ReferenceEncoder,
        scheduler,
        image_size: tuple | list = _DEFAULTS.image_size,
        num_frames: int = _DEFAULTS.num_frames,
        frame_stride: int = _DEFAULTS.frame_stride,
        use_masks: bool = _DEFAULTS.use_masks,
        fps: int | float = _DEFAULTS.fps,
        num_inference_steps: int = _DEFAULTS.num_inference_steps,
        crop: tuple | list | None = None,
    ):
        super().__init__()
        self.register_modules(vae=vae, unet=unet, reference_encoder=reference_encoder, scheduler=scheduler)
        image_size = tuple(int(x) for x in image_size)
        if len(image_size) != 2 or int(num_frames) < 2 or int(frame_stride) < 1 or int(num_inference_steps) < 1:
            raise ValueError(
                f"bad VisAligner settings: image_size={image_size} (H, W), num_frames={num_frames} "
                f"(>= 2), frame_stride={frame_stride} (>= 1), num_inference_steps={num_inference_steps} "
                f"(>= 1)"
            )
        self.register_to_config(
            image_size=image_size,
            num_frames=int(num_frames),
            frame_stride=int(frame_stride),
            use_masks=bool(use_masks),
            fps=fps,
            num_inference_steps=int(num_inference_steps),
            crop=None if crop is None else [float(x) for x in crop],
        )
        self._reference_image: np.ndarray | None = None
        self.set_progress_bar_config(disable=True)  # called once per env step by the wrapper

    # ------------------------------------------------------------------ persistence
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs) -> VisAlignerPipeline:
        """Load a local folder written by :meth:`save_pretrained` (or by the old layout; see the
        module docstring). ``kwargs`` go to ``DiffusionPipeline.from_pretrained`` (e.g.
        ``torch_dtype``); ``custom_pipeline`` and ``trust_remote_code`` are refused, and weights are
        read from safetensors files only.

        Raises:
            FileNotFoundError: the folder does not exist or holds no ``model_index.json``.
            ValueError: ``model_index.json`` names a component or key outside the allow-list.
        """
        path = Path(pretrained_model_name_or_path)
        for key in ("custom_pipeline", "trust_remote_code"):
            if kwargs.get(key):
                raise ValueError(
                    f"VisAlignerPipeline.from_pretrained does not run code shipped with a model "
                    f"folder; drop {key}={kwargs[key]!r}"
                )
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(
                f"{path} is not a VisAligner model folder (no model_index.json); pass the folder "
                f"that `embodied-gym visaligner train` wrote (its model/ subfolder); nothing is "
                f"downloaded"
            )
        index = json.loads((path / "model_index.json").read_text())
        if _is_old_layout(index):
            return cls._from_old_layout(path, index, kwargs.pop("torch_dtype", None))
        check_model_index(index, path / "model_index.json")
        kwargs.update(local_files_only=True, trust_remote_code=False, use_safetensors=True)
        with _loading_bar_on_terminal_only():
            return super().from_pretrained(path, **kwargs)

    @classmethod
    def extract_init_dict(cls, config_dict, **kwargs):
        # DiffusionPipeline.from_pretrained calls this with the folder's model_index.json before it
        # loads any component: the allow-list then holds for DiffusionPipeline.from_pretrained too.
        if "_diffusers_version" in config_dict or any(k in config_dict for k in ALLOWED_COMPONENTS):
            check_model_index(config_dict)
        return super().extract_init_dict(config_dict, **kwargs)

    @classmethod
    def _from_old_layout(cls, path: Path, index: dict, torch_dtype=None) -> VisAlignerPipeline:
        """A folder of the layout before this class was a ``DiffusionPipeline``: bare class names in
        ``model_index.json`` and the settings in ``visaligner_config.json``."""
        import diffusers

        from embodied_gym.visaligner import modeling as model_module

        if not (path / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{path}/model_index.json has the old layout (bare class names) but {CONFIG_NAME} "
                f"is missing; re-save the model with VisAlignerPipeline.save_pretrained"
            )
        components = {}
        for key, allowed in ALLOWED_COMPONENTS.items():
            names = {c: lib for lib, c in allowed}
            name = index.get(key, "DDIMScheduler" if key == "scheduler" else None)
            if name not in names:
                raise ValueError(f"{path}/model_index.json: component {key!r} is {name!r}; allowed: {sorted(names)}")
            klass = getattr(diffusers if names[name] == "diffusers" else model_module, name)
            kw = {} if key == "scheduler" else {"torch_dtype": torch_dtype, "use_safetensors": True}
            components[key] = klass.from_pretrained(path / key, local_files_only=True, **kw)
        pipe = cls(**components, **pipeline_settings(VisAlignerConfig.load(path / CONFIG_NAME)))
        pipe.register_to_config(_name_or_path=str(path))
        return pipe

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """diffusers' ``save_pretrained`` (safetensors weights) plus ``reference.png`` when the
        pipeline has a reference image."""
        kwargs.setdefault("safe_serialization", True)
        super().save_pretrained(save_directory, **kwargs)
        if self._reference_image is not None:
            save_png(Path(save_directory) / REFERENCE_NAME, self._reference_image)

    @property
    def reference_image(self) -> np.ndarray | None:
        """The default real reference ``(H, W, 3)`` uint8: set by the trainer, or the loaded folder's
        ``reference.png``; None when there is none."""
        if self._reference_image is None and self.name_or_path and os.path.isdir(self.name_or_path):
            path = Path(self.name_or_path) / REFERENCE_NAME
            if path.is_file():
                self._reference_image = _read_png(path)
        return self._reference_image

    @reference_image.setter
    def reference_image(self, image: np.ndarray | None) -> None:
        self._reference_image = None if image is None else np.ascontiguousarray(image, dtype=np.uint8)

    # ------------------------------------------------------------------ properties
    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.vae.config.block_out_channels) - 1)

    @property
    def temporal_vae(self) -> bool:
        """Whether the VAE decodes whole clips (SVD's temporal decoder needs ``num_frames``)."""
        # inspect.signature follows the __wrapped__ of diffusers' forward hooks; __code__ would not
        return "num_frames" in inspect.signature(self.vae.decode).parameters

    # ------------------------------------------------------------------ latents
    def encode_frames(self, frames: np.ndarray, batch: int = 32) -> torch.Tensor:
        """``(N, H, W, 3)`` uint8 -> ``(N, C, h, w)`` scaled latents (the posterior mode)."""
        frames = _resize(np.asarray(frames), self.config.image_size)
        device, dtype = self._execution_device, self.vae.dtype
        out = []
        with torch.no_grad():
            for i in range(0, len(frames), batch):
                x = torch.from_numpy(frames[i : i + batch]).to(device, dtype).permute(0, 3, 1, 2) / 127.5 - 1
                out.append(self.vae.encode(x).latent_dist.mode() * self.vae.config.scaling_factor)
        return torch.cat(out)

    def decode_latents(self, latents: torch.Tensor, batch: int = 32) -> np.ndarray:
        """``(N, C, h, w)`` -> ``(N, H, W, 3)`` uint8 frames."""
        device, dtype = self._execution_device, self.vae.dtype
        out = []
        with torch.no_grad():
            for i in range(0, len(latents), batch):
                z = latents[i : i + batch].to(device, dtype) / self.vae.config.scaling_factor
                kw = {"num_frames": len(z)} if self.temporal_vae else {}
                x = self.vae.decode(z, **kw).sample
                out.append(((x.float().clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy())
        return np.concatenate(out)

    def mask_latents(self, masks: np.ndarray | None, n: int) -> torch.Tensor:
        """Object masks ``(N, H, W)`` max-pooled to latent size ``(N, 1, h, w)`` (zeros when masks
        are off), so that an object of a few pixels still marks its latent cell."""
        h, w = (s // self.vae_scale_factor for s in self.config.image_size)
        device, dtype = self._execution_device, self.unet.dtype
        if masks is None or not self.config.use_masks:
            return torch.zeros(n, 1, h, w, device=device, dtype=dtype)
        resized = _resize(np.asarray(masks, dtype=np.uint8), self.config.image_size, nearest=True)
        m = torch.from_numpy(resized).to(device, torch.float32)[:, None]
        return F.adaptive_max_pool2d(m, (h, w)).to(dtype)

    def condition_latents(self, reference: np.ndarray, sim_frames: np.ndarray, masks: np.ndarray | None):
        """(condition latents ``(N, C, h, w)``, mask latents ``(N, 1, h, w)``) of one clip."""
        size = self.config.image_size
        sim = _resize(np.asarray(sim_frames), size)
        ref = _resize(np.asarray(reference)[None], size)[0]
        m = (
            _resize(np.asarray(masks, dtype=np.uint8), size, nearest=True).astype(bool)
            if masks is not None and self.config.use_masks
            else None
        )
        return self.encode_frames(condition_video(ref, sim, m)), self.mask_latents(m, len(sim))

    # ------------------------------------------------------------------ denoising
    @torch.no_grad()
    def sample_latents(
        self,
        cond: torch.Tensor,
        mask: torch.Tensor,
        num_inference_steps: int | None = None,
        generator=None,
        temporal: bool = True,
    ) -> torch.Tensor:
        """Denoise ``(B, N, C, h, w)`` latents given condition and mask latents; ``generator`` is one
        ``torch.Generator`` for the batch or a list of B, one per clip."""
        steps = num_inference_steps or self.config.num_inference_steps
        self.scheduler.set_timesteps(steps, device=cond.device)
        if isinstance(generator, (list, tuple)):  # one per clip: a clip's noise does not depend on its batch
            latents = torch.stack(
                [torch.randn(cond.shape[1:], generator=g, device=cond.device, dtype=cond.dtype) for g in generator]
            )
        else:
            latents = torch.randn(cond.shape, generator=generator, device=cond.device, dtype=cond.dtype)
        latents = latents * self.scheduler.init_noise_sigma
        ref_tokens = self.reference_encoder(cond[:, 0])
        with temporal_layers_off(self.unet) if not temporal else contextlib.nullcontext():
            for t in self.progress_bar(self.scheduler.timesteps):
                pred = denoiser_output(
                    self.unet, self.scheduler.scale_model_input(latents, t), t, cond, mask, ref_tokens, self.config.fps
                )
                latents = self.scheduler.step(pred.flatten(0, 1), t, latents.flatten(0, 1)).prev_sample.view_as(latents)
        return latents

    def check_inputs(self, references, sim_clips, masks, num_inference_steps, generator, output_type) -> None:
        """Raise ``ValueError`` naming the first argument that cannot be generated from (lists:
        one entry per clip)."""
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        if not sim_clips:
            raise ValueError("sim_frames is empty: pass one (N, H, W, 3) clip or a list of them")
        shapes = [s.shape for s in sim_clips]
        if len(set(shapes)) != 1 or len(shapes[0]) != 4 or shapes[0][0] < 2 or shapes[0][-1] != 3:
            raise ValueError(f"sim clips must share one shape (N >= 2, H, W, 3), got {shapes}")
        if any(s.dtype != np.uint8 for s in sim_clips):
            raise ValueError(f"sim frames must be uint8 RGB, got {sorted({str(s.dtype) for s in sim_clips})}")
        if len(references) != len(sim_clips):
            raise ValueError(f"{len(references)} reference images for {len(sim_clips)} clips; pass one per clip")
        for r in references:
            if r.ndim != 3 or r.shape[-1] != 3 or r.dtype != np.uint8:
                raise ValueError(f"a reference image must be uint8 (H, W, 3), got {r.dtype} {r.shape}")
        if len(masks) != len(sim_clips):
            raise ValueError(f"{len(masks)} mask arrays for {len(sim_clips)} clips; pass one per clip (or None)")
        for m in masks:
            if m is not None and m.shape != shapes[0][:3]:
                raise ValueError(f"masks {m.shape} must be (N, H, W) = {shapes[0][:3]} like the sim frames")
        if num_inference_steps is not None and int(num_inference_steps) < 1:
            raise ValueError(f"num_inference_steps must be >= 1, got {num_inference_steps}")
        if isinstance(generator, (list, tuple)) and len(generator) != len(sim_clips):
            raise ValueError(f"{len(generator)} generators for {len(sim_clips)} clips; pass one, or one per clip")

    @torch.no_grad()
    def __call__(
        self,
        reference,
        sim_frames,
        masks=None,
        num_inference_steps: int | None = None,
        generator: torch.Generator | list[torch.Generator] | None = None,
        temporal: bool = True,
        output_type: str = "np",
        return_dict: bool = True,
    ):
        """Generate one clip per condition clip, denoised as one batch.

        Args:
            reference: the real reference image, uint8 ``(H', W', 3)``, or a list (or
                ``(B, H', W', 3)`` array) with one per clip. It is frame 0 of the output.
            sim_frames: the sim renders, uint8 ``(N, H, W, 3)``, or a list (or ``(B, N, H, W, 3)``
                array) of B clips of one shape.
            masks: the object masks ``(N, H, W)`` bool of one clip, or a list with one per clip
                (entries may be None); None for no masks.
            num_inference_steps: denoising steps (default ``config.num_inference_steps``).
            generator: one ``torch.Generator`` for the batch, or a list with one per clip (then a
                clip's frames do not depend on what it is batched with).
            temporal: False runs the same network per frame (its temporal layers off; an ablation).
            output_type: ``"np"``, ``"pt"``, ``"pil"`` or ``"latent"`` (see
                :class:`VisAlignerPipelineOutput`).
            return_dict: return a :class:`VisAlignerPipelineOutput`, else the tuple ``(frames,)``.

        Returns:
            :class:`VisAlignerPipelineOutput` (or a tuple); ``frames[0]`` is the first clip.

        Raises:
            ValueError: inputs of the wrong shape, dtype or count (see :meth:`check_inputs`).
        """
        single = np.asarray(sim_frames).ndim == 4 if not isinstance(sim_frames, (list, tuple)) else False
        sims = [np.asarray(sim_frames)] if single else [np.asarray(s) for s in sim_frames]
        refs = [np.asarray(reference)] if single else [np.asarray(r) for r in reference]
        if masks is None:
            masks = [None] * len(sims)
        elif single:
            masks = [np.asarray(masks)]
        else:
            masks = [None if m is None else np.asarray(m) for m in masks]
        self.check_inputs(refs, sims, masks, num_inference_steps, generator, output_type)

        conds, mask_lats = zip(*(self.condition_latents(r, s, m) for r, s, m in zip(refs, sims, masks)))
        latents = self.sample_latents(
            torch.stack(conds), torch.stack(mask_lats), num_inference_steps, generator, temporal
        )
        frames: np.ndarray | torch.Tensor | list  # as VisAlignerPipelineOutput.frames
        if output_type == "latent":
            frames = latents
        else:
            n = sims[0].shape[0]
            # a temporal VAE decoder (SVD's) must see one clip per call; the tiny VAE decodes frames alone
            decoded = self.decode_latents(latents.flatten(0, 1), batch=n if self.temporal_vae else 32)
            frames = _resize(decoded, sims[0].shape[1:3]).reshape(len(sims), *sims[0].shape)
            for clip, ref in zip(frames, refs):
                if ref.shape == clip.shape[1:]:
                    clip[0] = ref
            if output_type == "pt":
                frames = torch.from_numpy(frames).permute(0, 1, 4, 2, 3).float() / 255
            elif output_type == "pil":
                from PIL import Image

                frames = [[Image.fromarray(f) for f in clip] for clip in frames]
        self.maybe_free_model_hooks()
        if not return_dict:
            return (frames,)
        return VisAlignerPipelineOutput(frames=frames)

    # ------------------------------------------------------------------ clips and episodes (numpy)
    def generate_clips(
        self,
        references,
        sim_clips,
        masks=None,
        num_inference_steps: int | None = None,
        generator=None,
        temporal: bool = True,
    ) -> list[np.ndarray]:
        """Several independent clips of equal length, denoised as one batch: a list of uint8
        ``(N, H, W, 3)`` (see :meth:`__call__`)."""
        masks = list(masks) if masks is not None else None
        return list(self(list(references), list(sim_clips), masks, num_inference_steps, generator, temporal).frames)

    def generate_video(
        self,
        reference: np.ndarray,
        sim_frames: np.ndarray,
        masks: np.ndarray | None = None,
        num_inference_steps: int | None = None,
        generator: torch.Generator | None = None,
        temporal: bool = True,
        progress: bool = False,
    ) -> np.ndarray:
        """A whole episode ``(T, H, W, 3)``, chunk by chunk (see the module docstring)."""
        return self.generate_videos(
            [reference], [sim_frames], [masks], num_inference_steps, generator, temporal, progress
        )[0]

    def generate_videos(
        self,
        references,
        sim_videos,
        masks=None,
        num_inference_steps: int | None = None,
        generator=None,
        temporal: bool = True,
        progress: bool = False,
    ) -> list[np.ndarray]:
        """Several episodes at once (any lengths): chunk k of every episode that has one is denoised in
        one batch. With ``generator`` a list (one per episode) every episode's frames are the same as
        when generated alone, whatever it is batched with."""
        from embodied_gym.progress import progress_bar

        sims = [np.asarray(s) for s in sim_videos]
        masks = list(masks) if masks is not None else [None] * len(sims)
        n = self.config.num_frames
        outs = [np.empty_like(s) for s in sims]
        for out, ref in zip(outs, references):
            out[0] = ref
        starts = [list(range(0, max(len(s) - 1, 1), n - 1)) for s in sims]
        for k in progress_bar(range(max(map(len, starts))), progress=progress, desc="visaligner chunks", unit="chunk"):
            groups: dict[int, list[tuple[int, int, int]]] = {}  # clip length -> (episode, start, end)
            for i, s in enumerate(sims):
                if k < len(starts[i]):
                    a = starts[i][k]
                    e = min(a + n, len(s))
                    if e - a >= 2:
                        groups.setdefault(e - a, []).append((i, a, e))
            for items in groups.values():
                gens = [generator[i] for i, _, _ in items] if isinstance(generator, (list, tuple)) else generator
                clips = self.generate_clips(
                    [outs[i][a] for i, a, _ in items],
                    [sims[i][a:e] for i, a, e in items],
                    [None if masks[i] is None else masks[i][a:e] for i, a, e in items],
                    num_inference_steps,
                    gens,
                    temporal,
                )
                for (i, a, e), clip in zip(items, clips):
                    outs[i][a + 1 : e] = clip[1:]
        return outs


def _is_old_layout(index: dict) -> bool:
    """The layout before ``DiffusionPipeline``: components as bare class-name strings."""
    return any(isinstance(index.get(k), str) for k in ALLOWED_COMPONENTS)


def _register_in_diffusers_namespace() -> None:
    """Make ``DiffusionPipeline.from_pretrained`` resolve ``_class_name: "VisAlignerPipeline"``
    (diffusers looks the name up as an attribute of the ``diffusers`` package; see the module
    docstring). Never replaces a class diffusers itself defines under that name."""
    import diffusers

    if getattr(diffusers, VisAlignerPipeline.__name__, None) is None:
        setattr(diffusers, VisAlignerPipeline.__name__, VisAlignerPipeline)


_register_in_diffusers_namespace()
