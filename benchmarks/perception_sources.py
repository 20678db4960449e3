"""Does the robot's estimator trained on VisAligner frames make the aligned-sim policy succeed more often on the
robot? One quick-demo run with ``--perception.sources randomized visaligner``, its ``act_aligned`` policy
evaluated on the stand-in on the same seeds (the demo's evaluation seeds, as many as ``--episodes``) reading:

- ``randomized``: the perception stage's estimator (randomised sim looks alone), bias-corrected on the run's
  stand-in demonstrations as a run with ``perception.sources: [randomized]`` corrects it;
- ``visaligner``: the perception_aligned stage's estimator (randomised looks + VisAligner frames), bias-corrected
  as the run corrected it (what the demo itself evaluates);

and ``act_stand_in`` (ACT on the stand-in demonstrations, its recording's estimator) beside them. Exact McNemar
tests between the rows; each row's evaluation JSON is kept in ``--out``'s folder and read back on a rerun.

    MUJOCO_GL=egl .venv/bin/python benchmarks/perception_sources.py --run runs/pick_va --episodes 100 \\
        [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--workers 2] [--out FILE.json]

The policy is the same in every aligned row: only the estimate it reads on the robot differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def randomized_estimator(outputs: dict, folder: Path) -> tuple[str, str]:
    """The perception stage's estimator bias-corrected on the run's stand-in demonstrations (as the perception_offset
    stage corrects it when ``perception.sources`` is ``[randomized]``), and how: the folder and a note."""
    from embodied_gym.perception.robot_offset import TooFewDemonstrations, corrected_estimator, fit_estimator_offset

    model = outputs["perception"]["model"]
    corrected = folder / "randomized_corrected"
    if corrected.is_dir():
        return str(corrected), "bias-corrected"
    try:
        fit = fit_estimator_offset(model, outputs["record"]["dataset"], outputs["generate"]["dataset"])
    except TooFewDemonstrations as e:  # what the demo does too: read the estimate as is
        return model, f"uncorrected ({e})"
    corrected_estimator(model, fit, corrected)
    return str(corrected), "bias-corrected"


def evaluate_row(name: str, policy: str, folder: Path, args, estimator: str | None) -> dict:
    """``policy`` on the stand-in reading ``estimator`` (None: its own): the evaluation JSON (per-episode success
    and the reset frame's estimate error)."""
    from embodied_gym.policies.evaluate import evaluate_policy

    path = folder / f"{name}.json"
    if not path.exists():
        print(f"[sources] {name}: {args.episodes} episodes", flush=True)
        evaluate_policy(
            policy,
            f"EmbodieDreamer-{args.task}-Real-v0",
            args.episodes,
            seed=args.seed,
            robot_config=args.robot_config,
            pose_estimator=estimator,
            pose_update=args.pose_update,
            max_episode_steps=args.max_episode_steps,
            workers=args.workers,
            progress=False,
            out=str(path),
        )
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a finished quick-demo task folder with visaligner sources")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--robot-config", default=None, help="the stand-in world (default: the one the run evaluated on)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="JSON of the result (default: RUN/perception_sources.json)")
    args = p.parse_args(argv)

    from embodied_gym.demo.stages import finished_outputs, sim_policy_estimator
    from embodied_gym.policies.evaluate import pairwise_comparisons

    outputs = finished_outputs(args.run)
    missing = [s for s in ("perception", "record", "generate", "perception_aligned", "act_aligned") if s not in outputs]
    if missing:
        p.error(
            f"--run {args.run}: stages {missing} have not finished (run the demo with --perception.sources "
            "randomized visaligner first)"
        )
    evaluate = json.loads((args.run / "evaluate" / "stage.json").read_text())["settings"]
    args.task = evaluate["task"]
    args.max_episode_steps = evaluate["max_episode_steps"]
    args.pose_update, args.seed = evaluate["pose_update"], evaluate["seed"]  # as the demo evaluates
    args.robot_config = args.robot_config or evaluate["robot_config"]
    out = args.out or args.run / "perception_sources.json"
    folder = out.parent / out.stem
    folder.mkdir(parents=True, exist_ok=True)

    randomized, how = randomized_estimator(outputs, folder)
    aligned = sim_policy_estimator(outputs)
    act = outputs["act_aligned"]["policy"]
    rows = {
        f"act_aligned, randomised-looks estimator ({how})": evaluate_row("randomized", act, folder, args, randomized),
        "act_aligned, randomised looks + VisAligner frames estimator (the run's)": evaluate_row(
            "visaligner", act, folder, args, aligned
        ),
    }
    if "act_stand_in" in outputs:
        rows["act_stand_in (its recording's estimator)"] = evaluate_row(
            "act_stand_in", outputs["act_stand_in"]["policy"], folder, args, None
        )
    world = Path(args.robot_config).stem if args.robot_config else "default"
    print(f"\n{args.task}, {world} world, {args.run}, {args.episodes} paired seeds from {args.seed}")
    print("| policy, estimator on the robot | success | reset-frame estimate error, cm (mean) |\n|---|---|---|")
    for n, r in rows.items():
        error = r["mean_reset_pose_error_cm"]
        print(f"| {n} | {r['success_rate']:.0%} | {'-' if error is None else f'{error:.2f}'} |")
    successes = {n: [e["success"] for e in r["per_episode"]] for n, r in rows.items()}
    print("\n| pair | only first / only second | exact McNemar p |\n|---|---|---|")
    tests = {}
    for (a, b), c in pairwise_comparisons(successes).items():
        tests[f"{a} vs {b}"] = c.to_json()
        print(f"| {a} vs {b} | {c.only_a} / {c.only_b} | {c.p_value:.2g} |")
    out.write_text(json.dumps({"task": args.task, "world": world, "rows": successes, "tests": tests}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
