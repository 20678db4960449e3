"""Baseline calibrators behind the same interface as PhysAligner.

- :func:`simulated_annealing`: SimplerEnv's recipe (SPEC §1) — parameters normalised to [0, 1],
  ``steps`` iterations (2000 by default), temperature 1.5 falling linearly to 0, neighbour = a
  uniform jump of ±0.5 on the normalised scale, clipped; Metropolis acceptance.
- :func:`cma_es`: CMA-ES from the ``cma`` package on the normalised box.

Both minimise a callable on normalised θ (the open-loop replay objective in practice), can stop
at a wall-time budget, and return the best point with its history (evaluation, wall time, best).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class SearchResult:
    theta: np.ndarray
    value: float
    evaluations: int
    wall_time_s: float
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (evaluation, seconds, best so far)


def simulated_annealing(objective: Callable[[np.ndarray], float], start: np.ndarray, steps: int = 2000,
                        temperature: float = 1.5, step_size: float = 0.5, seed: int = 0,
                        budget_s: float | None = None, progress: bool = False) -> SearchResult:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    x = np.clip(np.asarray(start, dtype=np.float64), 0.0, 1.0)
    fx = objective(x)
    best, fbest = x.copy(), fx
    history = [(1, time.perf_counter() - t0, fbest)]
    for k in tqdm(range(steps), desc="simulated annealing", disable=not progress):
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            break
        temp = temperature * (1 - k / steps)
        y = np.clip(x + rng.uniform(-step_size, step_size, x.shape), 0.0, 1.0)
        fy = objective(y)
        if fy < fx or (temp > 0 and rng.random() < math.exp(-(fy - fx) / temp)):
            x, fx = y, fy
        if fy < fbest:
            best, fbest = y.copy(), fy
        history.append((k + 2, time.perf_counter() - t0, fbest))
    return SearchResult(best, fbest, len(history), time.perf_counter() - t0, history)


def cma_es(objective: Callable[[np.ndarray], float], start: np.ndarray, sigma: float = 0.25,
           max_evaluations: int = 2000, seed: int = 0, budget_s: float | None = None) -> SearchResult:
    import cma

    t0 = time.perf_counter()
    es = cma.CMAEvolutionStrategy(np.clip(start, 0.0, 1.0), sigma,
                                  {"bounds": [0.0, 1.0], "seed": seed + 1, "verbose": -9,
                                   "maxfevals": max_evaluations})
    history, n = [], 0
    best, fbest = np.asarray(start, dtype=np.float64), math.inf
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
            history.append((n, time.perf_counter() - t0, fbest))
    return SearchResult(best, fbest, n, time.perf_counter() - t0, history)
