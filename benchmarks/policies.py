"""The paper's policy experiment (EmbodieDreamer, arXiv 2507.05198, section 4) on the stand-in robot, sized
for 2 CPU cores: the demo's stages (:data:`embodied_gym.demo.stages.STAGES`) under the ``benchmark``
profile (``embodied_gym/demo/profiles/benchmark.yaml``), then its rows as tables and a chart.

Every policy is LeRobot's ACT on joint state + the camera's object-pose estimate; on the stand-in the
estimate comes from the stand-in's own camera frames. Rows, each evaluated on the stand-in robot on the
same ``evaluate.episodes`` seeds (``evaluate.seed + i``), tested in pairs with exact McNemar tests:

(a) ``act_stand_in``: ACT on the scripted-expert demonstrations recorded on the stand-in;
(b) ``act_nominal``: ACT on demonstrations generated in the nominal (uncalibrated) sim;
(c) ``act_aligned``: ACT on demonstrations generated in the calibrated sim (PhysAligner on row a's demos);
(d) ``tpo``: (c) after TPO in the calibrated sim;
(e) ``act_aligned_ablation_estimator``: (c)'s policy reading another estimator (``--evaluate.ablation-estimator
    FOLDER``, e.g. one trained on raw sim renders by ``embodied-gym perception frames --look raw`` and
    ``embodied-gym perception train``);
(c_sim) ``act_aligned_in_sim``: (c) in the calibrated sim it was trained in.

Any demo flag passes through (``--robot-config embodied_gym/robots/stand_in_world2.yaml`` runs the whole
loop against the second world; ``--act.steps 16000``; ``--config FILE``); the run resumes stage by stage
like the demo (a changed setting reruns its stage and what reads it):

    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --name policies
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --name policies_world2 \\
        --robot-config embodied_gym/robots/stand_in_world2.yaml
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --summary runs/bench/policies/summary.json  # tables only

Output: ``<runs>/<name>/`` (the demo's run folder, ``report.html`` included), the tables on stdout and the
chart ``policies.png`` there (``--figure`` copies it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np

#: benchmark row -> the evaluate stage's entry
ROWS = {
    "a": "act_stand_in",
    "b": "act_nominal",
    "c": "act_aligned",
    "d": "tpo",
    "e": "act_aligned_ablation_estimator",
    "c_sim": "act_aligned_in_sim",
}
LABELS = {
    "a": "ACT, stand-in demos",
    "b": "ACT, nominal-sim demos",
    "c": "ACT, calibrated-sim demos",
    "d": "(c) after TPO in the calibrated sim",
    "e": "(c) with the ablation estimator",
    "c_sim": "(c) in its own (calibrated) sim",
}
ROW_OF = {entry: row for row, entry in ROWS.items()}


def rows_of(task_summary: dict) -> dict[str, dict]:
    """The summary's evaluations by benchmark row."""
    return {ROW_OF[k]: v for k, v in task_summary["evaluation"].items() if k in ROW_OF}


def reset_error_by_outcome(evaluation_json: str | None) -> dict | None:
    """How far the reset frame's estimate was from the env's reported cup position (cm, horizontal), over
    all episodes and split by outcome: whether the misses are the episodes the estimate misled."""
    if not evaluation_json or not Path(evaluation_json).exists():
        return None
    episodes = json.loads(Path(evaluation_json).read_text())["per_episode"]
    pairs = [(e["success"], e["reset_pose_error_cm"]) for e in episodes if e.get("reset_pose_error_cm") is not None]
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
    }


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_tables(summary: dict) -> None:
    for task, t in summary["tasks"].items():
        rows = rows_of(t)
        print(f"\n### {task}\n")
        print("| row | success (Wilson 95 % CI) | episodes | reset estimate's error, cm: mean / p90 |")
        print("|---|---|---|---|")
        for row, ev in rows.items():
            lo, hi = ev["ci95"]
            err = reset_error_by_outcome(ev.get("json"))
            e = f"{err['mean']:.2f} / {err['p90']:.2f}" if err else "-"
            print(f"| ({row}) {LABELS[row]} | {ev['success_rate']:.0%} ({lo:.0%}-{hi:.0%}) | {ev['episodes']} | {e} |")
        tpo_log = t["stages"].get("tpo", {}).get("outputs", {}).get("log") or []
        if any("eval_success_rate" in r for r in tpo_log):
            print("\n| TPO iteration (0: row c) | greedy success in the calibrated sim |")
            print("|---|---|")
            for r in tpo_log:
                if "eval_success_rate" in r:
                    print(f"| {r['iteration']} | {r['eval_success_rate']:.0%} |")
        print("\n| comparison (same seeds) | rates | only first / only second succeeded | exact McNemar p |")
        print("|---|---|---|---|")
        for c in t.get("paired", []):
            a, b = ROW_OF.get(c["a"], c["a"]), ROW_OF.get(c["b"], c["b"])
            print(
                f"| ({a}) vs ({b}) | {c['rate_a']:.0%} vs {c['rate_b']:.0%} | {c['only_a']} / {c['only_b']} | "
                f"{c['p_value']:.3g} |"
            )


