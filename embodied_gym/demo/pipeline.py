"""The Real2Sim2Real loop, top to bottom, on the stand-in robot.

For each task (the shape of the paper's policy experiment, arXiv 2507.05198):

1. ``record``: expert demonstrations on the stand-in robot (the "real" data).
2. ``calibrate``: the recommended calibration method (trust-region PhysAligner after
   ``benchmarks/calibration.py``) fits the sim's physics, delay and backlash to them.
3. ``visaligner``: VisAligner learns the stand-in camera's look from paired real/sim episodes.
4. ``generate``: expert rollouts in the aligned sim (calibrated physics), their frames rendered by
   VisAligner — the training data of the aligned-sim policy.
5. ``act_aligned`` / ``act_real``: single-camera ACT on the aligned-sim data, and the real-data
   baseline on the recorded demonstrations.
6. ``tpo``: TPO fine-tuning of the aligned-sim policy in the aligned sim.
7. ``evaluate``: every policy (and the scripted expert) on the stand-in robot.

Every stage is cached (:mod:`.cache`); the report (:mod:`.report`) is rebuilt at the end.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from embodied_gym.atomic import write_json
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.demo.cache import StageCache
from embodied_gym.demo.config import DemoConfig

STAGES = ["record", "calibrate", "visaligner", "generate", "act_aligned", "act_real", "tpo", "evaluate"]
POLICIES = ("expert", "act_real", "act_aligned", "tpo")


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def _record(env_id: str, out: Path, episodes: int, seed: int, camera: str, image_size, physics=None,
            max_episode_steps: int | None = None, after_success_steps: int = AFTER_SUCCESS_STEPS,
            crf: int | None = DEFAULT_CRF) -> dict:
    import gymnasium as gym

    import embodied_gym
    from embodied_gym.data.recording import record

    kwargs = dict(obs_type="pixels_state", cameras=(camera,), image_size=tuple(image_size))
    if embodied_gym.parse_env_id(env_id).real:
        kwargs["realtime"] = False
    if physics is not None:
        kwargs["physics"] = physics
    if max_episode_steps:
        kwargs["max_episode_steps"] = max_episode_steps
    env = gym.make(env_id, **kwargs)
    try:
        summary = record(env, embodied_gym.make_expert(env), out, episodes, seed=seed, env_id=env_id, progress=True,
                         after_success_steps=after_success_steps, crf=crf)
    finally:
        env.close()
    return {"dataset": str(out), "episodes": summary.episodes, "expert_success": summary.success_rate}


def stage_record(cfg: DemoConfig, task: str, folder: Path) -> dict:
    import embodied_gym

    r = cfg.record
    return _record(embodied_gym.env_id(task, real=True), folder / "dataset", r.episodes, r.seed, r.camera,
                   r.image_size, max_episode_steps=cfg.max_episode_steps, after_success_steps=r.after_success_steps,
                   crf=r.crf)


def stage_calibrate(cfg: DemoConfig, task: str, folder: Path, dataset: str) -> dict:
    from embodied_gym.physaligner import ParameterSpace
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate

    c = cfg.calibrate
    settings = {k: v for k, v in dataclasses.asdict(c).items() if k != "free"}
    result = calibrate(dataset, task, folder / "result.json", ParameterSpace.with_free(c.free) if c.free else None,
                       CalibrationConfig(**settings))
    return {"result": str(folder / "result.json"), "report": str(folder / "result.report.md"),
            "paths_png": str(folder / "result.paths.png"), "held_out_errors": result["held_out_errors"],
            "unconstrained": result["unconstrained"]}


def stage_visaligner(cfg: DemoConfig, task: str, folder: Path, dataset: str, physics: str) -> dict:
    from embodied_gym.visaligner.train import train

    train(replace(cfg.visaligner, dataset=dataset, out=str(folder / "train"), camera=cfg.record.camera,
                  physics=physics, model=dict(cfg.visaligner.model)))
    return {"model": str(folder / "train" / "model"), "samples": str(folder / "train" / "samples")}


def stage_generate(cfg: DemoConfig, task: str, folder: Path, real_dataset: str, physics: str, model: str) -> dict:
    from embodied_gym.visaligner.generate import generate_aligned_demos

    r = cfg.record
    return generate_aligned_demos(replace(cfg.generate, task=task, physics=physics, model=model,
                                          reference=str(real_dataset), camera=r.camera,
                                          image_size=tuple(r.image_size), max_episode_steps=cfg.max_episode_steps),
                                  folder)


def stage_act(cfg: DemoConfig, folder: Path, dataset: str) -> dict:
    from embodied_gym.policies.act import train_act

    res = train_act(replace(cfg.act, dataset=dataset, out=str(folder / "policy"), cameras=(cfg.record.camera,)))
    return {"policy": res.out, "steps": res.steps, "final_loss": res.final_loss, "train_time_s": res.train_time_s}


def stage_tpo(cfg: DemoConfig, task: str, folder: Path, policy: str, physics: str, model: str) -> dict:
    import embodied_gym
    from embodied_gym.policies.tpo import train_tpo

    log = train_tpo(replace(cfg.tpo, policy=policy, env_id=embodied_gym.env_id(task), out=str(folder / "tpo"),
                            physics=physics, visaligner=model, max_episode_steps=cfg.max_episode_steps))
    return {"policy": str(folder / "tpo"), "log": log}


def stage_evaluate(cfg: DemoConfig, task: str, folder: Path, policies: dict[str, str]) -> dict:
    import embodied_gym
    from embodied_gym.policies.evaluate import evaluate_policy

    e = cfg.evaluate
    out = {}
    for name, policy in policies.items():
        _say(f"{task}: evaluating {name} on the stand-in robot ({e.episodes} episodes)")
        res = evaluate_policy(policy, embodied_gym.env_id(task, real=True), e.episodes, e.seed,
                              out=str(folder / f"{name}.json"), videos=str(folder / f"{name}_videos"),
                              max_episode_steps=cfg.max_episode_steps)
        out[name] = {"json": str(folder / f"{name}.json"), **{k: v for k, v in res.to_json().items()
                                                                if k in ("success_rate", "ci95", "episodes",
                                                                         "mean_return")}}
    return out


def _expert_from_recording(rec: dict) -> dict:
    """The scripted expert's success over its recorded stand-in demonstrations, in the shape of an
    evaluation entry."""
    from embodied_gym.policies.evaluate import wilson_interval

    n = rec["episodes"]
    k = round(rec["expert_success"] * n)
    return {"json": None, "success_rate": k / n, "ci95": list(wilson_interval(k, n)), "episodes": n,
            "mean_return": None, "source": "record stage (its demonstrations)"}


def run_demo(cfg: DemoConfig, run_dir: str | os.PathLike, rerun_from: str | None = None) -> dict:
    """Run (or resume) every stage for every task, then write ``report.html`` and ``summary.json``."""
    import torch

    run_dir = Path(run_dir)
    t_start = time.time()
    threads = torch.get_num_threads()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    try:
        return _run(cfg, run_dir, rerun_from, t_start)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: DemoConfig, run_dir: Path, rerun_from: str | None, t_start: float) -> dict:
    from embodied_gym.demo.report import write_report

    cache = StageCache(run_dir, rerun_from, order=STAGES)
    per_task = {}
    n_stages = len(STAGES) * len(cfg.tasks)
    done = 0
    for task in cfg.tasks:
        recs = {}

        def stage(name, settings, inputs, fn):
            nonlocal done
            done += 1
            elapsed = time.time() - t_start
            _say(f"stage {done}/{n_stages} {task}/{name} (elapsed {elapsed / 60:.1f} min)")
            cache_name = f"{name}" if len(cfg.tasks) == 1 else f"{task}/{name}"
            settings = {"task": task, "max_episode_steps": cfg.max_episode_steps, **settings}
            rec = cache.run(cache_name, settings, [recs[i].name for i in inputs], fn)
            recs[name] = rec
            _say(f"  {task}/{name}: {'cached' if rec.cached else f'done in {rec.wall_time_s:.0f} s'}")
            return rec.outputs

        asdict = dataclasses.asdict
        rec = stage("record", asdict(cfg.record), [], lambda f: stage_record(cfg, task, f))
        cal = stage("calibrate", asdict(cfg.calibrate), ["record"],
                    lambda f: stage_calibrate(cfg, task, f, rec["dataset"]))
        vis = stage("visaligner", asdict(cfg.visaligner), ["record", "calibrate"],
                    lambda f: stage_visaligner(cfg, task, f, rec["dataset"], cal["result"]))
        # how many processes roll out the sim episodes does not change them: not part of the key
        gen_settings = {k: v for k, v in asdict(cfg.generate).items() if k not in ("workers", "backend")}
        gen = stage("generate", gen_settings, ["record", "calibrate", "visaligner"],
                    lambda f: stage_generate(cfg, task, f, rec["dataset"], cal["result"], vis["model"]))
        act_aligned = stage("act_aligned", asdict(cfg.act), ["generate"], lambda f: stage_act(cfg, f, gen["dataset"]))
        act_real = stage("act_real", asdict(cfg.act), ["record"], lambda f: stage_act(cfg, f, rec["dataset"]))
        tpo = stage("tpo", asdict(cfg.tpo), ["act_aligned", "calibrate", "visaligner"],
                    lambda f: stage_tpo(cfg, task, f, act_aligned["policy"], cal["result"], vis["model"]))
        policies = {"expert": "expert", "act_real": act_real["policy"], "act_aligned": act_aligned["policy"],
                    "tpo": tpo["policy"]}
        if not cfg.evaluate.expert:
            policies.pop("expert")
        ev = stage("evaluate", asdict(cfg.evaluate), ["act_real", "act_aligned", "tpo"],
                   lambda f: stage_evaluate(cfg, task, f, policies))
        if not cfg.evaluate.expert:
            ev = {"expert": _expert_from_recording(rec), **ev}
        per_task[task] = {"stages": {k: {"folder": str(r.folder), "wall_time_s": r.wall_time_s, "cached": r.cached,
                                         "outputs": r.outputs} for k, r in recs.items()},
                          "evaluation": ev}
    summary = {"config": cfg.to_dict(), "tasks": per_task, "wall_time_s": time.time() - t_start}
    write_json(run_dir / "summary.json", summary)
    write_report(summary, run_dir / "report.html")
    return summary
