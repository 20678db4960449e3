"""The Real2Sim2Real loop as a table of stages (EmbodieDreamer, arXiv 2507.05198).

Each :class:`Stage` names the stages whose outputs it reads (``inputs``), the config section it
receives (``section``: a function of the :class:`~embodied_gym.demo.configuration.DemoConfig`, so the table
says which settings reach which stage), the loop-level settings that change its result
(``loop_keys``) and its run function ``run(section, ctx) -> outputs``. :data:`STAGES` lists them
in the order they run; :func:`embodied_gym.demo.loop.run_demo` walks it for every task, caching
each stage by a key of its settings and its inputs' keys. A setting marked ``cache_key=False``
(:func:`embodied_gym.configs.setting`) is left out of that key: how many processes run the same
episodes does not change them.

With ``observation: pose_estimate`` (the default, the CPU path) the policies are ACT on joint state
and the camera's object-pose estimate:

- ``perception``: a pose estimator trained in the sim on frames with domain-randomised looks (or the
  one ``perception.model`` names).
- ``record``: expert demonstrations on the stand-in robot, with the estimate.
- ``act_stand_in``: ACT on those demonstrations (the baseline; needs only the recording, so it may
  train in a second process while the sim stages run: ``background_act_stand_in``).
- ``calibrate``: PhysAligner fits the sim's physics, delay and backlash to the recording.
- ``visaligner``: with ``visaligner`` in ``perception.sources``, VisAligner fine-tuned on the recorded
  video (which ``record`` then stores) and the calibrated sim; skipped otherwise (the policies read the
  estimate, not the frames).
- ``perception_aligned``: with ``visaligner`` in ``perception.sources``, the estimator the sim-trained
  policies read on the robot, trained on calibrated-sim episodes as VisAligner shows them (and the
  randomised looks), and the robot's demonstrations re-read with it.
- ``generate``: expert demonstrations in the calibrated sim, labelled with the sim's true poses.
- ``generate_nominal`` / ``act_nominal``: the same in the uncalibrated sim (``nominal_sim``; the
  benchmark's row b).
- ``act_aligned``: ACT on the calibrated-sim demonstrations.
- ``perception_sim_offset``: the estimator's constant bias on the sim's own renders, measured against
  the sim's true poses; a corrected copy the sim-trained policies read in the sim (TPO, the residual,
  in-sim evaluation), as ``perception_offset`` makes one for the robot.
- ``tpo``: TPO fine-tuning of the aligned-sim policy in the calibrated sim.
- ``residual``: the library RL baseline, a stable-baselines3 residual over the frozen aligned-sim policy
  in the calibrated sim (only when ``evaluate.policies`` names it).
- ``perception_offset``: the estimator's constant bias on the robot's camera, measured on the
  recorded demonstrations; a corrected copy for the sim-trained policies to read on the robot.
- ``evaluate``: every policy on the stand-in robot on the same seeds, with paired exact McNemar tests.

With ``observation: images`` (the GPU path) ``perception`` is skipped, the policies are end-to-end
image ACT, ``visaligner`` trains on paired real/sim episodes and ``generate`` renders the calibrated
sim's frames through it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import Any

import embodied_gym
from embodied_gym.configs import in_cache_key
from embodied_gym.data.reader import open_dataset
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.demo.configuration import POLICY_STAGES, DemoConfig
from embodied_gym.perception import PoseEstimatorConfig, generate_frames
from embodied_gym.perception.data import randomized_look
from embodied_gym.perception.robot_offset import TooFewDemonstrations, corrected_estimator, fit_estimator_offset
from embodied_gym.perception.sim_offset import fit_sim_offset, with_robot_bias
from embodied_gym.perception.training import train_pose_estimator
from embodied_gym.physaligner import ParameterSpace
from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate
from embodied_gym.policies.act import train_act
from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed, wilson_interval
from embodied_gym.policies.residual import train_residual
from embodied_gym.policies.tpo import train_tpo
from embodied_gym.processes import cpu_count
from embodied_gym.recording.aligned import generate_aligned_demos
from embodied_gym.recording.lerobot_import import ImportConfig, import_lerobot_dataset
from embodied_gym.recording.parallel import record_expert_demos
from embodied_gym.visaligner.training import train as train_visaligner


def say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LoopSettings:
    """The settings every stage may read beside its own section (the robot, its camera's rate, the
    episode length and what the policies observe)."""

    task: str
    observation: str
    robot_config: str | None
    camera_fps: float | None
    max_episode_steps: int | None
    sim_pose_source: str
    pose_update: str

    @classmethod
    def of(cls, cfg: DemoConfig, task: str) -> LoopSettings:
        return cls(
            task,
            cfg.observation,
            cfg.robot_config,
            cfg.camera_fps,
            cfg.max_episode_steps,
            cfg.sim_pose_source,
            cfg.pose_update,
        )

    @property
    def pose(self) -> bool:
        return self.observation == "pose_estimate"


@dataclass(frozen=True)
class StageContext:
    """What a stage's run function gets beside its section: the loop's shared settings, its own
    (clean) folder, and the outputs of the stages it reads, by name."""

    loop: LoopSettings
    folder: Path
    inputs: dict[str, dict]


@dataclass(frozen=True)
class Stage:
    """One row of the loop's table."""

    name: str
    run: Callable[[Any, StageContext], dict]
    section: Callable[[DemoConfig], Any]
    inputs: tuple[str, ...] = ()
    loop_keys: tuple[str, ...] = ()
    skip: Callable[[DemoConfig], str | None] = lambda cfg: None
    background: str | None = None  # a DemoConfig flag: True runs the stage in a second process
    # a run stopped half-way continues where it stopped (its run function resumes from the checkpoints and
    # finished evaluations in its folder) instead of starting over: the stages that take the longest
    resumable: bool = False

    def cache_settings(self, cfg: DemoConfig, task: str) -> dict:
        """The settings this stage's cache key hashes: its section without the settings marked
        ``cache_key=False``, the loop settings it names, the task and the episode length."""
        head = {"task": task, "max_episode_steps": cfg.max_episode_steps}
        if self.skip(cfg):
            return {**head, "skipped": True}
        return {**head, **keyed_settings(self.section(cfg)), **{k: getattr(cfg, k) for k in self.loop_keys}}


