"""Stage 3 of PhysAligner: gradient refinement of θ through the frozen surrogate.

θ is the only trainable tensor, kept inside its box through a sigmoid on the normalised scale.
The loss on real transitions (s_{t-1}, a_{t-1}) -> s_t compares the surrogate's prediction with the
recorded s_t: joint-position and joint-velocity errors, plus TCP translation and rotation errors
through differentiable forward kinematics, the rotation term in the smooth form
‖R_pred − R_real‖²_F / 8 = sin²(θ/2) (SimplerEnv, arXiv 2405.05941). Adam, several restarts (the first from the base
values, the others from random points), early stopping on held-out transitions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from embodied_gym.physaligner.fk import ArmFK
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.surrogate import Surrogate
from embodied_gym.sim import robot as layout


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


def trajectory_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    fk: ArmFK,
    cfg: RefineConfig,
    target_pose: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``target_pose``: ``fk(target)`` when the caller has it already (it does not change between steps)."""
    arm = torch.as_tensor(layout.ARM_INDICES)
    joint = ((pred[:, arm] - target[:, arm]) ** 2).mean()
    velocity = ((pred[:, 14 + arm] - target[:, 14 + arm]) ** 2).mean()
    p_pred, r_pred = fk(pred[:, :14])
    p_real, r_real = target_pose if target_pose is not None else fk(target[:, :14])
    translation = ((p_pred - p_real) ** 2).sum(-1).mean()
    rotation = (((r_pred - r_real) ** 2).sum((-2, -1)) / 8.0).mean()
    return cfg.w_joint * joint + cfg.w_velocity * velocity + cfg.w_translation * translation + cfg.w_rotation * rotation


def windows(episode: np.ndarray, horizon: int) -> np.ndarray:
    """(W, horizon) row indices of consecutive transitions inside one episode, windows overlapping by half."""
    stride = max(1, horizon // 2)
    starts = [i for i in range(0, len(episode) - horizon + 1, stride) if episode[i] == episode[i + horizon - 1]]
    return np.asarray(starts, dtype=np.int64)[:, None] + np.arange(horizon)[None, :]


def refine(
    surrogate: Surrogate,
    fk: ArmFK,
    space: ParameterSpace,
    state: np.ndarray,
    action: np.ndarray,
    next_state: np.ndarray,
    config: RefineConfig | None = None,
    progress: bool = False,
    episode: np.ndarray | None = None,
) -> RefineResult:
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
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float32)
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
        return trajectory_loss(
            pred.to(torch.float64), target.reshape(-1, target.shape[-1]).to(torch.float64), fk, cfg, poses[id(batch)]
        )

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
        results.append(
            {
                "start": start.tolist(),
                "theta": torch.sigmoid(best_z).numpy().astype(np.float64).tolist(),
                "val_loss": best,
                "curve": curve,
            }
        )
    bar.close()
    best = min(results, key=lambda r: r["val_loss"])
    theta = np.asarray(best["theta"])
    return RefineResult(theta=theta, values=space.denormalise(theta), val_loss=best["val_loss"], restarts=results)


# ---------------------------------------------------------------------------------------------- trust region
@dataclass
class TrustRegionConfig:
    """PhysAligner's outer loop: stages 1-3 repeated inside a box around the current estimate.

    ``radius`` is the box's half-width on the normalised scale: 0.2 of a 0.5x-2x log box is a factor
    of 4^0.2 = 1.32, about ±30 %. An accepted step re-centres the box there (and widens it by 1.5x,
    up to ``max_radius``); a rejected one halves it. The loop stops on the budget, after
    ``iterations``, when the radius falls below ``min_radius``, or after ``patience`` iterations
    without a real-loss decrease of at least ``tolerance`` (relative). A rejected step is retried at
    half its length before the box shrinks (``backtrack``).
    """

    radius: float = 0.2
    min_radius: float = 0.02
    max_radius: float = 0.4
    transitions: int = 1200  # recorded transitions simulated per iteration (a fresh random subset)
    samples_per_transition: int = 2  # dense θ: each transition gets its own θ, this many times
    epochs: int = 40
    batch_size: int = 512
    steps: int = 150  # Adam steps of stage 3 per iteration
    lr: float = 0.1
    iterations: int = 40
    tolerance: float = 2e-3
    patience: int = 4
    backtrack: bool = True  # a rejected step is retried at half its length (one more real-loss evaluation)
    seed: int = 0


