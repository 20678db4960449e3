"""Stage 3 of PhysAligner: gradient refinement of θ through the frozen surrogate.

θ is the only trainable tensor, kept inside its box through a sigmoid on the normalised scale.
The loss on real transitions (s_{t-1}, a_{t-1}) -> s_t compares the surrogate's prediction with the
recorded s_t: joint-position and joint-velocity errors, plus TCP translation and rotation errors
through differentiable forward kinematics, the rotation term in the smooth form
‖R_pred − R_real‖²_F / 8 = sin²(θ/2) (SPEC §1). Adam, several restarts (the first from the base
values, the others from random points), early stopping on held-out transitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from embodied_gym.sim import robot as layout
from embodied_gym.physaligner.fk import ArmFK
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.surrogate import Surrogate


@dataclass
class RefineConfig:
    restarts: int = 4
    steps: int = 400
    # > 1: the surrogate is unrolled over windows of `horizon` recorded actions from a recorded state, and the
    # loss is averaged over the window — closer to open-loop replay (how calibration is judged) than
    # one-step prediction, which a robot with latency can satisfy with the wrong physics.
    horizon: int = 1
    lr: float = 0.05
    patience: int = 60
    val_fraction: float = 0.2
    w_joint: float = 1.0  # per rad² of arm joint position error
    w_velocity: float = 0.01  # per (rad/s)²
    w_translation: float = 10.0  # per m² of TCP error
    w_rotation: float = 1.0  # per unit of ‖ΔR‖²_F / 8
    seed: int = 0


@dataclass
class RefineResult:
    theta: np.ndarray  # normalised, best restart
    values: np.ndarray  # physical units
    val_loss: float
    restarts: list[dict] = field(default_factory=list)  # per restart: start, theta, val_loss, curve


def trajectory_loss(pred: torch.Tensor, target: torch.Tensor, fk: ArmFK, cfg: RefineConfig,
                    target_pose: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``target_pose``: ``fk(target)`` when the caller has it already (it does not change between steps)."""
    arm = torch.as_tensor(layout.ARM_INDICES)
    joint = ((pred[:, arm] - target[:, arm]) ** 2).mean()
    velocity = ((pred[:, 14 + arm] - target[:, 14 + arm]) ** 2).mean()
    p_pred, r_pred = fk(pred[:, :14])
    p_real, r_real = target_pose if target_pose is not None else fk(target[:, :14])
    translation = ((p_pred - p_real) ** 2).sum(-1).mean()
    rotation = (((r_pred - r_real) ** 2).sum((-2, -1)) / 8.0).mean()
    return (cfg.w_joint * joint + cfg.w_velocity * velocity + cfg.w_translation * translation
            + cfg.w_rotation * rotation)


def windows(episode: np.ndarray, horizon: int) -> np.ndarray:
    """(W, horizon) row indices of consecutive transitions inside one episode, windows overlapping by half."""
    stride = max(1, horizon // 2)
    starts = [i for i in range(0, len(episode) - horizon + 1, stride)
              if episode[i] == episode[i + horizon - 1]]
    return np.asarray(starts, dtype=np.int64)[:, None] + np.arange(horizon)[None, :]


def refine(surrogate: Surrogate, fk: ArmFK, space: ParameterSpace, state: np.ndarray, action: np.ndarray,
           next_state: np.ndarray, config: RefineConfig | None = None, progress: bool = False,
           episode: np.ndarray | None = None) -> RefineResult:
    """Best θ over restarts (see module docstring); inputs are the *real* transitions, in episode order
    (``episode`` gives each row's episode; needed when ``config.horizon > 1``)."""
    cfg = config or RefineConfig()
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    surrogate.eval()
    for p in surrogate.parameters():
        p.requires_grad_(False)
    if cfg.horizon > 1:
        if episode is None:
            raise ValueError("refine(horizon > 1) needs the episode of every transition (episode=...)")
        rows = windows(np.asarray(episode), cfg.horizon)
        if len(rows) == 0:
            raise ValueError(f"no episode has {cfg.horizon} consecutive transitions; lower the horizon")
    else:
        rows = np.arange(len(state))[:, None]
    n = len(rows)
    held = np.zeros(n, dtype=bool)
    held[rng.permutation(n)[: max(1, int(round(cfg.val_fraction * n)))]] = True
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float32)  # noqa: E731
    # A batch: first state (W, 28), actions (W, h, 14), targets (W, h, 28).
    tr = [as_t(state[rows[~held, 0]]), as_t(action[rows[~held]]), as_t(next_state[rows[~held]])]
    va = [as_t(state[rows[held, 0]]), as_t(action[rows[held]]), as_t(next_state[rows[held]])]

    with torch.no_grad():
        poses = {id(b): fk(b[2].to(torch.float64).reshape(-1, b[2].shape[-1])[:, :14]) for b in (tr, va)}

    def loss_at(theta_u: torch.Tensor, batch) -> torch.Tensor:
        s, a, target = batch
        theta = theta_u.expand(len(s), -1)
        preds = []
        for j in range(a.shape[1]):  # unroll the surrogate on its own predictions
            s = surrogate(theta, s, a[:, j])
            preds.append(s)
        pred = torch.stack(preds, dim=1).reshape(-1, target.shape[-1])
        return trajectory_loss(pred.to(torch.float64), target.reshape(-1, target.shape[-1]).to(torch.float64),
                               fk, cfg, poses[id(batch)])

    base = np.clip(space.normalise(space.values_of(space.base)), 0.02, 0.98)
    starts = [base] + [rng.uniform(0.05, 0.95, space.dim) for _ in range(cfg.restarts - 1)]
    results = []
    bar = tqdm(total=len(starts) * cfg.steps, desc="stage 3: refinement", unit="step", disable=not progress)
    for start in starts:
        z = torch.tensor(np.log(start / (1 - start)), dtype=torch.float32, requires_grad=True)
        opt = torch.optim.Adam([z], lr=cfg.lr)
        best, best_z, since, curve = float("inf"), z.detach().clone(), 0, []
        for _ in range(cfg.steps):
            loss = loss_at(torch.sigmoid(z), tr)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                val = float(loss_at(torch.sigmoid(z), va))
            curve.append(val)
            bar.update()
            if val < best - 1e-9:
                best, best_z, since = val, z.detach().clone(), 0
            else:
                since += 1
                if since >= cfg.patience:
                    break
        bar.update(cfg.steps - len(curve))  # early stop: the rest of this restart's steps are skipped
        results.append({"start": start.tolist(), "theta": torch.sigmoid(best_z).numpy().astype(np.float64).tolist(),
                        "val_loss": best, "curve": curve})
    bar.close()
    best = min(results, key=lambda r: r["val_loss"])
    theta = np.asarray(best["theta"])
    return RefineResult(theta=theta, values=space.denormalise(theta), val_loss=best["val_loss"], restarts=results)
