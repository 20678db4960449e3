"""LeRobot devices: the simulated stand-in for the real ALOHA (a ``Robot``) and a scripted operator
for it (a ``Teleoperator``). LeRobot's ``make_*_from_config`` finds each class in this package."""

from embodied_gym.robots.scripted_operator import ScriptedOperator, ScriptedOperatorConfig
from embodied_gym.robots.stand_in import DEFAULT_CONFIG, StandInRobot, StandInRobotConfig, load_settings


def check_robot_config(path) -> None:
    """Read and check a stand-in config file now (the demo does, before its first stage), without handing its
    hidden settings to the caller. Raises FileNotFoundError / ValueError naming the file and the key."""
    load_settings(path)


def sets_its_own_table(robot_config) -> bool:
    """Whether a LeRobot ``RobotConfig`` is the stand-in's, a robot that sets its own table and knows its task
    state (the scripted expert and the demo's evaluation may run on it; hardware needs an operator)."""
    return isinstance(robot_config, StandInRobotConfig)


def robot_config_file(robot_config) -> str:
    """The hidden-settings file of a stand-in ``RobotConfig`` (the shipped default when it names none)."""
    if not sets_its_own_table(robot_config):
        raise ValueError(f"{type(robot_config).__name__} is not the stand-in's config")
    return str(robot_config.config_path or DEFAULT_CONFIG)


__all__ = [
    "ScriptedOperator",
    "ScriptedOperatorConfig",
    "StandInRobot",
    "StandInRobotConfig",
    "check_robot_config",
    "robot_config_file",
    "sets_its_own_table",
]
