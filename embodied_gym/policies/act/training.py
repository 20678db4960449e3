"""Train LeRobot's ``ACTPolicy`` on an embodied-gym LeRobotDataset, offline, on a CPU or a GPU.

One readable loop: decode the dataset once (:mod:`.data`), build LeRobot's policy and processors
(:mod:`.modeling`), optimise with AdamW and LeRobot's gradient clipping, log, and checkpoint
atomically (:mod:`.checkpoints`) so ``--resume`` continues bit for bit. Layout of ``out``::

    out/checkpoints/<step>/...    the policy and its training state (see .checkpoints)
    out/train_log.jsonl           loss per logged step
    out/loss.png                  its plot
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_gym import atomic
from embodied_gym.checkpoints import CheckpointStore
from embodied_gym.configs import require
from embodied_gym.data import features as F
from embodied_gym.data.reader import open_dataset
from embodied_gym.policies.act.checkpoints import load_training_state, save_checkpoint
from embodied_gym.policies.act.configuration import ACTTrainConfig
from embodied_gym.policies.act.data import load_training_frames, select_cameras
from embodied_gym.policies.act.modeling import make_act_policy
from embodied_gym.progress import progress_bar, report
from embodied_gym.sim.robot import GRIPPER_INDICES

#: 1 on the 12 arm joints of observation.state, 0 on the 2 grippers (``state_noise`` perturbs the arms only).
ARM_JOINT_MASK = torch.ones(14).index_fill_(0, torch.as_tensor(GRIPPER_INDICES), 0.0)


# ----------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    out: str
    checkpoint: str
    steps: int
    final_loss: float
    train_time_s: float  # this run's optimisation time, decoding excluded
    decode_time_s: float


@dataclass
class ACTRun:
    """What the ACT training loop carries from one step to the next (built by :func:`_setup`)."""

    cfg: ACTTrainConfig
    preset: Any  # the resolved preset: steps, batch size, learning-rate schedule
    out: Path
    store: CheckpointStore
    frames: Any  # the decoded training frames
    policy: Any
    pre: Any
    post: Any
    optimizer: torch.optim.Optimizer
    generator: torch.Generator  # the batch sampler's
    meta: dict  # embodied_gym_policy.json of every checkpoint
    step: int  # optimiser steps done
    ckpt: Path | None  # the last checkpoint written (or resumed from)
    decode_time: float
    running: list[float] = field(default_factory=list)  # batch losses since the last logged step
    loss_value: float = float("nan")  # the last batch loss

    @property
    def log_path(self) -> Path:
        return self.out / "train_log.jsonl"


def train_act(cfg: ACTTrainConfig) -> TrainResult:
    """Train ACT per ``cfg``; resumes from ``cfg.out`` when ``cfg.resume``.

    Args:
        cfg: the run (dataset, output folder, preset and overrides; see :class:`ACTTrainConfig`).

    Returns:
        The output folder, the last checkpoint's ``pretrained_model`` folder, the steps reached,
        the final batch loss and the optimisation and decoding times.

    Raises:
        FileExistsError: ``cfg.out`` holds checkpoints and ``cfg.resume`` is off.
        ValueError: a missing dataset or output folder, an unknown preset or override, a camera or
            episode the dataset does not have (the message names it).
    """
    run = _setup(cfg)
    steps = run.preset.steps
    run.policy.train()
    t_train = time.time()
    bar = progress_bar(total=steps, initial=run.step, progress=cfg.progress, desc="train act", unit="step")
    while run.step < steps:
        parts = _train_step(run)
        bar.update(1)
        if run.step % cfg.log_every == 0 or run.step == steps:
            row = _log_step(run, parts, time.time() - t_train)
            bar.set_postfix(loss=f"{row['loss']:.3f}")
            report(cfg.progress, f"train act step {run.step}/{steps}: loss {row['loss']:.4f}")
        if run.step % cfg.save_every == 0 or run.step == steps:
            run.ckpt = save_checkpoint(
                run.store, run.step, run.policy, run.pre, run.post, run.optimizer, run.generator, run.meta
            )
    bar.close()
    train_time = time.time() - t_train
    plot_training_log(run.log_path, run.out / "loss.png")
    if run.ckpt is None:
        raise RuntimeError(f"no ACT checkpoint was written to or resumed from {run.out}")
    checkpoint = str(run.ckpt / "pretrained_model")
    return TrainResult(str(run.out), checkpoint, run.step, run.loss_value, train_time, run.decode_time)


def _setup(cfg: ACTTrainConfig) -> ACTRun:
    """Open the dataset, decode its frames, build the policy and the optimizer (from the last checkpoint
    when resuming) and cut the log back to that checkpoint."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    preset = cfg.resolved_preset()
    out = Path(require(cfg.out, "out"))
    store = CheckpointStore(out, unit="step")
    last = store.latest()
    if last is not None and not cfg.resume:
        raise FileExistsError(
            f"{out} already holds ACT checkpoints; pass --resume to continue training, or choose another --out"
        )
    ds = open_dataset(require(cfg.dataset, "dataset"))
    episodes = ds.check_episodes(cfg.episodes) if cfg.episodes is not None else None
    if cfg.successful_only:
        episodes = _successful_episodes(ds, episodes)
    use_env = _use_env_state(ds, cfg)
    use_images = cfg.images if cfg.images is not None else bool(ds.cameras) or not use_env
    cameras = select_cameras(ds, cfg.cameras) if use_images else []
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    t0 = time.time()
    frames = load_training_frames(
        ds, episodes, cameras, preset.chunk_size, preset.image_size, cfg.progress, env_state=use_env
    )
    decode_time = time.time() - t0
    meta = _policy_meta(cfg, preset, ds, episodes, cameras, frames, use_env)
    policy, pre, post = make_act_policy(
        ds, cameras, preset, cfg.temporal_ensemble_coeff, cfg.device, cfg.backbone_weights, env_state=use_env
    )
    optimizer = make_optimizer(policy.get_optim_params(), preset.lr, 1e-4, cfg.device)
    step = 0
    if last is not None:
        optimizer = load_training_state(last.path, policy, optimizer, generator)
        step = last.counter
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    if log_path.exists():  # drop rows logged after the checkpoint we resume from (or all, when starting)
        kept = [line for line in log_path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
        atomic.write_text(log_path, "".join(line + "\n" for line in kept))
    ckpt = last.path if last is not None else None
    return ACTRun(
        cfg, preset, out, store, frames, policy, pre, post, optimizer, generator, meta, step, ckpt, decode_time
    )


def _policy_meta(cfg: ACTTrainConfig, preset, ds, episodes, cameras, frames, use_env: bool) -> dict:
    """``embodied_gym_policy.json``: what the policy reads (cameras and their sizes, the pose estimate)
    and how it was trained."""
    recorded = list(ds.image_size(cameras[0])) if cameras else None
    trained = list(frames.images[next(iter(frames.images))].shape[-2:]) if frames.images else None
    meta = {
        "kind": "act",
        "cameras": cameras,
        "recorded_image_size": recorded,
        "image_size": trained,
        "control_mode": "joint_pos",
        "dataset": str(cfg.dataset),
        "task": ds.task,
        "preset": cfg.preset,
        "settings": asdict(preset),
        "temporal_ensemble_coeff": cfg.temporal_ensemble_coeff,
        "state_noise": cfg.state_noise,  # TPO fine-tunes with the same noise (TPOConfig.state_noise)
    }
    if episodes is not None:
        meta["episodes"] = episodes  # a subset: --episodes or --successful-only
    if use_env:
        meta["env_state"] = list(ds.features[F.ENV_STATE].get("names") or [])
        meta["pose_estimator"] = _pose_estimator_of(ds, episodes)
    fps = _camera_fps_of(ds, episodes)
    if fps is not None:
        meta["camera_fps"] = fps
    return meta


def _train_step(run: ACTRun) -> dict:
    """One optimiser step on a random batch; returns ACT's loss terms."""
    preset = run.preset
    for group in run.optimizer.param_groups:  # the schedule is a function of the step, so resuming needs no state
        group["lr"] = preset.lr_at(run.step)
    idx = torch.randint(len(run.frames), (preset.batch_size,), generator=run.generator)
    raw = run.frames.batch(idx)
    raw[F.STATE] = perturb_arm_state(raw[F.STATE], run.cfg.state_noise, run.generator)
    batch = run.pre(raw)
    loss, parts = run.policy.forward(batch)
    run.optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.policy.parameters(), 10.0)  # LeRobot's default grad_clip_norm
    run.optimizer.step()
    run.step += 1
    run.loss_value = float(loss.item())
    run.running.append(run.loss_value)
    return parts


