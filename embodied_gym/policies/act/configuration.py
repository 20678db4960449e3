"""ACT's settings: the model and optimiser presets and one training run's config.

:class:`ACTPreset` holds LeRobot ``ACTConfig``'s model and optimiser settings; :data:`PRESETS` names
the two we ship. :class:`ACTTrainConfig` is one training run: it is also the ``embodied-gym train act``
command line and its ``--config`` YAML (:mod:`embodied_gym.configs`), and the demo nests it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from embodied_gym.configs import setting


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
    #: ACT's conditional-VAE objective (a style latent from a transformer over the action chunk). With
    #: scripted demonstrations the latent collapses (they hold one style, so its KL term falls to about nothing)
    #: and the VAE encoder is a large share of a state-only step's compute (BENCHMARKS.md, "ACT without its
    #: VAE"); False drops it
    #: (LeRobot ``ACTConfig.use_vae``; the latent is then zero, as at inference)
    use_vae: bool = True
    #: "constant" (ACT's) or "cosine": a linear warm-up over ``warmup_steps`` (at most a tenth of ``steps``),
    #: then a cosine decay to 0 at ``steps`` (so a run resumed to more steps follows another curve from the
    #: resume on)
    lr_schedule: str = "constant"
    warmup_steps: int = 0

    def lr_at(self, step: int) -> float:
        """The learning rate of optimisation step ``step`` (0-based)."""
        if self.lr_schedule == "constant":
            return self.lr
        warmup = min(self.warmup_steps, self.steps // 10)  # a short run does not spend itself warming up
        if step < warmup:
            return self.lr * (step + 1) / warmup
        span = max(self.steps - warmup, 1)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, span) / span))


LR_SCHEDULES = ("constant", "cosine")


PRESETS: dict[str, ACTPreset] = {
    # Sized for a shared 2-core CPU (with a camera, ResNet-18 dominates a step). Images are used as
    # recorded: resizing changes what a few-pixel object looks like (and, between sizes of another
    # aspect ratio, its shape), so record at the size to train at. lr 3e-4 with a cosine decay: it
    # learns PickCup from joint state + the true cup position better than ACT's constant 1e-4
    # (BENCHMARKS.md, "ACT's learning rate"; benchmarks/act_ceiling.py).
    "cpu": ACTPreset(
        chunk_size=20,
        n_action_steps=10,
        dim_model=128,
        n_heads=4,
        dim_feedforward=512,
        n_encoder_layers=2,
        n_decoder_layers=1,
        latent_dim=16,
        n_vae_encoder_layers=2,
        kl_weight=10.0,
        lr=3e-4,
        batch_size=8,
        steps=2000,
        image_size=None,
        lr_schedule="cosine",
        warmup_steps=200,
    ),
    # ACT's ALOHA sizes (Zhao et al., arXiv 2304.13705: dim 512, 4 encoder / 7 decoder layers, KL weight
    # 10, batch 8, ResNet-18) with the robot vendor's defaults the paper trains with (chunk 32, lr 4e-5).
    "paper": ACTPreset(
        chunk_size=32,
        n_action_steps=32,
        dim_model=512,
        n_heads=8,
        dim_feedforward=3200,
        n_encoder_layers=4,
        n_decoder_layers=7,
        latent_dim=32,
        n_vae_encoder_layers=4,
        kl_weight=10.0,
        lr=4e-5,
        batch_size=8,
        steps=100_000,
        image_size=None,
    ),
}


@dataclass
class ACTTrainConfig:
    """One ACT training run. ``None`` fields take the preset's value."""

    dataset: str | None = setting(
        None, required=True, help="LeRobotDataset folder (from `embodied-gym record` or `generate`)"
    )
    out: str | None = setting(None, required=True, help="output folder: checkpoints/, train_log.jsonl, loss.png")
    preset: str = setting(
        "cpu",
        choices=tuple(PRESETS),
        help="cpu: small ACT, 2000 steps; paper: ACT's ALOHA sizes (default cpu); both train on images as recorded",
    )
    cameras: tuple[str, ...] | None = setting(None, help="cameras to use (default: all in the dataset)")
    images: bool | None = setting(
        None,
        help="camera images as inputs (default: when the dataset has videos); "
        "--no-images: joint state and environment state only (no ResNet)",
    )
    env_state: bool | None = setting(
        None,
        help="observation.environment_state (estimated object poses) as an input (default: when the dataset has it)",
    )
    steps: int | None = setting(None, help="optimisation steps (default: the preset's)")
    batch_size: int | None = setting(None, help="samples per step (default: the preset's)")
    lr: float | None = setting(None, help="learning rate (default: the preset's)")
    lr_schedule: str | None = setting(
        None,
        choices=LR_SCHEDULES,
        help="constant, or cosine: warm-up then a cosine decay to 0 at --steps "
        "(default: the preset's; cpu: cosine, paper: constant)",
    )
    chunk_size: int | None = setting(None, help="actions predicted per query (default: the preset's)")
    n_action_steps: int | None = setting(None, help="actions run per predicted chunk (default: the preset's)")
    image_size: tuple[int, int] | None = setting(
        None, metavar=("H", "W"), help="resize images to (default: as recorded)"
    )
    temporal_ensemble_coeff: float | None = setting(
        None,
        flag="--temporal-ensemble",
        metavar="COEFF",
        help="ACT temporal ensembling coefficient (0.01 in ACT); sets n_action_steps to 1",
    )
    backbone_weights: str | None = setting(
        None,
        help="local ResNet weights file (.safetensors/.pth), e.g. "
        "torchvision's resnet18 IMAGENET1K_V1 state dict saved on a "
        "machine with network; default: random init, never downloaded",
    )
    state_noise: float = setting(
        0.0,
        metavar="RAD",
        help="std of Gaussian noise added to the arm joints of observation.state in every training batch "
        "(grippers untouched; 0: none). A sim demo's idle arm settles the same way every episode, and ACT "
        "learns to read the time off it; noise of a few mrad hides that clock",
    )
    episodes: list[int] | None = setting(None, help="dataset episodes to train on (default: all)")
    successful_only: bool = setting(
        False,
        help="only the episodes (of --episodes) whose sidecar row marks them "
        "successful: a scripted expert's failed demos are not imitated",
    )
    save_every: int = setting(500, help="steps between checkpoints")
    log_every: int = setting(50, help="steps between rows of train_log.jsonl")
    seed: int = setting(0, help="seed of the initialisation and the sampler")
    device: str = setting("cpu", help="torch device: cpu or cuda")
    num_threads: int | None = setting(None, flag="--threads", help="torch CPU threads")
    resume: bool = setting(False, help="continue from the last checkpoint in --out")
    progress: bool = setting(True, cli=False)
    overrides: dict = setting(default_factory=dict, help="other ACTPreset fields, e.g. dim_model=256 kl_weight=5")

    def resolved_preset(self) -> ACTPreset:
        """The preset with this run's overrides applied.

        Raises:
            ValueError: no dataset or output folder, an unknown preset, or an override naming no
                ACTPreset field.
        """
        if not self.dataset or not self.out:
            raise ValueError("ACT training needs a dataset and an output folder (--dataset DIR --out DIR)")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown ACT preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        unknown = sorted(set(self.overrides) - set(preset_field_names()))
        if unknown:
            raise ValueError(f"unknown ACT preset field(s) {unknown} in overrides; valid: {preset_field_names()}")
        p = replace(PRESETS[self.preset], **self.overrides)
        for name in ("steps", "batch_size", "lr", "lr_schedule", "chunk_size", "n_action_steps", "image_size"):
            value = getattr(self, name)
            if value is not None:
                change: dict[str, Any] = {name: tuple(value) if name == "image_size" else value}
                p = replace(p, **change)
        if p.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown ACT lr_schedule {p.lr_schedule!r}; choose one of {list(LR_SCHEDULES)}")
        if self.n_action_steps is None and p.n_action_steps > p.chunk_size:
            p = replace(p, n_action_steps=p.chunk_size)
        if self.temporal_ensemble_coeff is not None:
            p = replace(p, n_action_steps=1)
        return p


def preset_field_names() -> list[str]:
    return [f.name for f in fields(ACTPreset)]


__all__ = ["LR_SCHEDULES", "PRESETS", "ACTPreset", "ACTTrainConfig", "preset_field_names"]
