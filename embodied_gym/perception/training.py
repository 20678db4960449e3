"""Training a pose estimator on frame folders: one readable loop (CleanRL style).

``train_pose_estimator(PoseTrainConfig(data=[...], out=...))`` (``embodied-gym perception train --data DIR
[DIR ...] --out OUT``; the model's input is the frames', a :class:`PoseEstimatorConfig` as the second argument
sets the rest of the model) splits the frames by episode into train and validation sets (consecutive frames of one episode are nearly
identical, so a frame-level split would flatter the validation error), trains with AdamW and a
cosine learning-rate decay on the smooth-L1 loss of the normalised targets plus two keypoint losses
(keypoint ``k``'s expected position onto object ``k``'s projection in the image, :func:`keypoint_positions`,
and keypoint ``k``'s map onto a Gaussian there, :func:`keypoint_map_loss`), validates every
``eval_every`` steps and writes::

    <out>/checkpoints/<step>/   model (config.json, model.safetensors), optimizer.safetensors,
                                optimizer.json, train_state.json  (embodied_gym.checkpoints)
    <out>/model/                the final estimator (PoseEstimator.from_pretrained reads it)
    <out>/metrics.json          loss history and the final validation pose errors
    <out>/loss.png              the loss curves

``resume=True`` continues from the newest checkpoint with the same batches a run without the
interruption would have drawn (each step's batch is drawn from ``(seed, step)``). Photometric
augmentation (brightness, per-channel gain, offset, noise; never a shift, which would change what
position a pixel means) is on by default.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from embodied_gym.atomic import atomic_path, write_json
from embodied_gym.checkpoints import CheckpointStore
from embodied_gym.configs import setting
from embodied_gym.perception.configuration import CONFIG_NAME, PoseEstimatorConfig
from embodied_gym.perception.data import estimator_config_of_frames, load_frames
from embodied_gym.perception.evaluate import errors_from_estimates, predict_inputs
from embodied_gym.perception.modeling import PoseEstimator
from embodied_gym.progress import progress_bar, report


@dataclass
class PoseTrainConfig:
    """Settings of :func:`train_pose_estimator`."""

    data: list[str] = setting(
        default_factory=list,
        required=True,
        metavar="DIR",
        help="frame folders to train on together (perception frames' output)",
    )
    out: str = setting(
        "outputs/perception", metavar="DIR", help="output folder (checkpoints, model, metrics, loss.png)"
    )
    steps: int = setting(1500, help="optimisation steps")
    batch_size: int = setting(32, help="frames per step")
    lr: float = setting(2e-3, help="peak learning rate (cosine decay to 5 %% of it)")
    weight_decay: float = setting(1e-4, help="AdamW weight decay")
    val_fraction: float = setting(0.1, help="fraction of the episodes held out for validation")
    augment: bool = setting(True, help="photometric augmentation of the training frames")
    keypoint_weight: float = setting(
        1.0,
        help="weight of the keypoint loss: keypoint k is pulled onto object k's "
        "position in the image (0: off; fixed cameras only)",
    )
    heatmap_weight: float = setting(
        0.1,
        help="weight of the keypoint map loss: the KL divergence from a Gaussian at object k's position "
        "in the image to keypoint k's softmax map, which makes the keypoint look at the object rather "
        "than average distant places into the right mean (0: off; fixed cameras only)",
    )
    heatmap_sigma: float = setting(1.0, help="the keypoint map loss's Gaussian width, in map cells (1/8 of the input)")
    eval_every: int = setting(250, help="validate every this many steps")
    save_every: int = setting(500, help="checkpoint every this many steps")
    seed: int = setting(0, help="seed of the split, the initialisation and the batches")
    threads: int = setting(1, help="torch CPU threads while training (1 is fastest on a busy 2-core machine)")
    device: str = setting("cpu", help="torch device")
    resume: bool = setting(False, help="continue from the newest checkpoint in out")
    progress: bool = setting(True, help="show a progress bar (on a terminal; one line per evaluation elsewhere)")


@dataclass
class PoseTrainResult:
    model: PoseEstimator
    history: dict = field(default_factory=dict)
    val_errors: dict = field(default_factory=dict)
    out: Path | None = None


def split_episodes(episode: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices (train, val), whole episodes on each side; val is empty with one episode."""
    ids = np.unique(episode)
    n_val = min(len(ids) - 1, max(1 if val_fraction > 0 else 0, round(val_fraction * len(ids))))
    val_ids = np.random.default_rng(seed).permutation(ids)[:n_val]
    is_val = np.isin(episode, val_ids)
    return np.nonzero(~is_val)[0], np.nonzero(is_val)[0]


