"""One calibration run, any method, one result file and a report beside it.

:func:`calibrate` splits the dataset's episodes into fit and held-out sets (or takes the held-out
episodes from a ``test_dataset``), and then, for every method alike:

1. profiles the actuation delay (``latency_steps``, whole control steps) over a few candidates by
   the real one-step loss at the starting physics (:func:`profile_latency`);
2. runs the chosen method on the fit episodes at that delay, within ``budget_s``;
3. records the neighbouring delays' one-step loss at the method's result (a diagnostic);
4. the acceptance guard: replays the held-out episodes (which no method saw) under the starting
   physics and under the method's result, and keeps whichever replays better, so the result is
   never worse than the start there. The result JSON (``acceptance``) and the CLI say plainly when
   calibration found nothing better.

It writes a result JSON that ``gym.make(id, physics="result.json")`` and ``embodied-gym replay
--physics`` read directly: values (a ``PhysicsParams``, delay and backlash included), bounds,
frozen set, method, the dataset (path and content hash), held-out errors before and after
(open-loop replay), the method's own result before the guard, the delay profile, wall time per
stage, per-parameter uncertainty where the method gives one, the parameters the data does not
constrain, and the package version. A report (Markdown + PNG plots, :mod:`.report`) is written
beside it. PhysAligner's trust-region loop is checkpointed in ``<out>.work/`` after every
iteration, so a killed run resumes there.

Methods: ``physaligner`` (the paper's three stages, arXiv 2507.05198 Sec. 3.2, as trust-region
iterations checked by the real simulator: :func:`.refine.trust_region`), ``sysid``
(``mujoco.sysid``'s Gauss-Newton), ``cmaes`` and ``sa`` (SimplerEnv's simulated annealing).
``RECOMMENDED`` is the method with the lowest held-out error within the same budget in the
calibration benchmark (``benchmarks/calibration.py``; BENCHMARKS.md, Calibration section).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from embodied_gym.atomic import write_json
from embodied_gym.configs import setting
from embodied_gym.data.reader import Episode, load_episodes
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.transitions import dataset_hash

METHODS = ("physaligner", "sysid", "cmaes", "sa")
RECOMMENDED = "physaligner"

# A parameter counts as unconstrained by the data when moving it by 10 % of its (normalised) box
# raises the fit loss by less than 1 % (second-order estimate from the loss curvature).
_PROBE_STEP = 0.1
_PROBE_RISE = 0.01


@dataclass
class CalibrationConfig:
    """How one calibration runs; also the ``embodied-gym calibrate`` command line and its ``--config`` YAML."""

    method: str = setting(
        RECOMMENDED,
        choices=METHODS,
        help=f"calibration method (default {RECOMMENDED}, the best in benchmarks/calibration.py)",
    )
    held_out: float = setting(
        0.3, help="fraction of episodes kept out of the fit: the acceptance guard and the evaluation"
    )
    test_dataset: str | None = setting(
        None, help="judge the result on this dataset's episodes instead (then all of --dataset is fitted)"
    )
    latency_candidates: tuple[int, ...] = setting(
        (0, 1, 2, 3),
        flag="--latency",
        help="actuation delays profiled (control steps); none keeps the base physics' delay",
    )
    surrogate_epochs: int = setting(
        40, aliases=("--epochs",), help="physaligner stage 2: epochs per trust-region iteration"
    )
    refine_steps: int = setting(150, help="physaligner stage 3: Adam steps per trust-region iteration")
    tr_radius: float = setting(
        0.2, help="physaligner: initial trust-region half-width (normalised; about ±30 % of a 0.5x-2x box)"
    )
    tr_transitions: int = setting(1200, help="physaligner: recorded transitions simulated per iteration")
    tr_samples: int = setting(2, help="physaligner: dense θ per transition and iteration")
    tr_iterations: int = setting(40, help="physaligner: at most this many trust-region iterations")
    sa_steps: int = setting(2000, help="sa: annealing steps (SimplerEnv: 2000)")
    cmaes_evaluations: int = setting(2000, help="cmaes: objective evaluations")
    sysid_iterations: int = setting(20, help="sysid: Gauss-Newton iterations")
    budget_s: float | None = setting(
        None, flag="--budget", help="wall-time budget of the search, seconds (every method)"
    )
    # Small tensors gain nothing from more threads, and multi-threaded torch slows down badly on cores
    # that other jobs share (BENCHMARKS.md, Calibration section).
    torch_threads: int | None = setting(1, help="physaligner stages 2-3: torch threads")
    seed: int = setting(0, help="seed of the split and every method")


@dataclass
class MethodOutput:
    theta: np.ndarray  # normalised
    times: dict[str, float]
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (evaluation, s, best fit loss)
    snapshots: list[tuple[float, list[float]]] = field(default_factory=list)  # (s, best θ so far, normalised)
    std_u: np.ndarray | None = None  # per-parameter uncertainty on the normalised scale
    curvature: np.ndarray | None = None  # diagonal of the fit loss's Hessian (normalised scale)
    loss: float | None = None  # fit loss at theta, in the curvature's units
    logs: dict = field(default_factory=dict)


def split_episodes(episodes: list[Episode], held_out: float, seed: int) -> tuple[list[Episode], list[Episode]]:
    """(fit, held out), held out a seeded random ``held_out`` fraction (at least one episode)."""
    if len(episodes) < 2:
        raise ValueError(f"the dataset has {len(episodes)} episode(s); calibration needs at least 2 (fit + held out)")
    order = np.random.default_rng(seed).permutation(len(episodes))
    n_held = min(len(episodes) - 1, max(1, int(round(held_out * len(episodes)))))
    held = [episodes[i] for i in sorted(order[:n_held])]
    fit = [episodes[i] for i in sorted(order[n_held:])]
    return fit, held


def _run_physaligner(fit, task, space, start, cfg, work: Path, progress: bool) -> MethodOutput:
    """PhysAligner's three stages as trust-region iterations (:func:`.refine.trust_region`), each step
    checked by open-loop replay of the fit episodes in the real simulator."""
    from embodied_gym.physaligner.fk import ArmFK
    from embodied_gym.physaligner.objective import ReplayObjective
    from embodied_gym.physaligner.refine import TrustRegionConfig, trust_region
    from embodied_gym.physaligner.transitions import OneStepSimulator

    t = time.perf_counter()
    sim = OneStepSimulator(task, space)
    fk = ArmFK(sim.model, sim.idx)
    objective = ReplayObjective(fit, task, space)
    tr_cfg = TrustRegionConfig(
        radius=cfg.tr_radius,
        transitions=cfg.tr_transitions,
        samples_per_transition=cfg.tr_samples,
        epochs=cfg.surrogate_epochs,
        steps=cfg.refine_steps,
        iterations=cfg.tr_iterations,
        seed=cfg.seed,
    )
    key = f"trust-region-{space.fingerprint()}-{dataset_hash(fit)[:12]}-{_digest(asdict(tr_cfg))}"
    out = trust_region(
        sim,
        fk,
        space,
        fit,
        objective,
        start,
        tr_cfg,
        budget_s=cfg.budget_s,
        checkpoint=work / f"{key}.json",
        progress=progress,
    )
    objective.close()
    accepted = sum(it["accepted"] for it in out["iterations"])
    return MethodOutput(
        out["theta"],
        {"trust_region_s": time.perf_counter() - t},
        history=out["history"],
        snapshots=_thin(out["snapshots"]),
        curvature=out["curvature"],
        loss=out["surrogate_loss"],
        logs={"iterations": out["iterations"], "accepted_steps": accepted, "evaluations": len(out["history"])},
    )


def _run_search(fit, task, space, start, cfg, progress: bool) -> MethodOutput:
    from embodied_gym.physaligner.baselines import cma_es, mujoco_sysid, simulated_annealing
    from embodied_gym.physaligner.objective import ReplayObjective

    objective = ReplayObjective(fit, task, space)
    t = time.perf_counter()
    std_u = curvature = loss = None
    if cfg.method == "sa":
        res = simulated_annealing(
            objective, start, steps=cfg.sa_steps, seed=cfg.seed, budget_s=cfg.budget_s, progress=progress
        )
    elif cfg.method == "cmaes":
        res = cma_es(
            objective,
            start,
            max_evaluations=cfg.cmaes_evaluations,
            seed=cfg.seed,
            budget_s=cfg.budget_s,
            progress=progress,
        )
        std_u = res.std
    else:
        res = mujoco_sysid(
            objective.residuals,
            start,
            space.names,
            max_iterations=cfg.sysid_iterations,
            budget_s=cfg.budget_s,
            progress=progress,
        )
        if res.jacobian is not None:
            # Gauss-Newton's view of the loss ‖r‖²: Hessian ≈ 2 JᵀJ, covariance ≈ σ² (JᵀJ)⁻¹.
            jtj = res.jacobian.T @ res.jacobian
            curvature, loss = 2 * np.diag(jtj), res.value
            dof = max(1, res.jacobian.shape[0] - res.jacobian.shape[1])
            std_u = np.sqrt(np.clip(np.diag(np.linalg.pinv(jtj)) * res.value / dof, 0, None))
    objective.close()
    return MethodOutput(
        res.theta,
        {"search_s": time.perf_counter() - t},
        history=res.history,
        snapshots=_thin(res.snapshots),
        std_u=std_u,
        curvature=curvature,
        loss=loss,
        logs={"evaluations": res.evaluations},
    )


def _thin(snapshots: list, keep: int = 24) -> list:
    """At most ``keep`` snapshots, spread evenly in time, always with the first and the last."""
    if len(snapshots) <= keep:
        return list(snapshots)
    times = np.array([s[0] for s in snapshots])
    picks = {int(np.searchsorted(times, t)) for t in np.linspace(times[0], times[-1], keep)}
    return [snapshots[i] for i in sorted(picks | {0, len(snapshots) - 1}) if i < len(snapshots)]


def unconstrained(names: list[str], curvature: np.ndarray | None, loss: float | None) -> list[str] | None:
    """Parameters whose 10 %-of-box move raises the fit loss by < 1 % (None when unknown)."""
    if curvature is None or loss is None:
        return None
    rise = 0.5 * np.abs(curvature) * _PROBE_STEP**2
    return [n for n, r in zip(names, rise) if r < _PROBE_RISE * max(loss, 1e-12)]


def _digest(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def with_latency(space: ParameterSpace, latency_steps: int) -> ParameterSpace:
    from dataclasses import replace

    return space.with_base(replace(space.base, latency_steps=int(latency_steps)))


def profile_latency(
    episodes, task: str, space: ParameterSpace, theta: np.ndarray, candidates
) -> tuple[int, dict[int, float]]:
    """The actuation delay (control steps) among ``candidates`` whose *one-step* loss in the real
    simulator (:func:`.refine.one_step_loss`) at θ is lowest, and every candidate's loss. A whole-step
    delay is not a box dimension, so every method profiles it this way before its continuous search.
    One-step transitions start from recorded states, so wrong gains do not drift the comparison the
    way they drift an open-loop replay (where, at nominal physics, a wrong delay can replay better)."""
    from embodied_gym.physaligner.fk import ArmFK
    from embodied_gym.physaligner.refine import one_step_loss
    from embodied_gym.physaligner.transitions import OneStepSimulator

    sim = OneStepSimulator(task, space)
    fk = ArmFK(sim.model, sim.idx)
    values = space.denormalise(theta)
    scores = {
        int(L): one_step_loss(sim, fk, episodes, theta, physics=with_latency(space, L).to_physics(values))
        for L in candidates
    }
    return min(scores, key=scores.__getitem__), scores


def calibrate(
    dataset: str | os.PathLike,
    task: str,
    out: str | os.PathLike,
    space: ParameterSpace | None = None,
    config: CalibrationConfig | None = None,
    progress: bool = True,
    report: bool = True,
) -> dict:
    """Calibrate (see module docstring); returns the result JSON's content.

    Safe by default: the delay is profiled, the method runs on the fit episodes, and the result is the
    best of {the starting physics, the method's result} by open-loop replay of the held-out episodes
    (or ``config.test_dataset``), which the method never saw, so it is never worse than the start
    there. ``space`` None: :func:`~embodied_gym.physaligner.space.default_free` of the fit episodes.
    """
    cfg = config or CalibrationConfig()
    if cfg.method not in METHODS:
        raise ValueError(f"unknown method {cfg.method!r}; valid: {list(METHODS)}")
    out = Path(out)
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    episodes = load_episodes(dataset)
    if cfg.test_dataset:
        fit, held = episodes, load_episodes(cfg.test_dataset)
    else:
        fit, held = split_episodes(episodes, cfg.held_out, cfg.seed)
    start_space = space if space is not None else _default_space(fit, dataset)
    fitted = _fit(fit, task, start_space, cfg, work, progress)
    guard = _acceptance_guard(held, task, start_space, fitted, judged_on_test_dataset=bool(cfg.test_dataset))
    result_json = _result_json(dataset, task, episodes, fit, held, start_space, cfg, fitted, guard)
    write_json(out, result_json)
    if report:
        from embodied_gym.physaligner.report import write_report

        write_report(result_json, out, held)
    return result_json


def _default_space(fit: list[Episode], dataset) -> ParameterSpace:
    """The default free set (:func:`~embodied_gym.physaligner.space.default_free`) of the fit episodes."""
    from embodied_gym.physaligner.space import default_free, parameter_names

    free = default_free(fit)
    if not free:
        raise ValueError(
            f"no arm joint moves by {0.05} rad or more in the fit episodes of {dataset}; "
            f"nothing to calibrate from (pass a space with the parameters to fit)"
        )
    return ParameterSpace(frozen=[n for n in parameter_names() if n not in free])


@dataclass
class _Fitted:
    """Steps 1-3 of a calibration: the delay profile and the method's result at that delay."""

    space: ParameterSpace  # the start space at the profiled delay
    res: MethodOutput
    latency_scores: dict | None
    times: dict[str, float]


def _fit(fit, task: str, space: ParameterSpace, cfg: CalibrationConfig, work: Path, progress: bool) -> _Fitted:
    """Profile the delay, run the method at it, and record the neighbouring delays' loss at its result."""
    start = space.normalise(space.values_of(space.base))
    times = {}
    latency_scores: dict | None = None
    if cfg.latency_candidates:
        t = time.perf_counter()
        latency, latency_scores = profile_latency(fit, task, space, start, cfg.latency_candidates)
        space = with_latency(space, latency)
        times["latency_profile_s"] = time.perf_counter() - t
    if cfg.method == "physaligner":
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(cfg.torch_threads or threads)
        try:
            res = _run_physaligner(fit, task, space, start, cfg, work, progress)
        finally:
            torch.set_num_threads(threads)
    else:
        res = _run_search(fit, task, space, start, cfg, progress)
    times.update(res.times)
    if cfg.latency_candidates and len(cfg.latency_candidates) > 1:
        # For the record only: the neighbouring delays' one-step loss at the method's result. The result is
        # not switched to another delay without a refit: a result fitted by open-loop replay compensates its
        # delay with its gains, and there the one-step loss can prefer the wrong delay.
        t = time.perf_counter()
        L = space.base.latency_steps
        near = [c for c in cfg.latency_candidates if abs(c - L) <= 1]
        latency_scores = {
            "at_start": latency_scores,
            "at_result": profile_latency(fit, task, space, res.theta, near)[1],
        }
        times["latency_check_s"] = time.perf_counter() - t
    return _Fitted(space, res, latency_scores, times)


@dataclass
class _Guard:
    """The acceptance guard's verdict on the held-out episodes."""

    improved: bool
    before: dict  # held-out errors at the starting physics
    found: dict  # held-out errors at the method's result
    message: str
    seconds: float


def _acceptance_guard(
    held, task: str, start_space: ParameterSpace, fitted: _Fitted, judged_on_test_dataset: bool
) -> _Guard:
    """Replay the held-out episodes (which the method did not fit) in the real simulator under the
    starting physics and under the method's result."""
    from embodied_gym.physaligner.objective import ReplayObjective, score

    t = time.perf_counter()
    evaluate = ReplayObjective(held, task, start_space)
    before = evaluate.errors_of(start_space.base)
    found = evaluate.errors_of(fitted.space.to_physics(fitted.space.denormalise(fitted.res.theta)))
    evaluate.close()
    improved = score(found) < score(before)
    n_held = len(held)
    if improved:
        message = (
            f"calibration improved the held-out open-loop replay error on {n_held} episode(s) the method did "
            f"not fit: {score(before):.5f} -> {score(found):.5f} (TCP translation m + rotation rad)"
        )
    else:
        message = (
            f"calibration found nothing better than the starting physics: on {n_held} held-out episode(s) the "
            f"method's result scored {score(found):.5f} vs {score(before):.5f} at the start (TCP translation m + "
            f"rotation rad), so the result keeps the starting physics"
        )
    return _Guard(bool(improved), before, found, message, time.perf_counter() - t)


def _uncertainty(space: ParameterSpace, res: MethodOutput) -> dict | None:
    """The method's normalised spread in physical units, through the local slope of the scaling."""
    if res.std_u is None:
        return None
    slope = space.denormalise(np.clip(res.theta + 1e-4, 0, 1)) - space.denormalise(np.clip(res.theta - 1e-4, 0, 1))
    step = np.clip(res.theta + 1e-4, 0, 1) - np.clip(res.theta - 1e-4, 0, 1)
    return dict(zip(space.names, (np.abs(slope / step) * res.std_u).tolist()))


_UNCERTAINTY_KIND = {
    "physaligner": None,
    "sysid": "Gauss-Newton standard error, sqrt(diag((JᵀJ)⁻¹)·σ²)",
    "cmaes": "CMA-ES final standard deviations",
    "sa": None,
}


def _result_json(dataset, task, episodes, fit, held, start_space, cfg, fitted: _Fitted, guard: _Guard) -> dict:
    """The result file's content (see the module docstring): the guard's choice and everything behind it."""
    import embodied_gym
    from embodied_gym.physaligner.objective import score

    space, res = fitted.space, fitted.res
    method_values = space.denormalise(res.theta)
    method_physics = space.to_physics(method_values)
    start_physics = start_space.base
    physics = method_physics if guard.improved else start_physics
    values = method_values if guard.improved else start_space.values_of(start_physics)
    return {
        "values": physics.to_dict(),
        "calibrated": dict(zip(space.names, np.asarray(values).tolist())),
        "nominal": dict(zip(space.names, start_space.values_of(start_physics).tolist())),
        "latency_steps": {
            "calibrated": physics.latency_steps,
            "start": start_physics.latency_steps,
            "method_result": method_physics.latency_steps,
            "profile": fitted.latency_scores,
            "candidates": list(cfg.latency_candidates),
        },
        "acceptance": {
            "improved": guard.improved,
            "message": guard.message,
            "held_out_episodes": len(held),
            "score_start": score(guard.before),
            "score_method_result": score(guard.found),
            "judged_on": "test_dataset" if cfg.test_dataset else "held-out share of the dataset",
        },
        "method_result": {"values": method_physics.to_dict(), "held_out_errors": guard.found},
        "bounds": {p.name: [p.low, p.high] for p in space.params},
        "frozen": list(space.frozen),
        "method": cfg.method,
        "task": task,
        "config": asdict(cfg),
        "dataset": {
            "path": str(Path(dataset).resolve()),
            "sha256": dataset_hash(episodes),
            "fit_episodes": [e.index for e in fit],
            "held_out_episodes": [e.index for e in held],
            **({"test_dataset": str(Path(cfg.test_dataset).resolve())} if cfg.test_dataset else {}),
        },
        "held_out_errors": {"before": guard.before, "after": guard.found if guard.improved else guard.before},
        "wall_time_s": dict(fitted.times, total=sum(fitted.times.values()), held_out_evaluation=guard.seconds),
        "uncertainty": _uncertainty(space, res) if guard.improved else None,
        "uncertainty_kind": _UNCERTAINTY_KIND[cfg.method],
        "unconstrained": unconstrained(space.names, res.curvature, res.loss),
        "search_history": [list(h) for h in res.history],
        "snapshots": [[t_, list(map(float, th))] for t_, th in res.snapshots],
        "logs": res.logs,
        "package_version": embodied_gym.__version__,
    }
