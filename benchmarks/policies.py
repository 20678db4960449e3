"""The paper's policy experiment (EmbodieDreamer, arXiv 2507.05198, section 4) on the stand-in robot,
sized for 2 CPU cores: ACT on joint state + the camera's object-pose estimate.

Every policy is LeRobot's ACT reading ``observation.state`` (the 14 joint positions) and
``observation.environment_state`` (the cup's x, y, z). At evaluation that is always the pose
estimator's estimate from the ``cam_high`` frame (:mod:`embodied_gym.perception`): on the stand-in
it comes from the stand-in's own camera frames, never from its simulator state. In the training
data it is the estimate too for the stand-in demos (a robot has no other), and, with
``--sim-pose-source ground_truth`` (the default), the simulator's true cup position for the
generated sim demos (exact labels, read at the camera rate; ``estimate`` records the estimate there
too, as earlier runs did).

Rows (each evaluated on the stand-in robot, ``EmbodieDreamer-PickCup-Real-v0``, on the same
``--eval-episodes`` seeds ``--eval-seed + i``):

(a) ACT on ``--standin-demos`` scripted-expert demonstrations recorded on the stand-in;
(b) ACT on ``--sim-demos`` demonstrations generated in the nominal sim;
(c) ACT on ``--sim-demos`` demonstrations generated in the calibrated sim (PhysAligner's physics,
    delay and backlash fitted to the stand-in demonstrations of row a);
(d) (c) after TPO in the calibrated sim (perception-wrapped observations); TPO returns the iteration
    (the reference included) its greedy evaluation in the calibrated sim ranks first (``--tpo-select``;
    ``--tpo-curve`` also evaluates every iteration on the stand-in, ``tpo_iterations.png``);
(e) (c) with the estimate of a pose estimator trained on raw sim renders (``--raw-estimator``)
    instead of ``--estimator``: (c)'s policy evaluated with it (with ``--sim-pose-source estimate``:
    trained on (c)'s episodes re-recorded with its estimate);

plus (c) in its own sim (the in-domain figure). Rows (b), (c) and (e) use the same episode seeds, so
they differ only in physics or estimator. Each comparison is a paired exact McNemar test on the
evaluation seeds (:func:`embodied_gym.policies.evaluate.paired_comparison`).

    # the two pose estimators (BENCHMARKS.md, perception section)
    MUJOCO_GL=egl .venv/bin/python benchmarks/perception.py --keypoint-weight 0 --out runs/bench/perception
    MUJOCO_GL=egl .venv/bin/python benchmarks/perception.py --keypoint-weight 0 --variants randomized --sim-episodes 200 \\
        --steps 4000 --batch-size 64 --out runs/bench/perception_200
    MUJOCO_GL=egl .venv/bin/python benchmarks/perception.py --variants randomized --sim-episodes 200 \\
        --steps 4000 --batch-size 64 --out runs/bench/perception_200kp
    # this benchmark
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --out runs/bench/policies_gt \\
        --estimator runs/bench/perception_200kp/models/randomized/model \\
        --raw-estimator runs/bench/perception/models/raw/model

Two estimators, one per camera: ``--estimator`` reads the stand-in's frames (row a's demos and every
stand-in evaluation; one trained on VisAligner frames, the paper's loop), ``--sim-estimator`` the sim's
renders (the generated demos' metadata, TPO's rollouts and in-sim evaluations, row c_sim; one trained on
raw sim renders). ``--physics`` takes a calibration made elsewhere (e.g. on the 240x320 recording
VisAligner trains on) instead of calibrating on row (a)'s demos. ``--stages train`` trains the rows'
policies and TPO without evaluating them, so the sim side can run before the stand-in's estimator exists.

    # rows a-e with the estimator trained on VisAligner frames (BENCHMARKS.md, "the loop with VisAligner's
    # perception"): the sim reads its renders with the raw-render estimator, the stand-in with the VisAligner one
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --out runs/bench/policies_va \
        --estimator runs/bench/perception_visaligner/models/visaligner_full/model \
        --sim-estimator runs/bench/perception_visaligner/models/raw/model \
        --raw-estimator runs/bench/perception_visaligner/models/raw/model \
        --physics runs/bench/policies_va/calibrate/result.json --eval-pose-update at_reset --eval-tag _at_reset

``--robot-config FILE`` runs the whole loop against another stand-in world (its demos, its
calibration, its evaluations); the nominal-sim stages (row b) do not depend on the world, so a copy of
another run's ``data_nominal`` and ``act_b`` in ``--out`` is reused as is.

Every stage writes its output atomically and is skipped when it is there, so an interrupted run
resumes where it stopped (a changed setting needs a new ``--out``). ``--rows`` runs a subset, in the
order given; two processes with different ``--rows`` may share ``--out`` once the data stages are done
(``--stages data`` runs only those). Results: ``<out>/results.json``, the table on stdout, and a bar
chart with Wilson 95 % intervals at ``<out>/policies.png`` (``--figure`` copies it). ``--eval-pose-update
at_reset --eval-tag _at_reset`` evaluates the same policies with the estimate of the reset frame held
for the episode (``eval_<row>_at_reset.json``, ``results_at_reset.json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

import embodied_gym
from embodied_gym.atomic import write_json
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.parallel import record_expert_demos
from embodied_gym.data.reader import is_dataset, read_info, read_sidecar
from embodied_gym.envs.experts import FROM_PLAN
from embodied_gym.policies.act import ACTTrainConfig, latest_checkpoint, train_act
from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed

ROWS = {
    "a": "ACT, stand-in demos",
    "b": "ACT, nominal-sim demos",
    "c": "ACT, calibrated-sim demos",
    "d": "(c) after TPO in the calibrated sim",
    "e": "(c) with perception trained on raw sim renders",
}
#: (better, worse) pairs the issue's targets compare, as "row x beats row y"
COMPARISONS = [("c", "b"), ("c", "a"), ("d", "c"), ("c", "e")]


def _say(msg: str) -> None:
    print(f"[policies] {msg}", flush=True)


def _demos(
    env_id: str, root: Path, episodes: int, seed: int, estimator: str, args, physics=None, pose_source: str = "estimate"
) -> dict:
    """Scripted-expert demonstrations in ``env_id`` with the estimator's pose estimate (or, with
    ``pose_source="ground_truth"``, the sim's true poses in its layout) as the environment state (no
    video stored: ACT reads the pose, not the frames)."""
    have = read_info(root)["total_episodes"] if is_dataset(root) else 0
    if have < episodes:
        _say(f"recording {episodes - have} demos in {env_id} -> {root} (poses: {pose_source})")
        kwargs = dict(
            pose_estimator=estimator,
            camera_fps=args.camera_fps,
            pose_source=pose_source,
            obs_type="state" if pose_source == "ground_truth" else "pixels_state",
        )
        if physics is not None:
            kwargs["physics"] = physics
        if args.demo_pose_update:
            kwargs["pose_update"] = args.demo_pose_update
        if args.robot_config and embodied_gym.parse_env_id(env_id).real:
            kwargs["robot_config"] = args.robot_config
        record_expert_demos(
            env_id,
            kwargs,
            root,
            episodes - have,
            seed=seed,
            resume=is_dataset(root),
            after_success_steps=args.after_success_steps,
            cameras=(),
            expert_integral_below=args.expert_integral_below,
        )
    rows = read_sidecar(root)
    return {
        "dataset": str(root),
        "episodes": episodes,
        "expert_success": sum(bool(r.get("success")) for r in rows) / max(len(rows), 1),
    }


def _calibrate(dataset: Path, out: Path, args) -> str:
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate

    result = out / "result.json"
    if not result.exists():
        _say(f"calibrating on {dataset} (PhysAligner, {args.calibration_budget:g} s)")
        calibrate(str(dataset), args.task, result, None, CalibrationConfig(budget_s=args.calibration_budget))
    return str(result)


def _train(dataset: str, out: Path, args) -> float:
    ckpt = latest_checkpoint(out)
    if ckpt is None or int(ckpt.name) < args.steps:
        _say(f"training ACT on {dataset} -> {out}")
        train_act(
            ACTTrainConfig(
                dataset=dataset,
                out=str(out),
                preset="cpu",
                images=False,
                env_state=True,
                steps=args.steps,
                batch_size=args.batch_size,
                chunk_size=args.chunk_size,
                resume=ckpt is not None,
                num_threads=args.threads,
                save_every=max(100, args.steps // 4),
                overrides=dict(args.act_override),
                successful_only=args.successful_demos_only,
            )
        )
    return _train_time(out / "train_log.jsonl")


def _train_time(log: Path) -> float:
    """Optimisation time over all (resumed) runs: ``time_s`` restarts at every resume."""
    total, last = 0.0, 0.0
    for line in log.read_text().splitlines():
        t = json.loads(line)["time_s"]
        if t < last:
            total += last
        last = t
    return total + last


def _eval(policy: Path, env_id: str, out: Path, args, physics=None, pose_estimator=None) -> dict:
    """``policy`` on ``env_id``, reading ``pose_estimator`` (default: ``--estimator`` on the stand-in,
    ``--sim-estimator`` in a sim, in place of the one the policy's data names)."""
    real = embodied_gym.parse_env_id(env_id).real
    if pose_estimator is None:
        pose_estimator = args.estimator if real else args.sim_estimator
    if not out.exists():
        _say(f"evaluating {policy} on {env_id} ({args.eval_episodes} episodes)")
        robot = args.robot_config if real else None
        evaluate_policy(
            str(policy),
            env_id,
            args.eval_episodes,
            seed=args.eval_seed,
            out=str(out),
            physics=physics,
            temporal_ensemble_coeff=args.temporal_ensemble,
            pose_estimator=pose_estimator,
            robot_config=robot,
            pose_update=args.eval_pose_update,
            workers=args.eval_workers,
        )
    return json.loads(out.read_text())


def _tpo(out: Path, physics: str, args) -> list[dict]:
    """Row (d): TPO on row (c)'s policy in the calibrated sim (resumes; returns its log), its rollouts and
    in-sim evaluations reading ``--sim-estimator``."""
    from embodied_gym.policies.tpo import TPOConfig, train_tpo

    return train_tpo(
        TPOConfig(
            policy=str(out / "act_c"),
            env_id=embodied_gym.env_id(args.task),
            out=str(out / args.tpo_out),
            iterations=args.tpo_iterations,
            rollouts=args.tpo_rollouts,
            pairs=args.tpo_pairs,
            epochs=args.tpo_epochs,
            physics=physics,
            rollout_noise=args.tpo_rollout_noise,
            sft_weight=args.tpo_sft_weight,
            num_threads=args.threads,
            eval_episodes=args.tpo_eval_episodes,
            eval_temporal_ensemble=args.temporal_ensemble,
            eval_workers=args.eval_workers,
            select=args.tpo_select,
            seed=args.tpo_seed,
            pose_estimator=args.sim_estimator,
            pose_update=args.tpo_pose_update or args.eval_pose_update,
        )
    )


def _row(name: str, ev: dict, **extra) -> dict:
    return {
        "row": name,
        "success_rate": ev["success_rate"],
        "ci95": ev["ci95"],
        "episodes": ev["episodes"],
        "mean_return": ev["mean_return"],
        "eval_wall_time_s": ev["wall_time_s"],
        "successes": {str(k): v for k, v in successes_by_seed(ev).items()},
        "reset_pose_error_cm": reset_error_by_outcome(ev),
        **extra,
    }


def reset_error_by_outcome(ev: dict) -> dict | None:
    """How far the reset frame's estimate was from the env's reported cup position (cm, horizontal), over
    all episodes and split by outcome: whether the misses are the episodes the estimate misled. None for an
    evaluation that predates the field or reads no estimate."""
    pairs = [
        (e["success"], e["reset_pose_error_cm"]) for e in ev["per_episode"] if e.get("reset_pose_error_cm") is not None
    ]
    if not pairs:
        return None

    def mean(xs):
        return float(np.mean(xs)) if xs else None

    errors = [x for _, x in pairs]
    return {
        "mean": mean(errors),
        "p90": float(np.percentile(errors, 90)),
        "success_mean": mean([x for s, x in pairs if s]),
        "failure_mean": mean([x for s, x in pairs if not s]),
        "success_rate_below_1cm": mean([float(s) for s, x in pairs if x < 1.0]),
        "success_rate_above_1cm": mean([float(s) for s, x in pairs if x >= 1.0]),
        "episodes_below_1cm": sum(x < 1.0 for x in errors),
    }


def _integral_below(text: str):
    if text in (FROM_PLAN, "none"):
        return None if text == "none" else FROM_PLAN
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--expert-integral-below takes plan, none or a number (rad per step), got {text!r}"
        ) from None


