"""PhysAligner against simulated annealing, CMA-ES and mujoco.sysid on the stand-in robot.

    MUJOCO_GL=egl .venv/bin/python benchmarks/calibration.py \
        [--episodes 50] [--methods physaligner sysid cmaes sa] [--budget 1200] [--sa-steps 2000]

Records ``--episodes`` scripted-expert PickCup demonstrations on the stand-in robot (state only;
reused when the dataset exists), holds out 20 % (10 of 50), and calibrates the full default
parameter space with every method on the same fit episodes, one after the other (so their wall
times are comparable). Each method's result JSON and report land in ``--work``; a finished method
is not rerun (delete its JSON to rerun it). Then every method's best-so-far θ snapshots are replayed
on the held-out episodes to draw held-out error against wall time.

Reported per method (nominal physics first): held-out TCP translation / rotation error and arm
joint RMSE (open-loop replay), the error of each calibrated parameter against the stand-in's hidden
value (this script may read the stand-in's config; the library never does), and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import yaml  # noqa: E402

import embodied_gym  # noqa: E402
from embodied_gym.physaligner.calibrate import METHODS, CalibrationConfig, calibrate, split_episodes  # noqa: E402
from embodied_gym.physaligner.space import ParameterSpace  # noqa: E402

HIDDEN = os.path.join(os.path.dirname(embodied_gym.__file__), "robots", "stand_in_default.yaml")


def record_dataset(root: str, episodes: int) -> None:
    import gymnasium as gym

    from embodied_gym.data.recording import record

    eid = embodied_gym.env_id("PickCup", real=True)
    env = gym.make(eid, obs_type="state", realtime=False)
    record(env, embodied_gym.make_expert(env), root, episodes, env_id=eid, progress=True,
           resume=os.path.exists(root))
    env.close()


def hidden_values(space: ParameterSpace) -> dict[str, float]:
    """The stand-in's true value of every parameter that exists both there and in ``space``."""
    physics = yaml.safe_load(open(HIDDEN))["physics"]
    out = {}
    for name in space.names:
        group, _, joint = name.partition(".")
        value = physics.get(group)
        if isinstance(value, dict):
            value = value.get(joint)
        if isinstance(value, (int, float)):
            out[name] = float(value)
    return out


