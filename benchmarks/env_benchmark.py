"""Env speed vs raw MuJoCo and vs gym-aloha, and scripted-expert success per task.

    MUJOCO_GL=egl .venv/bin/python benchmarks/env_benchmark.py [--episodes 50] [--out benchmarks/results/env.json]
    MUJOCO_GL=egl .venv/bin/python benchmarks/env_benchmark.py --overhead-only   # the state-obs overhead row alone

Prints a Markdown table (pasted into BENCHMARKS.md, Environment speed section) and writes the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import mujoco
import numpy as np

import embodied_gym
from embodied_gym.sim import robot
from embodied_gym.sim.scene import N_SUBSTEPS
from embodied_gym.sim.tasks import TASKS


def steps_per_second(fn, n: int, repeats: int = 3) -> float:
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def expert_episodes(task: str, seeds) -> list[tuple[int, np.ndarray]]:
    """The scripted expert's joint_pos actions, so both sides replay realistic motion and contacts."""
    env = gym.make(embodied_gym.env_id(task), obs_type="state")
    expert = embodied_gym.make_expert(env)
    out = []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        actions, done = [], False
        while not done:
            a = expert(obs, info)
            actions.append(a)
            obs, _, terminated, truncated, info = env.step(a)
            done = terminated or truncated
        out.append((seed, np.array(actions)))
    env.close()
    return out


def bench_state(task: str = "PickCup", repeats: int = 9) -> dict:
    """Env steps/s (state obs, through gym.make's wrappers) vs raw mj_step at the same 50 Hz
    control step, both replaying the same expert episodes from the same start states.

    The two are timed alternately, ``repeats`` times; the overhead is the median of the paired
    ratios, which is robust to a noisy (virtualised) machine.
    """
    episodes = expert_episodes(task, range(5))
    env = gym.make(embodied_gym.env_id(task), obs_type="state")
    u = env.unwrapped
    n = sum(len(a) for _, a in episodes)
    raw = mujoco.MjData(u.model)
    env_times, raw_times = [], []
    for _ in range(repeats):
        elapsed = 0.0
        for seed, actions in episodes:
            env.reset(seed=seed)
            t0 = time.perf_counter()
            for a in actions:
                env.step(a)
            elapsed += time.perf_counter() - t0
        env_times.append(elapsed)
        elapsed = 0.0
        for seed, actions in episodes:
            env.reset(seed=seed)
            mujoco.mj_copyData(raw, u.model, u.data)
            ctrl = actions[:, u.sim.ctrl_source] * u.sim.ctrl_sign  # what the env writes, precomputed
            t0 = time.perf_counter()
            for c in ctrl:
                raw.ctrl[u.sim.ctrl_index] = c
                mujoco.mj_step(u.model, raw, nstep=N_SUBSTEPS)
            elapsed += time.perf_counter() - t0
        raw_times.append(elapsed)
    env.close()
    ratios = np.array(env_times) / np.array(raw_times)
    return {
        "env_state_steps_per_s": n / float(np.median(env_times)),
        "raw_mj_step_control_steps_per_s": n / float(np.median(raw_times)),
        "env_overhead_pct": 100 * (float(np.median(ratios)) - 1),
        "env_overhead_pct_range": [100 * (float(ratios.min()) - 1), 100 * (float(ratios.max()) - 1)],
        "replayed_steps": n,
        "repeats": repeats,
    }


def bench_pixels(n: int) -> dict:
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels_state", cameras=("cam_high",), image_size=(240, 320))
    env.reset(seed=0)
    action = robot.START_QPOS.astype(np.float32)

    def env_step():
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            env.reset()

    ours = steps_per_second(env_step, n)
    env.close()
    import gym_aloha  # noqa: F401

    aloha = gym.make("gym_aloha/AlohaTransferCube-v0", obs_type="pixels")
    aloha.reset(seed=0)
    a = np.zeros(14, dtype=np.float32)

    def aloha_step():
        _, _, term, trunc, _ = aloha.step(a)
        if term or trunc:
            aloha.reset()

    theirs = steps_per_second(aloha_step, max(20, n // 10), repeats=2)
    aloha.close()
    return {
        "env_1cam_240x320_steps_per_s": ours,
        "gym_aloha_transfer_cube_pixels_steps_per_s": theirs,
        "speedup_vs_gym_aloha": ours / theirs,
    }


def bench_experts(episodes: int) -> dict:
    from embodied_gym.policies.evaluate import evaluate_policy

    out = {}
    for task in TASKS:
        r = evaluate_policy("expert", embodied_gym.env_id(task), episodes, seed=0)
        out[task] = {
            "success_rate": r.success_rate,
            "episodes": episodes,
            "mean_length": r.mean_length,
            "failed_seeds": [e.seed for e in r.per_episode if not e.success],
        }
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--steps", type=int, default=2000, help="steps timed for the pixel comparison (x1/4)")
    p.add_argument("--out", default="benchmarks/results/env.json")
    p.add_argument("--overhead-only", action="store_true", help="only the state-obs env overhead over raw mj_step")
    p.add_argument("--repeats", type=int, default=9, help="paired env/raw timings for the overhead")
    args = p.parse_args()
    if args.overhead_only:
        r = bench_state(repeats=args.repeats)
        lo, hi = r["env_overhead_pct_range"]
        print(
            f"env overhead over raw MuJoCo, state obs, PickCup ({r['replayed_steps']} steps, median of "
            f"{r['repeats']} paired runs): {r['env_overhead_pct']:.1f} % (range {lo:.1f} to {hi:.1f} %); "
            f"env {r['env_state_steps_per_s']:.0f} steps/s, raw {r['raw_mj_step_control_steps_per_s']:.0f}"
        )
        return
    res = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "mujoco": mujoco.__version__,
        **bench_state(repeats=args.repeats),
        **bench_pixels(args.steps // 4),
        "experts": bench_experts(args.episodes),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print("\n| measure | value |\n|---|---|")
    print(f"| env steps/s, state obs (PickCup, replaying expert episodes) | {res['env_state_steps_per_s']:.0f} |")
    print(
        f"| raw `mj_step` x{N_SUBSTEPS} (same model, same 50 Hz control step) | {res['raw_mj_step_control_steps_per_s']:.0f} |"
    )
    lo, hi = res["env_overhead_pct_range"]
    print(
        f"| env overhead over raw MuJoCo (median of {res['repeats']} paired runs; range) | "
        f"{res['env_overhead_pct']:.1f} % ({lo:.0f} to {hi:.0f} %) |"
    )
    print(f"| env steps/s, one 240x320 camera | {res['env_1cam_240x320_steps_per_s']:.0f} |")
    print(
        f"| gym-aloha AlohaTransferCube-v0 pixels steps/s | {res['gym_aloha_transfer_cube_pixels_steps_per_s']:.1f} |"
    )
    print(f"| speed-up vs gym-aloha | {res['speedup_vs_gym_aloha']:.1f}x |")
    print("\n| task | expert success | episodes | mean length (steps) |\n|---|---|---|---|")
    for task, r in res["experts"].items():
        print(f"| {task} | {r['success_rate']:.0%} | {r['episodes']} | {r['mean_length']:.0f} |")


if __name__ == "__main__":
    main()
