"""Every gymnasium wrapper of embodied-gym, one module per concern.

- :mod:`.visaligner`: :class:`VisAlignerWrapper`, a sim camera's frames replaced by VisAligner's.
- :mod:`.pose`: :class:`PoseEstimateWrapper` and :class:`GroundTruthPoseWrapper`, the object-pose
  entry of the observation (its contract: :mod:`embodied_gym.perception.pose_entry`).
- :mod:`.physics`: :class:`PhysicsRandomizationWrapper`, a sim env's arm physics redrawn each episode.
- :mod:`.reach`: :class:`ReachStageWrapper`, the reach stage of a task for RL from state.
- :mod:`.lerobot`: :class:`LeRobotObservationWrapper`, our observation in LeRobot's env convention.

A name is imported from its module when it is first used (``from embodied_gym.wrappers import X``
works as usual), so importing one light wrapper does not pull in torch with the others.
"""

from __future__ import annotations

import importlib

_MODULES = {
    "GroundTruthPoseWrapper": "pose",
    "LeRobotObservationWrapper": "lerobot",
    "PhysicsRandomizationWrapper": "physics",
    "PoseEstimateWrapper": "pose",
    "ReachStageWrapper": "reach",
    "VisAlignerWrapper": "visaligner",
}


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_MODULES))


__all__ = sorted(_MODULES)
