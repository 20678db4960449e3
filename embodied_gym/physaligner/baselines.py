"""Baseline calibrators behind the same interface as PhysAligner.

- :func:`simulated_annealing`: SimplerEnv's recipe (arXiv 2405.05941) — parameters normalised to [0, 1],
  ``steps`` iterations (2000 by default), temperature 1.5 falling linearly to 0, neighbour = a
  uniform jump of ±0.5 on the normalised scale, clipped; Metropolis acceptance.
- :func:`cma_es`: CMA-ES from the ``cma`` package on the normalised box.
- :func:`mujoco_sysid`: MuJoCo's own system identification, ``mujoco.sysid.optimize`` — box-bounded
  Gauss-Newton / Levenberg-Marquardt (``mujoco.minimize.least_squares``) with finite-difference
  Jacobians — over a ``mujoco.sysid.ParameterDict`` of our named parameters. Its residual is the same
  open-loop replay as the other methods' objective, in least-squares form
  (:meth:`ReplayObjective.residuals`), rather than ``mujoco.sysid``'s sensor rollouts: that keeps the
  data, the replay (object layout, gripper mapping) and the evaluation identical across methods.

All minimise on normalised θ, can stop at a wall-time budget, and return the best point with its
history (evaluation, wall time, best).
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SearchResult:
    theta: np.ndarray
    value: float
    evaluations: int
    wall_time_s: float
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (evaluation, seconds, best so far)
    snapshots: list[tuple[float, list[float]]] = field(default_factory=list)  # (seconds, best θ) at improvements
    std: np.ndarray | None = None  # per-parameter spread at the end (CMA-ES), normalised scale
    jacobian: np.ndarray | None = None  # residual Jacobian at the end (Gauss-Newton)


def simulated_annealing(
    objective: Callable[[np.ndarray], float],
    start: np.ndarray,
    steps: int = 2000,
    temperature: float = 1.5,
    step_size: float = 0.5,
    seed: int = 0,
    budget_s: float | None = None,
    progress: bool = False,
) -> SearchResult:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    x = np.clip(np.asarray(start, dtype=np.float64), 0.0, 1.0)
    fx = objective(x)
    best, fbest = x.copy(), fx
    history = [(1, time.perf_counter() - t0, fbest)]
    snapshots = [(history[0][1], best.tolist())]
    for k in tqdm(range(steps), desc="simulated annealing", disable=None if progress else True):
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            break
        temp = temperature * (1 - k / steps)
        y = np.clip(x + rng.uniform(-step_size, step_size, x.shape), 0.0, 1.0)
        fy = objective(y)
        if fy < fx or (temp > 0 and rng.random() < math.exp(-(fy - fx) / temp)):
            x, fx = y, fy
        if fy < fbest:
            best, fbest = y.copy(), fy
            snapshots.append((time.perf_counter() - t0, best.tolist()))
        history.append((k + 2, time.perf_counter() - t0, fbest))
    return SearchResult(best, fbest, len(history), time.perf_counter() - t0, history, snapshots=snapshots)


def cma_es(
    objective: Callable[[np.ndarray], float],
    start: np.ndarray,
    sigma: float = 0.25,
    max_evaluations: int = 2000,
    seed: int = 0,
    budget_s: float | None = None,
    progress: bool = False,
) -> SearchResult:
    import cma
    from tqdm import tqdm

    t0 = time.perf_counter()
    es = cma.CMAEvolutionStrategy(
        np.clip(start, 0.0, 1.0),
        sigma,
        {"bounds": [0.0, 1.0], "seed": seed + 1, "verbose": -9, "maxfevals": max_evaluations},
    )
    history, snapshots, n = [], [], 0
    best, fbest = np.asarray(start, dtype=np.float64), math.inf
    bar = tqdm(total=max_evaluations, desc="CMA-ES", unit="eval", disable=None if progress else True)
    while not es.stop():
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            break
        xs = es.ask()
        fs = [objective(np.asarray(x)) for x in xs]
        es.tell(xs, fs)
        for x, f in zip(xs, fs):
            n += 1
            if f < fbest:
                best, fbest = np.asarray(x, dtype=np.float64), f
                snapshots.append((time.perf_counter() - t0, best.tolist()))
            history.append((n, time.perf_counter() - t0, fbest))
        bar.update(len(xs))
    bar.close()
    return SearchResult(
        best, fbest, n, time.perf_counter() - t0, history, snapshots=snapshots, std=np.asarray(es.result.stds)
    )


class _BudgetSpent(Exception):
    pass


def mujoco_sysid(
    residuals: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    names: list[str],
    max_iterations: int = 20,
    fd_step: float = 1e-3,
    budget_s: float | None = None,
    progress: bool = False,
) -> SearchResult:
    """Gauss-Newton through ``mujoco.sysid.optimize`` on ``residuals(θ_normalised) -> vector``.

    ``fd_step`` is the finite-difference perturbation on the normalised scale: MuJoCo's default (1.5e-8)
    is meant for smooth models, and a grasp makes the replay only piecewise smooth in θ.
    """
    from mujoco import sysid
    from tqdm import tqdm

    t0 = time.perf_counter()
    params = sysid.ParameterDict({n: sysid.Parameter(n, float(x), 0.0, 1.0) for n, x in zip(names, start)})
    best_theta = np.clip(np.asarray(start, dtype=np.float64), 0.0, 1.0)
    best_value = math.inf
    history: list[tuple[int, float, float]] = []
    snapshots: list[tuple[float, list[float]]] = []
    n = 0
    bar = tqdm(desc="mujoco.sysid (residual evaluations)", disable=None if progress else True, unit="eval")

    def residual_fn(x, _params):
        nonlocal n, best_theta, best_value
        cols = np.asarray(x, dtype=np.float64).reshape(len(names), -1)
        out = []
        for k in range(cols.shape[1]):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                raise _BudgetSpent
            r = residuals(cols[:, k])
            n += 1
            bar.update(1)
            value = float(r @ r)
            if value < best_value:
                best_theta, best_value = cols[:, k].copy(), value
                snapshots.append((time.perf_counter() - t0, best_theta.tolist()))
            history.append((n, time.perf_counter() - t0, best_value))
            out.append(r)
        return [np.stack(out, axis=1)], None, None

    jacobian = None
    try:
        # output=: mujoco.minimize prints every iteration otherwise; the progress bar stands in for it.
        _, opt = sysid.optimize(
            params,
            residual_fn,
            optimizer="mujoco",
            verbose=False,
            max_iters=max_iterations,
            eps=fd_step,
            output=io.StringIO(),
        )
        jacobian = np.asarray(opt.jac)
    except _BudgetSpent:
        pass
    finally:
        bar.close()
    return SearchResult(
        best_theta, best_value, n, time.perf_counter() - t0, history, snapshots=snapshots, jacobian=jacobian
    )
