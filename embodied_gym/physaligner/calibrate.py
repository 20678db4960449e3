"""One calibration run, any method, one result file and a report beside it.

:func:`calibrate` splits the dataset's episodes into fit and held-out sets, runs the chosen
method on the fit episodes and writes a result JSON that ``gym.make(id, physics="result.json")``
and ``embodied-gym replay --physics`` read directly: values, bounds, frozen set, method, the
dataset (path and content hash), held-out errors before and after (open-loop replay), wall time
per stage, per-parameter uncertainty where the method gives one, the parameters the data does not
constrain, and the package version. A report (Markdown + PNG plots, :mod:`.report`) is written
beside it. PhysAligner's stages are checkpointed in ``<out>.work/`` (the stage-1 cache, written in
chunks of θ samples while stage 1 runs, and the surrogate), so a killed run resumes from the finished
stage, and inside stage 1 from the finished chunks.

Methods: ``physaligner`` (the paper's three stages), ``sysid`` (``mujoco.sysid``'s Gauss-Newton),
``cmaes`` and ``sa`` (SimplerEnv's simulated annealing). ``RECOMMENDED`` is the method the
calibration benchmark (``benchmarks/calibration.py``) found best on the stand-in robot.
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
RECOMMENDED = "sysid"

# A parameter counts as unconstrained by the data when moving it by 10 % of its (normalised) box
# raises the fit loss by less than 1 % (second-order estimate from the loss curvature).
_PROBE_STEP = 0.1
_PROBE_RISE = 0.01


@dataclass
class CalibrationConfig:
    """How one calibration runs; also the ``embodied-gym calibrate`` command line and its ``--config`` YAML."""

    method: str = setting(RECOMMENDED, choices=METHODS,
                          help=f"calibration method (default {RECOMMENDED}, the best in benchmarks/calibration.py)")
    held_out: float = setting(0.2, help="fraction of episodes kept out of the fit to judge it")
    samples: int = setting(64, help="physaligner stage 1: θ samples")
    surrogate_epochs: int = setting(30, aliases=("--epochs",), help="physaligner stage 2: surrogate epochs")
    restarts: int = setting(4, help="physaligner stage 3: restarts")
    refine_steps: int = setting(400, help="physaligner stage 3: Adam steps per restart")
    sa_steps: int = setting(2000, help="sa: annealing steps (SimplerEnv: 2000)")
    cmaes_evaluations: int = setting(2000, help="cmaes: objective evaluations")
    sysid_iterations: int = setting(20, help="sysid: Gauss-Newton iterations")
    horizon: int = setting(1, help="physaligner stage 3: surrogate unroll length (1 = the paper's one-step loss)")
    budget_s: float | None = setting(None, flag="--budget", help="wall-time budget of the search, seconds")
    workers: int | None = setting(None, help="stage-1 processes (default: all CPUs)")
    # Small tensors gain nothing from more threads, and oversubscribed cores (other jobs, stage-1
    # workers) slow multi-threaded torch down by an order of magnitude.
    torch_threads: int | None = setting(1, help="physaligner stages 2-3: torch threads")
    backend: str = setting("processes", choices=("processes", "ray"),
                           help="physaligner stage 1: local processes, or Ray (pip install 'embodied-gym[ray]')")
    ray_address: str | None = setting(None, help="Ray cluster address for --backend ray (default: a local Ray)")
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
    import torch

    from embodied_gym.physaligner.objective import ReplayObjective
    from embodied_gym.physaligner.fk import ArmFK
    from embodied_gym.physaligner.refine import RefineConfig, refine, trajectory_loss
    from embodied_gym.physaligner.surrogate import Surrogate, SurrogateTrainConfig, train_surrogate
    from embodied_gym.physaligner.transitions import OneStepSimulator, episode_transitions, simulate_transitions

    times = {}
    t = time.perf_counter()
    transitions = simulate_transitions(fit, task, space, cfg.samples, seed=cfg.seed, workers=cfg.workers,
                                       cache_dir=work, progress=progress, backend=cfg.backend,
                                       ray_address=cfg.ray_address)
    times["stage1_dataset_s"] = time.perf_counter() - t
    t = time.perf_counter()
    key = f"surrogate-{space.fingerprint()}-{dataset_hash(fit)[:12]}-{cfg.samples}-{cfg.surrogate_epochs}-{cfg.seed}"
    if (work / key / "surrogate.json").exists():
        surrogate = Surrogate.from_pretrained(work / key)
        log = json.loads((work / key / "log.json").read_text())
    else:
        surrogate, log = train_surrogate(transitions, train=SurrogateTrainConfig(epochs=cfg.surrogate_epochs,
                                                                                 seed=cfg.seed), progress=progress)
        tmp = work / f"{key}.tmp"
        surrogate.save_pretrained(tmp)
        (tmp / "log.json").write_text(json.dumps(log))
        os.replace(tmp, work / key)  # the folder appears whole or not at all
    times["stage2_surrogate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    sim = OneStepSimulator(task, space)
    fk = ArmFK(sim.model, sim.idx)
    rcfg = RefineConfig(restarts=cfg.restarts, steps=cfg.refine_steps, horizon=cfg.horizon, seed=cfg.seed)
    s, a, s_next, episode = episode_transitions(fit)
    result = refine(surrogate, fk, space, s, a, s_next, rcfg, progress=progress, episode=episode)
    times["stage3_refine_s"] = time.perf_counter() - t

    # The surrogate's loss is not the goal: pick among the restarts (and the starting physics) by open-loop
    # replay of the fit episodes in the real simulator, so a surrogate that misleads cannot make the
    # calibration worse than where it started on the data it was given.
    t = time.perf_counter()
    objective = ReplayObjective(fit, task, space)
    candidates = [("start", np.asarray(start))] + [(f"restart {k}", np.asarray(r["theta"]))
                                                   for k, r in enumerate(result.restarts)]
    scores = [(objective(theta), name, theta) for name, theta in candidates]
    objective.close()
    fit_loss, chosen, theta = min(scores, key=lambda x: x[0])
    times["selection_s"] = time.perf_counter() - t
    # θ is only known at the end of stage 3: before that the best guess is the start.
    snapshots = [(0.0, list(start)), (sum(times.values()), theta.tolist())]

    # Uncertainty: spread of the restarts that reached (nearly) the best loss; curvature of the
    # surrogate loss at the solution tells which parameters the data pins down.
    good = [r for r in result.restarts if r["val_loss"] <= 1.1 * result.val_loss]
    std_u = np.std([r["theta"] for r in good], axis=0) if len(good) > 1 else None
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float32)  # noqa: E731
    sub = np.random.default_rng(cfg.seed).permutation(len(s))[:4096]
    S, A, T = as_t(s[sub]), as_t(a[sub]), as_t(s_next[sub]).to(torch.float64)

    def loss_fn(theta):
        pred = surrogate(theta.to(torch.float32).expand(len(S), -1), S, A).to(torch.float64)
        return trajectory_loss(pred, T, fk, rcfg)

    theta_t = torch.as_tensor(theta, dtype=torch.float64)
    hessian = torch.autograd.functional.hessian(loss_fn, theta_t).detach().numpy()
    loss = float(loss_fn(theta_t))
    return MethodOutput(theta, times, snapshots=snapshots, std_u=std_u, curvature=np.diag(hessian), loss=loss,
                        logs={"surrogate": log, "refine_curves": [r["curve"] for r in result.restarts],
                              "selection": {name: sc for sc, name, _ in scores}, "chosen": chosen})


def _run_search(fit, task, space, start, cfg, progress: bool) -> MethodOutput:
    from embodied_gym.physaligner.baselines import cma_es, mujoco_sysid, simulated_annealing
    from embodied_gym.physaligner.objective import ReplayObjective

    objective = ReplayObjective(fit, task, space)
    t = time.perf_counter()
    std_u = curvature = loss = None
    if cfg.method == "sa":
        res = simulated_annealing(objective, start, steps=cfg.sa_steps, seed=cfg.seed, budget_s=cfg.budget_s,
                                  progress=progress)
    elif cfg.method == "cmaes":
        res = cma_es(objective, start, max_evaluations=cfg.cmaes_evaluations, seed=cfg.seed, budget_s=cfg.budget_s,
                     progress=progress)
        std_u = res.std
    else:
        res = mujoco_sysid(objective.residuals, start, space.names, max_iterations=cfg.sysid_iterations,
                           budget_s=cfg.budget_s, progress=progress)
        if res.jacobian is not None:
            # Gauss-Newton's view of the loss ‖r‖²: Hessian ≈ 2 JᵀJ, covariance ≈ σ² (JᵀJ)⁻¹.
            jtj = res.jacobian.T @ res.jacobian
            curvature, loss = 2 * np.diag(jtj), res.value
            dof = max(1, res.jacobian.shape[0] - res.jacobian.shape[1])
            std_u = np.sqrt(np.clip(np.diag(np.linalg.pinv(jtj)) * res.value / dof, 0, None))
    objective.close()
    return MethodOutput(res.theta, {"search_s": time.perf_counter() - t}, history=res.history,
                        snapshots=_thin(res.snapshots), std_u=std_u,
                        curvature=curvature, loss=loss, logs={"evaluations": res.evaluations})


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
    rise = 0.5 * np.abs(curvature) * _PROBE_STEP ** 2
    return [n for n, r in zip(names, rise) if r < _PROBE_RISE * max(loss, 1e-12)]


def calibrate(dataset: str | os.PathLike, task: str, out: str | os.PathLike, space: ParameterSpace | None = None,
              config: CalibrationConfig | None = None, progress: bool = True, report: bool = True) -> dict:
    import embodied_gym
    from embodied_gym.physaligner.objective import ReplayObjective

    cfg = config or CalibrationConfig()
    if cfg.method not in METHODS:
        raise ValueError(f"unknown method {cfg.method!r}; valid: {list(METHODS)}")
    space = space or ParameterSpace()
    out = Path(out)
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    episodes = load_episodes(dataset)
    fit, held = split_episodes(episodes, cfg.held_out, cfg.seed)
    start = space.normalise(space.values_of(space.base))

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
    t_total = sum(res.times.values())

    t = time.perf_counter()
    evaluate = ReplayObjective(held, task, space)
    before, after = evaluate.errors(start), evaluate.errors(res.theta)
    evaluate.close()
    evaluation_s = time.perf_counter() - t
    values = space.denormalise(res.theta)
    physics = space.to_physics(values)
    std = None
    if res.std_u is not None:  # normalised spread -> physical units through the local slope of the scaling
        slope = (space.denormalise(np.clip(res.theta + 1e-4, 0, 1)) - space.denormalise(np.clip(res.theta - 1e-4, 0, 1)))
        step = np.clip(res.theta + 1e-4, 0, 1) - np.clip(res.theta - 1e-4, 0, 1)
        std = dict(zip(space.names, (np.abs(slope / step) * res.std_u).tolist()))
    result_json = {
        "values": physics.to_dict(),
        "calibrated": dict(zip(space.names, values.tolist())),
        "nominal": dict(zip(space.names, space.values_of(space.base).tolist())),
        "bounds": {p.name: [p.low, p.high] for p in space.params},
        "frozen": list(space.frozen),
        "method": cfg.method,
        "task": task,
        "config": asdict(cfg),
        "dataset": {"path": str(Path(dataset).resolve()), "sha256": dataset_hash(episodes),
                    "fit_episodes": [e.index for e in fit], "held_out_episodes": [e.index for e in held]},
        "held_out_errors": {"before": before, "after": after},
        "wall_time_s": dict(res.times, total=t_total, held_out_evaluation=evaluation_s),
        "uncertainty": std,
        "uncertainty_kind": {"physaligner": "std over restarts that reached the best loss",
                             "sysid": "Gauss-Newton standard error, sqrt(diag((JᵀJ)⁻¹)·σ²)",
                             "cmaes": "CMA-ES final standard deviations", "sa": None}[cfg.method],
        "unconstrained": unconstrained(space.names, res.curvature, res.loss),
        "search_history": [list(h) for h in res.history],
        "snapshots": [[t_, list(map(float, th))] for t_, th in res.snapshots],
        "logs": res.logs,
        "package_version": embodied_gym.__version__,
    }
    write_json(out, result_json)
    if report:
        from embodied_gym.physaligner.report import write_report

        write_report(result_json, out, held)
    return result_json