def print_comparison_with(summary: dict, other: dict, other_name: str) -> None:
    """Each row against the same row of another run (exact McNemar on shared seeds)."""
    from embodied_gym.policies.evaluate import paired_comparison, successes_by_seed

    def outcomes(ev: dict) -> dict[int, bool]:
        return successes_by_seed(json.loads(Path(ev["json"]).read_text()))

    for task, t in summary["tasks"].items():
        theirs = rows_of(other["tasks"].get(task, {"evaluation": {}}))
        print(f"\n| {task} row: this run vs {other_name} | rates | only this / only that | exact McNemar p |")
        print("|---|---|---|---|")
        for row, ev in rows_of(t).items():
            if row in theirs and ev.get("json") and theirs[row].get("json"):
                c = paired_comparison(outcomes(ev), outcomes(theirs[row]))
                print(
                    f"| ({row}) | {c.rate_a:.0%} vs {c.rate_b:.0%} (n = {c.n}) | {c.only_a} / {c.only_b} | "
                    f"{c.p_value:.3g} |"
                )


def plot(summary: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_gym.atomic import save_figure

    tasks = list(summary["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(8 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = rows_of(summary["tasks"][task])
        keys = list(rows)
        rates = [rows[k]["success_rate"] for k in keys]
        err = [
            [r - rows[k]["ci95"][0] for k, r in zip(keys, rates)],
            [rows[k]["ci95"][1] - r for k, r in zip(keys, rates)],
        ]
        colours = ["#bbbbbb" if k == "c_sim" else "#4c78a8" for k in keys]
        ax.bar(range(len(keys)), rates, yerr=err, capsize=4, color=colours)
        ax.set_xticks(range(len(keys)), [f"({k})\n" + textwrap.fill(LABELS[k], 20) for k in keys], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel("success rate")
        n = rows[keys[0]]["episodes"] if keys else 0
        world = Path(summary["config"].get("robot_config") or "default world").stem
        ax.set_title(
            textwrap.fill(
                f"{task}, {world}: ACT on joint state + camera pose estimate, stand-in robot ({n} paired seeds; "
                f"grey: in its own sim)",
                100,
            ),
            fontsize=9,
        )
    fig.tight_layout()
    save_figure(fig, png)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    p.add_argument("--runs", default="runs/bench", help="folder of runs (default runs/bench)")
    p.add_argument("--name", default="policies", help="run name: output in RUNS/NAME")
    p.add_argument("--profile", default="benchmark", help="the demo profile (default benchmark)")
    p.add_argument("--summary", metavar="SUMMARY_JSON", help="print the tables of a finished run and exit")
    p.add_argument("--figure", help="also copy the chart here")
    p.add_argument("--compare", metavar="SUMMARY_JSON", help="test each row against the same row of another run")
    args, demo_args = p.parse_known_args(argv)
    if args.summary:
        summary_path = Path(args.summary)
    else:
        from embodied_gym.cli import main as cli

        rc = cli(["demo", "--profile", args.profile, "--runs", args.runs, "--name", args.name, *demo_args])
        if rc:
            return rc
        summary_path = Path(args.runs, args.name, "summary.json")
    summary = json.loads(summary_path.read_text())
    png = summary_path.parent / "policies.png"
    plot(summary, png)
    if args.figure:
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(png, args.figure)
    print_tables(summary)
    if args.compare:
        print_comparison_with(summary, json.loads(Path(args.compare).read_text()), args.compare)
    print(f"\nchart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
