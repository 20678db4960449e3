"""Where an aligned-sim policy's gap between its calibrated sim and the stand-in robot comes from: the grip, which
calibration from joint trajectories does not see (the finger gain, the pads' and the objects' friction, the
objects' mass), the rest of the hidden physics, or what no simulator parameter holds.

The demo run's ``act_aligned`` policy is evaluated greedily on the same seeds (from 100000, as the demo evaluates)
in four places: its calibrated sim as calibrated; the same sim with the stand-in world's hidden grip put in;
the sim with every hidden parameter of the world a ``PhysicsParams`` can hold (arm gains, damping, friction,
armature, the grip, the delay and the backlash; what is left is the world's velocity-dependent friction, its
sensor noise and its camera); and the stand-in robot itself, reading the run's bias-corrected estimator as
the demo evaluates it. The world's parameters are read from its config file here, for this measurement only:
nothing the loop runs reads them. Paired tests (exact McNemar) between the rows.

    MUJOCO_GL=egl .venv/bin/python benchmarks/sim_gap.py --run runs/PenInCup_sn --task PenInCup --episodes 50 \\
        [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--out FILE.json]

A row whose JSON is already in ``--out``'s folder is read back, not rerun.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

GRIP_FIELDS = ("gripper_kp", "pad_friction", "object_friction", "object_mass_scale")


def stage_outputs(run: Path, stage: str) -> dict:
    return json.loads((run / stage / "stage.json").read_text())["outputs"]


def world_physics(robot_config: str | None):
    """The stand-in world's hidden physics as far as ``PhysicsParams`` holds it, and its grip parameters
    alone; for this measurement only."""
    from embodied_gym.robots.stand_in import load_settings
    from embodied_gym.sim.physics import PhysicsParams

    settings = load_settings(robot_config)
    effects = {k: settings["effects"][k] for k in ("latency_steps", "backlash") if k in settings["effects"]}
    physics = PhysicsParams.from_dict(effects, base=settings["physics"])
    grip: dict[str, Any] = {k: float(getattr(physics, k)) for k in GRIP_FIELDS}
    return physics, grip


def evaluate_row(name: str, folder: Path, args, env_id: str, **kwargs) -> list[bool]:
    """The policy's success per seed in ``env_id`` (``kwargs``: evaluate_policy's env options)."""
    from embodied_gym.policies.evaluate import evaluate_policy

    path = folder / f"{name}.json"
    if not path.exists():
        print(f"[gap] {name}: {args.episodes} episodes", flush=True)
        r = evaluate_policy(
            str(args.policy),
            env_id,
            args.episodes,
            seed=100_000,
            pose_update="at_reset",
            workers=args.workers,
            progress=False,
            **kwargs,
        )
        path.write_text(json.dumps({"successes": [bool(e.success) for e in r.per_episode]}))
    return json.loads(path.read_text())["successes"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a finished demo run of one task")
    p.add_argument("--task", required=True)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--robot-config", default=None, help="the stand-in world (default: the shipped one)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="JSON of the result (default: RUN/sim_gap/WORLD.json)")
    args = p.parse_args(argv)

    from embodied_gym.demo.stages import finished_outputs, sim_policy_estimator
    from embodied_gym.policies.evaluate import pairwise_comparisons
    from embodied_gym.sim.physics import resolve_physics

    world = Path(args.robot_config).stem if args.robot_config else "default"
    out = args.out or args.run / "sim_gap" / f"{world}.json"
    folder = out.parent / out.stem
    folder.mkdir(parents=True, exist_ok=True)
    args.policy = stage_outputs(args.run, "act_aligned")["policy"]
    calibrated = resolve_physics(stage_outputs(args.run, "calibrate")["result"])
    world_params, grip = world_physics(args.robot_config)
    with_grip = dataclasses.replace(calibrated, **grip)
    sim_id, real_id = f"EmbodieDreamer-{args.task}-v0", f"EmbodieDreamer-{args.task}-Real-v0"
    rows = {
        "calibrated sim": evaluate_row("sim", folder, args, env_id=sim_id, physics=calibrated),
        "calibrated sim, the world's grip": evaluate_row("sim_grip", folder, args, env_id=sim_id, physics=with_grip),
        "sim, every hidden parameter of the world": evaluate_row(
            "sim_world", folder, args, env_id=sim_id, physics=world_params
        ),
        "stand-in": evaluate_row(
            "stand_in",
            folder,
            args,
            env_id=real_id,
            robot_config=args.robot_config,
            pose_estimator=sim_policy_estimator(finished_outputs(args.run)),
        ),
    }
    names = list(rows)
    print(f"\n{args.task}, {world} world, act_aligned of {args.run}, {args.episodes} paired seeds; grip put in: {grip}")
    print("| where | success |\n|---|---|")
    for n in names:
        print(f"| {n} | {100 * sum(rows[n]) / len(rows[n]):.0f} % |")
    print("\n| pair | only first / only second | exact McNemar p |\n|---|---|---|")
    tests = {}
    for (a, b), c in pairwise_comparisons(rows).items():
        tests[f"{a} vs {b}"] = c.to_json()
        print(f"| {a} vs {b} | {c.only_a} / {c.only_b} | {c.p_value:.2g} |")
    out.write_text(
        json.dumps({"task": args.task, "world": world, "grip": grip, "rows": rows, "tests": tests}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