def perturb_arm_state(state: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """``state`` (B, 14) with N(0, ``std``) noise on its 12 arm joints (the grippers as they are);
    ``std`` 0 returns it unchanged. Drawn from the sampler's generator, so a resumed run continues
    the same noise stream."""
    if not std:
        return state
    return state + std * ARM_JOINT_MASK * torch.randn(state.shape, generator=generator)


def _log_step(run: ACTRun, parts: dict, elapsed: float) -> dict:
    """Append the mean loss since the last logged step (and the last batch's terms) to the log."""
    row = {
        "step": run.step,
        "loss": float(np.mean(run.running)),
        **{k: float(v) for k, v in parts.items()},
        "lr": run.preset.lr_at(run.step - 1),
        "time_s": elapsed,
    }
    run.running = []
    with open(run.log_path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def make_optimizer(params, lr: float, weight_decay: float, device: str) -> torch.optim.AdamW:
    """AdamW, with PyTorch's fused kernel on CPU and CUDA: the same update in one kernel instead of a
    loop over the parameter tensors, which matters for the many small tensors of a state-only ACT
    (BENCHMARKS.md, "The demo", the run where AdamW runs the fused kernel)."""
    fused = torch.device(device).type in ("cpu", "cuda")
    if fused:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def _use_env_state(ds, cfg: ACTTrainConfig) -> bool:
    present = F.ENV_STATE in ds.features
    if cfg.env_state and not present:
        raise ValueError(
            f"--env-state: dataset {ds.root} has no {F.ENV_STATE}; record it with "
            f"`embodied-gym record --pose-estimator DIR`, or drop --env-state"
        )
    return present if cfg.env_state is None else bool(cfg.env_state)


def _successful_episodes(ds, episodes: list[int] | None) -> list[int]:
    """The episodes (all by default) whose sidecar row says ``success``.

    Raises:
        ValueError: the dataset has no sidecar rows to tell (a dataset recorded elsewhere), or none
            of the episodes succeeded.
    """
    chosen = ds.check_episodes(episodes)
    if not ds.rows():
        raise ValueError(
            f"dataset {ds.root} has no per-episode success marks (no sidecar rows from `embodied-gym "
            f"record`); drop --successful-only or pass --episodes"
        )
    kept = [e for e in chosen if ds.row(e).get("success")]
    if not kept:
        raise ValueError(
            f"dataset {ds.root}: none of the {len(chosen)} training episodes succeeded; drop "
            f"--successful-only or record better demonstrations"
        )
    return kept


def _pose_estimator_of(ds, episodes) -> dict | None:
    """The pose estimator the dataset's environment state came from (its sidecar rows name it).

    Raises:
        ValueError: the training episodes were recorded with different estimators (their
            observations would not be one observation space).
    """
    rows = [r for r in ds.rows() if episodes is None or r["episode_index"] in set(episodes)]
    seen = {json.dumps(r.get("pose_estimator"), sort_keys=True) for r in rows}
    if len(seen) > 1:
        raise ValueError(
            f"dataset {ds.root}: its episodes were recorded with different pose estimators "
            f"({sorted(seen)}); train on episodes of one (--episodes)"
        )
    return json.loads(seen.pop()) if seen else None


def _camera_fps_of(ds, episodes) -> float | None:
    """The camera rate the dataset was recorded at (its sidecar rows' ``camera_fps``; None: a frame
    per control step), so evaluation runs the policy's env at the same rate.

    Raises:
        ValueError: the training episodes were recorded at different camera rates.
    """
    rows = [r for r in ds.rows() if episodes is None or r["episode_index"] in set(episodes)]
    seen = {r.get("camera_fps") for r in rows}
    if len(seen) > 1:
        raise ValueError(
            f"dataset {ds.root}: its episodes were recorded at different camera rates "
            f"({sorted(seen, key=str)} fps); train on episodes of one (--episodes)"
        )
    return seen.pop() if seen else None


def plot_training_log(log_path: Path, png: Path) -> None:
    if not log_path.exists():
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="loss")
    if "l1_loss" in rows[0]:
        ax.plot([r["step"] for r in rows], [r["l1_loss"] for r in rows], label="L1 (last batch)", alpha=0.6)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("ACT training")
    fig.tight_layout()
    atomic.save_figure(fig, png)


__all__ = ["TrainResult", "plot_training_log", "train_act"]
