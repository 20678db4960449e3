"""A real stable-baselines3 training run on the env (smoke: it runs and updates)."""

import gymnasium as gym
import numpy as np


def test_ppo_smoke_state_ee_delta():
    from stable_baselines3 import PPO

    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", control_mode="ee_delta")
    model = PPO("MultiInputPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu", verbose=0)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=256)
    after = list(model.policy.parameters())
    assert any(not np.allclose(b.numpy(), a.detach().numpy()) for b, a in zip(before, after))
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action.astype(np.float32))
    env.close()
