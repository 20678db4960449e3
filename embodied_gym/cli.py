"""The ``embodied-gym`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _cmd_demo(args) -> int:
    """Every task's scripted expert solving its task; a video per task; success printed."""
    import gymnasium as gym
    import numpy as np
    from tqdm import tqdm

    import embodied_gym
    from embodied_gym.envs.tasks import TASKS
    from embodied_gym.video import write_mp4

    tasks = args.tasks or list(TASKS)
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for task in tasks:
        env = gym.make(embodied_gym.env_id(task), obs_type="state", render_mode="rgb_array",
                       cameras=(args.camera,), image_size=(240, 320))
        expert = embodied_gym.make_expert(env)
        successes, frames = [], []
        for ep in tqdm(range(args.episodes), desc=f"{task:12s}", unit="ep"):
            obs, info = env.reset(seed=args.seed + ep)
            record = ep == 0
            if record:
                frames.append(env.render())
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(expert(obs, info))
                done = terminated or truncated
                if record and info["step"] % 2 == 0:
                    frames.append(env.render())
            successes.append(bool(info["is_success"]))
        env.close()
        video = os.path.join(args.out, f"{task}.mp4")
        write_mp4(video, frames, fps=25)
        rate = float(np.mean(successes))
        summary[task] = {"success_rate": rate, "episodes": len(successes), "video": video}
        print(f"{task:12s} expert success {rate:6.1%} over {len(successes)} episodes  (video: {video})")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied-gym", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run every task's scripted expert, save a video per task, print success")
    demo.add_argument("--tasks", nargs="*", help="tasks to run (default: all four)")
    demo.add_argument("--episodes", type=int, default=5, help="episodes per task (default 5)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--camera", default="cam_high")
    demo.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    demo.set_defaults(func=_cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "tasks", None):
        from embodied_gym.envs.tasks import TASKS

        unknown = [t for t in args.tasks if t not in TASKS]
        if unknown:
            print(f"embodied-gym: unknown task(s) {unknown}; valid: {sorted(TASKS)}", file=sys.stderr)
            return 2
    t0 = time.time()
    rc = args.func(args)
    print(f"done in {time.time() - t0:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
