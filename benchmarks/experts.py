"""The scripted experts on both stand-in worlds, with their joint-space integral action as planned,
on every slow joint, and off.

    MUJOCO_GL=egl .venv/bin/python benchmarks/experts.py [--episodes 20] [--out runs/bench/experts.json]

For every task and every stand-in world (``embodied_gym/robots/stand_in_default.yaml`` and
``stand_in_world2.yaml``) the expert runs ``--episodes`` episodes (seeds 0..N-1, the env's own time
limit) on the ``-Real-`` env three ways (``make_expert(env, integral_below=...)``): as its plan asks
(``ExpertPlan.integral_below``: the joints the plan holds, below 0.002 rad per step, PenInCup's below
0.01), integrating on every joint slower than 0.01 rad per step (every task's expert before the
plans chose), and without the integral term. An episode counts as a success if the task's success
fired at any step. Rows are saved one by one and a rerun with the same ``--out`` skips them.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
from tqdm import tqdm

import embodied_gym
from embodied_gym.atomic import write_json
from embodied_gym.envs.experts import FROM_PLAN
from embodied_gym.sim.tasks import TASKS

ROBOTS = Path(embodied_gym.__file__).parent / "robots"
WORLDS = {"default": None, "world2": str(ROBOTS / "stand_in_world2.yaml")}
SETTINGS = {"plan": FROM_PLAN, "0.01": 0.01, "off": None}
"""The plan's own ``integral_below``; 0.01 rad per step on every joint (the expert before it held only
the plan's holds); no integral action."""


def success_rate(task: str, robot_config: str | None, integral_below, episodes: int) -> dict:
    kw = {} if robot_config is None else {"robot_config": robot_config}
    env = gym.make(embodied_gym.env_id(task, real=True), obs_type="state", realtime=False, **kw)
    expert = embodied_gym.make_expert(env, integral_below=integral_below)
    successes = 0
    plan_below = None
    for seed in tqdm(
        range(episodes),
        desc=f"{task} {(robot_config and Path(robot_config).stem) or 'default'} integral_below={integral_below}",
        leave=False,
    ):
        obs, info = env.reset(seed=seed)
        expert.reset()
        plan_below = env.unwrapped.task.expert_plan(info["object_poses"]).integral_below
        done, success = False, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
            success |= bool(info.get("is_success", False))
            done = terminated or truncated
        successes += success
    env.close()
    return {"success_rate": successes / episodes, "episodes": episodes, "plan_integral_below": plan_below}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--out", default="runs/bench/experts.json")
    args = p.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    for task in args.tasks:
        for world, config in WORLDS.items():
            for setting, below in SETTINGS.items():
                key = f"{task}/{world}/{setting}"
                if key in results and results[key]["episodes"] == args.episodes:
                    continue
                results[key] = success_rate(task, config, below, args.episodes)
                out.parent.mkdir(parents=True, exist_ok=True)
                write_json(out, results)
    print(
        "\n| task | world | plan's integral_below (rad/step) | as planned | below 0.01 on every joint "
        "| no integral term | episodes |\n"
        "|---|---|---|---|---|---|---|"
    )
    for task in args.tasks:
        for world in WORLDS:
            r = {s: results[f"{task}/{world}/{s}"] for s in SETTINGS}
            print(
                f"| {task} | {world} | {r['plan']['plan_integral_below']} "
                f"| {r['plan']['success_rate']:.0%} | {r['0.01']['success_rate']:.0%} | {r['off']['success_rate']:.0%} "
                f"| {args.episodes} (seeds 0-{args.episodes - 1}) |"
            )


if __name__ == "__main__":
    main()
