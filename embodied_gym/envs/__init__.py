"""The gymnasium envs: the sim env over a :class:`~embodied_gym.sim.core.SimCore`, the real env over a LeRobot robot."""

from embodied_gym.envs.aloha_env import TASK_ENVS, AlohaTaskEnv, CupOnMatEnv, PenInCupEnv, PickCupEnv, RemoteInBoxEnv
from embodied_gym.sim.physics import PhysicsParams
from embodied_gym.sim.tasks import TASKS

__all__ = [
    "TASKS",
    "TASK_ENVS",
    "AlohaTaskEnv",
    "CupOnMatEnv",
    "PenInCupEnv",
    "PhysicsParams",
    "PickCupEnv",
    "RemoteInBoxEnv",
]
