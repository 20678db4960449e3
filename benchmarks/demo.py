"""The demo's wall time per stage and its success chart's figures, as Markdown tables.

Runs ``embodied-gym demo`` with a profile into a fresh run folder (the stage cache must be cold
for the times to mean anything), then prints one table of stage wall times and one of success
rates on the stand-in robot (Wilson 95 % intervals), next to the paper's real-robot numbers (arXiv 2507.05198):

    MUJOCO_GL=egl .venv/bin/python benchmarks/demo.py --profile quick --out runs/bench_demo

``--summary runs/quick/summary.json`` prints the tables of a finished run instead (e.g. the one
``scripts/dev demo`` wrote), without running anything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def tables(summary: dict) -> str:
    from embodied_gym.demo.report import LABELS, PAPER

    lines = []
    for task, rec in summary["tasks"].items():
        lines += [f"### {task}", "", "| stage | wall time | cached |", "|---|---|---|"]
        total = 0.0
        for name, st in rec["stages"].items():
            total += 0 if st["cached"] else st["wall_time_s"]
            where = " (in a background process, beside the stages after record)" if st.get("background") else ""
            lines.append(f"| {name}{where} | {st['wall_time_s'] / 60:.1f} min | {'yes' if st['cached'] else 'no'} |")
        lines += [
            f"| sum of the stage times (this run) | {total / 60:.1f} min | |",
            "",
            "| policy | success on the stand-in (95 % CI) | episodes | mean return | paper (real robot) |",
            "|---|---|---|---|---|",
        ]
        for name, ev in rec["evaluation"].items():
            lo, hi = ev["ci95"]
            # the paper's real-robot rows: real-data ACT (three views) and the aligned-sim policy after RL
            paper = dict(zip(("act_stand_in", "tpo"), PAPER.get(task, ()))).get(name)
            ret = "-" if ev.get("mean_return") is None else f"{ev['mean_return']:.1f}"
            label = LABELS.get(name, name) + (" (its recorded demos)" if ev.get("source") else "")
            lines.append(
                f"| {label} | {ev['success_rate']:.0%} ({lo:.0%}-{hi:.0%}) | {ev['episodes']} | {ret} | "
                f"{'-' if paper is None else f'{paper} %'} |"
            )
        if rec.get("paired"):
            lines += [
                "",
                "| paired comparison (same seeds) | rates | only first / only second | exact McNemar p |",
                "|---|---|---|---|",
            ]
            for c in rec["paired"]:
                lines.append(
                    f"| {LABELS.get(c['a'], c['a'])} vs {LABELS.get(c['b'], c['b'])} | {c['rate_a']:.0%} vs "
                    f"{c['rate_b']:.0%} (n = {c['n']}) | {c['only_a']} / {c['only_b']} | {c['p_value']:.3g} |"
                )
        lines.append("")
    lines.append(f"Whole run (process wall time, cached stages included): {summary['wall_time_s'] / 60:.1f} min")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="quick")
    p.add_argument("--config", help="YAML overrides, as `embodied-gym demo --config`")
    p.add_argument("--out", default="runs/bench_demo", help="run folder (emptied first: a cold cache)")
    p.add_argument("--summary", help="print the tables of this finished run's summary.json and exit")
    args = p.parse_args()
    if args.summary:
        print(tables(json.loads(Path(args.summary).read_text())))
        return 0
    from embodied_gym.demo.configuration import load_config
    from embodied_gym.demo.loop import run_demo

    cfg = load_config(args.profile, args.config)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    t0 = time.time()
    summary = run_demo(cfg, out)
    print(tables(summary))
    print(f"benchmarks/demo.py: {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