def keypoint_positions(estimator: PoseEstimatorConfig, poses: np.ndarray) -> np.ndarray:
    """(N, n_objects, 2) targets of the keypoint loss: each object's position (its pose's origin)
    projected by the estimator's nominal camera into the network input, as (x, y) in [-1, 1] (the
    grid of :class:`~embodied_gym.perception.modeling.SpatialSoftArgmax`; outside the crop: beyond 1).

    Raises:
        ValueError: the estimator reads a wrist camera (which moves: no fixed projection), or has
            fewer keypoints than objects (set ``PoseTrainConfig.keypoint_weight=0`` and ``heatmap_weight=0``).
    """
    from embodied_gym.sim.scene import project_to_pixels

    n = poses.shape[1]
    if estimator.keypoints < n:
        raise ValueError(
            f"the keypoint loss needs a keypoint per object: {estimator.keypoints} keypoints for {n} "
            f"objects; raise PoseEstimatorConfig.keypoints or set keypoint_weight=0 and heatmap_weight=0"
        )
    try:
        px = project_to_pixels(estimator.camera, poses[..., :3], estimator.frame_size)
    except ValueError as e:
        raise ValueError(
            f"{e}: the keypoint losses need a fixed camera; set PoseTrainConfig.keypoint_weight=0 and heatmap_weight=0"
        ) from None
    top, left, bottom, right = estimator.crop_box(estimator.frame_size)
    x = (px[..., 0] - left) / (right - left) * 2 - 1
    y = (px[..., 1] - top) / (bottom - top) * 2 - 1
    return np.stack([x, y], axis=-1).astype(np.float32)


def keypoint_map_loss(logits: torch.Tensor, positions: torch.Tensor, sigma: float) -> torch.Tensor:
    """Mean KL divergence from a Gaussian of width ``sigma`` (map cells) at each object's image position
    to its keypoint's softmax over the map.

    ``logits``: (B, K, h, w) keypoint maps (K >= n); ``positions``: (B, n, 2) the objects' (x, y) in
    [-1, 1] over the map (:func:`keypoint_positions`), keypoint ``k`` for object ``k``. Objects outside
    the input do not count. The coordinate loss alone is met as well by a map spread over distant
    places whose mean lands near an object that barely moves (the pen cup's, 2 cells of range); this
    loss is smallest only with the map's mass on the object.
    """
    b, n = positions.shape[:2]
    h, w = logits.shape[-2:]
    xs = torch.linspace(-1, 1, w, device=logits.device).view(1, 1, 1, w)
    ys = torch.linspace(-1, 1, h, device=logits.device).view(1, 1, h, 1)
    dx = (xs - positions[..., 0].view(b, n, 1, 1)) * (w - 1) / 2
    dy = (ys - positions[..., 1].view(b, n, 1, 1)) * (h - 1) / 2
    target = torch.softmax((-(dx**2 + dy**2) / (2 * sigma**2)).reshape(b, n, -1), dim=-1)
    log_p = torch.log_softmax(logits[:, :n].reshape(b, n, -1), dim=-1)
    kl = (target * (target.clamp_min(1e-12).log() - log_p)).sum(-1)
    inside = (positions.abs() <= 1).all(-1).float()
    return (kl * inside).sum() / inside.sum().clamp_min(1.0)