def keyed_settings(section: Any) -> Any:
    """``section`` as plain data (dataclasses as dicts, recursively) without its ``cache_key=False`` fields."""
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return {
            f.name: keyed_settings(getattr(section, f.name)) for f in dataclasses.fields(section) if in_cache_key(f)
        }
    if isinstance(section, dict):
        return {k: keyed_settings(v) for k, v in section.items()}
    if isinstance(section, (list, tuple)):
        return [keyed_settings(v) for v in section]
    return section


# --- the run functions: run(section, ctx) -> outputs ------------------------------------------------


def _record(
    env_id: str,
    out: Path,
    episodes: int,
    seed: int,
    loop: LoopSettings,
    *,
    camera: str,
    image_size,
    after_success_steps: int,
    workers: int | None,
    estimator: str | None,
    physics: str | None = None,
    crf: int = DEFAULT_CRF,
    backend: str = "local",
    pose_source: str = "estimate",
    robot_config: str | None = None,
    video: bool = False,
) -> dict:
    """Expert demonstrations in ``env_id``: with ``estimator``, joint state + its pose estimate
    (``pose_source="ground_truth"``, sim ids: the sim's true poses in its layout; with ``video`` also the
    camera frames the estimator reads, at its frame size); without, joint state + ``camera`` frames at
    ``image_size``."""

    ground_truth = estimator is not None and pose_source == "ground_truth"
    kwargs: dict[str, Any] = dict(
        obs_type="state" if ground_truth else "pixels_state",
        camera_fps=loop.camera_fps,
        physics=physics,
        robot_config=robot_config,
        pose_estimator=estimator,
        pose_source="ground_truth" if ground_truth else None,
        pose_update=loop.pose_update if estimator is not None else None,
        max_episode_steps=loop.max_episode_steps,
    )
    if estimator is None:
        kwargs.update(cameras=(camera,), image_size=tuple(image_size))
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
        cameras=() if estimator and not video else None,
    )
    stored = open_dataset(out).image_size(camera) if estimator is None or video else None
    return {
        "dataset": str(out),
        "episodes": summary.episodes,
        "expert_success": summary.success_rate,
        "camera": camera,
        "image_size": list(stored) if stored is not None else list(image_size),
        "video": estimator is None or video,
    }


