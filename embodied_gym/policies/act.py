"""Train LeRobot's ``ACTPolicy`` on an embodied-gym LeRobotDataset, offline, on a CPU or a GPU.

The policy, its config, its pre/post processors and its normalisation are LeRobot 0.6.1's own
(``ACTConfig``, ``make_pre_post_processors`` with ``dataset.meta.stats``); a checkpoint is a
LeRobot ``pretrained_model`` folder (``config.json``, ``model.safetensors``, processor files), so
``ACTPolicy.from_pretrained`` and ``lerobot-eval --policy.path`` read it too.

What is ours is the data path: every training frame (its camera images resized once to the
preset's image size, its state, and its chunk of future actions with LeRobot's padding mask) is
decoded from the dataset's videos once, episode by episode, into memory. Random-access video
decoding per sample would dominate a CPU run; with the cache a step costs only the model.

Layout of ``out``::

    out/checkpoints/<step>/pretrained_model/   the policy at that step (loadable)
    out/checkpoints/<step>/training_state/     optimizer, RNG state, step (for --resume)
    out/checkpoints/last.json                  which checkpoint is the latest (written atomically)
    out/train_log.jsonl, out/loss.png          loss per logged step
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch

from embodied_gym.data import features as F
from embodied_gym.data.reader import RecordedDataset, open_dataset

POLICY_META = "embodied_gym_policy.json"  # cameras, image size, control mode: what an env must give the policy
LAST = "last.json"


@dataclass
class ACTPreset:
    """ACT's model and optimiser settings (LeRobot ``ACTConfig`` names)."""

    chunk_size: int
    n_action_steps: int
    dim_model: int
    n_heads: int
    dim_feedforward: int
    n_encoder_layers: int
    n_decoder_layers: int
    latent_dim: int
    n_vae_encoder_layers: int
    kl_weight: float
    lr: float
    batch_size: int
    steps: int
    image_size: tuple[int, int] | None  # (H, W) images are resized to; None = as recorded
    vision_backbone: str = "resnet18"


PRESETS: dict[str, ACTPreset] = {
    # Sized for a shared 2-core CPU: ~0.3 s per step with one 72x96 camera (ResNet-18 dominates).
    "cpu": ACTPreset(chunk_size=20, n_action_steps=10, dim_model=128, n_heads=4, dim_feedforward=512,
                     n_encoder_layers=2, n_decoder_layers=1, latent_dim=16, n_vae_encoder_layers=2, kl_weight=10.0,
                     lr=1e-4, batch_size=8, steps=2000, image_size=(72, 96)),
    # SPEC §3: ALOHA's ACT (dim 512, 4 encoder / 7 decoder layers, KL weight 10, batch 8, ResNet-18)
    # with the paper's robot-vendor defaults (chunk 32, lr 4e-5).
    "paper": ACTPreset(chunk_size=32, n_action_steps=32, dim_model=512, n_heads=8, dim_feedforward=3200,
                       n_encoder_layers=4, n_decoder_layers=7, latent_dim=32, n_vae_encoder_layers=4, kl_weight=10.0,
                       lr=4e-5, batch_size=8, steps=100_000, image_size=None),
}


@dataclass
class ACTTrainConfig:
    """One ACT training run. ``None`` fields take the preset's value."""

    dataset: str
    out: str
    preset: str = "cpu"
    cameras: tuple[str, ...] | None = None  # default: every camera of the dataset
    steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    chunk_size: int | None = None
    n_action_steps: int | None = None
    image_size: tuple[int, int] | None = None
    temporal_ensemble_coeff: float | None = None  # e.g. 0.01 (ACT's value); forces n_action_steps = 1
    backbone_weights: str | None = None  # a local ResNet state-dict file (.safetensors or .pth); never downloaded
    episodes: list[int] | None = None
    save_every: int = 500
    log_every: int = 50
    seed: int = 0
    device: str = "cpu"
    num_threads: int | None = None
    resume: bool = False
    progress: bool = True
    overrides: dict = field(default_factory=dict)  # other ACTPreset fields

    def resolved_preset(self) -> ACTPreset:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown ACT preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        p = replace(PRESETS[self.preset], **self.overrides)
        for name in ("steps", "batch_size", "lr", "chunk_size", "n_action_steps", "image_size"):
            value = getattr(self, name)
            if value is not None:
                p = replace(p, **{name: tuple(value) if name == "image_size" else value})
        if self.n_action_steps is None and p.n_action_steps > p.chunk_size:
            p = replace(p, n_action_steps=p.chunk_size)
        if self.temporal_ensemble_coeff is not None:
            p = replace(p, n_action_steps=1)
        return p


