"""Which of the stand-in's hidden differences breaks a sim-trained policy? A diagnosis no user can run on a real
robot, and the reason we keep a stand-in: the demo's aligned-sim policy, evaluated on copies of the stand-in
world with parts of its hidden physics, effects or both put back to the nominal sim's.

Variants of the world ``--robot-config`` names (default: the shipped one); each keeps the world's look, so the
policy reads the same camera through the demo's bias-corrected estimator:

- ``world``: as shipped;
- ``no_effects``: without latency, backlash, Stribeck friction and joint-reading noise (the world's physics);
- ``no_physics``: the nominal sim's physics (gains, damping, friction, armature, gripper, object) with the effects;
- ``arm_physics``: only the arm's joint physics (gains, damping, dry friction, armature), no effects;
- ``grip_physics``: only the gripper gain, pad and object friction and object mass, no effects;
- ``stribeck``: only the Stribeck friction (nominal physics, no other effect);
- ``bare``: nominal physics, no effects (the look alone).

Every variant runs the same ``--episodes`` seeds (the demo's evaluation seeds); paired tests against ``bare``.

    MUJOCO_GL=egl .venv/bin/python benchmarks/stand_in_ablation.py --run runs/RemoteInBox_q --episodes 30 \\
        [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--policy act_aligned] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

ARM = ("kp", "damping", "frictionloss", "armature")
GRIP = ("gripper_kp", "object_friction", "pad_friction", "object_mass_scale")
DEFAULT_WORLD = "embodied_gym/robots/stand_in_default.yaml"


def variants(world: dict) -> dict[str, dict]:
    """Copies of a stand-in world config (a loaded YAML mapping) with parts removed, by name."""

    def with_(physics: dict, effects: dict) -> dict:
        w = copy.deepcopy(world)
        w["physics"], w["effects"] = physics, effects
        return w

    physics, effects = world.get("physics", {}), world.get("effects", {})
    return {
        "world": copy.deepcopy(world),
        "no_effects": with_(physics, {}),
        "no_physics": with_({}, effects),
        "arm_physics": with_({k: physics[k] for k in ARM if k in physics}, {}),
        "grip_physics": with_({k: physics[k] for k in GRIP if k in physics}, {}),
        "stribeck": with_({}, {k: effects[k] for k in ("stribeck",) if k in effects}),
        "bare": with_({}, {}),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a finished demo run folder of one task (runs/<name>/<task>)")
    p.add_argument("--policy", default="act_aligned", help="the policy stage to evaluate (default act_aligned)")
    p.add_argument("--robot-config", default=DEFAULT_WORLD, help="the stand-in world the run was recorded on")
    p.add_argument("--variants", nargs="+", help="variant names (default: all)")
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--seed", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", help="also write the rates and tests here (JSON)")
    args = p.parse_args(argv)

    import yaml

    import embodied_gym
    from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed

    run = Path(args.run)

    def outputs(stage: str) -> dict:
        path = run / stage / "stage.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: --run must be a finished demo run of one task (runs/NAME/TASK)")
        return json.loads(path.read_text())["outputs"]

    task = json.loads((run / "evaluate" / "stage.json").read_text())["settings"]["task"]
    policy = outputs(args.policy)["policy"]
    estimator = outputs("perception_offset").get("model") if args.policy != "act_stand_in" else None
    world = yaml.safe_load(Path(args.robot_config).read_text())
    table = variants(world)
    names = args.variants or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SystemExit(f"unknown --variants {unknown}; valid: {list(table)}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            cfg = Path(tmp) / f"{name}.yaml"
            cfg.write_text(yaml.safe_dump(table[name]))
            res = evaluate_policy(
                policy,
                embodied_gym.env_id(task, real=True),
                episodes=args.episodes,
                seed=args.seed,
                robot_config=str(cfg),
                pose_update="at_reset",
                pose_estimator=estimator,
                workers=args.workers,
                progress=False,
            )
            results[name] = res
            print(f"{name}: success {res.success_rate:.0%}, grasped {res.grasp_rate or 0:.0%}", flush=True)
    print(f"\n| {task}, {args.policy}, {Path(args.robot_config).stem} | success | grasped | vs bare: discordant, p |")
    print("|---|---|---|---|")
    rows = {}
    for name, res in results.items():
        test = ""
        if name != "bare" and "bare" in results:
            c = paired_comparison(successes_by_seed(res), successes_by_seed(results["bare"]))
            test = f"{c.only_a} / {c.only_b}, {c.p_value:.2g}"
        rows[name] = {"success_rate": res.success_rate, "grasp_rate": res.grasp_rate, "vs_bare": test}
        print(f"| {name} | {res.success_rate:.0%} | {res.grasp_rate or 0:.0%} | {test} |")
    if args.out:
        from embodied_gym.atomic import write_json

        write_json(Path(args.out), {"run": str(run), "policy": args.policy, "episodes": args.episodes, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
