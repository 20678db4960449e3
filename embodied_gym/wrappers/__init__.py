"""Gymnasium wrappers: the VisAligner observation wrapper (and, later, LeRobot format adapters)."""

from embodied_gym.wrappers.visaligner import VisAlignerWrapper

__all__ = ["VisAlignerWrapper"]