def augment_batch(x: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """Photometric jitter of a (B, 3, H, W) batch in [0, 1]: blur (half the batches), gain,
    per-channel gain, offset, noise."""
    b = x.shape[0]
    if rng.random() < 0.5:
        sigma = rng.uniform(0.3, 1.2)
        k = torch.exp(-(torch.arange(-2, 3, dtype=torch.float32) ** 2) / (2 * sigma**2))
        k = (k / k.sum()).view(1, 1, 1, 5).repeat(3, 1, 1, 1)
        x = F.conv2d(F.pad(x, (2, 2, 0, 0), mode="replicate"), k, groups=3)
        x = F.conv2d(F.pad(x, (0, 0, 2, 2), mode="replicate"), k.transpose(2, 3), groups=3)
    gain = torch.from_numpy(rng.uniform(0.8, 1.2, (b, 1, 1, 1)) * rng.uniform(0.92, 1.08, (b, 3, 1, 1))).float()
    offset = torch.from_numpy(rng.uniform(-0.06, 0.06, (b, 1, 1, 1))).float()
    noise_scale = torch.from_numpy(rng.uniform(0.0, 0.03, (b, 1, 1, 1))).float()
    noise = torch.from_numpy(rng.standard_normal(x.shape, dtype=np.float32))
    return (x * gain + offset + noise_scale * noise).clamp_(0.0, 1.0)


def _save_optimizer(opt: torch.optim.Optimizer, folder: Path) -> None:
    from safetensors.torch import save_file

    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, state in sd["state"].items():
        for k, v in state.items():
            if torch.is_tensor(v):
                tensors[f"{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    save_file(tensors, str(folder / "optimizer.safetensors"))
    write_json(folder / "optimizer.json", {"param_groups": sd["param_groups"], "scalars": scalars})


def _load_optimizer(opt: torch.optim.Optimizer, folder: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "optimizer.safetensors"))
    meta = json.loads((folder / "optimizer.json").read_text())
    state: dict[int, dict] = {}
    for key, v in list(tensors.items()) + list(meta["scalars"].items()):
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in meta["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


def _plot(history: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history["train_step"], history["train_loss"], label="train", lw=1)
    if history["val_step"]:
        ax.plot(history["val_step"], history["val_loss"], "o-", label="validation")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("smooth-L1 loss (normalised targets)")
    ax.set_title("pose estimator training")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


@dataclass
class PoseRun:
    """What the pose estimator's training loop carries from one step to the next."""

    cfg: PoseTrainConfig
    estimator: PoseEstimatorConfig
    out: Path
    store: CheckpointStore
    frames: Any  # the loaded frames (inputs, poses, episodes)
    targets: np.ndarray  # normalised targets per frame
    keypoint_targets: torch.Tensor | None  # the objects' image positions per frame (with the keypoint loss)
    train_idx: np.ndarray
    val_idx: np.ndarray
    model: PoseEstimator | None = None
    opt: torch.optim.Optimizer | None = None
    sched: Any = None
    history: dict = field(default_factory=lambda: {"train_step": [], "train_loss": [], "val_step": [], "val_loss": []})
    start: int = 0  # steps done (the checkpoint resumed from)


def train_pose_estimator(cfg: PoseTrainConfig, estimator: PoseEstimatorConfig | None = None) -> PoseTrainResult:
    """Train a :class:`PoseEstimator` on ``cfg.data`` (see the module docstring).

    ``estimator`` defines the model (default: the input of the first frame folder, from its
    ``frames.json``, the model's other settings at their defaults); on resume the checkpoint's config
    is used and must agree.

    Raises:
        ValueError: no frame folders; ``cfg.out`` holds checkpoints and ``cfg.resume`` is off (they
            would be overwritten).
    """
    run, last = _load_data(cfg, estimator)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, cfg.threads))
    try:
        _build_model(run, last)
        run.model.train()
        bar = progress_bar(
            range(run.start, cfg.steps),
            progress=cfg.progress,
            desc="pose estimator",
            initial=run.start,
            total=cfg.steps,
        )
        for step in bar:
            loss = _train_step(run, step)
            done = step + 1
            if done % cfg.eval_every == 0 or done == cfg.steps:
                vloss, _ = _validate(run)
                run.history["val_step"].append(done)
                run.history["val_loss"].append(vloss)
                run.model.train()
                bar.set_postfix(loss=f"{loss:.4f}", val=f"{vloss:.4f}")
                report(cfg.progress, f"pose estimator step {done}/{cfg.steps}: loss {loss:.4f}, val {vloss:.4f}")
            if done % cfg.save_every == 0 or done == cfg.steps:
                _checkpoint(run, done)
        run.model.eval()
        _, val_errors = _validate(run)
    finally:
        torch.set_num_threads(threads)
    return _finish(run, val_errors)