def run_perception(p, ctx: StageContext) -> dict:
    """A pose estimator for the task's objects, trained on sim frames with domain-randomised looks."""

    if p.model:
        return {"model": str(p.model), "given": True}
    estimator = PoseEstimatorConfig(task=ctx.loop.task)
    frames = ctx.folder / "frames"
    generate_frames(
        frames,
        estimator,
        range(p.episodes),
        frame_stride=p.frame_stride,
        look=randomized_look,
        layouts_per_episode=p.layouts_per_episode,
        workers=p.workers or cpu_count(),
    )
    train = ctx.folder / "train"
    res = train_pose_estimator(replace(p.train, data=[str(frames)], out=str(train), resume=True), estimator)
    return {
        "model": str(train / "model"),
        "frames": str(frames),
        "val_errors": res.val_errors,
        "loss_png": str(train / "loss.png"),
    }


def run_perception_sim_offset(_, ctx: StageContext) -> dict:
    """The estimator's constant bias on the sim's renders, measured against the sim's true poses at reset
    frames; a corrected copy for the sim-trained policies to read in the sim."""

    estimator = ctx.inputs["perception"]["model"]
    fit = fit_sim_offset(estimator, embodied_gym.env_id(ctx.loop.task))
    corrected_estimator(estimator, fit, ctx.folder / "model")
    return {
        "model": str(ctx.folder / "model"),
        "corrections_cm": {obj: [100 * v for v in o.correction_xy] for obj, o in fit.objects.items()},
        "spread_cm": {obj: [100 * v for v in o.spread_xy] for obj, o in fit.objects.items()},
        "episodes": fit.episodes,
    }


def run_record(r, ctx: StageContext) -> dict:
    """Scripted-expert demonstrations on the stand-in robot (the robot's own data), or the import of
    ``record.demos``, demonstrations recorded with LeRobot's tools."""

    estimator = ctx.inputs["perception"].get("model")
    if r.demos:
        summary = import_lerobot_dataset(
            ImportConfig(
                source=r.demos,
                out=str(ctx.folder / "dataset"),
                task=ctx.loop.task,
                joint_map=dict(r.joint_map),
                camera=r.camera,
                camera_map=dict(r.camera_map),
                # with an estimator, the frames it reads are its own size (as the record stage's env renders)
                image_size=None if estimator is not None else tuple(r.image_size),
                store_video=estimator is None or r.video,  # the policies read the estimate; VisAligner the video
                pose_estimator=estimator,
                pose_update=ctx.loop.pose_update,
                crf=r.crf,
            )
        )
        return {
            "dataset": summary.root,
            "episodes": summary.episodes,
            "expert_success": None,  # teleoperated: no scripted expert recorded these
            "imported_from": str(r.demos),
            "import_notes": summary.notes,
            "camera": r.camera,
            "image_size": list(r.image_size),
        }
    return _record(
        embodied_gym.env_id(ctx.loop.task, real=True),
        ctx.folder / "dataset",
        r.episodes,
        r.seed,
        ctx.loop,
        camera=r.camera,
        image_size=r.image_size,
        after_success_steps=r.after_success_steps,
        crf=r.crf,
        workers=r.workers,
        estimator=ctx.inputs["perception"].get("model"),
        robot_config=ctx.loop.robot_config,
        video=r.video,
    )


def run_calibrate(c, ctx: StageContext) -> dict:
    """PhysAligner: the sim's physics, delay and backlash fitted to the recorded demonstrations."""

    settings = {k: v for k, v in dataclasses.asdict(c).items() if k != "free"}
    result_path = ctx.folder / "result.json"
    space = ParameterSpace.with_free(c.free) if c.free else None
    result = calibrate(
        ctx.inputs["record"]["dataset"], ctx.loop.task, result_path, space, CalibrationConfig(**settings)
    )
    return {
        "result": str(result_path),
        "report": str(ctx.folder / "result.report.md"),
        "paths_png": str(ctx.folder / "result.paths.png"),
        "held_out_errors": result["held_out_errors"],
        "unconstrained": result["unconstrained"],
    }


