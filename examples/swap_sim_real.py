"""Evaluate one policy on a sim id and on the matching Real id: only the id string changes.

    MUJOCO_GL=egl .venv/bin/python examples/swap_sim_real.py --task PickCup --episodes 5

The Real id drives the stand-in robot by default (a hidden simulator with its own physics,
latency, backlash, friction and camera look); pass robot=<your lerobot Robot> to drive hardware.
"""

import argparse

import gymnasium as gym
import numpy as np

import embodied_gym

p = argparse.ArgumentParser()
p.add_argument("--task", default="PickCup")
p.add_argument("--episodes", type=int, default=5)
args = p.parse_args()

for env_id in (embodied_gym.env_id(args.task), embodied_gym.env_id(args.task, real=True)):
    extra = (
        {"realtime": False} if embodied_gym.parse_env_id(env_id).real else {}
    )  # the stand-in may run faster than real time
    with gym.make(env_id, obs_type="state", **extra) as env:
        policy = embodied_gym.make_expert(env)  # any policy(obs, info) -> action works the same way
        wins = []
        for seed in range(args.episodes):
            obs, info = env.reset(seed=seed)
            done = False
            while not done:
                obs, reward, terminated, truncated, info = env.step(policy(obs, info))
                done = terminated or truncated
            wins.append(bool(info["is_success"]))
    print(f"{env_id:36s} success {np.mean(wins):.0%} over {len(wins)} episodes")
