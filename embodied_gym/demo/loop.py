"""The Real2Sim2Real loop, top to bottom, on the stand-in robot.

For each task (the shape of the paper's policy experiment, arXiv 2507.05198), with the policies
reading the camera's object-pose estimate (``observation: pose_estimate``, the default):

0. ``perception``: a pose estimator trained in the sim on frames with domain-randomised looks.
1. ``record``: expert demonstrations on the stand-in robot (the "real" data), with the estimate.
2. ``calibrate``: the recommended calibration method (trust-region PhysAligner after
   ``benchmarks/calibration.py``) fits the sim's physics, delay and backlash to them.
3. ``visaligner``: skipped on this path (the policies read the estimate, not the frames).
4. ``generate``: expert demonstrations in the calibrated sim, with the estimate of its frames.
5. ``act_aligned`` / ``act_real``: ACT on joint state + estimate, on the calibrated-sim data and on
   the stand-in demonstrations. ``act_real`` needs only the recording, so by default
   (``background_act_real``) it trains in a second process while stages 2-5 run, its output in
   ``<run>/act_real/stage.log``.
6. ``tpo``: TPO fine-tuning of the aligned-sim policy in the calibrated sim.
7. ``perception_offset``: the estimator's constant bias on the robot's camera, measured on the
   recorded demonstrations (where the gripper held the cup) against the sim's grasp offset
   (:mod:`embodied_gym.perception.robot_offset`); a corrected copy of the estimator for the robot.
8. ``evaluate``: every policy (and the scripted expert) on the stand-in robot, on the same seeds,
   with paired exact McNemar tests. The sim-trained policies read the corrected estimator; ACT on
   the stand-in demonstrations reads the one its demonstrations were recorded with (it learnt that
   camera's bias with them).

With ``observation: images`` (the GPU path) stage 0 is skipped, the policies are end-to-end image
ACT, stage 3 trains VisAligner on paired real/sim episodes and stage 4 renders the calibrated sim's
frames through it. Every stage is cached (:mod:`.cache`); the report (:mod:`.report`) is rebuilt at
the end. ``robot_config`` runs the whole loop against another stand-in world.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

from embodied_gym.atomic import write_json
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.demo.cache import StageCache, StageRecord
from embodied_gym.demo.config import DemoConfig

STAGES = [
    "perception",
    "record",
    "calibrate",
    "visaligner",
    "generate",
    "act_aligned",
    "act_real",
    "tpo",
    "perception_offset",
    "evaluate",
]
POLICIES = ("expert", "act_real", "act_aligned", "tpo")
#: (first, second) policy pairs the report tests on the same evaluation seeds
COMPARISONS = (("act_aligned", "act_real"), ("tpo", "act_aligned"))


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def _record(
    env_id: str,
    out: Path,
    episodes: int,
    seed: int,
    camera: str,
    image_size,
    physics=None,
    max_episode_steps: int | None = None,
    after_success_steps: int = AFTER_SUCCESS_STEPS,
    crf: int | None = DEFAULT_CRF,
    estimator: str | None = None,
    robot_config: str | None = None,
    camera_fps: float | None = None,
    workers: int | None = None,
    backend: str = "local",
    pose_source: str = "estimate",
) -> dict:
    """Expert demonstrations in ``env_id``, rolled out by ``workers`` processes: with ``estimator``,
    joint state + its pose estimate (``pose_source="ground_truth"``, sim ids: the sim's true poses
    in its layout; no video stored either way); without, joint state + ``camera`` frames at
    ``image_size``."""
    from embodied_gym.data.parallel import record_expert_demos

    ground_truth = estimator is not None and pose_source == "ground_truth"
    kwargs = dict(
        obs_type="state" if ground_truth else "pixels_state",
        camera_fps=camera_fps,
        physics=physics,
        robot_config=robot_config,
        pose_estimator=estimator,
        pose_source="ground_truth" if ground_truth else None,
    )
    if estimator is None:
        kwargs.update(cameras=(camera,), image_size=tuple(image_size))
    if max_episode_steps:
        kwargs["max_episode_steps"] = max_episode_steps
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    summary = record_expert_demos(
        env_id,
        kwargs,
        out,
        episodes,
        seed=seed,
        workers=workers,
        backend=backend,
        after_success_steps=after_success_steps,
        crf=crf,
        cameras=() if estimator else None,
    )
    return {"dataset": str(out), "episodes": summary.episodes, "expert_success": summary.success_rate}


def stage_perception(cfg: DemoConfig, task: str, folder: Path) -> dict:
    from embodied_gym.perception import PoseEstimatorConfig, generate_frames
    from embodied_gym.perception.data import randomized_look
    from embodied_gym.perception.train import train_pose_estimator
    from embodied_gym.processes import cpu_count

    p = cfg.perception
    estimator = PoseEstimatorConfig(task=task)
    frames = folder / "frames"
    generate_frames(
        frames,
        estimator,
        range(p.episodes),
        frame_stride=p.frame_stride,
        look=randomized_look,
        layouts_per_episode=p.layouts_per_episode,
        workers=p.workers or cpu_count(),
    )
    res = train_pose_estimator(replace(p.train, data=[str(frames)], out=str(folder / "train"), resume=True), estimator)
    return {
        "model": str(folder / "train" / "model"),
        "val_errors": res.val_errors,
        "loss_png": str(folder / "train" / "loss.png"),
    }


def stage_record(cfg: DemoConfig, task: str, folder: Path, estimator: str | None) -> dict:
    import embodied_gym

    r = cfg.record
    return _record(
        embodied_gym.env_id(task, real=True),
        folder / "dataset",
        r.episodes,
        r.seed,
        r.camera,
        r.image_size,
        max_episode_steps=cfg.max_episode_steps,
        after_success_steps=r.after_success_steps,
        crf=r.crf,
        estimator=estimator,
        robot_config=cfg.robot_config,
        camera_fps=cfg.camera_fps,
        workers=r.workers,
    )


def stage_calibrate(cfg: DemoConfig, task: str, folder: Path, dataset: str) -> dict:
    from embodied_gym.physaligner import ParameterSpace
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate

    c = cfg.calibrate
    settings = {k: v for k, v in dataclasses.asdict(c).items() if k != "free"}
    result = calibrate(
        dataset,
        task,
        folder / "result.json",
        ParameterSpace.with_free(c.free) if c.free else None,
        CalibrationConfig(**settings),
    )
    return {
        "result": str(folder / "result.json"),
        "report": str(folder / "result.report.md"),
        "paths_png": str(folder / "result.paths.png"),
        "held_out_errors": result["held_out_errors"],
        "unconstrained": result["unconstrained"],
    }


def stage_visaligner(cfg: DemoConfig, task: str, folder: Path, dataset: str, physics: str) -> dict:
    from embodied_gym.visaligner.train import train

    train(
        replace(
            cfg.visaligner,
            dataset=dataset,
            out=str(folder / "train"),
            camera=cfg.record.camera,
            physics=physics,
            model=dict(cfg.visaligner.model),
        )
    )
    return {"model": str(folder / "train" / "model"), "samples": str(folder / "train" / "samples")}


def stage_generate(
    cfg: DemoConfig, task: str, folder: Path, real_dataset: str, physics: str, model: str | None, estimator: str | None
) -> dict:
    import embodied_gym
    from embodied_gym.visaligner.generate import generate_aligned_demos

    r, g = cfg.record, cfg.generate
    if estimator is not None:  # the policies read the estimate: expert demos in the calibrated sim, no video
        out = _record(
            embodied_gym.env_id(task),
            folder / "dataset",
            g.episodes,
            g.seed,
            r.camera,
            r.image_size,
            physics=physics,
            max_episode_steps=cfg.max_episode_steps,
            after_success_steps=g.after_success_steps,
            estimator=estimator,
            camera_fps=cfg.camera_fps,
            workers=g.workers,
            backend=g.backend,
            pose_source=cfg.sim_pose_source,
        )
        return {**out, "sim_expert_success": out["expert_success"]}
    return generate_aligned_demos(
        replace(
            g,
            task=task,
            physics=physics,
            model=model,
            reference=str(real_dataset),
            camera=r.camera,
            image_size=tuple(r.image_size),
            max_episode_steps=cfg.max_episode_steps,
        ),
        folder,
    )


def stage_act(cfg: DemoConfig, folder: Path, dataset: str) -> dict:
    from embodied_gym.policies.act import train_act

    if cfg.observation == "pose_estimate":
        act = replace(cfg.act, dataset=dataset, out=str(folder / "policy"), images=False, env_state=True)
    else:
        act = replace(cfg.act, dataset=dataset, out=str(folder / "policy"), cameras=(cfg.record.camera,))
    res = train_act(act)
    return {
        "policy": res.out,
        "steps": res.steps,
        "final_loss": res.final_loss,
        "train_time_s": res.train_time_s,
        "loss_png": str(folder / "policy" / "loss.png"),
    }


def stage_tpo(cfg: DemoConfig, task: str, folder: Path, policy: str, physics: str, model: str) -> dict:
    import embodied_gym
    from embodied_gym.policies.tpo import train_tpo
    from embodied_gym.processes import cpu_count

    # its in-sim evaluations run on as many processes as the stand-in evaluation (evaluate.workers)
    log = train_tpo(
        replace(
            cfg.tpo,
            policy=policy,
            env_id=embodied_gym.env_id(task),
            out=str(folder / "tpo"),
            physics=physics,
            visaligner=model if cfg.observation == "images" else None,
            max_episode_steps=cfg.max_episode_steps,
            pose_update=_tpo_pose_update(cfg),
            eval_workers=cfg.evaluate.workers or cpu_count(),
        )
    )
    return {"policy": str(folder / "tpo"), "log": log}


def _tpo_pose_update(cfg: DemoConfig) -> str | None:
    """TPO rolls out on the observation the policies are evaluated on (``evaluate.pose_update``),
    unless the tpo settings name one."""
    if cfg.observation != "pose_estimate":
        return None
    return cfg.tpo.pose_update or cfg.evaluate.pose_update


def stage_perception_offset(
    cfg: DemoConfig, task: str, folder: Path, estimator: str, robot_dataset: str, sim_dataset: str
) -> dict:
    from embodied_gym.perception.robot_offset import TooFewDemonstrations, corrected_estimator, fit_estimator_offset

    try:
        fit = fit_estimator_offset(estimator, robot_dataset, sim_dataset)
    except TooFewDemonstrations as e:  # e.g. episodes cut before success: the policies read the estimate as is
        return {"skipped": str(e)}
    corrected_estimator(estimator, fit, folder / "model")
    return {
        "model": str(folder / "model"),
        "correction_cm": [100 * v for v in fit.correction_xy],
        "robot_episodes": fit.robot_episodes,
        "outliers": fit.outliers,
    }


def stage_evaluate(
    cfg: DemoConfig, task: str, folder: Path, policies: dict[str, str], estimators: dict[str, str] | None = None
) -> dict:
    """Every policy on the stand-in; ``estimators``: a pose estimator folder per policy name in place of
    the one its data names."""
    import embodied_gym
    from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed
    from embodied_gym.processes import cpu_count

    e = cfg.evaluate
    out, seeds = {}, {}
    for name, policy in policies.items():
        _say(f"{task}: evaluating {name} on the stand-in robot ({e.episodes} episodes)")
        res = evaluate_policy(
            policy,
            embodied_gym.env_id(task, real=True),
            e.episodes,
            e.seed,
            out=str(folder / f"{name}.json"),
            videos=str(folder / f"{name}_videos"),
            max_episode_steps=cfg.max_episode_steps,
            robot_config=cfg.robot_config,
            pose_update=e.pose_update,
            workers=e.workers or cpu_count(),
            pose_estimator=(estimators or {}).get(name),
        )
        seeds[name] = successes_by_seed(res)
        out[name] = {
            "json": str(folder / f"{name}.json"),
            **{
                k: v
                for k, v in res.to_json().items()
                if k in ("success_rate", "ci95", "episodes", "mean_return", "mean_reset_pose_error_cm")
            },
        }
    out["_paired"] = [
        {"a": a, "b": b, **paired_comparison(seeds[a], seeds[b]).to_json()}
        for a, b in COMPARISONS
        if a in seeds and b in seeds
    ]
    return out


def _logged(fn, log_name: str, folder: Path) -> dict:
    """``fn(folder)`` with everything it prints (progress bars included) going to ``folder/log_name``."""
    import traceback

    with open(folder / log_name, "w") as log, redirect_stdout(log), redirect_stderr(log):
        try:
            return fn(folder)
        except BaseException:
            traceback.print_exc()
            raise


def _execute_stage(
    run_dir: str, name: str, key: str, settings: dict, inputs: list[str], fn, torch_threads: int | None
) -> None:
    """A background stage's process: runs the stage through the cache, so its ``stage.json`` is its result."""
    import torch

    from embodied_gym.processes import exit_with_parent

    exit_with_parent()
    if torch_threads:
        torch.set_num_threads(torch_threads)
    StageCache(run_dir).execute(name, key, settings, inputs, fn)


