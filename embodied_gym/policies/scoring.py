"""How good a trajectory is, for TPO's ranking: the end-effector's distance to the task's target.

Each task's target is a point the gripper (the nearest TCP) should end at when the task is done,
computed from privileged ``info`` (``tcp_poses``, ``object_poses``; in the sim only) by the task's
:meth:`~embodied_gym.sim.tasks.base.Task.score_target`, documented in its module under
``embodied_gym/sim/tasks/`` (e.g. PickCup's: the cup's grasp point at the cup's *start* position,
raised by the lift height, where a successful lift ends).

The score of a trajectory is ``success + exp(-d / 5 cm)`` with ``d`` the final distance (m):
successful trajectories always rank above failed ones, and among equals the closer end ranks
higher. Scores lie in [0, 2].
"""

from __future__ import annotations

import math

import numpy as np

from embodied_gym.sim.tasks import TASKS, Task

DISTANCE_SCALE_M = 0.05


def _task(task: str | Task) -> Task:
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"no TPO target defined for task {task!r}; tasks: {', '.join(TASKS)}")
    return TASKS[task]()


def task_target(task: str | Task, start_poses: dict, poses: dict) -> np.ndarray:
    """The task's end-effector target (x, y, z) in m, from the objects' start and current poses.

    Raises:
        ValueError: ``task`` is not a registered task name.
    """
    return _task(task).score_target(start_poses, poses)


def target_distance(task: str | Task, start_info: dict, info: dict) -> float:
    """Distance (m) from the nearest TCP to the task target at ``info`` (the trajectory's end).

    Raises:
        KeyError: ``info`` or ``start_info`` lacks ``tcp_poses``/``object_poses`` (not a sim env).
        ValueError: ``task`` is not a registered task name.
    """
    for key in ("tcp_poses", "object_poses"):
        if key not in info or key not in start_info:
            raise KeyError(f"info lacks {key!r}: TPO scores trajectories from privileged sim state; run it on a sim id")
    target = task_target(task, start_info["object_poses"], info["object_poses"])
    tcp = np.asarray(info["tcp_poses"])[:, :3]
    return float(np.min(np.linalg.norm(tcp - target, axis=1)))


def trajectory_score(success: bool, distance: float) -> float:
    """``success + exp(-distance / 5 cm)``, in [0, 2]."""
    return float(success) + math.exp(-distance / DISTANCE_SCALE_M)
