"""The paper's policy experiment (EmbodieDreamer, arXiv 2507.05198, section 4) on the stand-in robot, per task
and per stand-in world, sized for 2 CPU cores: the demo's stages (:data:`embodied_gym.demo.stages.STAGES`) under
the ``benchmark`` profile (``embodied_gym/demo/profiles/benchmark.yaml``), once per task, world and training
seed, then the tables, a chart and whether the sims rank the policies as the stand-in does.

Every policy is LeRobot's ACT on joint state + the camera's object-pose estimate; on the stand-in the estimate
comes from the stand-in's own camera frames. Rows, each evaluated on the stand-in on the same
``evaluate.episodes`` seeds (``evaluate.seed + i``), and each also in the calibrated and the nominal sim:

(a) ``act_stand_in``: ACT on the scripted-expert demonstrations recorded on the stand-in (``--seeds`` training
    seeds);
(b) ``act_nominal``: ACT on demonstrations generated in the nominal (uncalibrated) sim (the first seed only);
(c) ``act_aligned``: ACT on demonstrations generated in the calibrated sim (PhysAligner on row a's demos;
    ``--seeds`` training seeds);
(d) ``tpo``: row (c) after TPO in the calibrated sim (each seed's (c));
(f) ``residual``: row (c) with a stable-baselines3 residual policy trained in the calibrated sim (the RL
    baseline from a well-kept library; each seed's (c)).

A training seed alone moves a row by tens of points, so (a) and (c) train once per seed; the paired test
between them pools every seed's evaluations (seed i of (c) against seed i of (a), on the same episode seeds).
The first seed's run is the demo's run folder ``<runs>/<name>/<world>/<task>/seed<s>``; a later seed's run
reuses its perception, recording, calibration and generated data in place (``demo --reuse``) and trains and
evaluates only its own policies. Every run resumes like the demo: stage by stage, and a stopped training or
evaluation from its last checkpoint or finished policy.

    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --tasks all --worlds default world2   # hours
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --tasks PickCup --worlds default --seeds 0
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --tasks PenInCup --worlds default --rows a b c  # no RL
    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --tasks all --report   # tables of what ran so far

Any other flag goes to every demo run (``--act.steps 16000``, ``--config FILE``). Output: the tables on
stdout (markdown), ``<runs>/<name>/benchmark.json`` (every rate, test and ranking metric) and
``<runs>/<name>/policies.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import numpy as np

WORLDS = {"default": None, "world2": "embodied_gym/robots/stand_in_world2.yaml"}
#: benchmark row -> the evaluate stage's entry
ROWS = {"a": "act_stand_in", "b": "act_nominal", "c": "act_aligned", "d": "tpo", "f": "residual"}
LABELS = {
    "a": "ACT, stand-in demos",
    "b": "ACT, nominal-sim demos",
    "c": "ACT, calibrated-sim demos",
    "d": "(c) + TPO",
    "f": "(c) + SB3 residual",
}
#: the rows trained once per training seed (row b: the first seed only)
SEEDED_ROWS = ("a", "c", "d", "f")
#: the paired tests, (first row, second row), pooled over training seeds
TESTS = (("c", "a"), ("c", "b"), ("b", "a"), ("d", "c"), ("f", "c"), ("d", "f"))


def run_folder(runs: Path, world: str, task: str, seed: int) -> Path:
    return runs / world / task / f"seed{seed}"


def demo_args(task: str, world: str, seed: int, first_seed: int, runs: Path, rows: list[str]) -> list[str]:
    """The demo's command line for one (task, world, training seed) run of the given rows."""
    folder = run_folder(runs, world, task, seed)
    args = ["demo", "--profile", "benchmark", "--tasks", task, "--runs", str(folder.parent), "--name", folder.name]
    args += ["--act.seed", str(seed)]
    robot_config = WORLDS[world]
    if robot_config:
        args += ["--robot-config", robot_config]
    first = seed == first_seed
    if not first:  # row (b) once; the rest is read from the first seed's run
        args += ["--reuse", str(run_folder(runs, world, task, first_seed))]
    run_rows = [r for r in rows if first or r in SEEDED_ROWS]
    if "b" not in run_rows:
        args += ["--no-nominal-sim"]
    policies = [ROWS[r] for r in run_rows]
    args += ["--evaluate.policies", *(["expert"] if first else []), *policies]
    args += ["--evaluate.in-sim", *policies, "--evaluate.in-nominal-sim", *policies]
    pairs = [f"{ROWS[a]},{ROWS[b]}" for a, b in TESTS if a in run_rows and b in run_rows]
    # always given, possibly empty: the profile's own list names rows this run may not train
    return args + ["--evaluate.comparisons", *pairs]


