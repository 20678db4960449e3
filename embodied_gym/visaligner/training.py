"""Training VisAligner on paired real/sim episodes (works plainly and under ``accelerate launch``).

Stages, all in ``out/``:

1. ``paired.npz``: paired episodes (sim replay, masks), built once and reused.
2. ``vae/`` (tiny preset only): the AutoencoderKL trained on real and sim frames (L1 + MSE + a
   small KL term); its ``scaling_factor`` is set to 1/std of the latents. The svd preset keeps
   SVD's own VAE frozen, and a fine-tune (``init``) the init model's.
3. The denoiser (UNet + reference encoder) on clips of ``num_frames`` frames with the diffusion
   loss of :func:`diffusion_loss` (here, on the networks themselves; the pipeline is inference
   only); the VAE is frozen and every frame's latent is computed once up front. ``checkpoint/`` is
   rewritten atomically every ``checkpoint_every`` steps (the pipeline folder, ``visaligner_config.json``,
   optimizer, step, loss log) and a rerun resumes from it.
   ``samples/step_XXXXXX.png`` / ``.mp4``: ground truth | condition | generated, every
   ``sample_every`` steps. ``loss.jsonl`` and ``loss.png``: the loss log.
4. ``model/``: the final :class:`~embodied_gym.visaligner.pipeline.VisAlignerPipeline` (diffusers'
   ``save_pretrained`` layout, with ``reference.png``) and ``visaligner_config.json``, the
   :class:`~embodied_gym.visaligner.configuration.VisAlignerConfig` it was trained with.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from embodied_gym.atomic import atomic_dir, save_figure
from embodied_gym.checkpoints import CheckpointStore
from embodied_gym.configs import require, setting
from embodied_gym.progress import progress_bar, report
from embodied_gym.visaligner.conditioning import condition_video
from embodied_gym.visaligner.configuration import BASE_MODEL_DIR, VisAlignerConfig, preset
from embodied_gym.visaligner.modeling import denoiser_output
from embodied_gym.visaligner.paired import PairedEpisode, crop_paired, paired_episodes_cached
from embodied_gym.visaligner.pipeline import (
    CONFIG_NAME,
    VisAlignerPipeline,
    build_pipeline,
    pipeline_settings,
    save_png,
)

__all__ = [
    "VisAlignerTrainConfig",
    "diffusion_loss",
    "init_model_dir",
    "model_config",
    "sample_clips",
    "save_png",
    "train",
    "train_vae",
]

#: The model settings a fine-tune (``init``) may change: they act at sampling time only.
FINE_TUNE_OVERRIDES = frozenset({"num_inference_steps"})

log = logging.getLogger(__name__)


@dataclass
class VisAlignerTrainConfig:
    """What :func:`train` does; ``model`` overrides fields of the preset's :class:`VisAlignerConfig`.
    Also the ``embodied-gym visaligner train`` command line and its ``--config`` YAML."""

    dataset: str | None = setting(None, required=True, help="LeRobotDataset recorded with a camera (e.g. a -Real- id)")
    out: str | None = setting(None, required=True, help="output folder (paired cache, checkpoint/, samples/, model/)")
    preset: str = setting("tiny", choices=("tiny", "svd"), help="model preset (svd needs --pretrained)")
    camera: str = setting("cam_high", help="the camera to align")
    episodes: list[int] | None = setting(None, help="training episodes (default: all)")
    physics: str | None = setting(None, help="calibrated physics JSON for the sim replay (default: nominal)")
    sam_checkpoint: str | None = setting(
        None, help="segment-anything weights for real-video object masks (default: classical static-camera masks)"
    )
    model: dict = setting(default_factory=dict, help="VisAlignerConfig overrides, e.g. num_frames=8 use_masks=false")
    init: str | None = setting(
        None,
        help="a VisAligner model folder to fine-tune, or `base` for the base model that ships with the package "
        "(trained on randomised sim looks): its config is the model's, its VAE is kept (no VAE steps) and "
        "its denoiser trains --steps more",
    )
    vae_steps: int = setting(400, help="VAE training steps (tiny preset from scratch; not with --init)")
    vae_batch_size: int = setting(32, help="frames per VAE step")
    vae_lr: float = setting(2e-3, help="VAE learning rate")
    steps: int = setting(1000, help="denoiser training steps")
    batch_size: int = setting(4, help="clips per denoiser step")
    lr: float = setting(1e-3, help="denoiser learning rate")
    sample_every: int = setting(250, help="steps between sample grids")
    checkpoint_every: int = setting(100, help="steps between checkpoints")
    sample_steps: int = setting(20, help="denoising steps of the sample grids")
    seed: int = setting(0, help="seed")
    num_threads: int | None = setting(None, flag="--threads", help="torch CPU threads (1 is fastest on a busy machine)")
    device: str | None = setting(
        None,
        choices=("cpu", "cuda"),
        help="cpu or cuda (default: accelerate's choice, the GPU when torch sees one; under "
        "`accelerate launch` each process's own GPU)",
    )
    progress: bool = setting(True, cli=False)


@dataclass
class EpisodeLatents:
    """Per-frame latents of one paired episode (frozen VAE)."""

    real: torch.Tensor  # (T, C, h, w) target frames
    cond: torch.Tensor  # (T, C, h, w) condition frames (sim render + silhouettes, or the plain render)
    mask: torch.Tensor  # (T, 1, h, w)
    step_stride: int = 1  # the episode's (PairedEpisode.step_stride)


def episode_latents(pipe: VisAlignerPipeline, cfg: VisAlignerConfig, ep: PairedEpisode) -> EpisodeLatents:
    masks = (ep.real_mask if cfg.mask_source == "real" else ep.sim_mask) if cfg.use_masks else None
    # Condition frames are encoded one by one, so frame 0 being the reference does not matter
    # here: the clip sampler puts the clip's reference (a real latent) in front.
    cond_frames = condition_video(ep.sim[0], ep.sim, masks)
    return EpisodeLatents(
        pipe.encode_frames(ep.real).cpu(),
        pipe.encode_frames(cond_frames).cpu(),
        pipe.mask_latents(masks, len(ep.sim)).cpu(),
        ep.step_stride,
    )


def sample_clips(latents: list[EpisodeLatents], cfg: VisAlignerConfig, batch: int, rng: np.random.Generator):
    """A batch of (target, condition, mask) clips ``(B, N, ...)``; condition frame 0 = the real
    reference (the clip's first real frame)."""
    tgt, cond, mask = [], [], []
    for _ in range(batch):
        ep = latents[rng.integers(len(latents))]
        T = len(ep.real)
        frame_stride = stored_stride(cfg, ep.step_stride)
        span = (cfg.num_frames - 1) * frame_stride
        stride = frame_stride if span < T else max(1, (T - 1) // (cfg.num_frames - 1))
        s = int(rng.integers(0, max(1, T - (cfg.num_frames - 1) * stride)))
        idx = s + stride * np.arange(cfg.num_frames)
        idx = np.minimum(idx, T - 1)
        c = ep.cond[idx].clone()
        c[0] = ep.real[idx[0]]
        tgt.append(ep.real[idx])
        cond.append(c)
        mask.append(ep.mask[idx])
    return torch.stack(tgt), torch.stack(cond), torch.stack(mask)


def stored_stride(cfg: VisAlignerConfig, step_stride: int) -> int:
    """Stored frames between a clip's frames, for an episode that keeps every ``step_stride``-th step.

    Raises:
        ValueError: the model's ``frame_stride`` is not a multiple of ``step_stride``.
    """
    if cfg.frame_stride % step_stride:
        raise ValueError(
            f"the model reads every {cfg.frame_stride}th step, but the episodes keep every {step_stride}th; "
            f"use episodes whose step_stride divides frame_stride"
        )
    return cfg.frame_stride // step_stride


def clip_frames(ep: PairedEpisode, cfg: VisAlignerConfig, start: int = 0):
    """(real, sim, masks) frames of a clip of ``ep`` (as the sampler picks them), for sample grids."""
    idx = np.minimum(start + stored_stride(cfg, ep.step_stride) * np.arange(cfg.num_frames), len(ep.real) - 1)
    masks = ep.sim_mask[idx] if cfg.use_masks else None
    return ep.real[idx], ep.sim[idx], masks


def sample_grid(real: np.ndarray, condition: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """Rows ground truth | condition | generated; one column per frame; 1-px white gaps."""
    rows = []
    for row in (real, condition, generated):
        pad = np.full((row.shape[1], 1, 3), 255, np.uint8)
        rows.append(np.concatenate([x for f in row for x in (f, pad)][:-1], axis=1))
    gap = np.full((1, rows[0].shape[1], 3), 255, np.uint8)
    return np.concatenate([rows[0], gap, rows[1], gap, rows[2]], axis=0)


def diffusion_loss(
    unet,
    reference_encoder,
    scheduler,
    target: torch.Tensor,
    cond: torch.Tensor,
    mask: torch.Tensor,
    fps: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The denoiser's diffusion loss on a batch of clips.

    Args:
        unet, reference_encoder: the networks (plain or wrapped by ``accelerator.prepare``).
        scheduler: the noise schedule (``add_noise``; ``get_velocity`` for v-prediction).
        target: clean target latents ``(B, N, C, h, w)``.
        cond: condition latents ``(B, N, C, h, w)``; frame 0 is the reference.
        mask: mask latents ``(B, N, 1, h, w)``.
        fps: the first of the ``added_time_ids`` (the model's ``fps`` setting).

    Returns:
        The MSE between the prediction and its goal (the noise, or the velocity for v-prediction),
        one timestep per clip.
    """
    b = target.shape[0]
    noise = torch.randn(target.shape, generator=generator, device=target.device, dtype=target.dtype)
    t = torch.randint(0, scheduler.config.num_train_timesteps, (b,), generator=generator, device=target.device)
    flat_t = t.repeat_interleave(target.shape[1])
    noisy = scheduler.add_noise(target.flatten(0, 1), noise.flatten(0, 1), flat_t).view_as(target)
    if scheduler.config.prediction_type == "v_prediction":
        goal = scheduler.get_velocity(target.flatten(0, 1), noise.flatten(0, 1), flat_t).view_as(target)
    else:
        goal = noise
    pred = denoiser_output(unet, noisy, t, cond, mask, reference_encoder(cond[:, 0]), fps)
    return F.mse_loss(pred.float(), goal.float())


def write_samples(
    pipe: VisAlignerPipeline, cfg: VisAlignerConfig, ep: PairedEpisode, path_stem: str, steps: int, seed: int
) -> None:
    from embodied_gym.video import write_mp4

    real, sim, masks = clip_frames(ep, cfg)
    gen = pipe(real[0], sim, masks, steps, torch.Generator(pipe.device).manual_seed(seed)).frames[0]
    cond = condition_video(real[0], sim, masks)
    save_png(f"{path_stem}.png", sample_grid(real, cond, gen), scale=2)
    write_mp4(f"{path_stem}.mp4", [np.concatenate([r, c, g], axis=1) for r, c, g in zip(real, cond, gen)], fps=4)


def plot_loss(rows: list[dict], path: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for stage in sorted({r["stage"] for r in rows}):
        pts = [(r["step"], r["loss"]) for r in rows if r["stage"] == stage]
        x, y = np.array(pts).T
        ax.plot(x, y, alpha=0.35, label=f"{stage} (per step)")
        k = max(1, len(y) // 20)
        ax.plot(x[k - 1 :], np.convolve(y, np.ones(k) / k, mode="valid"), label=f"{stage} (mean of {k})")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def train_vae(
    pipe: VisAlignerPipeline,
    episodes: list[PairedEpisode],
    tc: VisAlignerTrainConfig,
    accelerator,
    loss_rows: list[dict],
) -> None:
    """Fit the tiny preset's AutoencoderKL (``pipe.vae``, trained in place) on real, sim and
    condition frames, then set its ``scaling_factor`` to 1/std of the latents."""
    frames = np.concatenate([x for ep in episodes for x in (ep.real, condition_video(ep.sim[0], ep.sim, ep.sim_mask))])
    rng = np.random.default_rng(tc.seed)
    vae = pipe.vae.train()
    opt = torch.optim.AdamW(vae.parameters(), lr=tc.vae_lr, weight_decay=0.0)
    vae, opt = accelerator.prepare(vae, opt)
    show = tc.progress and accelerator.is_main_process
    bar = progress_bar(range(tc.vae_steps), progress=show, desc="vae")
    for step in bar:
        x = torch.from_numpy(frames[rng.integers(len(frames), size=tc.vae_batch_size)]).to(accelerator.device)
        x = x.permute(0, 3, 1, 2).float() / 127.5 - 1
        post = accelerator.unwrap_model(vae).encode(x).latent_dist
        rec = accelerator.unwrap_model(vae).decode(post.sample()).sample
        loss = (rec - x).abs().mean() + ((rec - x) ** 2).mean() + 1e-6 * post.kl().mean()
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
        loss_rows.append({"stage": "vae", "step": step, "loss": loss.item()})
        bar.set_postfix(loss=f"{loss_rows[-1]['loss']:.4f}")
        if (step + 1) % max(1, tc.vae_steps // 10) == 0 or step + 1 == tc.vae_steps:
            report(show, f"visaligner vae step {step + 1}/{tc.vae_steps}: loss {loss_rows[-1]['loss']:.4f}")
    pipe.vae.eval().requires_grad_(False)  # the module ``vae`` wraps: trained in place
    pipe.vae.register_to_config(scaling_factor=1.0)
    z = pipe.encode_frames(frames[rng.integers(len(frames), size=min(len(frames), 256))])
    pipe.vae.register_to_config(scaling_factor=float(1.0 / z.float().std()))


@dataclass
class TrainRun:
    """What the denoiser loop of :func:`train` carries from one step to the next (built by :func:`_setup`)."""

    tc: VisAlignerTrainConfig
    cfg: VisAlignerConfig
    out: Path
    accelerator: Any
    episodes: list[PairedEpisode]
    store: CheckpointStore
    pipe: VisAlignerPipeline  # the plain networks: sampled and saved
    unet: Any  # the pipeline's UNet and reference encoder as ``accelerator.prepare`` returns them: trained
    reference_encoder: Any
    opt: Any
    params: list  # the trained parameters (UNet and reference encoder)
    latents: list[EpisodeLatents]
    rng: np.random.Generator  # the clip sampler's
    start_step: int
    loss_rows: list[dict]  # the loss log: VAE steps, then denoiser steps

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process


def init_model_dir(init: str) -> Path:
    """The model folder ``init`` names (``base``: the shipped base model).

    Raises:
        FileNotFoundError: the folder has no ``visaligner_config.json`` (or the base model was not built).
    """
    path = BASE_MODEL_DIR if init == "base" else Path(init)
    if not (path / CONFIG_NAME).exists():
        fix = (
            "build it with `python scripts/make_visaligner_base.py --export` (or reinstall the package)"
            if init == "base"
            else "pass a folder `visaligner train` wrote (OUT/model)"
        )
        raise FileNotFoundError(f"init {init!r}: {path} has no {CONFIG_NAME}; {fix}")
    return path


def model_config(tc: VisAlignerTrainConfig) -> VisAlignerConfig:
    """The model ``tc`` trains: the preset with ``tc.model`` applied, or the ``init`` model's config (with
    only :data:`FINE_TUNE_OVERRIDES` changeable).

    Raises:
        ValueError: ``tc.model`` changes a setting of the ``init`` model that fixes its weights or data.
    """
    if tc.init is None:
        return preset(tc.preset, **tc.model)
    cfg = VisAlignerConfig.load(init_model_dir(tc.init) / CONFIG_NAME)
    if tc.preset != cfg.preset:
        raise ValueError(f"init {tc.init!r} is a {cfg.preset!r} model; drop --preset {tc.preset} to fine-tune it")
    fixed = {k: v for k, v in tc.model.items() if k not in FINE_TUNE_OVERRIDES}
    for key, value in fixed.items():
        if not hasattr(cfg, key):
            raise ValueError(f"model.{key}: VisAlignerConfig has no such setting")
        if VisAlignerConfig(**{**cfg.to_dict(), key: value}).to_dict()[key] != cfg.to_dict()[key]:
            raise ValueError(
                f"model.{key}={value!r}: the init model {tc.init!r} was trained with {key}={getattr(cfg, key)!r} "
                f"and a fine-tune keeps it; drop model.{key}, or train from scratch (no --init)"
            )
    return dataclasses.replace(cfg, **{k: v for k, v in tc.model.items() if k in FINE_TUNE_OVERRIDES})


def train(tc: VisAlignerTrainConfig, episodes: list[PairedEpisode] | None = None) -> VisAlignerPipeline:
    """Train VisAligner (see the module docstring); returns the final pipeline.

    ``episodes``: paired episodes to train on instead of ``tc.dataset``'s (already cut to the model's
    ``crop``; the base model's randomised looks, :mod:`embodied_gym.visaligner.base`).

    The pipeline holds the plain networks for sampling and saving; the loss runs on the networks
    ``accelerator.prepare`` returns (the same parameters), so nothing is swapped in and out.

    Raises:
        ValueError: the checkpoint in ``out`` was trained with another model configuration.
        FileNotFoundError: the checkpoint in ``out`` lacks the ``visaligner_config.json`` it was trained with.
    """
    run = _setup(tc, episodes)
    bar = progress_bar(
        range(run.start_step, tc.steps),
        progress=tc.progress and run.main,
        desc="visaligner",
        initial=run.start_step,
        total=tc.steps,
    )
    with open(run.out / "loss.jsonl", "a") as loss_log:
        for step in bar:
            row = {"stage": "unet", "step": step + 1, "loss": _train_step(run), "time": time.time()}
            run.loss_rows.append(row)
            if run.main:
                loss_log.write(json.dumps(row) + "\n")
                bar.set_postfix(loss=f"{row['loss']:.4f}")
                _samples_and_checkpoint(run, step + 1, loss_log)
    return _finish(run)


def _setup(tc: VisAlignerTrainConfig, episodes: list[PairedEpisode] | None) -> TrainRun:
    """The accelerator, the paired episodes, the pipeline (resumed, the init model, or built with its VAE
    trained), the frozen VAE's latents and the optimizer."""
    if not tc.out or (episodes is None and not tc.dataset):
        raise ValueError("VisAligner training needs a dataset and an output folder (--dataset DIR --out DIR)")
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    out = Path(tc.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model_config(tc)
    accelerator = _accelerator(tc, cfg)
    torch.manual_seed(tc.seed + accelerator.process_index)
    if episodes is None:
        episodes = _paired_episodes(tc, cfg, accelerator)
    if not episodes:
        raise ValueError("VisAligner training got no paired episodes")
    for ep in episodes:  # before any work: a wrong data rate fails now, not at the first clip
        stored_stride(cfg, ep.step_stride)
    store = CheckpointStore(out, unit="step", keep=1)
    pipe, opt_state, start_step, loss_rows = _resume_or_build(tc, cfg, store, accelerator, episodes)
    pipe.to(accelerator.device)
    pipe.vae.eval().requires_grad_(False)
    if cfg.gradient_checkpointing:
        pipe.unet.enable_gradient_checkpointing()
    show = tc.progress and accelerator.is_main_process
    latents = [
        episode_latents(pipe, cfg, ep) for ep in progress_bar(episodes, progress=show, desc="latents", unit="ep")
    ]
    params = list(pipe.unet.parameters()) + list(pipe.reference_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=tc.lr, weight_decay=1e-4)
    if opt_state is not None:
        opt.load_state_dict(torch.load(opt_state, map_location="cpu", weights_only=True))
    pipe.unet.train()
    pipe.reference_encoder.train()
    # the loss runs on what prepare returns; the pipeline keeps the plain modules (same parameters)
    unet_t, ref_t, opt = accelerator.prepare(pipe.unet, pipe.reference_encoder, opt)
    (out / "samples").mkdir(exist_ok=True)
    return TrainRun(
        tc=tc,
        cfg=cfg,
        out=out,
        accelerator=accelerator,
        episodes=episodes,
        store=store,
        pipe=pipe,
        unet=unet_t,
        reference_encoder=ref_t,
        opt=opt,
        params=params,
        latents=latents,
        rng=np.random.default_rng([tc.seed, accelerator.process_index, start_step]),
        start_step=start_step,
        loss_rows=loss_rows,
    )


def _accelerator(tc: VisAlignerTrainConfig, cfg: VisAlignerConfig):
    """accelerate's ``Accelerator`` on ``tc.device`` (mixed precision on a GPU only)."""
    from accelerate import Accelerator

    if tc.device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "VisAligner training: device cuda, but torch sees no GPU (torch.cuda.is_available() is "
            "False); use --device cpu, or a CUDA build of torch on a GPU machine"
        )
    on_cpu = tc.device == "cpu" or not torch.cuda.is_available()
    return Accelerator(cpu=tc.device == "cpu", mixed_precision="no" if on_cpu else cfg.mixed_precision)


def _paired_episodes(tc: VisAlignerTrainConfig, cfg: VisAlignerConfig, accelerator) -> list[PairedEpisode]:
    """The paired episodes (built by the main process, read by the others), cut to ``cfg.crop``."""

    def cached(progress: bool) -> list[PairedEpisode]:
        return paired_episodes_cached(
            require(tc.dataset, "dataset"),
            Path(require(tc.out, "out")) / "paired.npz",
            tc.camera,
            episodes=tc.episodes,
            physics=tc.physics,
            sam_checkpoint=tc.sam_checkpoint,
            progress=progress,
        )

    if accelerator.is_main_process:
        episodes = cached(tc.progress)
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        episodes = cached(False)
    if cfg.crop is not None:  # replayed and masked whole, then cut: the masker sees the whole frame
        episodes = [crop_paired(ep, cfg.crop) for ep in episodes]
    frame_size = tuple(episodes[0].real.shape[1:3])
    if cfg.preset == "tiny" and "image_size" not in tc.model and frame_size != cfg.image_size:
        log.info(
            "dataset frames are %s%s; the model works at %s (frames are resized)",
            frame_size,
            f" (crop {cfg.crop})" if cfg.crop else "",
            cfg.image_size,
        )
    return episodes


def _resume_or_build(tc: VisAlignerTrainConfig, cfg: VisAlignerConfig, store: CheckpointStore, accelerator, episodes):
    """The pipeline of the checkpoint in ``tc.out`` with its optimizer state file, step and loss log; or
    a new pipeline (its VAE trained, or read from ``out/vae``), no optimizer state, step 0."""
    out = Path(require(tc.out, "out"))
    latest = store.latest()
    # out/checkpoints/<step> (one scheme for every trainer); out/checkpoint is the layout before it
    ckpt = latest.path if latest is not None else out / "checkpoint"
    state_path = ckpt / "trainer_state.json"
    if state_path.exists():
        if not (ckpt / CONFIG_NAME).exists():
            raise FileNotFoundError(
                f"{ckpt} has no {CONFIG_NAME} (the model config it was trained with); delete "
                f"{ckpt} to start over or use a new --out"
            )
        if VisAlignerConfig.load(ckpt / CONFIG_NAME).to_dict() != cfg.to_dict():
            raise ValueError(f"{ckpt} was trained with another model config; use a new --out or delete it")
        pipe = VisAlignerPipeline.from_pretrained(ckpt)
        state = json.loads(state_path.read_text())
        log.info("resuming from %s at step %d", ckpt, state["step"])
        return pipe, ckpt / "optimizer.pt", state["step"], state["loss"]
    loss_rows: list[dict] = []
    if tc.init is not None:  # its VAE, UNet and reference encoder; the VAE stays frozen
        path = init_model_dir(tc.init)
        log.info("fine-tuning %s", path)
        pipe = VisAlignerPipeline.from_pretrained(path, dtype=torch.float32).to(accelerator.device)
        pipe.register_to_config(**pipeline_settings(cfg))  # a fine-tune's own sampling steps
        return pipe, None, 0, loss_rows
    pipe = build_pipeline(cfg).to(accelerator.device)
    if cfg.preset == "tiny":
        vae_dir = out / "vae"
        if (vae_dir / "config.json").exists():
            pipe.vae = type(pipe.vae).from_pretrained(vae_dir, local_files_only=True).to(accelerator.device)
        else:
            train_vae(pipe, episodes, tc, accelerator, loss_rows)
            if accelerator.is_main_process:
                with atomic_dir(vae_dir) as d:
                    pipe.vae.save_pretrained(d, safe_serialization=True)
                (out / "vae_loss.json").write_text(json.dumps(loss_rows))
        if (out / "vae_loss.json").exists():
            loss_rows = json.loads((out / "vae_loss.json").read_text())
    return pipe, None, 0, loss_rows


def _train_step(run: TrainRun) -> float:
    """One optimiser step of the diffusion loss on a batch of clips; returns the loss."""
    accelerator, cfg = run.accelerator, run.cfg
    clips = sample_clips(run.latents, cfg, run.tc.batch_size, run.rng)
    tgt, cond, mask = (x.to(accelerator.device) for x in clips)
    with accelerator.autocast():
        loss = diffusion_loss(run.unet, run.reference_encoder, run.pipe.scheduler, tgt, cond, mask, cfg.fps)
    run.opt.zero_grad()
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(run.params, 1.0)
    run.opt.step()
    return loss.item()


def _samples_and_checkpoint(run: TrainRun, done: int, loss_log) -> None:
    """After ``done`` steps (main process): the sample grid every ``sample_every`` steps, the checkpoint
    and the loss plot every ``checkpoint_every`` steps, both at the last step."""
    tc, pipe = run.tc, run.pipe
    last = done == tc.steps
    if done % tc.sample_every == 0 or last:
        pipe.unet.eval()
        pipe.reference_encoder.eval()
        stem = str(run.out / "samples" / f"step_{done:06d}")
        write_samples(pipe, run.cfg, run.episodes[0], stem, tc.sample_steps, tc.seed)
        pipe.unet.train()
        pipe.reference_encoder.train()
    if done % tc.checkpoint_every == 0 or last:
        loss_log.flush()
        _save_checkpoint(run, done)
        plot_loss(run.loss_rows, run.out / "loss.png")
        report(tc.progress, f"visaligner step {done}/{tc.steps}: loss {run.loss_rows[-1]['loss']:.4f}")


def _save_checkpoint(run: TrainRun, step: int) -> None:
    """``out/checkpoints/<step>``: the pipeline, its config, the optimizer and the step with the loss log."""

    def write(d):
        run.pipe.save_pretrained(d)
        run.cfg.save(d / CONFIG_NAME)
        torch.save(run.opt.state_dict(), d / "optimizer.pt")
        (d / "trainer_state.json").write_text(json.dumps({"step": step, "loss": run.loss_rows}))

    run.store.save(step, write)


def _finish(run: TrainRun) -> VisAlignerPipeline:
    """Write ``out/model`` (the pipeline with its reference image and config) and the loss plot."""
    run.accelerator.wait_for_everyone()
    pipe = run.pipe
    pipe.unet.eval()
    pipe.reference_encoder.eval()
    pipe.reference_image = run.episodes[0].real[0]  # the default reference of `render` (reference.png)
    if run.main:
        with atomic_dir(run.out / "model") as d:
            pipe.save_pretrained(d)
            run.cfg.save(d / CONFIG_NAME)
        if run.loss_rows:
            plot_loss(run.loss_rows, run.out / "loss.png")
    return pipe