def run_visaligner(v, ctx: StageContext) -> dict:
    """VisAligner trained on paired stand-in / calibrated-sim episodes."""

    rec = ctx.inputs["record"]
    out = ctx.folder / "train"
    train_visaligner(
        replace(
            v,
            dataset=rec["dataset"],
            out=str(out),
            camera=rec["camera"],
            physics=ctx.inputs["calibrate"]["result"],
            model=dict(v.model),
        )
    )
    return {"model": str(out / "model"), "samples": str(out / "samples")}


def run_perception_aligned(p, ctx: StageContext) -> dict:
    """The estimator the sim-trained policies read on the robot, trained on calibrated-sim episodes as
    VisAligner shows them (arXiv 2507.05198, section 3.2) and, with ``randomized`` in ``perception.sources``,
    the perception stage's frames; and the robot's demonstrations with its estimate (re-read from their
    video), from which the perception_offset stage measures its bias."""
    from embodied_gym.visaligner.pose_frames import generate_visaligner_frames
    from embodied_gym.visaligner.render import reference_image

    loop, rec = ctx.loop, ctx.inputs["record"]
    estimator = PoseEstimatorConfig(task=loop.task)
    frames = ctx.folder / "visaligner_frames"
    generate_visaligner_frames(
        frames,
        estimator,
        range(p.visaligner_episodes),
        ctx.inputs["visaligner"]["model"],
        reference_image(rec["dataset"], rec["camera"], ctx.folder / "reference.png"),  # the robot's first frame
        env_kwargs={"physics": ctx.inputs["calibrate"]["result"], "max_episode_steps": loop.max_episode_steps},
        num_inference_steps=p.visaligner_steps,
    )
    data = [str(frames)]
    randomized = ctx.inputs["perception"].get("frames")
    if "randomized" in p.sources:
        if randomized is None:
            raise ValueError(
                "perception.sources names randomized, but the perception stage made no frames (perception.model "
                "gives a trained estimator): drop randomized from perception.sources"
            )
        data.insert(0, randomized)
    train = ctx.folder / "train"
    res = train_pose_estimator(replace(p.train, data=data, out=str(train), resume=True), estimator)
    robot = import_lerobot_dataset(
        ImportConfig(
            source=rec["dataset"],
            out=str(ctx.folder / "robot_dataset"),
            task=loop.task,
            camera=rec["camera"],
            store_video=False,
            pose_estimator=str(train / "model"),
            pose_update=loop.pose_update,
        )
    )
    return {
        "model": str(train / "model"),
        "frames": data,
        "val_errors": res.val_errors,
        "robot_dataset": robot.root,
    }


def _generate(g, ctx: StageContext, physics: str | None) -> dict:
    """Expert demonstrations in the sim with ``physics``: with an estimator, no video (the policies
    read the estimate); without, frames rendered through VisAligner."""

    rec, loop = ctx.inputs["record"], ctx.loop
    estimator = ctx.inputs["perception"].get("model")
    if estimator is not None:
        out = _record(
            embodied_gym.env_id(loop.task),
            ctx.folder / "dataset",
            g.episodes,
            g.seed,
            loop,
            camera=rec["camera"],
            image_size=rec["image_size"],
            after_success_steps=g.after_success_steps,
            workers=g.workers,
            backend=g.backend,
            estimator=estimator,
            physics=physics,
            pose_source=loop.sim_pose_source,
        )
        return {**out, "sim_expert_success": out["expert_success"]}
    outputs = generate_aligned_demos(
        replace(
            g,
            task=loop.task,
            physics=physics,
            model=ctx.inputs["visaligner"].get("model"),
            reference=rec["dataset"],
            camera=rec["camera"],
            image_size=tuple(rec["image_size"]),
            max_episode_steps=loop.max_episode_steps,
        ),
        ctx.folder,
    )
    return {"camera": rec["camera"], **outputs}


def run_generate(g, ctx: StageContext) -> dict:
    """Expert demonstrations in the calibrated sim."""
    return _generate(g, ctx, ctx.inputs["calibrate"]["result"])


def run_generate_nominal(g, ctx: StageContext) -> dict:
    """Expert demonstrations in the uncalibrated (nominal) sim: what calibration is measured against."""
    return _generate(g, ctx, None)