def outcomes(entry: dict) -> dict[int, bool]:
    from embodied_gym.policies.evaluate import successes_by_seed

    return successes_by_seed(json.loads(Path(entry["json"]).read_text()))


def task_result(runs: Path, world: str, task: str, seeds: list[int]) -> dict | None:
    """Every row of one task on one world from the finished runs: per training seed the stand-in, calibrated-
    sim and nominal-sim rates and the grasp rate; the pooled paired tests. None if no run finished."""
    from embodied_gym.policies.evaluate import paired_comparison

    per_seed = {}
    for seed in seeds:
        path = run_folder(runs, world, task, seed) / "summary.json"
        if path.exists():
            per_seed[seed] = json.loads(path.read_text())["tasks"][task]["evaluation"]
    if not per_seed:
        return None
    rows: dict[str, dict] = {}
    for row, entry in ROWS.items():
        policies = []
        for seed, ev in per_seed.items():
            if entry not in ev:
                continue
            policies.append(
                {
                    "seed": seed,
                    "stand_in": ev[entry]["success_rate"],
                    "grasp": ev[entry].get("grasp_rate"),
                    "episodes": ev[entry]["episodes"],
                    "calibrated_sim": ev.get(f"{entry}_in_sim", {}).get("success_rate"),
                    "nominal_sim": ev.get(f"{entry}_in_nominal_sim", {}).get("success_rate"),
                    "json": ev[entry]["json"],
                }
            )
        if policies:
            rates = [p["stand_in"] for p in policies]
            rows[row] = {"policies": policies, "mean": float(np.mean(rates)), "range": [min(rates), max(rates)]}
    tests = {}
    for a, b in TESTS:
        if a in rows and b in rows:
            pooled_a: dict[tuple[int, int], bool] = {}
            pooled_b: dict[tuple[int, int], bool] = {}
            for pa in rows[a]["policies"]:
                # seed i of one row against seed i of the other (row b's one seed against every seed of a/c)
                pb = next((p for p in rows[b]["policies"] if p["seed"] == pa["seed"]), rows[b]["policies"][0])
                oa, ob = outcomes(pa), outcomes(pb)
                pooled_a.update({(pa["seed"], s): v for s, v in oa.items()})
                pooled_b.update({(pa["seed"], s): v for s, v in ob.items() if s in oa})
            tests[f"{a}_vs_{b}"] = paired_comparison(pooled_a, pooled_b).to_json()
    return {"rows": rows, "tests": tests}


def ranking(results: dict) -> dict:
    """Per world, whether each sim ranks the policies (every task, row and seed) as the stand-in does."""
    from embodied_gym.policies.sim2real import sim2real_agreement

    out = {}
    for world, tasks in results.items():
        names: list[str] = []
        stand_in: list[float] = []
        sims: dict[str, list[float]] = {"calibrated_sim": [], "nominal_sim": []}
        for task, res in tasks.items():
            for row, r in res["rows"].items():
                for p in r["policies"]:
                    if p["calibrated_sim"] is None or p["nominal_sim"] is None:
                        continue
                    names.append(f"{task}/{row}/seed{p['seed']}")
                    stand_in.append(p["stand_in"])
                    for k in sims:
                        sims[k].append(p[k])
        if len(names) >= 2:
            real = dict(zip(names, stand_in))
            out[world] = {k: sim2real_agreement(dict(zip(names, v)), real, k).to_json() for k, v in sims.items()}
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}"


