"""PhysAligner's trust region (arXiv 2507.05198, Sec. 3.2) and the one-step loss its stage 3 minimises.

:func:`trust_region` repeats the paper's three stages inside a box around the current estimate of
θ: (1) dense one-step rollouts in the real simulator (:func:`.transitions.simulate_dense`), (2) a
surrogate of their outcome (:func:`.surrogate.train_on_rows`), (3) Adam on θ alone through the
surrogate, and accepts a step only when the real simulator's loss falls.

:func:`trajectory_loss` compares predicted with recorded next states: joint-position and
joint-velocity errors, plus TCP translation and rotation errors through differentiable forward
kinematics, the rotation term in the smooth form ‖R_pred − R_real‖²_F / 8 = sin²(θ/2) (SimplerEnv,
arXiv 2405.05941). :func:`one_step_loss` is the same loss of the real one-step simulator.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from embodied_gym.physaligner.fk import ArmFK
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.sim import robot as layout

if TYPE_CHECKING:
    from embodied_gym.physaligner.transitions import OneStepSimulator


@dataclass
class LossConfig:
    """Weights of the one-step loss (:func:`trajectory_loss`)."""

    w_joint: float = 1.0  # per rad² of arm joint position error
    w_velocity: float = 0.01  # per (rad/s)²
    w_translation: float = 10.0  # per m² of TCP error
    w_rotation: float = 1.0  # per unit of ‖ΔR‖²_F / 8


def trajectory_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    fk: ArmFK,
    cfg: LossConfig,
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


@dataclass
class _LoopState:
    """The trust region's loop state; the checkpoint JSON holds exactly these fields."""

    centre: np.ndarray  # normalised θ at the centre of the box
    radius: float
    iteration: int = 0
    stall: int = 0  # iterations in a row whose real-loss decrease fell short of ``tolerance``
    elapsed_s: float = 0.0
    history: list = field(default_factory=list)  # [entry, s, real loss at the centre]
    snapshots: list = field(default_factory=list)  # [s, centre]
    iterations: list = field(default_factory=list)  # one log entry per iteration
    loss: float | None = None  # real loss at the centre (None until evaluated)
    last_iteration_s: float = 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "centre": self.centre.tolist()}

    def centre_loss(self) -> float:
        """The real loss at the centre; RuntimeError before it was evaluated."""
        if self.loss is None:
            raise RuntimeError("the trust region's centre has no real loss yet (evaluate it before iterating)")
        return self.loss

    @classmethod
    def load(cls, path) -> _LoopState:
        with open(path) as f:
            saved = json.load(f)
        return cls(**{**saved, "centre": np.asarray(saved["centre"])})


@dataclass
class _Inputs:
    """What every iteration of one trust-region run reads: the simulator and the fit transitions."""

    sim: OneStepSimulator
    fk: ArmFK
    cfg: TrustRegionConfig
    loss_cfg: LossConfig
    state: np.ndarray  # (N, 28) s_{t-1}, in episode order
    action: np.ndarray  # (N, 14) recorded commands a_{t-1}
    next_state: np.ndarray  # (N, 28) recorded s_t
    episode: np.ndarray  # (N,) episode index of each transition
    layouts: dict  # episode index -> recorded object layout
    applied: _AppliedTargets


@dataclass
class _BoxSample:
    """Stage 1 of one iteration: the transitions simulated at the centre and under dense θ in the box."""

    lo: np.ndarray
    hi: np.ndarray
    rows: np.ndarray  # the transitions of this iteration
    rep: np.ndarray  # per dense θ: its index into ``rows``
    theta: np.ndarray  # dense θ, normalised
    s_c: np.ndarray  # next states at the centre, one per row
    a_c: np.ndarray  # applied targets at the centre
    s_th: np.ndarray  # next states under the dense θ
    a_th: np.ndarray  # applied targets under the dense θ