def _act(act, ctx: StageContext, data: str) -> dict:

    dataset = ctx.inputs[data]
    out = ctx.folder / "policy"
    if ctx.loop.pose:
        act = replace(act, dataset=dataset["dataset"], out=str(out), images=False, env_state=True)
    else:
        act = replace(act, dataset=dataset["dataset"], out=str(out), cameras=(dataset["camera"],))
    res = train_act(replace(act, resume=True))  # a resumed stage continues from its last checkpoint
    return {
        "policy": res.out,
        "steps": res.steps,
        "final_loss": res.final_loss,
        "train_time_s": res.train_time_s,
        "loss_png": str(out / "loss.png"),
    }


def run_act_stand_in(act, ctx: StageContext) -> dict:
    """ACT on the stand-in robot's demonstrations (the baseline the aligned sim must beat)."""
    return _act(act, ctx, "record")


def run_act_aligned(act, ctx: StageContext) -> dict:
    """ACT on the calibrated-sim demonstrations."""
    return _act(act, ctx, "generate")


def run_act_nominal(act, ctx: StageContext) -> dict:
    """ACT on the nominal-sim demonstrations."""
    return _act(act, ctx, "generate_nominal")


def run_tpo(t, ctx: StageContext) -> dict:
    """TPO fine-tuning of the aligned-sim policy in the calibrated sim."""

    loop = ctx.loop
    log = train_tpo(
        replace(
            t,
            policy=ctx.inputs["act_aligned"]["policy"],
            env_id=embodied_gym.env_id(loop.task),
            out=str(ctx.folder / "tpo"),
            physics=ctx.inputs["calibrate"]["result"],
            visaligner=None if loop.pose else ctx.inputs["visaligner"].get("model"),
            max_episode_steps=loop.max_episode_steps,
            # the rollouts and the in-sim selection read the estimate without the sim's constant bias, as
            # the policy reads the robot's without the robot's
            pose_estimator=t.pose_estimator or ctx.inputs.get("perception_sim_offset", {}).get("model"),
        )
    )
    return {"policy": str(ctx.folder / "tpo"), "log": log}


def run_residual(r, ctx: StageContext) -> dict:
    """Residual RL (stable-baselines3) over the frozen aligned-sim policy in the calibrated sim."""
    loop = ctx.loop
    meta = train_residual(
        replace(
            r,
            policy=ctx.inputs["act_aligned"]["policy"],
            env_id=embodied_gym.env_id(loop.task),
            out=str(ctx.folder / "residual"),
            physics=ctx.inputs["calibrate"]["result"],
            max_episode_steps=loop.max_episode_steps,
            pose_estimator=r.pose_estimator or ctx.inputs.get("perception_sim_offset", {}).get("model"),
        )
    )
    return {"policy": str(ctx.folder / "residual"), "eval": meta.get("eval")}


def run_perception_offset(_, ctx: StageContext) -> dict:
    """The estimator's constant bias on the robot's camera, measured on the recorded demonstrations
    against the sim's (per object: the task's grasped object, and its place target where the
    demonstrations release); a corrected copy of the estimator for the sim-trained policies."""

    aligned = ctx.inputs.get("perception_aligned", {})
    estimator = aligned.get("model") or ctx.inputs["perception"]["model"]
    robot_dataset = aligned.get("robot_dataset") or ctx.inputs["record"]["dataset"]
    try:
        fit = fit_estimator_offset(estimator, robot_dataset, ctx.inputs["generate"]["dataset"])
    except TooFewDemonstrations as e:  # e.g. episodes cut before the grasp: the policies read the estimate as is
        return {"skipped": str(e)}
    corrected_estimator(estimator, fit, ctx.folder / "model")
    return {
        "model": str(ctx.folder / "model"),
        "object": fit.object,
        "correction_cm": [100 * v for v in fit.correction_xy],  # the grasped object's (the report's figure)
        "corrections_cm": {obj: [100 * v for v in o.correction_xy] for obj, o in fit.objects.items()},
        "uncorrected": fit.uncorrected,
        "robot_episodes": fit.robot_episodes,
        "outliers": {obj: o.outliers for obj, o in fit.objects.items()},
    }


def _expert_from_recording(rec: dict) -> dict:
    """The scripted expert's success over its recorded stand-in demonstrations, in the shape of an
    evaluation entry."""

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


