"""Which of the stand-in's hidden differences breaks a sim-trained policy? A diagnosis no user can run on a real
robot, and the reason we keep a stand-in: the demo's aligned-sim policy, evaluated on copies of the stand-in
world with parts of its hidden physics, effects or both put back to the nominal sim's.

Variants of the world ``--robot-config`` names (default: the shipped one); each keeps the world's look, so the
policy reads the same camera through the demo's bias-corrected estimator:

- ``world``: as shipped;
- ``no_effects``: without latency, backlash, Stribeck friction and joint-reading noise (the world's physics);
- ``no_physics``: the nominal sim's physics (gains, damping, friction, armature, gripper, object) with the effects;
- ``arm_physics``: only the arm's joint physics (gains, damping, dry friction, armature), no effects;
- ``arm_gains``: only the arm's position gains (kp), no effects;
- ``left_gains`` / ``right_gains``: only one arm's position gains, no effects (a one-arm task's idle arm and
  working arm);
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

    def one_arm_gains(arm: str) -> dict:
        kp = physics.get("kp", {})
        return {"kp": {j: v for j, v in kp.items() if j.startswith(arm)}} if isinstance(kp, dict) else {}

    return {
        "world": copy.deepcopy(world),
        "no_effects": with_(physics, {}),
        "no_physics": with_({}, effects),
        "arm_physics": with_({k: physics[k] for k in ARM if k in physics}, {}),
        "arm_gains": with_({k: physics[k] for k in ("kp",) if k in physics}, {}),
        "left_gains": with_(one_arm_gains("left"), {}),
        "right_gains": with_(one_arm_gains("right"), {}),
        "grip_physics": with_({k: physics[k] for k in GRIP if k in physics}, {}),
        "stribeck": with_({}, {k: effects[k] for k in ("stribeck",) if k in effects}),
        "bare": with_({}, {}),
    }


def trace_episode(policy: str, env_id: str, seed: int, robot_config: str, estimator: str | None, name: str) -> None:
    """One episode of ``policy`` printed every 10th control step: TCP heights (cm), the joint readings the
    policy was given (rad; grippers m) and the difference of its command from them."""
    import numpy as np

    from embodied_gym.factory import make_env_for
    from embodied_gym.policies.agents import load_agent

    agent = load_agent(policy, pose_estimator=estimator) if estimator else load_agent(policy)
    env = make_env_for(agent, env_id, robot_config=robot_config, pose_update="at_reset")
    try:
        agent.reset()
        obs, info = env.reset(seed=seed)
        np.set_printoptions(precision=4, suppress=True, linewidth=200)
        print(f"--- {name}, seed {seed}: step, TCP z left/right (cm), joint readings left | right, command - reading")
        for t in range(10_000):
            action = agent(obs, info)
            q = np.asarray(obs["joint_pos"], dtype=np.float64)
            obs, _, terminated, truncated, info = env.step(action)
            if t % 10 == 0 or terminated or truncated:
                z = np.asarray(info["tcp_poses"])[:, 2] * 100
                print(f"{t:4d} z {z[0]:5.1f} / {z[1]:5.1f}  q {q[:7]} | {q[7:]}  a-q {np.asarray(action) - q}")
            if terminated or truncated:
                print(f"--- {name}: {'success' if info.get('is_success') else 'failure'} after {t + 1} steps")
                break
    finally:
        env.close()


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
    p.add_argument(
        "--trace",
        action="store_true",
        help="instead of evaluating, print one episode (reset --seed) step by step in each variant: both arms' "
        "TCP heights, every joint reading and the command minus it, each 10th step",
    )
    args = p.parse_args(argv)

    import yaml

    import embodied_gym
    from embodied_gym.demo.stages import finished_outputs, sim_policy_estimator
    from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed

    run = Path(args.run)

    def outputs(stage: str) -> dict:
        path = run / stage / "stage.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: --run must be a finished demo run of one task (runs/NAME/TASK)")
        return json.loads(path.read_text())["outputs"]

    task = json.loads((run / "evaluate" / "stage.json").read_text())["settings"]["task"]
    policy = outputs(args.policy)["policy"]
    estimator = sim_policy_estimator(finished_outputs(run)) if args.policy != "act_stand_in" else None
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
            if args.trace:
                trace_episode(policy, embodied_gym.env_id(task, real=True), args.seed, str(cfg), estimator, name)
                continue
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
    if args.trace:
        return 0
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