def _load_data(cfg: PoseTrainConfig, estimator: PoseEstimatorConfig | None):
    """Check the output folder, settle the model config (the checkpoint's when resuming) and load the
    frames with their targets and train/validation split; returns the run and the checkpoint to resume."""
    if not cfg.data:
        raise ValueError("PoseTrainConfig.data is empty: pass the frame folders to train on (--data DIR [DIR ...])")
    out = Path(cfg.out)
    store = CheckpointStore(out, unit="step")
    if not cfg.resume and store.latest() is not None:
        raise ValueError(
            f"{out} already holds a pose estimator's checkpoints; pass --resume to continue it, or another --out"
        )
    last = store.latest() if cfg.resume else None
    if last is not None:
        saved = PoseEstimatorConfig.from_json(last.path / CONFIG_NAME)
        if estimator is not None and estimator.to_dict() != saved.to_dict():
            raise ValueError(
                f"{last.path} was trained with another PoseEstimatorConfig; use another --out or "
                f"resume without changing the model"
            )
        estimator = saved
    estimator = estimator or estimator_config_of_frames(cfg.data[0])
    frames = load_frames(cfg.data, estimator)
    targets = estimator.normalise(estimator.targets(frames.poses)).astype(np.float32)
    keypoint_targets = (
        torch.from_numpy(keypoint_positions(estimator, frames.poses))
        if cfg.keypoint_weight or cfg.heatmap_weight
        else None
    )
    train_idx, val_idx = split_episodes(frames.episode, cfg.val_fraction, cfg.seed)
    return PoseRun(cfg, estimator, out, store, frames, targets, keypoint_targets, train_idx, val_idx), last


def _cosine(cfg: PoseTrainConfig):
    """The learning-rate factor at step ``s``: cosine from 1 down to 0.05 at ``cfg.steps``."""
    return lambda s: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / max(1, cfg.steps)))