#: the fields of an evaluation JSON an entry of the summary keeps
_EVAL_FIELDS = ("success_rate", "ci95", "episodes", "mean_return", "mean_reset_pose_error_cm", "grasp_rate")


#: where an evaluation runs: the stand-in robot, the calibrated sim the policies were trained in, the
#: uncalibrated sim
ROBOT, CALIBRATED_SIM, NOMINAL_SIM = "robot", "calibrated_sim", "nominal_sim"


def sim_policy_estimator(outputs: dict[str, dict]) -> str | None:
    """The pose estimator the sim-trained policies read on the robot, from stage outputs by stage name: the
    bias-corrected one (``perception_offset``), else the one trained on VisAligner frames
    (``perception_aligned``), else None (the one their demonstrations were recorded with)."""
    return outputs.get("perception_offset", {}).get("model") or outputs.get("perception_aligned", {}).get("model")


def finished_outputs(task_folder: str | Path) -> dict[str, dict]:
    """The outputs of every finished stage of one task's demo run folder (``<runs>/<name>[/<task>]``), by name."""
    folder = Path(task_folder)
    return {
        name: json.loads((folder / name / "stage.json").read_text())["outputs"]
        for name in STAGE_NAMES
        if (folder / name / "stage.json").exists()
    }


def stand_in_sim_estimator(ctx: StageContext) -> str | None:
    """The estimator ACT on the robot's demonstrations reads in a sim: the sim-corrected one with the
    robot's bias put back (the bias it learnt with), written into the evaluate stage's folder; the
    sim-corrected one as is when the robot's bias was not measured on the estimator its demonstrations
    hold (no ``perception_offset``, or it corrects ``perception_aligned``'s estimator); None without a
    sim correction."""
    sim = ctx.inputs.get("perception_sim_offset", {}).get("model")
    robot = ctx.inputs.get("perception_offset", {}).get("model")
    if sim is None or robot is None or ctx.inputs.get("perception_aligned", {}).get("model"):
        return sim
    return str(with_robot_bias(sim, robot, ctx.folder / "stand_in_sim_estimator"))


def evaluation_runs(e, ctx: StageContext) -> list[tuple[str, str, str, str | None]]:
    """(entry name, policy folder or "expert", where (:data:`ROBOT`, :data:`CALIBRATED_SIM`,
    :data:`NOMINAL_SIM`), pose estimator or None) of every evaluation ``e`` asks for. The sim-trained
    policies read the robot's corrected estimate on the robot and the sim-corrected estimate
    (``perception_sim_offset``) in a sim; ACT on the robot's demonstrations reads the estimate as recorded
    on the robot, and in a sim the sim-corrected one with the robot's bias put back
    (:func:`stand_in_sim_estimator`). Without those stages a policy reads the estimator it was recorded with."""
    policies = {n: ctx.inputs[n]["policy"] for n in e.policies if n != "expert" and "policy" in ctx.inputs.get(n, {})}
    corrected = sim_policy_estimator(ctx.inputs)
    in_sim = ctx.inputs.get("perception_sim_offset", {}).get("model")
    stand_in_in_sim = stand_in_sim_estimator(ctx) if "act_stand_in" in {*e.in_sim, *e.in_nominal_sim} else None
    runs: list[tuple[str, str, str, str | None]] = []
    if "expert" in e.policies and e.expert:
        runs.append(("expert", "expert", ROBOT, None))
    for name, policy in policies.items():
        runs.append((name, policy, ROBOT, corrected if name != "act_stand_in" else None))
    for where, names, suffix in (
        (CALIBRATED_SIM, e.in_sim, "in_sim"),
        (NOMINAL_SIM, e.in_nominal_sim, "in_nominal_sim"),
    ):
        for name in names:
            runs.append(
                (f"{name}_{suffix}", policies[name], where, stand_in_in_sim if name == "act_stand_in" else in_sim)
            )
    if e.ablation_estimator:
        runs.append(("act_aligned_ablation_estimator", policies["act_aligned"], ROBOT, e.ablation_estimator))
    return runs


_WHERE = {ROBOT: "the stand-in robot", CALIBRATED_SIM: "the calibrated sim", NOMINAL_SIM: "the nominal sim"}