class BackgroundStage:
    """One cached stage run in a separate (spawned) process while the caller runs other stages.

    The child writes the stage's folder and ``stage.json`` as :meth:`StageCache.execute` does, its output
    in ``<folder>/stage.log``; :meth:`result` waits for it and registers the record. A failure raises
    with the log's path; the child is terminated if the caller stops first (:meth:`stop`)."""

    LOG = "stage.log"

    def __init__(
        self,
        cache: StageCache,
        name: str,
        key: str,
        settings: dict,
        inputs: list[str],
        fn,
        torch_threads: int | None = None,
    ):
        self.cache, self.name, self.key = cache, name, key
        self.log = cache.run_dir / name / self.LOG
        ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch / EGL state
        self.process = ctx.Process(
            target=_execute_stage,
            daemon=True,
            args=(
                str(cache.run_dir),
                name,
                key,
                settings,
                inputs,
                functools.partial(_logged, fn, self.LOG),
                torch_threads,
            ),
        )
        self.process.start()

    def result(self) -> StageRecord:
        self.process.join()
        rec = self.cache.lookup(self.name, self.key)
        if self.process.exitcode != 0 or rec is None:
            raise RuntimeError(
                f"stage {self.name} failed in its background process (exit code "
                f"{self.process.exitcode}); its output and traceback: {self.log}"
            )
        rec.cached = False
        return rec

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


