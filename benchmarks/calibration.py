"""Calibration on two stand-in worlds, side by side: nominal, the oracles, PhysAligner, mujoco.sysid,
CMA-ES and simulated annealing.

    MUJOCO_GL=egl .venv/bin/python benchmarks/calibration.py \
        [--worlds default world2] [--episodes 30] [--held-out 10] [--budget 240] [--sa-steps 100]

Per world (``embodied_gym/robots/stand_in_<world>.yaml``; this script may read the hidden settings,
the library never does): records ``--episodes`` scripted-expert PickCup demonstrations on the
stand-in robot (state only; reused when the dataset exists) and splits them with the calibration's
own seeded split into fit and ``--held-out`` episodes. Rows:

- ``nominal``: the simulator's nominal physics (no delay, no backlash);
- ``oracle values``: the world's true hidden parameter values, no delay or backlash (the floor of a
  parameter-only simulator);
- ``oracle + effects``: the true values with the true delay and backlash (the floor of this
  simulator: only the stand-in's Stribeck friction and sensor noise remain);
- one row per method: ``embodied-gym calibrate --method M --budget B`` as a new user runs it (the
  default free set and boxes, the delay profiled, the acceptance guard on the held-out episodes),
  each in its own process, one after the other, with the same split and the same wall-time budget.

Reported per row: held-out TCP translation / rotation error and arm joint RMSE (open-loop replay),
the method's own result before the guard, the delay found vs the true one, the median relative
error of the identifiable calibrated parameters (those the result does not flag as unconstrained;
backlash excluded) and the mean absolute backlash error (rad) against the hidden values, wall time;
and every method's best-so-far snapshots replayed on the held-out episodes (error against wall
time, ``--figure``). Resumable row by row: a finished row (``<work>/<world>/<row>.json``) is not
rerun; delete it to rerun it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import yaml

import embodied_gym
from embodied_gym.atomic import atomic_path, write_json, write_text
from embodied_gym.physaligner.calibrate import METHODS, split_episodes
from embodied_gym.physaligner.space import ParameterSpace, get_value
from embodied_gym.sim.physics import ARM_JOINT_NAMES, PhysicsParams

ROBOTS = os.path.join(os.path.dirname(embodied_gym.__file__), "robots")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def world_config(world: str) -> str:
    return os.path.join(ROBOTS, f"stand_in_{world}.yaml")


def hidden(world: str) -> PhysicsParams:
    """The world's true parameter values with its true delay and arm-joint backlash."""
    s = yaml.safe_load(Path(world_config(world)).read_text())
    eff = s.get("effects", {})
    backlash = dict.fromkeys(ARM_JOINT_NAMES, 0.0)
    backlash.update({j: float(v) for j, v in eff.get("backlash", {}).items() if j in backlash})
    return PhysicsParams.from_dict(
        dict(s.get("physics", {}), latency_steps=int(eff.get("latency_steps", 0)), backlash=backlash)
    )


def record_dataset(root: str, episodes: int, world: str) -> None:
    import gymnasium as gym

    from embodied_gym.recording.episodes import record

    eid = embodied_gym.env_id("PickCup", real=True)
    env = gym.make(eid, obs_type="state", realtime=False, robot_config=world_config(world))
    record(env, embodied_gym.make_expert(env), root, episodes, env_id=eid, progress=True, resume=os.path.exists(root))
    env.close()


def result_space(r: dict, latency: int) -> ParameterSpace:
    """The space a result's θ snapshots live in (its bounds, frozen set and delay)."""
    return ParameterSpace(
        PhysicsParams(latency_steps=latency), {n: tuple(b) for n, b in r["bounds"].items()}, r["frozen"]
    )


def parameter_report(values: PhysicsParams, truth: PhysicsParams, free: list[str], loose: set[str]) -> dict:
    cont = [n for n in free if not n.startswith("backlash.") and n not in loose]
    rel = [
        abs(get_value(values, n) - get_value(truth, n)) / abs(get_value(truth, n))
        for n in cont
        if get_value(truth, n) != 0
    ]
    bl = [abs(get_value(values, n) - get_value(truth, n)) for n in free if n.startswith("backlash.")]
    return {
        "median_rel_error_identifiable": float(np.median(rel)) if rel else None,
        "identifiable": cont,
        "backlash_mean_abs_error_rad": float(np.mean(bl)) if bl else None,
        "latency_found": values.latency_steps,
        "latency_true": truth.latency_steps,
    }