def run_evaluate(e, ctx: StageContext) -> dict:
    """Every policy on the stand-in robot on the same seeds, and the paired tests ``e.comparisons`` name."""

    loop, seeds = ctx.loop, {}
    out: dict[str, Any] = {}
    if "expert" in e.policies and not e.expert:
        if ctx.inputs["record"].get("expert_success") is not None:
            out["expert"] = _expert_from_recording(ctx.inputs["record"])
        else:  # imported teleoperated demonstrations: no scripted-expert bar (evaluate.expert: true runs it)
            say(f"{loop.task}: no expert entry: the demonstrations were imported, not recorded by the scripted expert")
    for name, policy, where, estimator in evaluation_runs(e, ctx):
        path = ctx.folder / f"{name}.json"
        if path.exists():  # a resumed stage (same key: same policies and settings): this one finished before
            say(f"{loop.task}: {name} on {_WHERE[where]}: evaluated before the stop ({path.name})")
            res = json.loads(path.read_text())
        else:
            say(f"{loop.task}: evaluating {name} on {_WHERE[where]} ({e.episodes} episodes)")
            on_robot = where == ROBOT
            res = evaluate_policy(
                policy,
                embodied_gym.env_id(loop.task, real=on_robot),
                e.episodes,
                e.seed,
                out=str(path),
                videos=str(ctx.folder / f"{name}_videos"),
                max_episode_steps=loop.max_episode_steps,
                robot_config=loop.robot_config if on_robot else None,
                physics=ctx.inputs["calibrate"]["result"] if where == CALIBRATED_SIM else None,
                pose_update=e.pose_update,
                workers=e.workers or cpu_count(),
                pose_estimator=estimator,
            ).to_json()
        seeds[name] = successes_by_seed(res)
        out[name] = {"json": str(path), **{k: res.get(k) for k in _EVAL_FIELDS}}
    out["_paired"] = [
        {"a": a, "b": b, **paired_comparison(seeds[a], seeds[b]).to_json()}
        for a, b in e.comparisons
        if a in seeds and b in seeds
    ]
    return out


# --- the sections each stage receives ------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetSettings:
    """The one setting of stage perception_offset (``perception.robot_offset``) and of stage
    perception_sim_offset (``perception.sim_offset``): whether it runs."""

    enabled: bool


def _tpo_section(cfg: DemoConfig):
    """TPO rolls out on the observation the policies are evaluated on (``evaluate.pose_update``, else the
    loop's ``pose_update``) unless its own settings name one, and rolls out and evaluates on as many
    processes as the stand-in evaluation."""

    pose_update: str | None = None
    if cfg.observation == "pose_estimate":
        pose_update = cfg.tpo.pose_update or cfg.evaluate.pose_update or cfg.pose_update
    workers = cfg.evaluate.workers or cpu_count()
    return replace(cfg.tpo, pose_update=pose_update, eval_workers=workers, rollout_workers=workers)


def _skip_perception(cfg: DemoConfig) -> str | None:
    return None if cfg.observation == "pose_estimate" else "observation: images (the policies read the camera frames)"


def _skip_visaligner(cfg: DemoConfig) -> str | None:
    if cfg.observation == "pose_estimate" and not cfg.aligned_perception:
        return "observation: pose_estimate and perception.sources without visaligner (nothing reads its frames)"
    return None


def _skip_perception_aligned(cfg: DemoConfig) -> str | None:
    return None if cfg.aligned_perception else "perception.sources without visaligner (observation pose_estimate)"


def _record_section(cfg: DemoConfig):
    """The record stage stores the camera's video when VisAligner learns from it."""
    return replace(cfg.record, video=cfg.record.video or cfg.aligned_perception)


def _skip_offset(cfg: DemoConfig) -> str | None:
    if cfg.observation != "pose_estimate":
        return "observation: images"
    return None if cfg.perception.robot_offset else "perception.robot_offset: false"


def _skip_sim_offset(cfg: DemoConfig) -> str | None:
    if cfg.observation != "pose_estimate":
        return "observation: images"
    if cfg.sim_pose_source == "estimate":  # then the sim's demos hold its estimate, bias included
        return "sim_pose_source: estimate (the sim-trained policies learnt the sim's estimate as it is)"
    return None if cfg.perception.sim_offset else "perception.sim_offset: false"