# ----------------------------------------------------------------------------- data
@dataclass
class TrainingFrames:
    """Every frame of a dataset in memory: what ACT's ``forward`` needs per sample."""

    images: dict[str, torch.Tensor]  # key -> (N, 3, H, W) uint8
    state: torch.Tensor  # (N, 14) float32
    actions: torch.Tensor  # (N, chunk, 14) float32, future actions of the frame's episode
    action_is_pad: torch.Tensor  # (N, chunk) bool, True past the episode's end

    def __len__(self) -> int:
        return self.state.shape[0]

    def batch(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        b = {F.STATE: self.state[idx], F.ACTION: self.actions[idx], F.ACTION_IS_PAD: self.action_is_pad[idx]}
        b.update({k: v[idx].float().div_(255.0) for k, v in self.images.items()})
        return b


def resize_images(frames: torch.Tensor, size: tuple[int, int] | None) -> torch.Tensor:
    """(N, 3, H, W) uint8 -> (N, 3, h, w) uint8 with antialiasing; the same function at training and
    at inference, so the policy sees identically resized frames in both."""
    if size is None or tuple(frames.shape[-2:]) == tuple(size):
        return frames
    out = torch.nn.functional.interpolate(frames.float(), size=tuple(size), mode="bilinear", antialias=True,
                                          align_corners=False)
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


def load_training_frames(ds: RecordedDataset, episodes: list[int] | None, cameras: list[str], chunk_size: int,
                         image_size: tuple[int, int] | None, progress: bool = True) -> TrainingFrames:
    """Decode ``episodes`` (all by default) of the dataset once: images (resized), state, action
    chunks with LeRobot's padding rule (indices past the episode's end repeat its last action and
    are flagged ``action_is_pad``)."""
    from tqdm import tqdm

    hf = ds.table(episodes)
    ep_index = np.asarray(hf["episode_index"])
    state = torch.as_tensor(np.stack(hf[F.STATE]), dtype=torch.float32)
    action = torch.as_tensor(np.stack(hf[F.ACTION]), dtype=torch.float32)
    n = len(ep_index)
    chunks = torch.empty(n, chunk_size, action.shape[1])
    pad = torch.empty(n, chunk_size, dtype=torch.bool)
    images = {F.image_key(c): [] for c in cameras}
    order = []
    for ep in tqdm(list(dict.fromkeys(ep_index.tolist())), desc="decoding dataset", unit="ep", disable=not progress):
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
                raise ValueError(f"dataset {ds.root}: episode {ep} has {len(rows)} frames but its {cam} video "
                                 f"{len(frames)}")
            images[F.image_key(cam)].append(resize_images(frames, image_size).contiguous())
    rows = np.concatenate(order)
    inverse = torch.as_tensor(np.argsort(rows))
    imgs = {k: torch.cat(v)[inverse] for k, v in images.items()}
    return TrainingFrames(images=imgs, state=state, actions=chunks, action_is_pad=pad)


# ----------------------------------------------------------------------------- policy
def make_act_policy(ds: RecordedDataset, cameras: list[str], preset: ACTPreset, temporal_ensemble_coeff: float | None,
                    device: str, backbone_weights: str | None = None):
    """LeRobot ``ACTPolicy`` + its processors for ``cameras`` and ``observation.state`` -> ``action``."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    h, w = preset.image_size or ds.image_size(cameras[0])
    inputs = {F.STATE: PolicyFeature(type=FeatureType.STATE, shape=(14,))}
    inputs.update({F.image_key(c): PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w)) for c in cameras})
    cfg = ACTConfig(
        input_features=inputs, output_features={F.ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(14,))},
        chunk_size=preset.chunk_size, n_action_steps=preset.n_action_steps, dim_model=preset.dim_model,
        n_heads=preset.n_heads, dim_feedforward=preset.dim_feedforward, n_encoder_layers=preset.n_encoder_layers,
        n_decoder_layers=preset.n_decoder_layers, latent_dim=preset.latent_dim,
        n_vae_encoder_layers=preset.n_vae_encoder_layers, kl_weight=preset.kl_weight, optimizer_lr=preset.lr,
        optimizer_lr_backbone=preset.lr, vision_backbone=preset.vision_backbone,
        pretrained_backbone_weights=None,  # torchvision would download them; a local file is loaded below
        temporal_ensemble_coeff=temporal_ensemble_coeff, device=device, push_to_hub=False,
    )
    policy = ACTPolicy(cfg)
    if backbone_weights:
        load_backbone_weights(policy, backbone_weights)
    policy.to(device)
    pre, post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)
    return policy, pre, post


def load_backbone_weights(policy, path: str) -> None:
    """Initialise ACT's ResNet from a local torchvision-style state dict (no download)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"backbone weights {path} not found; give a local ResNet state-dict file "
                                f"(.safetensors, or .pth loadable with weights_only=True)")
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(p))
    else:
        state = torch.load(str(p), map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    result = policy.model.backbone.load_state_dict(state, strict=False)
    if result.missing_keys:
        raise ValueError(f"{path} does not fit ACT's {policy.config.vision_backbone} backbone; missing "
                         f"{result.missing_keys[:5]}{'...' if len(result.missing_keys) > 5 else ''}")


# ----------------------------------------------------------------------------- checkpoints
def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _atomic_json(path: Path, obj) -> None:
    _atomic_text(path, json.dumps(obj, indent=2))


def save_checkpoint(out: Path, step: int, policy, pre, post, optimizer, generator: torch.Generator,
                    meta: dict, keep: int = 2) -> Path:
    """Write ``checkpoints/<step>`` in a temporary folder, rename it into place, then point
    ``last.json`` at it; a crash at any moment leaves the previous checkpoint intact."""
    from lerobot.optim.optimizers import save_optimizer_state
    from safetensors.torch import save_file

    ckpt_root = out / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"{step:06d}"
    tmp = ckpt_root / f".tmp-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model_dir, state_dir = tmp / "pretrained_model", tmp / "training_state"
    policy.save_pretrained(model_dir)
    pre.save_pretrained(model_dir)
    post.save_pretrained(model_dir)
    (model_dir / POLICY_META).write_text(json.dumps(dict(meta, step=step), indent=2))
    state_dir.mkdir(parents=True)
    save_optimizer_state(optimizer, state_dir)
    save_file({"torch_rng": torch.get_rng_state(), "sampler_rng": generator.get_state()},
              str(state_dir / "rng_state.safetensors"))
    (state_dir / "training_step.json").write_text(json.dumps({"step": step}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _atomic_json(ckpt_root / LAST, {"step": step, "path": final.name})
    steps = sorted(d for d in ckpt_root.iterdir() if d.is_dir() and d.name.isdigit())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(out: str | os.PathLike) -> Path | None:
    last = Path(out) / "checkpoints" / LAST
    if not last.exists():
        return None
    return Path(out) / "checkpoints" / json.loads(last.read_text())["path"]


def resolve_pretrained_dir(path: str | os.PathLike) -> Path:
    """A ``pretrained_model`` folder from: itself, a checkpoint folder, or a training output folder."""
    p = Path(path)
    for cand in (p, p / "pretrained_model"):
        if (cand / "config.json").exists() and (cand / "model.safetensors").exists():
            return cand
    ckpt = latest_checkpoint(p)
    if ckpt is not None:
        return ckpt / "pretrained_model"
    raise FileNotFoundError(f"{path} holds no policy: expected a LeRobot pretrained_model folder (config.json, "
                            f"model.safetensors), a checkpoint folder, or an `embodied-gym train act --out` folder")


# ----------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    out: str
    checkpoint: str
    steps: int
    final_loss: float
    train_time_s: float  # this run's optimisation time, decoding excluded
    decode_time_s: float


def train_act(cfg: ACTTrainConfig) -> TrainResult:
    """Train ACT per ``cfg``; resumes from ``cfg.out`` when ``cfg.resume``."""
    from tqdm import tqdm

    from lerobot.optim.optimizers import load_optimizer_state

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    preset = cfg.resolved_preset()
    out = Path(cfg.out)
    last = latest_checkpoint(out)
    if last is not None and not cfg.resume:
        raise FileExistsError(f"{out} already holds ACT checkpoints; pass --resume to continue training, or choose "
                              f"another --out")
    ds = open_dataset(cfg.dataset)
    episodes = ds.check_episodes(cfg.episodes) if cfg.episodes is not None else None
    cameras = select_cameras(ds, cfg.cameras)
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    t0 = time.time()
    frames = load_training_frames(ds, episodes, cameras, preset.chunk_size, preset.image_size, cfg.progress)
    decode_time = time.time() - t0
    task = ds.task
    recorded = list(ds.image_size(cameras[0]))
    meta = {"kind": "act", "cameras": cameras, "recorded_image_size": recorded, "image_size": list(frames.images[next(iter(frames.images))].shape[-2:]),
            "control_mode": "joint_pos", "dataset": str(cfg.dataset), "task": task, "preset": cfg.preset,
            "settings": asdict(preset), "temporal_ensemble_coeff": cfg.temporal_ensemble_coeff}

    policy, pre, post = make_act_policy(ds, cameras, preset, cfg.temporal_ensemble_coeff, cfg.device,
                                        cfg.backbone_weights)
    optimizer = torch.optim.AdamW(policy.get_optim_params(), lr=preset.lr, weight_decay=1e-4)
    step = 0
    if last is not None:
        from safetensors.torch import load_file

        from lerobot.policies.act.modeling_act import ACTPolicy

        loaded = ACTPolicy.from_pretrained(str(last / "pretrained_model"))
        policy.load_state_dict(loaded.state_dict())
        optimizer = load_optimizer_state(optimizer, last / "training_state")
        rng = load_file(str(last / "training_state" / "rng_state.safetensors"))
        torch.set_rng_state(rng["torch_rng"])
        generator.set_state(rng["sampler_rng"])
        step = json.loads((last / "training_state" / "training_step.json").read_text())["step"]
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    if log_path.exists():  # drop rows logged after the checkpoint we resume from (or all, when starting)
        kept = [line for line in log_path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
        _atomic_text(log_path, "".join(line + "\n" for line in kept))

    policy.train()
    t_train = time.time()
    bar = tqdm(total=preset.steps, initial=step, desc="train act", unit="step", disable=not cfg.progress)
    loss_value = float("nan")
    running = []
    ckpt = last
    while step < preset.steps:
        idx = torch.randint(len(frames), (preset.batch_size,), generator=generator)
        batch = pre(frames.batch(idx))
        loss, parts = policy.forward(batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)  # LeRobot's default grad_clip_norm
        optimizer.step()
        step += 1
        loss_value = float(loss.item())
        running.append(loss_value)
        bar.update(1)
        if step % cfg.log_every == 0 or step == preset.steps:
            row = {"step": step, "loss": float(np.mean(running)), **{k: float(v) for k, v in parts.items()},
                   "time_s": time.time() - t_train}
            running = []
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            bar.set_postfix(loss=f"{row['loss']:.3f}")
        if step % cfg.save_every == 0 or step == preset.steps:
            ckpt = save_checkpoint(out, step, policy, pre, post, optimizer, generator, meta)
    bar.close()
    train_time = time.time() - t_train
    plot_training_log(log_path, out / "loss.png")
    return TrainResult(str(out), str(ckpt / "pretrained_model"), step, loss_value, train_time, decode_time)


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
    fig.savefig(png, dpi=100)
    plt.close(fig)


def preset_field_names() -> list[str]:
    return [f.name for f in fields(ACTPreset)]