def _simulate_box(run: _Inputs, c: np.ndarray, rho: float, rng, sobol) -> _BoxSample:
    """Stage 1: the centre, then dense θ (one per transition and sample) in the box."""
    from embodied_gym.physaligner.transitions import simulate_dense

    cfg, n_all = run.cfg, len(run.state)
    lo, hi = np.clip(c - rho, 0, 1), np.clip(c + rho, 0, 1)
    rows = np.sort(rng.choice(n_all, min(cfg.transitions, n_all), replace=False))
    s_c, a_c = simulate_dense(run.sim, c[None], run.state, run.action, run.episode, rows, run.layouts)
    rep = np.tile(np.arange(len(rows)), cfg.samples_per_transition)
    with warnings.catch_warnings():  # Sobol's balance wants powers of 2; a scrambled prefix is still well spread
        warnings.simplefilter("ignore", UserWarning)
        theta = lo + (hi - lo) * sobol.random(len(rep))
    order = np.argsort(rows[rep], kind="stable")
    rep, theta = rep[order], theta[order]
    s_th, a_th = simulate_dense(run.sim, theta, run.state, run.action, run.episode, rows[rep], run.layouts)
    return _BoxSample(lo, hi, rows, rep, theta, s_c, a_c, s_th, a_th)


def _fit_surrogate(run: _Inputs, box: _BoxSample, c: np.ndarray, rho: float, iteration: int):
    """Stage 2: a surrogate of the change from the centre's next state, frozen; returns it and its log."""
    from embodied_gym.physaligner.surrogate import SurrogateTrainConfig, train_on_rows

    rows, rep, state = box.rows, box.rep, run.state
    x_theta = np.concatenate([(box.theta - c) / rho, np.zeros((len(rows), len(c)))])
    x_state = np.concatenate([state[rows[rep]], state[rows]])
    x_action = np.concatenate(
        [np.concatenate([box.a_th, box.a_th - box.a_c[rep]], 1), np.concatenate([box.a_c, 0 * box.a_c], 1)]
    )
    y = np.concatenate([state[rows[rep]] + box.s_th - box.s_c[rep], state[rows]])
    train = SurrogateTrainConfig(epochs=run.cfg.epochs, batch_size=run.cfg.batch_size, seed=run.cfg.seed + iteration)
    surrogate, log = train_on_rows(x_theta, x_state, x_action, y, groups=np.concatenate([rows[rep], rows]), train=train)
    surrogate.eval()
    for p in surrogate.parameters():
        p.requires_grad_(False)
    return surrogate, log


