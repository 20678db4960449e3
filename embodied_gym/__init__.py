"""embodied-gym: EmbodieDreamer's Real2Sim2Real loop as a Gymnasium plugin.

``import embodied_gym`` registers the envs ``EmbodieDreamer-<Task>-v0`` for the tasks PickCup,
PenInCup, RemoteInBox and CupOnMat.
"""

from embodied_gym.rendering import select_gl_backend

select_gl_backend()  # before anything imports mujoco

from embodied_gym.envs import TASK_ENVS, PhysicsParams  # noqa: E402
from embodied_gym.envs.experts import make_expert  # noqa: E402
from embodied_gym.registration import env_id, parse_env_id, register_envs  # noqa: E402

__version__ = "0.1.0"

register_envs()

__all__ = ["TASK_ENVS", "PhysicsParams", "__version__", "env_id", "make_expert", "parse_env_id"]