def parameter_errors(values: dict[str, float], truth: dict[str, float], among: list[str]) -> float:
    """Median relative error |value − truth| / truth over ``among``."""
    return float(np.median([abs(values[n] - truth[n]) / abs(truth[n]) for n in among])) if among else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="runs/bench/standin_pickcup_50")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--methods", nargs="+", default=["physaligner", "sysid", "cmaes", "sa"], choices=METHODS)
    p.add_argument("--work", default="runs/bench/calibration", help="per-method results and reports")
    p.add_argument("--budget", type=float, default=1200, help="wall-time budget of each search method, s")
    p.add_argument("--sa-steps", type=int, default=2000, help="SimplerEnv uses 2000")
    p.add_argument("--cmaes-evaluations", type=int, default=2000)
    p.add_argument("--sysid-iterations", type=int, default=20)
    p.add_argument("--samples", type=int, default=64, help="physaligner stage 1: θ samples")
    p.add_argument("--epochs", type=int, default=10, help="physaligner stage 2: surrogate epochs")
    p.add_argument("--out", default="benchmarks/results/calibration.json")
    p.add_argument("--figure", default="benchmarks/figures/calibration_error_vs_time.png")
    args = p.parse_args()

    from embodied_gym.data.reader import is_dataset, load_episodes, read_info
    from embodied_gym.physaligner.objective import ReplayObjective

    if not is_dataset(args.dataset) or read_info(args.dataset)["total_episodes"] < args.episodes:
        record_dataset(args.dataset, args.episodes)
    episodes = load_episodes(args.dataset)[: args.episodes]
    space = ParameterSpace()
    cfg_common = dict(held_out=0.2, samples=args.samples, surrogate_epochs=args.epochs, sa_steps=args.sa_steps,
                      cmaes_evaluations=args.cmaes_evaluations, sysid_iterations=args.sysid_iterations,
                      budget_s=args.budget, seed=0)
    fit, held = split_episodes(episodes, 0.2, 0)
    print(f"{len(fit)} fit episodes, {len(held)} held out; {space.dim} free parameters; methods {args.methods}")
    os.makedirs(args.work, exist_ok=True)
    results = {}
    for method in args.methods:
        out = os.path.join(args.work, f"{method}.json")
        if os.path.exists(out):
            print(f"{method}: reusing {out}")
            results[method] = json.load(open(out))
            continue
        print(f"--- {method}")
        results[method] = calibrate(args.dataset, "PickCup", out, space, CalibrationConfig(method=method, **cfg_common))

    truth = hidden_values(space)
    nominal = dict(zip(space.names, space.values_of(space.base).tolist()))
    evaluate = ReplayObjective(held, "PickCup", space)
    start = space.normalise(space.values_of(space.base))
    rows = {"nominal": {"held_out": evaluate.errors(start), "wall_time_s": 0.0, "values": nominal}}
    curves = {}
    for method, r in results.items():
        loose = set(r.get("unconstrained") or [])
        rows[method] = {"held_out": r["held_out_errors"]["after"], "wall_time_s": r["wall_time_s"]["total"],
                        "values": r["calibrated"], "unconstrained": sorted(loose),
                        "stage_times_s": r["wall_time_s"]}
        curve = []
        for t, theta in r["snapshots"]:
            e = evaluate.errors(np.asarray(theta))
            curve.append((t, e["translation_error_m"] + e["rotation_error_rad"]))
        curves[method] = curve
    evaluate.close()
    constrained = [n for n in truth if all(n not in set(r.get("unconstrained") or []) for r in results.values())]
    for name, row in rows.items():
        row["param_error_all"] = parameter_errors(row["values"], truth, list(truth))
        row["param_error_constrained"] = parameter_errors(row["values"], truth, constrained)
        row["per_parameter"] = {n: {"value": row["values"][n], "truth": truth[n]} for n in truth}

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    summary = {"dataset": os.path.abspath(args.dataset), "fit_episodes": len(fit), "held_out_episodes": len(held),
               "free_parameters": space.dim, "config": cfg_common, "rows": rows, "curves": curves,
               "parameters_constrained_for_every_method": constrained, "cpus": os.cpu_count(),
               "load_average_at_end": os.getloadavg()}
    with open(args.out + ".tmp", "w") as f:
        json.dump(summary, f, indent=2)
    os.replace(args.out + ".tmp", args.out)
    plot(curves, rows, args.figure)

    print("\n| method | held-out TCP translation (cm) | rotation (rad) | arm joint RMSE (rad) "
          "| parameter error vs hidden, median rel. | wall time (s) |\n|---|---|---|---|---|---|")
    for name, row in rows.items():
        e = row["held_out"]
        print(f"| {name} | {e['translation_error_m'] * 100:.3f} | {e['rotation_error_rad']:.4f} | "
              f"{e['joint_rmse_rad']:.4f} | {row['param_error_all']:.1%} | "
              f"{row['wall_time_s']:.0f} |")
    print(f"\nparameters constrained by the data for every method: {len(constrained)} of {len(truth)}; "
          f"results: {args.out}, figure: {args.figure}")
    return 0


def plot(curves: dict, rows: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    n = rows["nominal"]["held_out"]
    ax.axhline(n["translation_error_m"] + n["rotation_error_rad"], color="grey", ls=":", label="nominal physics")
    for method, curve in curves.items():
        if not curve:
            continue
        t, e = zip(*curve)
        t = np.maximum(np.asarray(t), 1.0)  # log axis: the start sits at 1 s
        t_end = rows[method]["wall_time_s"]
        ax.step(list(t) + [t_end], list(e) + [e[-1]], where="post", label=method)
        ax.plot([t_end], [e[-1]], "o", color=ax.lines[-1].get_color())
    ax.set_xscale("log")
    ax.set(xlabel="wall time (s, log)", ylabel="held-out TCP translation (m) + rotation (rad)",
           title="Calibration on the stand-in robot (PickCup, 40 fit / 10 held-out episodes)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)


if __name__ == "__main__":
    sys.exit(main())
