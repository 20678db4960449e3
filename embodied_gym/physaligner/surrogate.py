"""Stage 2 of PhysAligner: a differentiable surrogate g(θ, s_{t-1}, a_{t-1}) ≈ s_t.

An MLP with three hidden layers and SiLU activations (smooth, so gradients with respect to θ
are well behaved in stage 3). Inputs are standardised (the parameters and states span very
different ranges) and it predicts the standardised state change s_t − s_{t-1}; loss is MSE.
:func:`train_on_rows` fits one on dense stage-1 rows (one θ per row), as every iteration of
PhysAligner's trust region does (:func:`.refine.trust_region`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from embodied_gym.physaligner.transitions import STATE_DIM


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

    # buffers (register_buffer): the input and output standardisation
    in_mean: torch.Tensor
    in_std: torch.Tensor
    out_mean: torch.Tensor
    out_std: torch.Tensor

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
    log: dict[str, list[float]] = {"train_mse": [], "val_mse": []}

    def mse(batch) -> torch.Tensor:
        theta, s, a, s_next = batch
        return (((model(theta, s, a) - s_next) / model.out_std) ** 2).mean()

    bar = tqdm(range(train.epochs), desc="stage 2: surrogate", unit="epoch", disable=None if progress else True)
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
