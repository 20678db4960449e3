"""stable-baselines3 PPO and SAC on our env: state observations, end-effector delta control,
vectorised with SubprocVecEnv, on the reach stage of PickCup; a learning-curve PNG.

    MUJOCO_GL=egl .venv/bin/python examples/sb3_ppo_sac.py --out runs/sb3 --ppo-steps 20000 --sac-steps 5000

The reach stage (``embodied_gym.wrappers.reach.ReachStageWrapper``) adds the cup's reach point (3 cm
below the rim; privileged sim state) and its offset from each gripper to the observation and
rewards -d per step, d (m) the distance from the nearest gripper to that point; episodes last 40
steps (0.8 s; at most 1 cm per step). Before and after training, the deterministic policy is
evaluated on 20 fixed seeds: final distance to the reach point and the mean per-step reward. Outputs: ``<out>/learning_curve.png``,
``<out>/sb3_results.json``, ``<out>/{ppo,sac}_reach.zip`` (each with its env settings in ``.env.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv
from tqdm import tqdm

from embodied_gym.policies.rl import make_reach_env, save_sb3

EPISODE_STEPS = 40


class CurveCallback(BaseCallback):
    """Records (timesteps, mean per-step reward) of every finished training episode."""

    def __init__(self, total: int, desc: str):
        super().__init__()
        self.points: list[tuple[int, float]] = []
        self.bar = tqdm(total=total, desc=desc, unit="step")  # SB3's own bar needs `rich`, not in our stack

    def _on_step(self) -> bool:
        self.bar.n = min(self.num_timesteps, self.bar.total)
        self.bar.refresh()
        for info in self.locals.get("infos", []):
            ep = info.get("episode")
            if ep:
                self.points.append((self.num_timesteps, float(ep["r"]) / float(ep["l"])))
        return True


def evaluate(model, seeds) -> dict:
    env = make_reach_env("PickCup", EPISODE_STEPS)
    dists, rewards = [], []
    for s in seeds:
        obs, info = env.reset(seed=int(s))
        total, n, done = 0.0, 0, False
        while not done:
            action = model.predict(obs, deterministic=True)[0] if model is not None else np.zeros(14, np.float32)
            obs, r, term, trunc, info = env.step(action)
            total, n, done = total + r, n + 1, term or trunc
        dists.append(info["reach_distance"])
        rewards.append(total / n)
    env.close()
    return {
        "final_distance_cm": float(np.mean(dists) * 100),
        "final_distance_cm_std": float(np.std(dists) * 100),
        "mean_step_reward": float(np.mean(rewards)),
        "within_5cm": float(np.mean(np.array(dists) < 0.05)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/sb3")
    p.add_argument("--envs", type=int, default=2, help="SubprocVecEnv workers")
    p.add_argument("--ppo-steps", type=int, default=20_000)
    p.add_argument("--sac-steps", type=int, default=5_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eval_seeds = range(10_000, 10_020)
    results = {
        "task": "PickCup reach stage",
        "episode_steps": EPISODE_STEPS,
        "zero_action_baseline": evaluate(None, eval_seeds),
    }
    curves = {}
    for name, _algo, steps in (("ppo", PPO, args.ppo_steps), ("sac", SAC, args.sac_steps)):
        if steps <= 0:
            continue
        venv = make_vec_env(
            make_reach_env,
            n_envs=args.envs,
            seed=args.seed,
            vec_env_cls=SubprocVecEnv,
            env_kwargs={"task": "PickCup", "max_episode_steps": EPISODE_STEPS},
        )
        if name == "ppo":
            model = PPO(
                "MultiInputPolicy",
                venv,
                n_steps=512,
                batch_size=128,
                n_epochs=10,
                gamma=0.98,
                learning_rate=3e-4,
                seed=args.seed,
                device="cpu",
                verbose=0,
            )
        else:
            model = SAC(
                "MultiInputPolicy",
                venv,
                learning_starts=500,
                batch_size=256,
                gamma=0.98,
                train_freq=1,
                gradient_steps=1,
                seed=args.seed,
                device="cpu",
                verbose=0,
            )
        before = evaluate(model, eval_seeds)
        cb = CurveCallback(steps, name)
        t0 = time.time()
        model.learn(total_timesteps=steps, callback=cb)
        cb.bar.close()
        wall = time.time() - t0
        save_sb3(model, out / f"{name}_reach.zip", wrapper="ReachStageWrapper", task="PickCup")  # + .env.json
        venv.close()
        after = evaluate(model, eval_seeds)
        curves[name] = cb.points
        results[name] = {"timesteps": steps, "train_time_s": wall, "before": before, "after": after}
        print(
            f"{name}: {steps} steps in {wall:.0f} s; final distance {before['final_distance_cm']:.1f} -> "
            f"{after['final_distance_cm']:.1f} cm, mean step reward {before['mean_step_reward']:.3f} -> "
            f"{after['mean_step_reward']:.3f}"
        )
    results["curves"] = curves
    (out / "sb3_results.json").write_text(json.dumps(results, indent=2))
    _plot(curves, results, out / "learning_curve.png")
    print(f"learning curve: {out / 'learning_curve.png'}")


def _plot(curves, results, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves) or 1, figsize=(5 * max(1, len(curves)), 3.6), squeeze=False)
    for ax, (name, pts) in zip(axes[0], curves.items()):
        if pts:
            t, r = np.array(pts).T
            w = max(1, len(r) // 30)
            smooth = np.convolve(r, np.ones(w) / w, mode="valid")
            ax.plot(t, r, ".", alpha=0.25, ms=3, label="episode")
            ax.plot(t[w - 1 :], smooth, label=f"moving mean ({w})")
        base = results["zero_action_baseline"]["mean_step_reward"]
        ax.axhline(base, color="gray", ls="--", lw=1, label="zero action")
        ax.set_title(f"{name.upper()}: PickCup reach stage")
        ax.set_xlabel("timesteps")
        ax.set_ylabel("mean reward per step (-distance, m)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