def print_tables(results: dict, agreement: dict) -> None:
    for world, tasks in results.items():
        print(f"\n### {world}\n")
        print(
            "| task | row | stand-in success per training seed (%) | mean | grasped (%) | calibrated sim (%) | nominal sim (%) |"
        )
        print("|---|---|---|---|---|---|---|")
        for task, res in tasks.items():
            for row, r in res["rows"].items():
                ps = r["policies"]
                print(
                    f"| {task} | ({row}) {LABELS[row]} | {' / '.join(_pct(p['stand_in']) for p in ps)} "
                    f"(n = {ps[0]['episodes']} each) | **{_pct(r['mean'])}** | {' / '.join(_pct(p['grasp']) for p in ps)} | "
                    f"{' / '.join(_pct(p['calibrated_sim']) for p in ps)} | {' / '.join(_pct(p['nominal_sim']) for p in ps)} |"
                )
        print(
            "\n| task | comparison (pooled over training seeds, same episode seeds) | rates | only first / only second | exact McNemar p |"
        )
        print("|---|---|---|---|---|")
        for task, res in tasks.items():
            for name, t in res["tests"].items():
                a, b = name.split("_vs_")
                print(
                    f"| {task} | ({a}) vs ({b}) | {_pct(t['rate_a'])} vs {_pct(t['rate_b'])} % (n = {t['n']}) | "
                    f"{t['only_a']} / {t['only_b']} | {t['p_value']:.3g} |"
                )
        means = [res["rows"]["c"]["mean"] for res in tasks.values() if "c" in res["rows"]]
        if means:
            print(f"\nMean of (c) over {len(means)} task(s): {100 * np.mean(means):.1f} % (the paper's: 77.5 %)")
        if world in agreement:
            print("\n| sim | policies | Pearson r (sim vs stand-in success) | MMRV |")
            print("|---|---|---|---|")
            for sim, m in agreement[world].items():
                r = "-" if m["pearson_r"] is None else f"{m['pearson_r']:.3f}"
                print(f"| {sim} | {m['n']} | {r} | {m['mmrv']:.3f} |")


def plot(results: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_gym.atomic import save_figure

    worlds = list(results)
    fig, axes = plt.subplots(1, len(worlds), figsize=(9 * len(worlds), 4.2), squeeze=False)
    colours = {"a": "#bbbbbb", "b": "#e45756", "c": "#4c78a8", "d": "#54a24b", "f": "#f58518"}
    for ax, world in zip(axes[0], worlds):
        tasks = list(results[world])
        for j, row in enumerate(ROWS):
            xs, means, points = [], [], []
            for i, task in enumerate(tasks):
                r = results[world][task]["rows"].get(row)
                if r:
                    xs.append(i + (j - (len(ROWS) - 1) / 2) * 0.17)
                    means.append(r["mean"])
                    points.append([p["stand_in"] for p in r["policies"]])
            ax.bar(xs, means, width=0.16, color=colours[row], label=f"({row}) {LABELS[row]}")
            for x, ps in zip(xs, points):
                ax.plot([x] * len(ps), ps, "k.", ms=4)
        ax.set_xticks(range(len(tasks)), tasks)
        ax.set(ylim=(0, 1.05), ylabel="success on the stand-in (dots: training seeds)")
        ax.set_title(textwrap.fill(f"{world}: ACT on joint state + camera pose estimate", 80), fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, png)


def collect(runs: Path, tasks: list[str], worlds: list[str], seeds: list[int]) -> dict:
    results: dict[str, dict] = {}
    for world in worlds:
        for task in tasks:
            res = task_result(runs, world, task, seeds)
            if res is not None:
                results.setdefault(world, {})[task] = res
    return results


def main(argv: list[str] | None = None) -> int:
    from embodied_gym.sim.tasks import TASKS

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    p.add_argument("--runs", default="runs/bench", help="folder of runs (default runs/bench)")
    p.add_argument("--name", default="policies", help="benchmark name: runs in RUNS/NAME/WORLD/TASK/seedS")
    p.add_argument("--tasks", nargs="+", default=["PickCup"], help=f"tasks, or all ({', '.join(TASKS)})")
    p.add_argument("--worlds", nargs="+", default=["default", "world2"], choices=list(WORLDS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds of rows a and c")
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), help="rows to run (default: every row)")
    p.add_argument("--report", action="store_true", help="only print the tables of the runs that finished")
    args, passed = p.parse_known_args(argv)
    tasks = list(TASKS) if args.tasks == ["all"] else args.tasks
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown task(s) {unknown}; valid: {list(TASKS)} or all")
    runs = Path(args.runs) / args.name
    if not args.report:
        from embodied_gym.cli import main as cli

        for world in args.worlds:
            for task in tasks:
                for seed in args.seeds:
                    rc = cli([*demo_args(task, world, seed, args.seeds[0], runs, args.rows), *passed])
                    if rc:
                        return rc
    results = collect(runs, tasks, args.worlds, args.seeds)
    if not results:
        print(f"no finished run under {runs}", file=sys.stderr)
        return 1
    agreement = ranking(results)
    from embodied_gym.atomic import write_json

    write_json(runs / "benchmark.json", {"results": results, "agreement": agreement})
    plot(results, runs / "policies.png")
    print_tables(results, agreement)
    print(f"\nchart: {runs / 'policies.png'}; every figure: {runs / 'benchmark.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