def _override(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    if not value:
        raise argparse.ArgumentTypeError(f"--act-override {text!r}: write NAME=VALUE, e.g. dim_model=256")
    return key, json.loads(value) if value[0] in "0123456789-[{tf" else value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="PickCup")
    p.add_argument("--out", default="runs/bench/policies")
    p.add_argument(
        "--estimator",
        required=True,
        help="pose estimator folder of every stand-in episode of rows a-d: row (a)'s demos and every "
        "evaluation on the stand-in (e.g. one trained on VisAligner frames)",
    )
    p.add_argument(
        "--sim-estimator",
        help="pose estimator folder of every sim episode: the generated demos' metadata, row (d)'s TPO "
        "rollouts and in-sim evaluations, row c_sim (default: --estimator). One trained on raw sim "
        "renders reads the sim's own frames; one trained on VisAligner frames reads the robot's",
    )
    p.add_argument("--raw-estimator", help="pose estimator trained on raw sim renders (row e)")
    p.add_argument("--physics", help="a calibration result JSON to use instead of calibrating here")
    p.add_argument(
        "--robot-config",
        metavar="FILE",
        help="stand-in robot config of every -Real- env here (the demos of row a, which the calibration "
        "fits, and every evaluation), e.g. embodied_gym/robots/stand_in_world2.yaml: the whole "
        "loop against another robot",
    )
    p.add_argument("--calibration-budget", type=float, default=240.0, help="PhysAligner's budget, s")
    p.add_argument("--standin-demos", type=int, default=50)
    p.add_argument("--sim-demos", type=int, default=200, help="demos generated in each sim (rows b, c, e)")
    p.add_argument(
        "--sim-pose-source",
        choices=("ground_truth", "estimate"),
        default="ground_truth",
        help="the cup position stored in the generated sim demos: the sim's true one, read at the camera "
        "rate (default), or the estimator's estimate (evaluation always uses the estimate)",
    )
    p.add_argument(
        "--demo-pose-update",
        choices=("every_frame", "at_reset"),
        help="the demos' environment state: refreshed every camera frame (default) or the reset frame's "
        "estimate (the true start pose with --sim-pose-source ground_truth) held for the episode",
    )
    p.add_argument(
        "--camera-fps",
        type=float,
        default=10.0,
        help="camera frame rate (the estimate is held between frames; evaluation uses the same)",
    )
    p.add_argument(
        "--after-success-steps",
        type=int,
        default=AFTER_SUCCESS_STEPS,
        help="control steps recorded after the first success",
    )
    p.add_argument(
        "--expert-integral-below",
        type=_integral_below,
        default=FROM_PLAN,
        metavar="plan|none|RAD",
        help="the experts' integral term for every demo (make_expert's integral_below): plan (default: "
        "each task's plan), none (off), or a number (rad per step; 0.01 is the expert before "
        "ExpertPlan.integral_below)",
    )
    p.add_argument(
        "--successful-demos-only",
        action="store_true",
        help="train ACT only on the demos the expert succeeded in (train act --successful-only); "
        "on world2 the expert fails about 30 %% of them",
    )
    p.add_argument("--steps", type=int, default=8000, help="ACT optimisation steps per row")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--chunk-size", type=int, default=20)
    p.add_argument(
        "--act-override",
        type=_override,
        action="append",
        default=[],
        help="another ACTPreset field, NAME=VALUE (repeatable)",
    )
    p.add_argument(
        "--temporal-ensemble",
        type=float,
        default=0.01,
        help="ACT's temporal ensembling coefficient at evaluation (ACT's 0.01)",
    )
    p.add_argument(
        "--eval-pose-update",
        choices=("every_frame", "at_reset"),
        help="evaluate every row with the estimate refreshed every camera frame or only at reset (held for "
        "the episode); default: as each row's data was recorded. A new --out (or --eval-tag) keeps both",
    )
    p.add_argument(
        "--eval-tag",
        default="",
        help="suffix of the evaluation files (eval_<row><tag>.json), so one --out "
        "holds evaluations of the same policies under other settings",
    )
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--eval-seed", type=int, default=100_000, help="evaluation seeds differ from demo seeds")
    p.add_argument("--tpo-iterations", type=int, default=2)
    p.add_argument("--tpo-rollouts", type=int, default=16)
    p.add_argument("--tpo-pairs", type=int, default=4)
    p.add_argument("--tpo-epochs", type=int, default=5)
    p.add_argument(
        "--tpo-pose-update",
        choices=("every_frame", "at_reset"),
        help="row (d): when the TPO rollouts' pose estimate is refreshed (default: --eval-pose-update, "
        "the observation the policy is evaluated with; unset: as its data was recorded)",
    )
    p.add_argument(
        "--tpo-out",
        default="tpo_d",
        help="row (d): the TPO output folder under --out (another name "
        "keeps a run at other TPO sizes beside the first)",
    )
    p.add_argument(
        "--tpo-rollout-noise",
        type=float,
        default=0.02,
        help="Laplace b of TPO's rollouts (TPO's own default is its likelihood scale, 0.1: there the "
        "rollouts mostly fail; BENCHMARKS.md has both)",
    )
    p.add_argument(
        "--tpo-sft-weight",
        type=float,
        default=0.0,
        help="TPO's optional L1 anchor on the preferred trajectories (TPOConfig.sft_weight; 0 is the paper's loss)",
    )
    p.add_argument(
        "--tpo-eval-episodes",
        type=int,
        default=50,
        help="row (d): TPO's greedy evaluations in the calibrated sim (the reference and every iteration; "
        "TPOConfig.eval_episodes, seeds from 10000); 0: none",
    )
    p.add_argument(
        "--tpo-select",
        choices=("best", "last"),
        default="best",
        help="row (d): the iteration TPO returns (TPOConfig.select): the best of those evaluations, or the last",
    )
    p.add_argument("--tpo-seed", type=int, default=0, help="row (d): TPO's seed (rollouts, pair sampler)")
    p.add_argument(
        "--tpo-curve",
        action="store_true",
        help="row (d): also evaluate every TPO iteration on the stand-in (the same seeds as the rows: "
        "does the in-sim choice predict the stand-in?)",
    )
    p.add_argument("--eval-workers", type=int, default=1, help="processes per evaluation (results do not change)")
    p.add_argument("--rows", nargs="+", default=["a", "b", "c", "e", "c_sim", "d"], choices=[*ROWS, "c_sim"])
    p.add_argument(
        "--stages",
        choices=["all", "data", "train"],
        default="all",
        help="data: only record and calibrate (then run rows in parallel processes); train: also train "
        "the rows' policies (and row d's TPO), evaluating nothing on the stand-in",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--figure", help="also copy the figure here")
    p.add_argument(
        "--compare",
        metavar="RESULTS_JSON",
        help="also test each row against the same row of another run's results.json (paired: both "
        "must use the same evaluation seeds), e.g. a run with another --estimator",
    )
    args = p.parse_args()
    if "e" in args.rows and not args.raw_estimator:
        p.error("row e needs --raw-estimator (a pose estimator trained on raw sim renders)")
    args.sim_estimator = args.sim_estimator or args.estimator

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    real = embodied_gym.env_id(args.task, real=True)
    sim = embodied_gym.env_id(args.task)
    tag = args.eval_tag
    results_path = out / f"results{tag}.json"
    t0 = time.time()

    # data: the stand-in demos, the calibration, and the generated sim demos (same seeds in each sim)
    rows_needing = {
        "a": ["standin"],
        "b": ["nominal"],
        "c": ["calibrated"],
        "c_sim": ["calibrated"],
        "d": ["calibrated"],
        "e": ["calibrated_raw"],
    }
    ground_truth = args.sim_pose_source == "ground_truth"
    if ground_truth:  # row e is (c)'s policy, evaluated with the raw-render estimator
        rows_needing["e"] = ["calibrated"]
    needed = {d for r in args.rows for d in rows_needing[r]}
    calibrating = bool(needed & {"calibrated", "calibrated_raw"}) and not args.physics
    if calibrating:
        needed.add("standin")  # the calibration fits the stand-in demos
    data = {}
    if "standin" in needed:
        data["standin"] = _demos(real, out / "data_standin", args.standin_demos, 0, args.estimator, args)
    physics = None
    if needed & {"calibrated", "calibrated_raw"}:
        physics = args.physics or _calibrate(Path(data["standin"]["dataset"]), out / "calibrate", args)
    if "nominal" in needed:
        data["nominal"] = _demos(
            sim,
            out / "data_nominal",
            args.sim_demos,
            50_000,
            args.sim_estimator,
            args,
            pose_source=args.sim_pose_source,
        )
    if "calibrated" in needed:
        data["calibrated"] = _demos(
            sim,
            out / "data_calibrated",
            args.sim_demos,
            50_000,
            args.sim_estimator,
            args,
            physics=physics,
            pose_source=args.sim_pose_source,
        )
    if "calibrated_raw" in needed:
        data["calibrated_raw"] = _demos(
            sim, out / "data_calibrated_raw", args.sim_demos, 50_000, args.raw_estimator, args, physics=physics
        )
    if args.stages == "data":
        _say(f"data stages done in {time.time() - t0:.0f} s")
        return

    source = {"a": "standin", "b": "nominal", "c": "calibrated", "e": "calibrated_raw"}
    if args.stages == "train":  # the policies (and TPO) only: their stand-in evaluations come with --stages all
        for key in args.rows:
            # c_sim, d, and e with exact labels use row (c)'s policy
            own = key in ("a", "b", "c") or (key == "e" and not ground_truth)
            _train(data[source[key if own else "c"]]["dataset"], out / f"act_{key if own else 'c'}", args)
            if key == "d":
                _tpo(out, physics, args)
        _say(f"training stages done in {time.time() - t0:.0f} s")
        return
    for key in args.rows:  # in the order given; results are saved after every row
        results = {}
        if key == "e" and ground_truth:
            t = _train(data["calibrated"]["dataset"], out / "act_c", args)
            ev = _eval(out / "act_c", real, out / f"eval_e{tag}.json", args, pose_estimator=args.raw_estimator)
            results[key] = _row(ROWS[key], ev, train_time_s=t, steps=args.steps, data=data["calibrated"])
        elif key in source:
            t = _train(data[source[key]]["dataset"], out / f"act_{key}", args)
            ev = _eval(out / f"act_{key}", real, out / f"eval_{key}{tag}.json", args)
            results[key] = _row(ROWS[key], ev, train_time_s=t, steps=args.steps, data=data[source[key]])
        elif key == "c_sim":
            t = _train(data["calibrated"]["dataset"], out / "act_c", args)
            ev = _eval(out / "act_c", sim, out / f"eval_c_sim{tag}.json", args, physics=physics)
            results[key] = _row("(c) in its own (calibrated) sim", ev, train_time_s=t, steps=args.steps)
        elif key == "d":
            from embodied_gym.policies.tpo import selected_iteration

            t_c = _train(data["calibrated"]["dataset"], out / "act_c", args)
            tpo_out = out / args.tpo_out
            log = _tpo(out, physics, args)
            tpo_time = sum(r["rollout_time_s"] + r["train_time_s"] for r in log if r["iteration"] > 0)
            named = "d" if args.tpo_out == "tpo_d" else args.tpo_out
            chosen = selected_iteration(log, args.tpo_select)
            by_iteration = {}
            if args.tpo_curve:  # every iteration on the stand-in; iteration 0 is row (c) itself
                for r in log:
                    it = r["iteration"]
                    by_iteration[it] = (
                        _eval(out / "act_c", real, out / f"eval_c{tag}.json", args)
                        if it == 0
                        else _eval(
                            tpo_out / "checkpoints" / f"{it:06d}",
                            real,
                            out / f"eval_{named}_iteration{it}{tag}.json",
                            args,
                        )
                    )
            # a returned iteration > 0 is that checkpoint (weights and observation): its curve evaluation is row
            # (d)'s; the reference (row c's folder) may name another pose update than TPO's copy of it
            ev = (by_iteration.get(chosen) if chosen else None) or _eval(
                tpo_out, real, out / f"eval_{named}{tag}.json", args
            )
            curve = {str(it): e["success_rate"] for it, e in by_iteration.items()}
            results[key] = _row(
                ROWS[key],
                ev,
                train_time_s=t_c + tpo_time,
                tpo_time_s=tpo_time,
                tpo={
                    "iterations": args.tpo_iterations,
                    "rollouts": args.tpo_rollouts,
                    "pairs": args.tpo_pairs,
                    "epochs": args.tpo_epochs,
                    "sft_weight": args.tpo_sft_weight,
                    "pose_update": args.tpo_pose_update or args.eval_pose_update,
                    "rollout_success": [r["rollout_success_rate"] for r in log if r["iteration"] > 0],
                    "select": args.tpo_select,
                    "seed": args.tpo_seed,
                    "selected_iteration": chosen,
                    "sim_eval": {str(r["iteration"]): r["eval_success_rate"] for r in log if "eval_success_rate" in r},
                    "standin_by_iteration": curve,
                },
            )
        # another process (other --rows) may have saved rows meanwhile: merge into what is on disk now
        row = results[key]
        results = json.loads(results_path.read_text()) if results_path.exists() else {}
        results[key] = row
        results["_comparisons"] = _comparisons(results)
        results["_settings"] = {k: v for k, v in vars(args).items() if k not in ("rows", "stages", "figure")}
        results["_settings"]["physics"] = physics
        write_json(results_path, results)
        _plot(results, out / f"policies{tag}.png", args.task, args.eval_pose_update)
        if results.get("d", {}).get("tpo", {}).get("standin_by_iteration"):
            _plot_tpo_iterations(results["d"]["tpo"], out / f"tpo_iterations{tag}.png", args)
        if args.figure:
            Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(out / f"policies{tag}.png", args.figure)
    print_table(json.loads(results_path.read_text()))
    if args.compare:
        print_comparison_with(json.loads(results_path.read_text()), args.compare)


def print_comparison_with(results: dict, other_path: str) -> None:
    """Each row of ``results`` against the same row of another run (exact McNemar on shared seeds)."""
    other = json.loads(Path(other_path).read_text())
    print(f"\n| row: this run vs {other_path} | rates | only this / only that | exact McNemar p |")
    print("|---|---|---|---|")
    for key in [k for k in [*ROWS, "c_sim"] if k in results and k in other]:
        c = paired_comparison(_successes(results[key]), _successes(other[key]))
        print(f"| ({key}) | {c.rate_a:.0%} vs {c.rate_b:.0%} (n = {c.n}) | {c.only_a} / {c.only_b} | {c.p_value:.3g} |")


def _successes(row: dict) -> dict[int, bool]:
    """A saved row's per-seed outcomes (JSON keys are strings)."""
    return {int(k): v for k, v in row["successes"].items()}


def _comparisons(results: dict) -> list[dict]:
    out = []
    for x, y in COMPARISONS:
        if x in results and y in results:
            c = paired_comparison(_successes(results[x]), _successes(results[y]))
            out.append({"a": x, "b": y, **c.to_json()})
    return out


def _or_dash(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: dict) -> None:
    print("| row | success on the stand-in (Wilson 95 % CI) | episodes | ACT training time |")
    print("|---|---|---|---|")
    for key in [k for k in [*ROWS, "c_sim"] if k in results]:
        r = results[key]
        lo, hi = r["ci95"]
        where = " (calibrated sim)" if key == "c_sim" else ""
        print(
            f"| ({key}) {r['row']}{where} | {r['success_rate']:.0%} ({lo:.0%}-{hi:.0%}) | {r['episodes']} | "
            f"{r['train_time_s'] / 60:.1f} min |"
        )
    diagnosed = [k for k in [*ROWS, "c_sim"] if (results.get(k) or {}).get("reset_pose_error_cm")]
    if diagnosed:
        print(
            "\nThe reset frame's estimate against the env's reported cup position (cm, horizontal; the stand-in's "
            "motion-capture truth, read for this table only)"
        )
        print("| row | mean / p90 | mean in successes / failures | success when < 1 cm / >= 1 cm (episodes < 1 cm) |")
        print("|---|---|---|---|")
        for key in diagnosed:
            e = results[key]["reset_pose_error_cm"]
            print(
                f"| ({key}) | {e['mean']:.2f} / {e['p90']:.2f} | {_or_dash(e['success_mean'], '.2f')} / "
                f"{_or_dash(e['failure_mean'], '.2f')} | {_or_dash(e['success_rate_below_1cm'], '.0%')} / "
                f"{_or_dash(e['success_rate_above_1cm'], '.0%')} ({e['episodes_below_1cm']}) |"
            )
    tpo = results.get("d", {}).get("tpo", {})
    if tpo.get("sim_eval"):
        print(f"\nTPO iterations (0: row c), greedy success; returned: iteration {tpo.get('selected_iteration')}")
        print("| iteration | in the calibrated sim (TPO's own evaluation) | on the stand-in |")
        print("|---|---|---|")
        for it, rate in tpo["sim_eval"].items():
            standin = tpo.get("standin_by_iteration", {}).get(it)
            print(f"| {it} | {rate:.0%} | {'-' if standin is None else f'{standin:.0%}'} |")
    print()
    print("| comparison (same seeds) | rates | only first / only second succeeded | exact McNemar p |")
    print("|---|---|---|---|")
    for c in results.get("_comparisons", []):
        print(
            f"| ({c['a']}) vs ({c['b']}) | {c['rate_a']:.0%} vs {c['rate_b']:.0%} | {c['only_a']} / {c['only_b']} | "
            f"{c['p_value']:.3g} |"
        )


def _plot(results: dict, png: Path, task: str, pose_update: str | None = None) -> None:
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_gym.atomic import save_figure

    keys = [k for k in [*ROWS, "c_sim"] if k in results]
    if not keys:
        return
    rates = [results[k]["success_rate"] for k in keys]
    err = [
        [r - results[k]["ci95"][0] for k, r in zip(keys, rates)],
        [results[k]["ci95"][1] - r for k, r in zip(keys, rates)],
    ]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    colours = ["#bbbbbb" if k == "c_sim" else "#4c78a8" for k in keys]
    ax.bar(range(len(keys)), rates, yerr=err, capsize=4, color=colours)
    labels = [f"({k})\n" + textwrap.fill(results[k]["row"], 20) for k in keys]
    ax.set_xticks(range(len(keys)), labels, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("success rate")
    n = results[keys[0]]["episodes"]
    which = " (the reset frame's, held)" if pose_update == "at_reset" else ""
    ax.set_title(
        textwrap.fill(
            f"{task}: ACT on joint state + camera pose estimate{which}, stand-in robot ({n} "
            f"paired seeds; grey: in its own sim)",
            100,
        ),
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, png)


def _plot_tpo_iterations(tpo: dict, png: Path, args) -> None:
    """Row (d)'s TPO iterations: the greedy success in the calibrated sim that chose the returned one,
    beside the success on the stand-in (the same policies; iteration 0 is row c)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_gym.atomic import save_figure

    sim = {int(k): v for k, v in tpo["sim_eval"].items()}
    real = {int(k): v for k, v in tpo["standin_by_iteration"].items()}
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(
        list(sim),
        list(sim.values()),
        "s-",
        label=f"calibrated sim ({args.tpo_eval_episodes} episodes, TPO's own evaluation)",
    )
    ax.plot(list(real), list(real.values()), "o-", label=f"stand-in ({args.eval_episodes} episodes)")
    chosen = tpo.get("selected_iteration")
    if chosen in real:
        ax.plot([chosen], [real[chosen]], "*", ms=16, color="tab:red", label=f"returned: iteration {chosen}")
    ax.set_xticks(sorted(set(sim) | set(real)))
    ax.set_xlabel("TPO iteration (0: row c, the reference)")
    ax.set_ylabel("greedy success rate")
    ax.set_ylim(0, 1)
    world = Path(args.robot_config).stem if args.robot_config else "default world"
    ax.set_title(f"{args.task}, {world}: TPO iterations in the sim and on the stand-in", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    save_figure(fig, png)


if __name__ == "__main__":
    main()
