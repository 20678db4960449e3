"""Does removing the pose estimator's bias on the sim's own renders (the demo's stage ``perception_sim_offset``)
make the sims rate the policies as the stand-in robot does?

For finished runs of ``benchmarks/policies.py`` (one folder per task, world and training seed), every in-sim
entry of the run's evaluate stage twice, on the same seeds: *before*, the policy reading the estimator its data
was recorded with (what the demo's in-sim evaluations read until the stage existed; evaluated here into
``RUN/sim_offset_before/ENTRY.json``, read back when there); *after*, the evaluate stage's own entry (the
sim-trained policies read the sim-corrected estimator, ACT on the stand-in demos that copy with the robot's
measured bias put back). Per entry: success, the estimate's mean horizontal error at the reset frame, and the
exact McNemar test between before and after. Across the runs' policies, per sim: Pearson r and MMRV (Mean
Maximum Rank Violation, arXiv 2405.05941) between in-sim and stand-in success, before and after.

    MUJOCO_GL=egl .venv/bin/python benchmarks/sim_offset.py --task PickCup \\
        --runs runs/bench/policies/world2/PickCup/seed0 runs/bench/policies/world2/PickCup/seed1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SIMS = {"_in_sim": "calibrated sim", "_in_nominal_sim": "nominal sim"}


def stage_outputs(run: Path, stage: str) -> dict:
    return json.loads((run / stage / "stage.json").read_text())["outputs"]


def evaluate_before(run: Path, task: str, entry: str, after: dict, workers: int) -> dict:
    """``entry`` (``POLICY_in_sim`` / ``POLICY_in_nominal_sim``) reading the estimator its policy's data was
    recorded with, on the seeds of ``after`` (the evaluate stage's entry)."""
    from embodied_gym.policies.evaluate import evaluate_policy

    path = run / "sim_offset_before" / f"{entry}.json"
    if not path.exists():
        suffix = next(s for s in SIMS if entry.endswith(s))
        policy = stage_outputs(run, entry[: -len(suffix)])["policy"]
        physics = stage_outputs(run, "calibrate")["result"] if suffix == "_in_sim" else None
        print(f"[sim_offset] {run} {entry}: before, {after['episodes']} episodes", flush=True)
        evaluate_policy(
            policy,
            f"EmbodieDreamer-{task}-v0",
            after["episodes"],
            after["seed"],
            out=str(path),
            physics=physics,
            pose_update="at_reset",
            workers=workers,
            progress=False,
        )
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True, help="finished benchmarks/policies.py run folders")
    p.add_argument("--task", required=True)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)

    from embodied_gym.policies.evaluate import paired_comparison, successes_by_seed
    from embodied_gym.policies.sim2real import mean_maximum_rank_violation, pearson_correlation

    rows, ranking = [], {sim: {"before": [], "after": [], "stand_in": []} for sim in SIMS.values()}
    for run in args.runs:
        evaluate = run / "evaluate"
        for f in sorted(evaluate.glob("*.json")):
            entry = f.stem
            suffix = next((s for s in SIMS if entry.endswith(s)), None)
            if suffix is None or entry == "stage":
                continue
            after = json.loads(f.read_text())
            before = evaluate_before(run, args.task, entry, after, args.workers)
            stand_in = json.loads((evaluate / f"{entry[: -len(suffix)]}.json").read_text())
            test = paired_comparison(successes_by_seed(after), successes_by_seed(before))
            rows.append((run, entry, before, after, stand_in, test))
            for key, res in (("before", before), ("after", after), ("stand_in", stand_in)):
                ranking[SIMS[suffix]][key].append(res["success_rate"])

    print(f"\n{args.task}: every policy in the sims, before and after the sim's camera bias is removed\n")
    print(
        "| run | policy | where | stand-in | before (reset error, cm) | after (reset error, cm) | after only / before only, p |"
    )
    print("|---|---|---|---|---|---|---|")
    out = []
    for run, entry, before, after, stand_in, test in rows:
        suffix = next(s for s in SIMS if entry.endswith(s))
        print(
            f"| {run.name} | {entry[: -len(suffix)]} | {SIMS[suffix]} | {100 * stand_in['success_rate']:.0f} % | "
            f"{100 * before['success_rate']:.0f} % ({before['mean_reset_pose_error_cm']:.2f}) | "
            f"{100 * after['success_rate']:.0f} % ({after['mean_reset_pose_error_cm']:.2f}) | "
            f"{test.only_a} / {test.only_b}, {test.p_value:.2g} |"
        )
        out.append(
            {
                "run": str(run),
                "entry": entry,
                "stand_in": stand_in["success_rate"],
                "before": before["success_rate"],
                "after": after["success_rate"],
                "reset_error_cm": [before["mean_reset_pose_error_cm"], after["mean_reset_pose_error_cm"]],
                "test": test.to_json(),
            }
        )
    print("\n| sim | policies | Pearson r before -> after | MMRV before -> after |\n|---|---|---|---|")
    metrics = {}
    for sim, r in ranking.items():
        if len(r["stand_in"]) < 2:
            continue
        m = {
            k: {
                "r": pearson_correlation(r[k], r["stand_in"]),
                "mmrv": mean_maximum_rank_violation(r[k], r["stand_in"]),
            }
            for k in ("before", "after")
        }
        metrics[sim] = m

        def fmt(v):
            return "n/a" if v is None else f"{v:.2f}"

        print(
            f"| {sim} | {len(r['stand_in'])} | {fmt(m['before']['r'])} -> {fmt(m['after']['r'])} | "
            f"{m['before']['mmrv']:.3f} -> {m['after']['mmrv']:.3f} |"
        )
    target = args.runs[0] / "sim_offset_before" / "comparison.json"
    target.write_text(json.dumps({"task": args.task, "rows": out, "ranking": metrics}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
