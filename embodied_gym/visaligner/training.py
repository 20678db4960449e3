"""Training VisAligner on paired real/sim episodes (works plainly and under ``accelerate launch``).

Stages, all in ``out/``:

1. ``paired.npz``: paired episodes (sim replay, masks), built once and reused.
2. ``vae/`` (tiny preset only): the AutoencoderKL trained on real and sim frames (L1 + MSE + a
   small KL term); its ``scaling_factor`` is set to 1/std of the latents. The svd preset keeps
   SVD's own VAE frozen.
3. The denoiser (UNet + reference encoder) on clips of ``num_frames`` frames with the diffusion
   loss of :func:`diffusion_loss` (here, on the networks themselves; the pipeline is inference
   only); the VAE is frozen and every frame's latent is computed once up front. ``checkpoint/`` is
   rewritten atomically every ``checkpoint_every`` steps (the pipeline folder, ``visaligner_config.json``,
   optimizer, step, loss log) and a rerun resumes from it.
   ``samples/step_XXXXXX.png`` / ``.mp4``: ground truth | condition | generated, every
   ``sample_every`` steps. ``loss.jsonl`` and ``loss.png``: the loss log.
4. ``model/``: the final :class:`~embodied_gym.visaligner.pipeline.VisAlignerPipeline` (diffusers'
   ``save_pretrained`` layout, with ``reference.png``) and ``visaligner_config.json``, the
   :class:`~embodied_gym.visaligner.presets.VisAlignerConfig` it was trained with.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from embodied_gym.atomic import atomic_dir, save_figure
from embodied_gym.checkpoints import CheckpointStore
from embodied_gym.configs import setting
from embodied_gym.visaligner.conditioning import condition_video
from embodied_gym.visaligner.model import denoiser_output
from embodied_gym.visaligner.paired import PairedEpisode, crop_paired, paired_episodes_cached
from embodied_gym.visaligner.pipeline import CONFIG_NAME, VisAlignerPipeline, build_pipeline, save_png
from embodied_gym.visaligner.presets import VisAlignerConfig, preset

__all__ = ["TrainConfig", "diffusion_loss", "sample_clips", "save_png", "train", "train_vae"]

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
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
    vae_steps: int = setting(400, help="VAE fine-tuning steps")
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


def episode_latents(pipe: VisAlignerPipeline, cfg: VisAlignerConfig, ep: PairedEpisode) -> EpisodeLatents:
    masks = (ep.real_mask if cfg.mask_source == "real" else ep.sim_mask) if cfg.use_masks else None
    # Condition frames are encoded one by one, so frame 0 being the reference does not matter
    # here: the clip sampler puts the clip's reference (a real latent) in front.
    cond_frames = condition_video(ep.sim[0], ep.sim, masks)
    return EpisodeLatents(
        pipe.encode_frames(ep.real).cpu(),
        pipe.encode_frames(cond_frames).cpu(),
        pipe.mask_latents(masks, len(ep.sim)).cpu(),
    )


def sample_clips(latents: list[EpisodeLatents], cfg: VisAlignerConfig, batch: int, rng: np.random.Generator):
    """A batch of (target, condition, mask) clips ``(B, N, ...)``; condition frame 0 = the real
    reference (the clip's first real frame)."""
    tgt, cond, mask = [], [], []
    span = (cfg.num_frames - 1) * cfg.frame_stride
    for _ in range(batch):
        ep = latents[rng.integers(len(latents))]
        T = len(ep.real)
        stride = cfg.frame_stride if span < T else max(1, (T - 1) // (cfg.num_frames - 1))
        s = int(rng.integers(0, max(1, T - (cfg.num_frames - 1) * stride)))
        idx = s + stride * np.arange(cfg.num_frames)
        idx = np.minimum(idx, T - 1)
        c = ep.cond[idx].clone()
        c[0] = ep.real[idx[0]]
        tgt.append(ep.real[idx])
        cond.append(c)
        mask.append(ep.mask[idx])
    return torch.stack(tgt), torch.stack(cond), torch.stack(mask)


def clip_frames(ep: PairedEpisode, cfg: VisAlignerConfig, start: int = 0):
    """(real, sim, masks) frames of a clip of ``ep`` (as the sampler picks them), for sample grids."""
    idx = np.minimum(start + cfg.frame_stride * np.arange(cfg.num_frames), len(ep.real) - 1)
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
    pipe: VisAlignerPipeline, episodes: list[PairedEpisode], tc: TrainConfig, accelerator, loss_rows: list[dict]
) -> None:
    """Fit the tiny preset's AutoencoderKL (``pipe.vae``, trained in place) on real, sim and
    condition frames, then set its ``scaling_factor`` to 1/std of the latents."""
    from tqdm import tqdm

    frames = np.concatenate([x for ep in episodes for x in (ep.real, condition_video(ep.sim[0], ep.sim, ep.sim_mask))])
    rng = np.random.default_rng(tc.seed)
    vae = pipe.vae.train()
    opt = torch.optim.AdamW(vae.parameters(), lr=tc.vae_lr, weight_decay=0.0)
    vae, opt = accelerator.prepare(vae, opt)
    bar = tqdm(range(tc.vae_steps), desc="vae", disable=not (tc.progress and accelerator.is_main_process))
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
    pipe.vae.eval().requires_grad_(False)  # the module ``vae`` wraps: trained in place
    pipe.vae.register_to_config(scaling_factor=1.0)
    z = pipe.encode_frames(frames[rng.integers(len(frames), size=min(len(frames), 256))])
    pipe.vae.register_to_config(scaling_factor=float(1.0 / z.float().std()))


def train(tc: TrainConfig) -> VisAlignerPipeline:
    """Train VisAligner (see the module docstring); returns the final pipeline.

    The pipeline holds the plain networks for sampling and saving; the loss runs on the networks
    ``accelerator.prepare`` returns (the same parameters), so nothing is swapped in and out.

    Raises:
        ValueError: the checkpoint in ``out`` was trained with another model configuration.
        FileNotFoundError: the checkpoint in ``out`` lacks the ``visaligner_config.json`` it was trained with.
    """
    from accelerate import Accelerator
    from tqdm import tqdm

    if not tc.dataset or not tc.out:
        raise ValueError("VisAligner training needs a dataset and an output folder (--dataset DIR --out DIR)")
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)

    out = Path(tc.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = preset(tc.preset, **tc.model)
    if tc.device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "VisAligner training: device cuda, but torch sees no GPU (torch.cuda.is_available() is "
            "False); use --device cpu, or a CUDA build of torch on a GPU machine"
        )
    on_cpu = tc.device == "cpu" or not torch.cuda.is_available()
    accelerator = Accelerator(cpu=tc.device == "cpu", mixed_precision="no" if on_cpu else cfg.mixed_precision)
    torch.manual_seed(tc.seed + accelerator.process_index)

    if accelerator.is_main_process:
        episodes = paired_episodes_cached(
            tc.dataset,
            out / "paired.npz",
            tc.camera,
            episodes=tc.episodes,
            physics=tc.physics,
            sam_checkpoint=tc.sam_checkpoint,
            progress=tc.progress,
        )
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        episodes = paired_episodes_cached(
            tc.dataset,
            out / "paired.npz",
            tc.camera,
            episodes=tc.episodes,
            physics=tc.physics,
            sam_checkpoint=tc.sam_checkpoint,
            progress=False,
        )
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

    store = CheckpointStore(out, unit="step", keep=1)
    latest = store.latest()
    # out/checkpoints/<step> (one scheme for every trainer); out/checkpoint is the layout before it
    ckpt = latest.path if latest is not None else out / "checkpoint"
    state_path = ckpt / "trainer_state.json"
    loss_rows: list[dict] = []
    start_step = 0
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
        start_step, loss_rows = state["step"], state["loss"]
        log.info("resuming from %s at step %d", ckpt, start_step)
    else:
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
    pipe.to(accelerator.device)
    vae, unet, ref, scheduler = pipe.vae, pipe.unet, pipe.reference_encoder, pipe.scheduler
    vae.eval().requires_grad_(False)
    if cfg.gradient_checkpointing:
        unet.enable_gradient_checkpointing()

    latents = [
        episode_latents(pipe, cfg, ep)
        for ep in tqdm(episodes, desc="latents", unit="ep", disable=not (tc.progress and accelerator.is_main_process))
    ]
    params = list(unet.parameters()) + list(ref.parameters())
    opt = torch.optim.AdamW(params, lr=tc.lr, weight_decay=1e-4)
    if state_path.exists():
        opt.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True))
    unet.train()
    ref.train()
    # the loss runs on what prepare returns; the pipeline keeps the plain modules (same parameters)
    unet_t, ref_t, opt = accelerator.prepare(unet, ref, opt)
    rng = np.random.default_rng([tc.seed, accelerator.process_index, start_step])
    samples = out / "samples"
    samples.mkdir(exist_ok=True)

    def save_checkpoint(step):
        def write(d):
            pipe.save_pretrained(d)
            cfg.save(d / CONFIG_NAME)
            torch.save(opt.state_dict(), d / "optimizer.pt")
            (d / "trainer_state.json").write_text(json.dumps({"step": step, "loss": loss_rows}))

        store.save(step, write)

    bar = tqdm(
        range(start_step, tc.steps),
        desc="visaligner",
        initial=start_step,
        total=tc.steps,
        disable=not (tc.progress and accelerator.is_main_process),
    )
    with open(out / "loss.jsonl", "a") as loss_log:
        for step in bar:
            tgt, cond, mask = (x.to(accelerator.device) for x in sample_clips(latents, cfg, tc.batch_size, rng))
            with accelerator.autocast():
                loss = diffusion_loss(unet_t, ref_t, scheduler, tgt, cond, mask, cfg.fps)
            opt.zero_grad()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(params, 1.0)
            opt.step()
            loss_value = loss.item()
            row = {"stage": "unet", "step": step + 1, "loss": loss_value, "time": time.time()}
            loss_rows.append(row)
            if accelerator.is_main_process:
                loss_log.write(json.dumps(row) + "\n")
                bar.set_postfix(loss=f"{loss_value:.4f}")
                done = step + 1
                if done % tc.sample_every == 0 or done == tc.steps:
                    unet.eval()
                    ref.eval()
                    write_samples(pipe, cfg, episodes[0], str(samples / f"step_{done:06d}"), tc.sample_steps, tc.seed)
                    unet.train()
                    ref.train()
                if done % tc.checkpoint_every == 0 or done == tc.steps:
                    loss_log.flush()
                    save_checkpoint(done)
                    plot_loss(loss_rows, out / "loss.png")
    accelerator.wait_for_everyone()
    unet.eval()
    ref.eval()
    pipe.reference_image = episodes[0].real[0]  # the default reference of `render` (reference.png)
    if accelerator.is_main_process:

        def write_model(d):
            pipe.save_pretrained(d)
            cfg.save(d / CONFIG_NAME)

        with atomic_dir(out / "model") as d:
            write_model(d)
        if loss_rows:
            plot_loss(loss_rows, out / "loss.png")
    return pipe
