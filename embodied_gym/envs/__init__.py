"""Simulated ALOHA scene, tasks and envs."""

from embodied_gym.envs.aloha_env import (AlohaTaskEnv, CupOnMatEnv, PenInCupEnv, PickCupEnv, RemoteInBoxEnv,
                                         TASK_ENVS)
from embodied_gym.envs.physics import PhysicsParams
from embodied_gym.envs.tasks import TASKS

__all__ = ["AlohaTaskEnv", "PickCupEnv", "PenInCupEnv", "RemoteInBoxEnv", "CupOnMatEnv", "TASK_ENVS", "TASKS",
           "PhysicsParams"]
