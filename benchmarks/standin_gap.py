"""How far the stand-in robot is from the nominal simulator: record scripted-expert episodes on the
stand-in ("real") robot, replay them open-loop in the nominal sim, report the errors.

    MUJOCO_GL=egl .venv/bin/python benchmarks/standin_gap.py [--episodes 10] [--out benchmarks/results/standin_gap.json]

This is the gap that calibration (PhysAligner) has to close. Datasets are written without video
(state only) to keep the run short.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import numpy as np

import embodied_gym
from embodied_gym.data.reader import load_episodes
from embodied_gym.data.replay import replay_episode
from embodied_gym.recording.episodes import record
from embodied_gym.sim.tasks import TASKS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default="benchmarks/results/standin_gap.json")
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            eid = embodied_gym.env_id(task, real=True)
            env = gym.make(eid, obs_type="state", realtime=False)
            summary = record(
                env, embodied_gym.make_expert(env), os.path.join(tmp, task), args.episodes, env_id=eid, progress=True
            )
            env.close()
            rows = [replay_episode(ep, task).summary() for ep in load_episodes(os.path.join(tmp, task))]
            results[task] = {
                "stand_in_expert_success": summary.success_rate,
                "episodes": args.episodes,
                "joint_rmse_rad": float(np.mean([r["joint_rmse_rad"] for r in rows])),
                "translation_error_m": float(np.mean([r["translation_error_m"] for r in rows])),
                "rotation_error_rad": float(np.mean([r["rotation_error_rad"] for r in rows])),
            }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(
        "\n| task | expert success on the stand-in | TCP translation error (cm) | TCP rotation error (rad) "
        "| arm joint RMSE (rad) |\n|---|---|---|---|---|"
    )
    for task, r in results.items():
        print(
            f"| {task} | {r['stand_in_expert_success']:.0%} ({r['episodes']} ep.) | {100 * r['translation_error_m']:.2f} "
            f"| {r['rotation_error_rad']:.4f} | {r['joint_rmse_rad']:.4f} |"
        )


if __name__ == "__main__":
    main()