def _expert_from_recording(rec: dict) -> dict:
    """The scripted expert's success over its recorded stand-in demonstrations, in the shape of an
    evaluation entry."""
    from embodied_gym.policies.evaluate import wilson_interval

    n = rec["episodes"]
    k = round(rec["expert_success"] * n)
    return {
        "json": None,
        "success_rate": k / n,
        "ci95": list(wilson_interval(k, n)),
        "episodes": n,
        "mean_return": None,
        "source": "record stage (its demonstrations)",
    }


def run_demo(cfg: DemoConfig, run_dir: str | os.PathLike, rerun_from: str | None = None) -> dict:
    """Run (or resume) every stage for every task, then write ``report.html`` and ``summary.json``."""
    import torch

    run_dir = Path(run_dir)
    for warning in cfg.check():  # before any stage: a missing weights file, cuda without a GPU
        _say(f"warning: {warning}")
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
    jobs: list[BackgroundStage] = []
    try:
        for task in cfg.tasks:
            recs, in_background = {}, set()

            def stage(name, settings, inputs, fn, background=False):
                """Run (or find cached) one stage; ``background``: start it in another process and return
                its :class:`BackgroundStage` (or, when cached, its outputs)."""
                nonlocal done
                done += 1
                elapsed = time.time() - t_start
                _say(f"stage {done}/{n_stages} {task}/{name} (elapsed {elapsed / 60:.1f} min)")
                cache_name = f"{name}" if len(cfg.tasks) == 1 else f"{task}/{name}"
                settings = {"task": task, "max_episode_steps": cfg.max_episode_steps, **settings}
                input_names = [recs[i].name for i in inputs]
                key = cache.key(settings, input_names)
                rec = cache.lookup(cache_name, key)
                if rec is None and background:
                    job = BackgroundStage(cache, cache_name, key, settings, input_names, fn, cfg.torch_threads)
                    jobs.append(job)
                    _say(f"  {task}/{name}: started in a background process (output: {job.log})")
                    return job
                rec = rec or cache.execute(cache_name, key, settings, input_names, fn)
                recs[name] = rec
                _say(f"  {task}/{name}: {'cached' if rec.cached else f'done in {rec.wall_time_s:.0f} s'}")
                return rec.outputs

            def wait(name, job):
                """The outputs of a stage :func:`stage` may have started in the background."""
                if not isinstance(job, BackgroundStage):
                    return job
                elapsed = (time.time() - t_start) / 60
                _say(f"  {task}/{name}: waiting for its background process (elapsed {elapsed:.1f} min)")
                rec = recs[name] = job.result()
                in_background.add(name)
                _say(f"  {task}/{name}: done in {rec.wall_time_s:.0f} s (in the background)")
                return rec.outputs

            asdict = dataclasses.asdict
            pose = cfg.observation == "pose_estimate"
            robot = {"robot_config": cfg.robot_config, "camera_fps": cfg.camera_fps, "observation": cfg.observation}
            # how many processes run the episodes does not change them: not part of the keys
            # (robot_offset is the perception_offset stage's setting)
            per_settings = {k: v for k, v in asdict(cfg.perception).items() if k not in ("workers", "robot_offset")}
            per = stage(
                "perception",
                per_settings if pose else {"skipped": True},
                [],
                lambda f: (
                    stage_perception(cfg, task, f)
                    if pose
                    else {"skipped": "observation: images (the policies read the camera frames)"}
                ),
            )
            estimator = per.get("model") if pose else None
            rec_settings = {k: v for k, v in asdict(cfg.record).items() if k != "workers"}
            rec = stage(
                "record", {**rec_settings, **robot}, ["perception"], lambda f: stage_record(cfg, task, f, estimator)
            )
            # act_real reads only the recording: with background_act_real it trains beside stages 2-5
            act_real = stage(
                "act_real",
                asdict(cfg.act),
                ["record"],
                functools.partial(stage_act, cfg, dataset=rec["dataset"]),
                background=cfg.background_act_real,
            )
            cal = stage(
                "calibrate", asdict(cfg.calibrate), ["record"], lambda f: stage_calibrate(cfg, task, f, rec["dataset"])
            )
            vis = stage(
                "visaligner",
                {"skipped": True} if pose else asdict(cfg.visaligner),
                ["record", "calibrate"],
                lambda f: (
                    {"skipped": "observation: pose_estimate (the policies read the estimate, not the frames)"}
                    if pose
                    else stage_visaligner(cfg, task, f, rec["dataset"], cal["result"])
                ),
            )
            gen_settings = {k: v for k, v in asdict(cfg.generate).items() if k not in ("workers", "backend")}
            if pose:
                gen_settings["sim_pose_source"] = cfg.sim_pose_source
            gen = stage(
                "generate",
                {**gen_settings, **robot},
                ["perception", "record", "calibrate", "visaligner"],
                lambda f: stage_generate(cfg, task, f, rec["dataset"], cal["result"], vis.get("model"), estimator),
            )
            act_aligned = stage(
                "act_aligned", asdict(cfg.act), ["generate"], lambda f: stage_act(cfg, f, gen["dataset"])
            )
            tpo_settings = {k: v for k, v in asdict(cfg.tpo).items() if k != "eval_workers"}
            tpo = stage(
                "tpo",
                {**tpo_settings, "pose_update": _tpo_pose_update(cfg)},
                ["act_aligned", "calibrate", "visaligner"],
                lambda f: stage_tpo(cfg, task, f, act_aligned["policy"], cal["result"], vis.get("model")),
            )
            offset_on = pose and cfg.perception.robot_offset
            off = stage(
                "perception_offset",
                {"robot_offset": offset_on},
                ["perception", "record", "generate"],
                lambda f: (
                    stage_perception_offset(cfg, task, f, estimator, rec["dataset"], gen["dataset"])
                    if offset_on
                    else {"skipped": "perception.robot_offset: false" if pose else "observation: images"}
                ),
            )
            act_real = wait("act_real", act_real)
            policies = {
                "expert": "expert",
                "act_real": act_real["policy"],
                "act_aligned": act_aligned["policy"],
                "tpo": tpo["policy"],
            }
            if not cfg.evaluate.expert:
                policies.pop("expert")
            # the sim-trained policies learnt exact positions: they read the robot's corrected estimate
            robot_estimators = {"act_aligned": off["model"], "tpo": off["model"]} if off.get("model") else {}
            ev_settings = {k: v for k, v in asdict(cfg.evaluate).items() if k != "workers"}
            ev = stage(
                "evaluate",
                {**ev_settings, "robot_config": cfg.robot_config},
                ["act_real", "act_aligned", "tpo", "perception_offset"],
                lambda f: stage_evaluate(cfg, task, f, policies, robot_estimators),
            )
            paired = ev.get("_paired", [])
            ev = {k: v for k, v in ev.items() if not k.startswith("_")}
            if not cfg.evaluate.expert:
                ev = {"expert": _expert_from_recording(rec), **ev}
            per_task[task] = {
                "stages": {
                    k: {
                        "folder": str(r.folder),
                        "wall_time_s": r.wall_time_s,
                        "cached": r.cached,
                        "background": k in in_background,
                        "outputs": r.outputs,
                    }
                    for k, r in sorted(recs.items(), key=lambda kv: STAGES.index(kv[0]))
                },
                "evaluation": ev,
                "paired": paired,
            }
    finally:
        for job in jobs:  # a failed stage (or Ctrl-C) leaves no training process behind
            job.stop()
    summary = {"config": cfg.to_dict(), "tasks": per_task, "wall_time_s": time.time() - t_start}
    write_json(run_dir / "summary.json", summary)
    write_report(summary, run_dir / "report.html")
    return summary