def _torch_physical(space: ParameterSpace):
    """u (dim,) -> physical values (dim,), differentiable, as :meth:`ParameterSpace.denormalise`."""
    lo = torch.tensor([p.low for p in space.params], dtype=torch.float64)
    hi = torch.tensor([p.high for p in space.params], dtype=torch.float64)
    log = torch.tensor([p.log for p in space.params])
    ratio = torch.where(
        log, torch.log(torch.where(log, hi / lo.clamp_min(1e-300), torch.ones_like(hi))), torch.zeros_like(hi)
    )
    return lambda u: torch.where(log, lo * torch.exp(u * ratio), lo + u * (hi - lo))


class _AppliedTargets:
    """Differentiable applied targets of the fit transitions as a function of θ's backlash
    (:func:`~embodied_gym.sim.core.applied_targets` with ``xp=torch``, all episodes at once)."""

    def __init__(self, space: ParameterSpace, state, action, episode):
        from embodied_gym.physaligner.transitions import episode_starts
        from embodied_gym.sim.core import effects_from_physics
        from embodied_gym.sim.physics import ARM_JOINT_NAMES

        starts = episode_starts(episode)
        first = np.unique(starts)
        self.e_of_row = np.searchsorted(first, starts)
        self.t_of_row = np.arange(len(episode)) - starts
        lengths = np.diff(np.r_[first, len(episode)])
        T = int(lengths.max())
        cmds = np.empty((T, len(first), action.shape[1]))
        for e, (s0, n) in enumerate(zip(first, lengths)):
            cmds[:n, e] = action[s0 : s0 + n]
            cmds[n:, e] = action[s0 + n - 1]
        self.cmds = torch.as_tensor(cmds)
        self.initial = torch.as_tensor(state[first, : action.shape[1]])
        eff = effects_from_physics(space.base)
        self.latency = eff.latency_steps
        self.base14 = torch.as_tensor(eff.backlash)
        free = [(i, p.name.split(".", 1)[1]) for i, p in enumerate(space.params) if p.name.startswith("backlash.")]
        self.theta_idx = torch.tensor([i for i, _ in free], dtype=torch.long)
        self.joint_idx = torch.tensor([layout.ARM_INDICES[ARM_JOINT_NAMES.index(j)] for _, j in free], dtype=torch.long)
        self.physical = _torch_physical(space)
        self.varies = bool(free)

    def __call__(self, u: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        from embodied_gym.sim.core import applied_targets

        b14 = self.base14.index_put((self.joint_idx,), self.physical(u)[self.theta_idx])
        out = applied_targets(self.cmds, self.initial, self.latency, b14, xp=torch)  # (T, E, 14)
        return out[torch.as_tensor(self.t_of_row[rows]), torch.as_tensor(self.e_of_row[rows])]


def trust_region(
    sim,
    fk: ArmFK,
    space: ParameterSpace,
    episodes,
    real_loss,
    start: np.ndarray,
    config: TrustRegionConfig | None = None,
    loss_config: RefineConfig | None = None,
    budget_s: float | None = None,
    checkpoint=None,
    progress: bool = False,
) -> dict:
    """PhysAligner (arXiv 2507.05198, Sec. 3.2) as a trust-region method, see :class:`TrustRegionConfig`.

    Each iteration: (1) dense one-step rollouts in the real simulator from recorded states, one θ per
    transition drawn in the box around the centre c, plus one rollout at c; (2) a surrogate of the
    *change* of the next state from c's (inputs: (θ − c) / radius, state, applied target and its
    change), exact at c by construction; (3) Adam on θ alone through it, inside the box, on the
    one-step loss against the recorded next states (:func:`trajectory_loss`). The step is accepted
    only when ``real_loss`` (the real simulator, e.g. open-loop replay of the fit episodes) falls.
    ``checkpoint``: a JSON path; the loop state is written there after every iteration and a rerun
    resumes from it. Returns theta, history, snapshots, iterations, the last surrogate's curvature.
    """
    import json
    import time
    import warnings

    from scipy.stats import qmc

    from embodied_gym.atomic import write_json
    from embodied_gym.physaligner.surrogate import SurrogateTrainConfig, train_on_rows
    from embodied_gym.physaligner.transitions import episode_transitions, simulate_dense

    cfg = config or TrustRegionConfig()
    lcfg = loss_config or RefineConfig()
    t0 = time.perf_counter()
    state, action, next_rec, episode = episode_transitions(episodes)
    layouts = {e.index: e.layout for e in episodes}
    applied_fn = _AppliedTargets(space, state, action, episode)
    n_all, dim = len(state), space.dim
    rng = np.random.default_rng(cfg.seed)
    sobol = qmc.Sobol(d=dim, scramble=True, seed=cfg.seed)
    st = {
        "centre": np.asarray(start, float).tolist(),
        "radius": cfg.radius,
        "iteration": 0,
        "stall": 0,
        "elapsed_s": 0.0,
        "history": [],
        "snapshots": [],
        "iterations": [],
    }
    if checkpoint is not None and os.path.exists(checkpoint):
        st = json.loads(open(checkpoint).read())
        rng = np.random.default_rng([cfg.seed, st["iteration"]])
    elapsed0 = st["elapsed_s"]
    clock = lambda: elapsed0 + time.perf_counter() - t0
    c = np.asarray(st["centre"])
    if "loss" not in st:
        st["loss"] = float(real_loss(c))
        st["history"].append([1, clock(), st["loss"]])
        st["snapshots"].append([clock(), c.tolist()])
    f_c, rho = st["loss"], st["radius"]
    last = None
    bar = tqdm(
        total=cfg.iterations, initial=st["iteration"], desc="physaligner trust region", unit="it", disable=not progress
    )
    while st["iteration"] < cfg.iterations and rho >= cfg.min_radius and st["stall"] < cfg.patience:
        # Stop when the next iteration (as long as the last one) would overrun the budget.
        if budget_s is not None and clock() + st.get("last_iteration_s", 0.0) > budget_s:
            break
        t_it = time.perf_counter()
        k = st["iteration"]
        lo, hi = np.clip(c - rho, 0, 1), np.clip(c + rho, 0, 1)
        rows = np.sort(rng.choice(n_all, min(cfg.transitions, n_all), replace=False))
        # Stage 1: the centre, then dense θ (one per transition and sample) in the box.
        s_c, a_c = simulate_dense(sim, c[None], state, action, episode, rows, layouts)
        m = cfg.samples_per_transition
        rep = np.tile(np.arange(len(rows)), m)
        with warnings.catch_warnings():  # Sobol's balance wants powers of 2; a scrambled prefix is still well spread
            warnings.simplefilter("ignore", UserWarning)
            theta = lo + (hi - lo) * sobol.random(len(rep))
        order = np.argsort(rows[rep], kind="stable")
        rep, theta = rep[order], theta[order]
        s_th, a_th = simulate_dense(sim, theta, state, action, episode, rows[rep], layouts)
        # Stage 2: surrogate of the change from the centre's next state.
        x_theta = np.concatenate([(theta - c) / rho, np.zeros((len(rows), dim))])
        x_state = np.concatenate([state[rows[rep]], state[rows]])
        x_action = np.concatenate([np.concatenate([a_th, a_th - a_c[rep]], 1), np.concatenate([a_c, 0 * a_c], 1)])
        y = np.concatenate([state[rows[rep]] + s_th - s_c[rep], state[rows]])
        surrogate, log = train_on_rows(
            x_theta,
            x_state,
            x_action,
            y,
            groups=np.concatenate([rows[rep], rows]),
            train=SurrogateTrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed + k),
        )
        surrogate.eval()
        for p in surrogate.parameters():
            p.requires_grad_(False)
        S = torch.as_tensor(state[rows])
        S32, Sc = S.to(torch.float32), torch.as_tensor(s_c)
        A_c = torch.as_tensor(a_c)
        T = torch.as_tensor(next_rec[rows])
        with torch.no_grad():
            pose = fk(T[:, :14])
        c_t, rho_t = torch.as_tensor(c), float(rho)

        def loss_at(u: torch.Tensor) -> torch.Tensor:
            a_u = applied_fn(u, rows) if applied_fn.varies else A_c
            inp = ((u - c_t) / rho_t).to(torch.float32).expand(len(rows), -1)
            act = torch.cat([a_u, a_u - A_c], 1).to(torch.float32)
            pred = (surrogate(inp, S32, act).to(torch.float64) - S) + Sc
            return trajectory_loss(pred, T, fk, lcfg, pose)

        # Stage 3: θ alone, inside the box (sigmoid), from the centre.
        lo_t, hi_t = torch.as_tensor(lo), torch.as_tensor(hi)
        frac = np.clip((c - lo) / np.maximum(hi - lo, 1e-12), 1e-3, 1 - 1e-3)
        z = torch.tensor(np.log(frac / (1 - frac)), requires_grad=True)
        opt = torch.optim.Adam([z], lr=cfg.lr)
        with torch.no_grad():
            predicted_c = float(loss_at(c_t))
        best, best_u = predicted_c, c_t.clone()
        for _ in range(cfg.steps):
            u = lo_t + (hi_t - lo_t) * torch.sigmoid(z)
            loss = loss_at(u)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = loss.detach().item()
            if value < best:
                best, best_u = value, u.detach().clone()
        candidate = best_u.numpy()
        f_new = float(real_loss(candidate))
        backtracked = False
        if not f_new < f_c and cfg.backtrack:
            # The surrogate's direction may still be right where its step length is not: try half the step.
            half = c + 0.5 * (candidate - c)
            f_half = float(real_loss(half))
            if f_half < f_new:
                candidate, f_new, backtracked = half, f_half, True
        accepted = f_new < f_c
        gain = (f_c - f_new) / max(f_c, 1e-12)
        st["iterations"].append(
            {
                "iteration": k,
                "radius": rho,
                "surrogate_val_mse": log["val_mse"][-1],
                "predicted_loss_centre": predicted_c,
                "predicted_loss_step": best,
                "real_loss_centre": f_c,
                "real_loss_step": f_new,
                "accepted": bool(accepted),
                "half_step": backtracked,
            }
        )
        if backtracked and accepted:
            c, f_c = candidate, f_new
            rho *= 0.5  # the full step overshot: a smaller box next time
            st["snapshots"].append([clock(), c.tolist()])
        elif accepted:
            at_edge = np.any(
                (np.abs(candidate - lo) < 0.05 * rho) & (lo > 0) | (np.abs(candidate - hi) < 0.05 * rho) & (hi < 1)
            )
            c, f_c = candidate, f_new
            rho = min(cfg.max_radius, rho * 1.5) if at_edge else rho
            st["snapshots"].append([clock(), c.tolist()])
        else:
            rho *= 0.5
        st["stall"] = 0 if gain >= cfg.tolerance else st["stall"] + 1
        st["history"].append([k + 2, clock(), f_c])
        st.update(
            centre=c.tolist(),
            loss=f_c,
            radius=rho,
            iteration=k + 1,
            elapsed_s=clock(),
            last_iteration_s=time.perf_counter() - t_it,
        )
        last = (loss_at, c_t if not accepted else torch.as_tensor(c))
        if checkpoint is not None:
            write_json(checkpoint, st)
        bar.update()
        bar.set_postfix(loss=f"{f_c:.5f}", radius=f"{rho:.3f}", accepted=accepted)
    bar.close()
    curvature = loss = None
    if last is not None:
        loss_at, at = last
        curvature = np.diag(torch.autograd.functional.hessian(loss_at, at.to(torch.float64)).numpy())
        loss = float(loss_at(at))
    return {
        "theta": c,
        "loss": f_c,
        "history": [tuple(h) for h in st["history"]],
        "snapshots": [tuple(s) for s in st["snapshots"]],
        "iterations": st["iterations"],
        "curvature": curvature,
        "surrogate_loss": loss,
        "elapsed_s": st["elapsed_s"],
    }


