"""How precise must the reset frame's pose estimate be for each task? The scripted expert on the stand-in, planned
from start poses moved by a known horizontal error (each object in its own random direction) and run open loop
(PenInCup's tip feedback off, as a policy reading the reset frame's estimate cannot have it). ``--objects``
moves only the named objects (which object's estimate a task needs precise).

    MUJOCO_GL=egl .venv/bin/python benchmarks/expert_tolerance.py --episodes 20 [--tasks PenInCup RemoteInBox] \\
        [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--objects pencup]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

ERRORS_CM = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)


def success_with_error(
    task: str, error_cm: float, episodes: int, robot_config: str | None, objects: list[str] | None = None
) -> int:
    """Successful episodes (seeds 0..episodes-1) of the open-loop expert planned from poses ``error_cm`` off
    (only ``objects``' poses, when given)."""
    import embodied_gym
    from embodied_gym.envs.experts import make_expert
    from embodied_gym.factory import make_env

    env = make_env(embodied_gym.env_id(task, real=True), robot_config=robot_config, obs_type="state")
    rng = np.random.default_rng(0)
    successes = 0
    for seed in range(episodes):
        expert = make_expert(env)
        obs, info = env.reset(seed=seed)
        expert.reset()
        moved = {}
        for name, pose in info["object_poses"].items():
            pose = np.array(pose, dtype=np.float64)
            angle = rng.uniform(0, 2 * np.pi)
            if objects is None or name in objects:
                pose[:2] += error_cm / 100 * np.array([np.cos(angle), np.sin(angle)])
            moved[name] = pose
        action = expert(obs, {**info, "object_poses": moved})  # the plan is made from the first call's poses
        while True:
            expert._feedback = None  # open loop: the plan alone
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            action = expert(obs, info)
        successes += bool(info.get("is_success"))
    env.close()
    return successes


def main(argv: list[str] | None = None) -> int:
    from embodied_gym.sim.tasks import TASKS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--robot-config", help="a stand-in world config (default: the shipped world)")
    p.add_argument("--objects", nargs="+", help="move only these objects (default: every object of the task)")
    args = p.parse_args(argv)
    print("| task | " + " | ".join(f"{e:g} cm" for e in ERRORS_CM) + " |")
    print("|---|" + "---|" * len(ERRORS_CM))
    for task in args.tasks:
        cells = [success_with_error(task, e, args.episodes, args.robot_config, args.objects) for e in ERRORS_CM]
        label = f"{task}: {', '.join(args.objects)} moved" if args.objects else task
        print(f"| {label} | " + " | ".join(f"{100 * k / args.episodes:.0f} %" for k in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