def _build_model(run: PoseRun, last) -> None:
    """The model, optimizer and schedule: new (seeded), or the checkpoint ``last``'s with its history."""
    cfg = run.cfg
    torch.manual_seed(cfg.seed)
    run.model = PoseEstimator(run.estimator).to(cfg.device)
    run.opt = torch.optim.AdamW(run.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    run.sched = torch.optim.lr_scheduler.LambdaLR(run.opt, _cosine(cfg))
    if last is not None:
        run.model = PoseEstimator.from_pretrained(last.path, device=cfg.device)
        run.opt = torch.optim.AdamW(run.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        _load_optimizer(run.opt, last.path)
        state = json.loads((last.path / "train_state.json").read_text())
        run.history, run.start = state["history"], last.counter
        run.sched = torch.optim.lr_scheduler.LambdaLR(run.opt, _cosine(cfg), last_epoch=run.start - 1)


def _built(run: PoseRun) -> tuple[PoseEstimator, torch.optim.Optimizer]:
    """The run's model and optimizer; RuntimeError before :func:`_build_model` made them."""
    if run.model is None or run.opt is None:
        raise RuntimeError("the pose run has no model yet: _build_model(run, last) makes it")
    return run.model, run.opt


def _train_step(run: PoseRun, step: int) -> float:
    """One optimiser step on the batch of ``step`` (its own seeded sampler, so a resume continues the
    same run); returns the loss."""
    cfg, device = run.cfg, run.cfg.device
    model, opt = _built(run)
    rng = np.random.default_rng([cfg.seed, step])
    n = len(run.train_idx)
    idx = rng.choice(run.train_idx, size=min(cfg.batch_size, n), replace=n < cfg.batch_size)
    x = PoseEstimator.to_tensor(run.frames.inputs[idx])
    if cfg.augment:
        x = augment_batch(x, rng)
    y = torch.from_numpy(run.targets[idx])
    pred, keypoints, maps = model(x.to(device), return_keypoints=True)
    loss = F.smooth_l1_loss(pred, y.to(device), beta=0.1)
    if run.keypoint_targets is not None:  # keypoint k onto object k (the first n_objects keypoints)
        kp = run.keypoint_targets[idx].to(device)
        if cfg.keypoint_weight:
            loss = loss + cfg.keypoint_weight * F.smooth_l1_loss(keypoints[:, : kp.shape[1]], kp, beta=0.05)
        if cfg.heatmap_weight:
            loss = loss + cfg.heatmap_weight * keypoint_map_loss(maps, kp, cfg.heatmap_sigma)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    run.sched.step()
    run.history["train_step"].append(step + 1)
    run.history["train_loss"].append(loss.item())
    return loss.item()


def _validate(run: PoseRun) -> tuple[float, dict]:
    """The validation loss and pose errors (NaN and none without validation frames)."""
    if not len(run.val_idx):
        return float("nan"), {}
    est = predict_inputs(_built(run)[0], run.frames.inputs[run.val_idx])
    norm = torch.from_numpy(run.estimator.normalise(est).astype(np.float32))
    loss = float(F.smooth_l1_loss(norm, torch.from_numpy(run.targets[run.val_idx]), beta=0.1))
    return loss, errors_from_estimates(run.estimator, est, run.frames.poses[run.val_idx])


def _checkpoint(run: PoseRun, step: int) -> None:
    """``out/checkpoints/<step>``: the model, the optimizer and the history."""

    model, opt = _built(run)

    def write(folder: Path) -> None:
        model.write_files(folder)
        _save_optimizer(opt, folder)
        write_json(folder / "train_state.json", {"step": step, "history": run.history})

    run.store.save(step, write)


def _finish(run: PoseRun, val_errors: dict) -> PoseTrainResult:
    """Write ``out/model``, ``metrics.json`` and the loss plot."""
    cfg, out = run.cfg, run.out
    model = _built(run)[0]
    model.save_pretrained(out / "model")
    settings = (
        "steps",
        "batch_size",
        "lr",
        "augment",
        "keypoint_weight",
        "heatmap_weight",
        "heatmap_sigma",
        "seed",
        "val_fraction",
    )
    metrics = {
        "history": run.history,
        "val_errors": val_errors,
        "train_frames": len(run.train_idx),
        "val_frames": len(run.val_idx),
        "config": {k: getattr(cfg, k) for k in settings},
    }
    write_json(out / "metrics.json", metrics)
    _plot(run.history, out / "loss.png")
    return PoseTrainResult(model.cpu().eval(), run.history, val_errors, out)


__all__ = [
    "PoseTrainConfig",
    "PoseTrainResult",
    "augment_batch",
    "keypoint_map_loss",
    "keypoint_positions",
    "split_episodes",
    "train_pose_estimator",
]