def one_step_loss(
    sim,
    fk: ArmFK,
    episodes,
    theta_u: np.ndarray,
    physics=None,
    max_transitions: int = 2000,
    config: RefineConfig | None = None,
    seed: int = 0,
) -> float:
    """The stage-3 loss (:func:`trajectory_loss`) of the *real* one-step simulator: every (or a seeded
    subset of ``max_transitions``) recorded transition simulated from its recorded state under θ (or a
    whole ``physics``, latency and backlash included) and compared with the recorded next state."""
    from embodied_gym.physaligner.transitions import applied_actions, episode_transitions
    from embodied_gym.sim.core import effects_from_physics

    state, action, next_rec, episode = episode_transitions(episodes)
    rows = np.arange(len(state))
    if len(rows) > max_transitions:
        rows = np.sort(np.random.default_rng(seed).choice(len(rows), max_transitions, replace=False))
    physics = physics if physics is not None else sim.physics_of(theta_u)
    eff = effects_from_physics(physics)
    applied = applied_actions(state, action, episode, eff.latency_steps, eff.backlash, rows)
    layouts = {e.index: e.layout for e in episodes}
    sim.core.set_physics(physics)
    out = np.empty((len(rows), state.shape[1]))
    current = None
    for i, r in enumerate(rows):
        if episode[r] != current:
            current = episode[r]
            sim.place(layouts.get(int(current), {}))
        out[i] = sim.step(state[r], applied[i])
    with torch.no_grad():
        return float(
            trajectory_loss(torch.as_tensor(out), torch.as_tensor(next_rec[rows]), fk, config or RefineConfig())
        )