def _surrogate_loss(
    run: _Inputs, surrogate, box: _BoxSample, c: np.ndarray, rho: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """u -> the one-step loss (:func:`trajectory_loss`) of the iteration's transitions, predicted by the
    surrogate: differentiable in u, backlash included through the applied targets."""
    rows = box.rows
    S = torch.as_tensor(run.state[rows])
    S32, Sc = S.to(torch.float32), torch.as_tensor(box.s_c)
    A_c = torch.as_tensor(box.a_c)
    T = torch.as_tensor(run.next_state[rows])
    with torch.no_grad():
        pose = run.fk(T[:, :14])
    c_t, rho_t = torch.as_tensor(c), float(rho)

    def loss_at(u: torch.Tensor) -> torch.Tensor:
        a_u = run.applied(u, rows) if run.applied.varies else A_c
        inp = ((u - c_t) / rho_t).to(torch.float32).expand(len(rows), -1)
        act = torch.cat([a_u, a_u - A_c], 1).to(torch.float32)
        pred = (surrogate(inp, S32, act).to(torch.float64) - S) + Sc
        return trajectory_loss(pred, T, run.fk, run.loss_cfg, pose)

    return loss_at


def _refine_in_box(loss_at, c: np.ndarray, box: _BoxSample, cfg: TrustRegionConfig) -> tuple[float, float, np.ndarray]:
    """Stage 3: θ alone by Adam, inside the box (a sigmoid), from the centre. Returns the predicted loss
    at the centre, the best predicted loss and the θ that reached it."""
    lo_t, hi_t = torch.as_tensor(box.lo), torch.as_tensor(box.hi)
    frac = np.clip((c - box.lo) / np.maximum(box.hi - box.lo, 1e-12), 1e-3, 1 - 1e-3)
    z = torch.tensor(np.log(frac / (1 - frac)), requires_grad=True)
    opt = torch.optim.Adam([z], lr=cfg.lr)
    c_t = torch.as_tensor(c)
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
    return predicted_c, best, best_u.numpy()


def _check_step(real_loss, c: np.ndarray, f_c: float, candidate: np.ndarray, backtrack: bool):
    """The real loss at the surrogate's step (and at half of it when the full step does not decrease
    it); returns (step, its real loss, whether it is the half step)."""
    f_new = float(real_loss(candidate))
    if not f_new < f_c and backtrack:
        # The surrogate's direction may still be right where its step length is not: try half the step.
        half = c + 0.5 * (candidate - c)
        f_half = float(real_loss(half))
        if f_half < f_new:
            return half, f_half, True
    return candidate, f_new, False


def _move_box(st: _LoopState, cfg: TrustRegionConfig, box: _BoxSample, step, f_new: float, half: bool, clock) -> None:
    """Re-centre the box on an accepted step (halved after a half step, widened when the step reached
    its edge) or halve it after a rejected one; count the iterations without progress."""
    rho, f_c = st.radius, st.centre_loss()
    accepted = f_new < f_c
    if accepted and half:
        st.centre, st.loss, st.radius = step, f_new, rho * 0.5  # the full step overshot: a smaller box
    elif accepted:
        lo, hi = box.lo, box.hi
        at_edge = np.any((np.abs(step - lo) < 0.05 * rho) & (lo > 0) | (np.abs(step - hi) < 0.05 * rho) & (hi < 1))
        st.centre, st.loss = step, f_new
        st.radius = min(cfg.max_radius, rho * 1.5) if at_edge else rho
    else:
        st.radius = rho * 0.5
    if accepted:
        st.snapshots.append([clock(), st.centre.tolist()])
    gain = (f_c - f_new) / max(f_c, 1e-12)
    st.stall = 0 if gain >= cfg.tolerance else st.stall + 1


def _iterate(run: _Inputs, st: _LoopState, real_loss, rng, sobol, clock) -> tuple[bool, Callable]:
    """One trust-region iteration (stages 1-3, the real-loss check, the box's move); returns whether
    the step was accepted and the iteration's surrogate loss (for the curvature at the end)."""
    k, c, rho, f_c = st.iteration, st.centre, st.radius, st.centre_loss()
    box = _simulate_box(run, c, rho, rng, sobol)
    surrogate, log = _fit_surrogate(run, box, c, rho, k)
    loss_at = _surrogate_loss(run, surrogate, box, c, rho)
    predicted_c, predicted_step, candidate = _refine_in_box(loss_at, c, box, run.cfg)
    step, f_new, half = _check_step(real_loss, c, f_c, candidate, run.cfg.backtrack)
    accepted = f_new < f_c
    st.iterations.append(
        {
            "iteration": k,
            "radius": rho,
            "surrogate_val_mse": log["val_mse"][-1],
            "predicted_loss_centre": predicted_c,
            "predicted_loss_step": predicted_step,
            "real_loss_centre": f_c,
            "real_loss_step": f_new,
            "accepted": bool(accepted),
            "half_step": half,
        }
    )
    _move_box(st, run.cfg, box, step, f_new, half, clock)
    st.history.append([k + 2, clock(), st.loss])
    return accepted, loss_at


def _should_continue(st: _LoopState, cfg: TrustRegionConfig, budget_s: float | None, clock) -> bool:
    if st.iteration >= cfg.iterations or st.radius < cfg.min_radius or st.stall >= cfg.patience:
        return False
    # Stop when the next iteration (as long as the last one) would overrun the budget.
    return budget_s is None or clock() + st.last_iteration_s <= budget_s


def trust_region(
    sim,
    fk: ArmFK,
    space: ParameterSpace,
    episodes,
    real_loss,
    start: np.ndarray,
    config: TrustRegionConfig | None = None,
    loss_config: LossConfig | None = None,
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
    from scipy.stats import qmc

    from embodied_gym.atomic import write_json
    from embodied_gym.physaligner.transitions import episode_transitions

    cfg = config or TrustRegionConfig()
    t0 = time.perf_counter()
    state, action, next_state, episode = episode_transitions(episodes)
    layouts = {e.index: e.layout for e in episodes}
    applied = _AppliedTargets(space, state, action, episode)
    run = _Inputs(sim, fk, cfg, loss_config or LossConfig(), state, action, next_state, episode, layouts, applied)
    rng = np.random.default_rng(cfg.seed)
    sobol = qmc.Sobol(d=space.dim, scramble=True, seed=cfg.seed)
    st = _LoopState(centre=np.asarray(start, float), radius=cfg.radius)
    if checkpoint is not None and os.path.exists(checkpoint):
        st = _LoopState.load(checkpoint)
        rng = np.random.default_rng([cfg.seed, st.iteration])
    elapsed0 = st.elapsed_s

    def clock() -> float:
        return elapsed0 + time.perf_counter() - t0

    if st.loss is None:
        st.loss = float(real_loss(st.centre))
        st.history.append([1, clock(), st.loss])
        st.snapshots.append([clock(), st.centre.tolist()])
    last = None
    bar = tqdm(
        total=cfg.iterations,
        initial=st.iteration,
        desc="physaligner trust region",
        unit="it",
        disable=None if progress else True,
    )
    while _should_continue(st, cfg, budget_s, clock):
        t_it = time.perf_counter()
        accepted, last = _iterate(run, st, real_loss, rng, sobol, clock)
        st.iteration += 1
        st.elapsed_s, st.last_iteration_s = clock(), time.perf_counter() - t_it
        if checkpoint is not None:
            write_json(checkpoint, st.to_json())
        bar.update()
        bar.set_postfix(loss=f"{st.loss:.5f}", radius=f"{st.radius:.3f}", accepted=accepted)
    bar.close()
    return _result(st, last)


def _result(st: _LoopState, loss_at) -> dict:
    """trust_region's return value; the curvature of the last surrogate's loss at the final centre."""
    curvature = loss = None
    if loss_at is not None:
        at = torch.as_tensor(st.centre).to(torch.float64)
        curvature = np.diag(torch.autograd.functional.hessian(loss_at, at).numpy())
        loss = float(loss_at(at))
    return {
        "theta": st.centre,
        "loss": st.loss,
        "history": [tuple(h) for h in st.history],
        "snapshots": [tuple(s) for s in st.snapshots],
        "iterations": st.iterations,
        "curvature": curvature,
        "surrogate_loss": loss,
        "elapsed_s": st.elapsed_s,
    }


def one_step_loss(
    sim,
    fk: ArmFK,
    episodes,
    theta_u: np.ndarray,
    physics=None,
    max_transitions: int = 2000,
    config: LossConfig | None = None,
    seed: int = 0,
) -> float:
    """The stage-3 loss (:func:`trajectory_loss`) of the *real* one-step simulator: every (or a seeded
    subset of ``max_transitions``) recorded transition simulated from its recorded state under θ (or a
    whole ``physics``, latency and backlash included) and compared with the recorded next state."""
    from embodied_gym.physaligner.transitions import applied_actions, episode_transitions
    from embodied_gym.sim.core import effects_from_physics

    state, action, next_rec, episode = episode_transitions(episodes)
    rows: np.ndarray = np.arange(len(state))
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
        return float(trajectory_loss(torch.as_tensor(out), torch.as_tensor(next_rec[rows]), fk, config or LossConfig()))
