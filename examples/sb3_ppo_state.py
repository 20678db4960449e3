"""Train stable-baselines3 PPO on state observations with end-effector delta control.

    MUJOCO_GL=egl .venv/bin/python examples/sb3_ppo_state.py --steps 20000

The observation is a flat Dict, so SB3's MultiInputPolicy takes it as is.
"""

import argparse

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import embodied_gym  # noqa: F401  (registers the envs)
from embodied_gym.policies.rl import save_sb3

p = argparse.ArgumentParser()
p.add_argument("--task", default="PickCup")
p.add_argument("--steps", type=int, default=20_000)
p.add_argument("--envs", type=int, default=2)
args = p.parse_args()

venv = make_vec_env(
    f"EmbodieDreamer-{args.task}-v0", n_envs=args.envs, env_kwargs=dict(obs_type="state", control_mode="ee_delta")
)
model = PPO("MultiInputPolicy", venv, n_steps=512, batch_size=256, verbose=1, device="cpu")
model.learn(total_timesteps=args.steps, progress_bar=False)
save_sb3(model, f"ppo_{args.task}.zip")  # + ppo_<task>.env.json: `embodied-gym eval` makes this env