def run_row(world: str, row: str, args, dataset: str, held, free: list[str], truth: PhysicsParams) -> dict:
    from embodied_gym.physaligner.objective import ReplayObjective

    evaluate = ReplayObjective(held, "PickCup", ParameterSpace())
    out: dict = {"world": world, "row": row}
    if row in ("nominal", "oracle values", "oracle + effects"):
        physics = {
            "nominal": PhysicsParams(),
            "oracle values": PhysicsParams.from_dict({**truth.to_dict(), "latency_steps": 0, "backlash": [0.0] * 12}),
            "oracle + effects": truth,
        }[row]
        out.update(
            held_out=evaluate.errors_of(physics),
            wall_time_s=0.0,
            parameters=parameter_report(physics, truth, free, set()),
        )
    else:
        path = os.path.join(args.work, world, f"{row}.json")
        cmd = [
            sys.executable,
            "-m",
            "embodied_gym.cli",
            "calibrate",
            "--dataset",
            dataset,
            "--task",
            "PickCup",
            "--method",
            row,
            "--out",
            path,
            "--budget",
            str(args.budget),
            "--held-out",
            str(args.held_out_share),
            "--seed",
            "0",
            "--sa-steps",
            str(args.sa_steps),
        ]
        print("$", " ".join(cmd), flush=True)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT)
        r = json.loads(Path(path).read_text())
        physics = PhysicsParams.from_dict(r["values"])
        loose = set(r.get("unconstrained") or [])
        raw = PhysicsParams.from_dict(r["method_result"]["values"])
        curve = []
        space = result_space(r, r["latency_steps"]["method_result"])
        for t_, theta in r["snapshots"]:
            e = evaluate.errors_of(space.to_physics(space.denormalise(np.asarray(theta))))
            curve.append((t_, e["translation_error_m"], e["rotation_error_rad"]))
        out.update(
            held_out=r["held_out_errors"]["after"],
            method_result_held_out=r["method_result"]["held_out_errors"],
            improved=r["acceptance"]["improved"],
            message=r["acceptance"]["message"],
            wall_time_s=r["wall_time_s"]["total"],
            stage_times_s=r["wall_time_s"],
            process_wall_s=time.perf_counter() - t,
            unconstrained=sorted(loose),
            parameters=parameter_report(physics, truth, free, loose),
            method_result_parameters=parameter_report(raw, truth, free, loose),
            latency_profile=r["latency_steps"]["profile"],
            curve=curve,
            evaluations=r["logs"].get("evaluations"),
            result=os.path.abspath(path),
        )
    evaluate.close()
    out["load_average"] = os.getloadavg()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worlds", nargs="+", default=["default", "world2"])
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--held-out", type=int, default=10, help="held-out episodes per world (>= 10)")
    p.add_argument("--methods", nargs="+", default=["sysid", "cmaes", "sa", "physaligner"], choices=METHODS)
    p.add_argument("--work", default="runs/bench/calibration_worlds", help="per-row results")
    p.add_argument("--budget", type=float, default=240, help="wall-time budget of every method, s")
    p.add_argument("--sa-steps", type=int, default=100, help="annealing schedule length (SimplerEnv: 2000)")
    p.add_argument("--out", default="benchmarks/results/calibration.json")
    p.add_argument("--figure", default="benchmarks/figures/calibration_error_vs_time.png")
    args = p.parse_args()
    args.held_out_share = args.held_out / args.episodes

    from embodied_gym.data.replay import load_episodes
    from embodied_gym.physaligner.space import default_free

    setup = {}
    for world in args.worlds:
        dataset = os.path.abspath(f"runs/bench/standin_{world}_pickcup_{args.episodes}")
        if (
            not os.path.exists(os.path.join(dataset, "meta", "info.json"))
            or len(load_episodes(dataset)) < args.episodes
        ):
            record_dataset(dataset, args.episodes, world)
        episodes = load_episodes(dataset)[: args.episodes]
        fit, held = split_episodes(episodes, args.held_out_share, 0)
        assert len(held) == args.held_out, (len(held), args.held_out)
        setup[world] = (dataset, held, default_free(fit), hidden(world))
        print(
            f"{world}: {len(fit)} fit / {len(held)} held-out episodes; default free set {len(setup[world][2])} "
            f"parameters; true delay {setup[world][3].latency_steps}",
            flush=True,
        )

    order = [(w, r) for w in args.worlds for r in ("nominal", "oracle values", "oracle + effects")]
    order += [(w, m) for m in args.methods for w in args.worlds]
    rows: dict = {w: {} for w in args.worlds}
    for world, row in order:
        path = os.path.join(args.work, world, f"row-{row.replace(' ', '_').replace('+', 'and')}.json")
        if os.path.exists(path):
            rows[world][row] = json.loads(Path(path).read_text())
            continue
        print(f"--- {world}: {row}", flush=True)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        res = run_row(world, row, args, *setup[world])
        write_json(path, res)
        rows[world][row] = res

    summary = {
        "worlds": args.worlds,
        "episodes": args.episodes,
        "held_out": args.held_out,
        "budget_s": args.budget,
        "sa_steps": args.sa_steps,
        "rows": rows,
        "cpus": os.cpu_count(),
        "command": " ".join(sys.argv),
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    write_json(args.out, summary)
    plot(rows, args.figure)
    table = markdown(rows)
    write_text(os.path.splitext(args.out)[0] + ".md", table)
    print(table)
    return 0


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def markdown(rows: dict) -> str:
    lines = []
    for world, rs in rows.items():
        nominal = rs["nominal"]["held_out"]["translation_error_m"]
        floor = rs["oracle + effects"]["held_out"]["translation_error_m"]
        lines += [
            f"### World `{world}`",
            "",
            "| row | held-out TCP translation (cm) | × nominal | × floor | rotation (rad) | arm joint RMSE (rad) "
            "| method's own result (cm) | delay found / true | param. error, median rel. (identifiable) "
            "| backlash error (mrad) | wall time (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in rs.items():
            e, pr = r["held_out"], r["parameters"]
            own = r.get("method_result_held_out")
            lines.append(
                f"| {name}{'' if r.get('improved', True) else ' (guard kept the start)'} "
                f"| {e['translation_error_m'] * 100:.3f} | {e['translation_error_m'] / nominal:.2f} "
                f"| {e['translation_error_m'] / floor:.2f} | {e['rotation_error_rad']:.4f} | {e['joint_rmse_rad']:.4f} "
                f"| {_fmt(own and own['translation_error_m'] * 100, '.3f')} "
                f"| {pr['latency_found']} / {pr['latency_true']} "
                f"| {_fmt(pr['median_rel_error_identifiable'], '.1%')} ({len(pr['identifiable'])}) "
                f"| {_fmt(pr['backlash_mean_abs_error_rad'] and pr['backlash_mean_abs_error_rad'] * 1000, '.2f')} "
                f"| {r['wall_time_s']:.0f} |"
            )
        lines.append("")
        lines += _time_to_reach(rs)
    return "\n".join(lines)


def _time_to_reach(rs: dict, method: str = "physaligner") -> list[str]:
    """When ``method``'s best-so-far result (replayed on the held-out episodes) first reached each
    other method's final held-out TCP translation error."""
    curve = rs.get(method, {}).get("curve")
    if not curve:
        return []
    out = []
    for other, r in rs.items():
        if other == method or not r.get("curve"):
            continue
        target = r["held_out"]["translation_error_m"]
        hit = next((c[0] for c in curve if c[1] <= target), None)
        out.append(
            f"- {method} reached {other}'s final held-out error ({target * 100:.3f} cm, after "
            f"{r['wall_time_s']:.0f} s) "
            + (
                f"after {hit:.0f} s ({hit / r['wall_time_s']:.2f}x its time)"
                if hit is not None
                else "never within its budget"
            )
        )
    return out + [""]


def plot(rows: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(6.5 * len(rows), 4.2), squeeze=False)
    for ax, (world, rs) in zip(axes[0], rows.items()):
        for name, style in (("nominal", ":"), ("oracle values", "--"), ("oracle + effects", "-.")):
            ax.axhline(rs[name]["held_out"]["translation_error_m"] * 100, color="grey", ls=style, label=name)
        for name, r in rs.items():
            curve = r.get("curve")
            if not curve:
                continue
            t, e = [max(c[0], 1.0) for c in curve], [c[1] * 100 for c in curve]
            t_end = r["wall_time_s"]
            ax.step(t + [t_end], e + [e[-1]], where="post", label=name)
            final = r["held_out"]["translation_error_m"] * 100
            ax.plot([t_end], [final], "o", color=ax.lines[-1].get_color())
        ax.set_xscale("log")
        ax.set(
            xlabel="wall time (s, log)",
            ylabel="held-out TCP translation error (cm)",
            title=f"stand-in world '{world}' (PickCup)",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


if __name__ == "__main__":
    sys.exit(main())
