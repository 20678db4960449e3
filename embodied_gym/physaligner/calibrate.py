"""One calibration run, any method, one result file.

:func:`calibrate` splits the dataset's episodes into fit and held-out sets, runs the chosen
method on the fit episodes and writes a result JSON that ``gym.make(id, physics="result.json")``
and ``embodied-gym replay --physics`` read directly: values, bounds, frozen set, method, the
dataset (path and content hash), held-out errors before and after (open-loop replay), wall time
per stage and the package version. PhysAligner's stages are checkpointed in ``<out>.work/``
(the stage-1 cache and the surrogate), so a killed run resumes from the finished stage.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied_gym.data.replay import load_episodes
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.transitions import dataset_hash

METHODS = ("physaligner", "sa", "cmaes")


@dataclass
class CalibrationConfig:
    method: str = "physaligner"
    held_out: float = 0.2  # fraction of episodes kept for evaluation
    samples: int = 64  # stage 1: θ samples
    surrogate_epochs: int = 30
    restarts: int = 4
    refine_steps: int = 400
    sa_steps: int = 2000
    cmaes_evaluations: int = 2000
    budget_s: float | None = None  # wall-time budget of the search (sa, cmaes)
    workers: int | None = None
    seed: int = 0


def calibrate(dataset: str | os.PathLike, task: str, out: str | os.PathLike, space: ParameterSpace | None = None,
              config: CalibrationConfig | None = None, progress: bool = True) -> dict:
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
    if len(episodes) < 2:
        raise ValueError(f"{dataset} has {len(episodes)} episode(s); calibration needs at least 2 (fit + held out)")
    order = np.random.default_rng(cfg.seed).permutation(len(episodes))
    n_held = max(1, int(round(cfg.held_out * len(episodes))))
    held = [episodes[i] for i in sorted(order[:n_held])]
    fit = [episodes[i] for i in sorted(order[n_held:])]
    start = space.normalise(space.values_of(space.base))
    times: dict[str, float] = {}

    if cfg.method == "physaligner":
        from embodied_gym.physaligner.fk import ArmFK
        from embodied_gym.physaligner.refine import RefineConfig, refine
        from embodied_gym.physaligner.surrogate import Surrogate, SurrogateTrainConfig, train_surrogate
        from embodied_gym.physaligner.transitions import OneStepSimulator, episode_transitions, simulate_transitions

        t = time.perf_counter()
        transitions = simulate_transitions(fit, task, space, cfg.samples, seed=cfg.seed, workers=cfg.workers,
                                           cache_dir=work, progress=progress)
        times["stage1_dataset_s"] = time.perf_counter() - t
        t = time.perf_counter()
        key = f"surrogate-{space.fingerprint()}-{cfg.samples}-{cfg.surrogate_epochs}-{cfg.seed}"
        if (work / key / "surrogate.json").exists():
            surrogate = Surrogate.from_pretrained(work / key)
        else:
            surrogate, log = train_surrogate(transitions, train=SurrogateTrainConfig(epochs=cfg.surrogate_epochs,
                                                                                     seed=cfg.seed), progress=progress)
            surrogate.save_pretrained(work / key)
            (work / key / "log.json").write_text(json.dumps(log))
        times["stage2_surrogate_s"] = time.perf_counter() - t
        t = time.perf_counter()
        s, a, s_next, _ = episode_transitions(fit)
        sim = OneStepSimulator(task, space)
        result = refine(surrogate, ArmFK(sim.model, sim.idx), space, s, a, s_next,
                        RefineConfig(restarts=cfg.restarts, steps=cfg.refine_steps, seed=cfg.seed))
        theta = result.theta
        spread = np.std([space.denormalise(np.asarray(r["theta"])) for r in result.restarts], axis=0)
        times["stage3_refine_s"] = time.perf_counter() - t
    else:
        from embodied_gym.physaligner.baselines import cma_es, simulated_annealing

        objective = ReplayObjective(fit, task, space)
        t = time.perf_counter()
        if cfg.method == "sa":
            res = simulated_annealing(objective, start, steps=cfg.sa_steps, seed=cfg.seed, budget_s=cfg.budget_s,
                                      progress=progress)
        else:
            res = cma_es(objective, start, max_evaluations=cfg.cmaes_evaluations, seed=cfg.seed,
                         budget_s=cfg.budget_s)
        objective.close()
        theta, spread = res.theta, None
        times["search_s"] = time.perf_counter() - t

    evaluate = ReplayObjective(held, task, space)
    before, after = evaluate.errors(start), evaluate.errors(theta)
    evaluate.close()
    values = space.denormalise(theta)
    physics = space.to_physics(values)
    result_json = {
        "values": physics.to_dict(),
        "calibrated": dict(zip(space.names, values.tolist())),
        "bounds": {p.name: [p.low, p.high] for p in space.params},
        "frozen": list(space.frozen),
        "method": cfg.method,
        "config": {k: v for k, v in cfg.__dict__.items()},
        "dataset": {"path": str(Path(dataset).resolve()), "sha256": dataset_hash(episodes),
                    "fit_episodes": [e.index for e in fit], "held_out_episodes": [e.index for e in held]},
        "held_out_errors": {"before": before, "after": after},
        "wall_time_s": dict(times, total=sum(times.values())),
        "spread_over_restarts": dict(zip(space.names, spread.tolist())) if spread is not None else None,
        "package_version": embodied_gym.__version__,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result_json, indent=2))
    os.replace(tmp, out)
    return result_json
