"""Gymnasium ids of the embodied-gym envs."""

from __future__ import annotations

import gymnasium as gym

from embodied_gym.envs.aloha_env import TASK_ENVS
from embodied_gym.envs.tasks import make_task


def env_id(task: str, real: bool = False) -> str:
    """``EmbodieDreamer-<task>-v0`` (``-Real-v0`` for the real-robot env)."""
    make_task(task)  # validates the name
    return f"EmbodieDreamer-{task}{'-Real' if real else ''}-v0"


def register_envs() -> None:
    for task, cls in TASK_ENVS.items():
        steps = make_task(task).max_episode_steps
        if env_id(task) not in gym.registry:
            gym.register(id=env_id(task), entry_point=f"{cls.__module__}:{cls.__name__}", max_episode_steps=steps)
        if env_id(task, real=True) not in gym.registry:
            gym.register(id=env_id(task, real=True), entry_point="embodied_gym.envs.real_env:AlohaRealEnv",
                         max_episode_steps=steps, kwargs={"task": task})