def _skip_nominal(cfg: DemoConfig) -> str | None:
    return None if cfg.nominal_sim else "nominal_sim: false"


def _skip_tpo(cfg: DemoConfig) -> str | None:
    return None if "tpo" in cfg.evaluate.policies else "tpo is not in evaluate.policies"


def _residual_section(cfg: DemoConfig):
    """The residual trains on the observation the policies are evaluated on, as TPO does, and evaluates
    on as many processes as the stand-in evaluation."""
    if cfg.observation != "pose_estimate":
        return cfg.residual
    pose_update = cfg.residual.pose_update or cfg.evaluate.pose_update or cfg.pose_update
    return replace(cfg.residual, pose_update=pose_update, eval_workers=cfg.evaluate.workers or cpu_count())


def _skip_residual(cfg: DemoConfig) -> str | None:
    if "residual" not in cfg.evaluate.policies:
        return "residual is not in evaluate.policies"
    return "observation: images (the residual reads the pose estimate)" if cfg.observation == "images" else None


_ROBOT = ("robot_config", "camera_fps", "observation", "pose_update")

#: The loop, in the order its stages run.
STAGES: tuple[Stage, ...] = (
    Stage("perception", run_perception, attrgetter("perception"), skip=_skip_perception, resumable=True),
    Stage("record", run_record, _record_section, ("perception",), _ROBOT),
    Stage(
        "act_stand_in",
        run_act_stand_in,
        attrgetter("act"),
        ("record",),
        background="background_act_stand_in",
        resumable=True,
    ),
    Stage("calibrate", run_calibrate, attrgetter("calibrate"), ("record",)),
    Stage(
        "visaligner",
        run_visaligner,
        attrgetter("visaligner"),
        ("record", "calibrate"),
        skip=_skip_visaligner,
        resumable=True,
    ),
    Stage(
        "perception_aligned",
        run_perception_aligned,
        attrgetter("perception"),
        ("perception", "record", "calibrate", "visaligner"),
        ("pose_update",),
        skip=_skip_perception_aligned,
        resumable=True,
    ),
    Stage(
        "generate",
        run_generate,
        attrgetter("generate"),
        ("perception", "record", "calibrate", "visaligner"),
        (*_ROBOT, "sim_pose_source"),
    ),
    Stage(
        "generate_nominal",
        run_generate_nominal,
        attrgetter("generate"),
        ("perception", "record", "visaligner"),
        (*_ROBOT, "sim_pose_source"),
        skip=_skip_nominal,
    ),
    Stage("act_aligned", run_act_aligned, attrgetter("act"), ("generate",), resumable=True),
    Stage("act_nominal", run_act_nominal, attrgetter("act"), ("generate_nominal",), skip=_skip_nominal, resumable=True),
    Stage(
        "perception_sim_offset",
        run_perception_sim_offset,
        lambda cfg: OffsetSettings(cfg.perception.sim_offset),
        ("perception",),
        ("sim_pose_source",),  # it decides whether the stage runs
        skip=_skip_sim_offset,
    ),
    Stage(
        "tpo",
        run_tpo,
        _tpo_section,
        ("act_aligned", "calibrate", "visaligner", "perception_sim_offset"),
        skip=_skip_tpo,
        resumable=True,
    ),
    Stage(
        "residual",
        run_residual,
        _residual_section,
        ("act_aligned", "calibrate", "perception_sim_offset"),
        skip=_skip_residual,
        resumable=True,
    ),
    Stage(
        "perception_offset",
        run_perception_offset,
        lambda cfg: OffsetSettings(cfg.perception.robot_offset),
        ("perception", "record", "perception_aligned", "generate"),
        skip=_skip_offset,
    ),
    Stage(
        "evaluate",
        run_evaluate,
        attrgetter("evaluate"),
        ("record", "calibrate", *POLICY_STAGES, "perception_aligned", "perception_offset", "perception_sim_offset"),
        ("robot_config",),
        resumable=True,
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def downstream(name: str) -> set[str]:
    """``name`` and every stage that reads it, directly or through others."""
    found = {name}
    for s in STAGES:  # the table is in run order: a stage's inputs come before it
        if found & set(s.inputs):
            found.add(s.name)
    return found
