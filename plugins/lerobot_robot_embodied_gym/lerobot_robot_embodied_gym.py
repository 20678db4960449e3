"""LeRobot plugin: importing this registers embodied-gym's robot (``embodied_gym_stand_in``), teleoperator
(``embodied_gym_scripted``) and env (``embodied_gym``) with LeRobot's config registries."""

import embodied_gym.policies.lerobot_env
import embodied_gym.robots  # noqa: F401
