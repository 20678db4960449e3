"""LeRobot ``Robot`` implementations: the simulated stand-in for the real ALOHA."""

from embodied_gym.robots.stand_in import StandInRobot, StandInRobotConfig

__all__ = ["StandInRobot", "StandInRobotConfig"]
