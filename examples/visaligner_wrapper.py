"""Run the scripted expert in a sim env whose cam_high frames come from a trained VisAligner model,
and save sim render | generated frame side by side as an MP4.

    python examples/visaligner_wrapper.py --model runs/vis/model --out runs/vis_wrapper.mp4
"""

import argparse

import gymnasium as gym
import numpy as np

import embodied_gym
from embodied_gym.video import write_mp4
from embodied_gym.visaligner.pipeline import VisAlignerPipeline
from embodied_gym.wrappers import VisAlignerWrapper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a trained model folder (visaligner train's OUT/model)")
    ap.add_argument("--out", default="runs/vis_wrapper.mp4")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    pipe = VisAlignerPipeline.from_pretrained(args.model)
    env = gym.make(
        "EmbodieDreamer-PickCup-v0",
        obs_type="pixels_state",
        cameras=("cam_high",),
        image_size=pipe.config.image_size,
        render_mode="rgb_array",
    )
    env = VisAlignerWrapper(env, pipe, camera="cam_high")
    expert = embodied_gym.make_expert(env)
    obs, info = env.reset(seed=args.seed)
    frames = []
    for _ in range(args.steps):
        frames.append(np.concatenate([env.render(), obs["cam_high"]], axis=1))  # sim render | what the policy sees
        obs, _, terminated, truncated, info = env.step(expert(obs, info))
        if terminated or truncated:
            break
    env.close()
    write_mp4(args.out, frames, fps=25)
    print(f"{len(frames)} frames written to {args.out}; success: {info['is_success']}")


if __name__ == "__main__":
    main()
