"""Make an env, let the scripted expert solve it, and save what the top camera saw.

MUJOCO_GL=egl .venv/bin/python examples/quickstart.py --task PickCup --out pickcup.mp4
"""

import argparse

import gymnasium as gym

import embodied_gym
from embodied_gym.video import write_mp4

p = argparse.ArgumentParser()
p.add_argument("--task", default="PickCup")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--out", default="quickstart.mp4")
args = p.parse_args()

env = gym.make(embodied_gym.env_id(args.task), obs_type="pixels_state", cameras=("cam_high",))
expert = embodied_gym.make_expert(env)
obs, info = env.reset(seed=args.seed)
frames = [obs["cam_high"]]
done = False
while not done:
    obs, reward, terminated, truncated, info = env.step(expert(obs, info))
    frames.append(obs["cam_high"])
    done = terminated or truncated
env.close()
write_mp4(args.out, frames, fps=50)
print(f"{args.task}: success={info['is_success']} after {info['step']} steps; video in {args.out}")
