"""How good a trajectory is, for TPO's ranking: the end-effector's distance to the task's target.

Each task's target is a point the gripper (the nearest TCP) should end at when the task is done,
computed from privileged ``info`` (``tcp_poses``, ``object_poses``; in the sim only):

=============  =========================================================================
PickCup        the cup's grasp point (3 cm below the rim) at the cup's *start* position,
               raised by the lift height (5 cm): where a successful lift ends
PenInCup       5 cm above the pen cup's rim, over its centre (the pen is dropped from there)
RemoteInBox    5 cm above the box's rim, over its centre
CupOnMat       the cup's grasp point when standing on the mat's centre
=============  =========================================================================

The score of a trajectory is ``success + exp(-d / 5 cm)`` with ``d`` the final distance (m):
successful trajectories always rank above failed ones, and among equals the closer end ranks
higher. Scores lie in [0, 2].
"""

from __future__ import annotations

import math

import numpy as np

from embodied_gym.envs.tasks import (BOX_HEIGHT, CUP_HEIGHT, MAT_HALF, PENCUP_HEIGHT, PickCup)

DISTANCE_SCALE_M = 0.05
_GRASP_BELOW_RIM = 0.03
_ABOVE_RIM = 0.05


def task_target(task: str, start_poses: dict, poses: dict) -> np.ndarray:
    """The task's end-effector target (x, y, z) in m, from the objects' start and current poses."""
    if task == "PickCup":
        x, y = start_poses["cup"][:2]
        return np.array([x, y, CUP_HEIGHT - _GRASP_BELOW_RIM + PickCup().lift_height])
    if task == "PenInCup":
        x, y = poses["pencup"][:2]
        return np.array([x, y, PENCUP_HEIGHT + _ABOVE_RIM])
    if task == "RemoteInBox":
        x, y, z = poses["box"][:3]
        return np.array([x, y, z + BOX_HEIGHT + _ABOVE_RIM])
    if task == "CupOnMat":
        x, y, z = poses["mat"][:3]
        return np.array([x, y, z + 2 * MAT_HALF[2] + CUP_HEIGHT - _GRASP_BELOW_RIM])
    raise ValueError(f"no TPO target defined for task {task!r}; tasks: PickCup, PenInCup, RemoteInBox, CupOnMat")


def target_distance(task: str, start_info: dict, info: dict) -> float:
    """Distance (m) from the nearest TCP to the task target at ``info`` (the trajectory's end)."""
    for key in ("tcp_poses", "object_poses"):
        if key not in info or key not in start_info:
            raise KeyError(f"info lacks {key!r}: TPO scores trajectories from privileged sim state; run it on a sim id")
    target = task_target(task, start_info["object_poses"], info["object_poses"])
    tcp = np.asarray(info["tcp_poses"])[:, :3]
    return float(np.min(np.linalg.norm(tcp - target, axis=1)))


def trajectory_score(success: bool, distance: float) -> float:
    """``success + exp(-distance / 5 cm)``, in [0, 2]."""
    return float(success) + math.exp(-distance / DISTANCE_SCALE_M)
