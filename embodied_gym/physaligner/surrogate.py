"""Stage 2 of PhysAligner: a differentiable surrogate g(θ, s_{t-1}, a_{t-1}) ≈ s_t.

An MLP with three hidden layers and SiLU activations (smooth, so gradients with respect to θ
are well behaved in stage 3). Inputs are standardised (the parameters and states span very
different ranges) and it predicts the standardised state change s_t − s_{t-1}; loss is MSE.
Saved as ``surrogate.safetensors`` (weights and normalisation statistics) plus
``surrogate.json`` (its typed config).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from embodied_gym.atomic import atomic_path
from embodied_gym.physaligner.transitions import STATE_DIM, Transitions


@dataclass
class SurrogateConfig:
    theta_dim: int
    state_dim: int = STATE_DIM
    action_dim: int = 14
    hidden: int = 256
    layers: int = 3


@dataclass
class SurrogateTrainConfig:
    epochs: int = 30
    batch_size: int = 4096
    lr: float = 2e-3
    weight_decay: float = 1e-6
    val_fraction: float = 0.1
    seed: int = 0


class Surrogate(nn.Module):
    """g(θ_normalised, s, a) -> predicted next state (physical units)."""

    def __init__(self, config: SurrogateConfig):
        super().__init__()
        self.config = config
        c = config
        n_in = c.theta_dim + c.state_dim + c.action_dim
        dims = [n_in] + [c.hidden] * c.layers
        blocks: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            blocks += [nn.Linear(a, b), nn.SiLU()]
        blocks.append(nn.Linear(dims[-1], c.state_dim))
        self.net = nn.Sequential(*blocks)
        self.register_buffer("in_mean", torch.zeros(n_in))
        self.register_buffer("in_std", torch.ones(n_in))
        self.register_buffer("out_mean", torch.zeros(c.state_dim))
        self.register_buffer("out_std", torch.ones(c.state_dim))

    def forward(self, theta: torch.Tensor, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([theta, state, action], dim=-1)
        delta = self.net((x - self.in_mean) / self.in_std) * self.out_std + self.out_mean
        return state + delta

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, folder: str | os.PathLike) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "surrogate.safetensors") as tmp:
            save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(tmp))
        (folder / "surrogate.json").write_text(json.dumps(asdict(self.config), indent=2))

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> Surrogate:
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / "surrogate.json").exists():
            raise FileNotFoundError(f"{folder} holds no surrogate (surrogate.json missing)")
        model = cls(SurrogateConfig(**json.loads((folder / "surrogate.json").read_text())))
        model.load_state_dict(load_file(str(folder / "surrogate.safetensors")))
        return model


def _flatten(t: Transitions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(θ, s, a, s_next) rows, one per (θ, transition) pair."""
    k, n = t.next_state.shape[:2]
    theta = np.repeat(t.theta, n, axis=0)
    state = np.tile(t.state, (k, 1))
    action = np.tile(t.action, (k, 1))
    return theta, state, action, t.next_state.reshape(k * n, -1)


def train_surrogate(
    t: Transitions,
    config: SurrogateConfig | None = None,
    train: SurrogateTrainConfig | None = None,
    progress: bool = True,
) -> tuple[Surrogate, dict]:
    """Fit a surrogate on stage-1 transitions; returns it and a log with train/validation MSE
    (standardised units) per epoch. Validation holds out whole transitions (all θ of them)."""
    train = train or SurrogateTrainConfig()
    config = config or SurrogateConfig(theta_dim=t.theta.shape[1])
    torch.manual_seed(train.seed)
    rng = np.random.default_rng(train.seed)
    n = len(t.state)
    held = np.zeros(n, dtype=bool)
    held[rng.permutation(n)[: max(1, int(round(train.val_fraction * n)))]] = True

    def rows(mask):
        sub = Transitions(t.theta, t.state[mask], t.action[mask], t.next_state[:, mask], t.episode[mask])
        return [torch.as_tensor(x, dtype=torch.float32) for x in _flatten(sub)]

    tr, va = rows(~held), rows(held)
    return _fit(Surrogate(config), tr, va, train, progress)


def train_on_rows(
    theta: np.ndarray,
    state: np.ndarray,
    action: np.ndarray,
    next_state: np.ndarray,
    config: SurrogateConfig | None = None,
    train: SurrogateTrainConfig | None = None,
    progress: bool = False,
    groups: np.ndarray | None = None,
) -> tuple[Surrogate, dict]:
    """Fit a surrogate on rows of (θ, s, a, s_next), one θ per row (dense stage 1). Validation holds
    out whole ``groups`` (default: rows) so it measures error on transitions it never saw."""
    train = train or SurrogateTrainConfig()
    config = config or SurrogateConfig(theta_dim=theta.shape[1], state_dim=state.shape[1], action_dim=action.shape[1])
    torch.manual_seed(train.seed)
    rng = np.random.default_rng(train.seed)
    groups = np.arange(len(theta)) if groups is None else np.asarray(groups)
    names = np.unique(groups)
    val_names = rng.permutation(names)[: max(1, int(round(train.val_fraction * len(names))))]
    held = np.isin(groups, val_names)
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float32)
    tr = [as_t(x[~held]) for x in (theta, state, action, next_state)]
    va = [as_t(x[held]) for x in (theta, state, action, next_state)]
    # Outputs that barely vary (joints the data does not move) must not dominate the standardised loss.
    return _fit(Surrogate(config), tr, va, train, progress, relative_floor=1e-2)


def _fit(
    model: Surrogate, tr: list, va: list, train: SurrogateTrainConfig, progress: bool, relative_floor: float = 0.0
) -> tuple[Surrogate, dict]:
    """Standardise, then train with AdamW and a cosine schedule. ``relative_floor``: each output's
    scale is at least this fraction of the largest scale among the outputs of its kind (the first
    half of the state: positions; the second: velocities)."""
    from tqdm import tqdm

    x = torch.cat(tr[:3], dim=1)
    delta = tr[3] - tr[1]
    model.in_mean.copy_(x.mean(0))
    model.in_std.copy_(x.std(0).clamp_min(1e-6))
    model.out_mean.copy_(delta.mean(0))
    out_std = delta.std(0).clamp_min(1e-6)
    if relative_floor > 0:
        half = out_std.shape[0] // 2
        for part in (slice(0, half), slice(half, None)):
            out_std[part] = out_std[part].clamp_min(relative_floor * float(out_std[part].max()))
    model.out_std.copy_(out_std)
    opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, train.epochs))
    log = {"train_mse": [], "val_mse": []}

    def mse(batch) -> torch.Tensor:
        theta, s, a, s_next = batch
        return (((model(theta, s, a) - s_next) / model.out_std) ** 2).mean()

    bar = tqdm(range(train.epochs), desc="stage 2: surrogate", unit="epoch", disable=not progress)
    for _ in bar:
        model.train()
        perm = torch.randperm(len(tr[0]))
        total, count = 0.0, 0
        for i in range(0, len(perm), train.batch_size):
            idx = perm[i : i + train.batch_size]
            loss = mse([v[idx] for v in tr])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            count += len(idx)
        sched.step()
        model.eval()
        with torch.no_grad():
            val = float(mse(va))
        log["train_mse"].append(total / count)
        log["val_mse"].append(val)
        bar.set_postfix(train=f"{total / count:.4f}", val=f"{val:.4f}")
    return model, log
