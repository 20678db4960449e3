"""The tasks of the paper's experiment (arXiv 2507.05198), one module each, and their registry.

:data:`TASKS` (name -> :class:`Task` subclass) is the one registry: ``make_task``, the env
classes (``embodied_gym.envs.aloha_env.TASK_ENVS``), the registered env ids
``EmbodieDreamer-<Task>-v0`` / ``-Real-v0`` and the CLI's task choices all follow from it. To add a
task, write ``embodied_gym/sim/tasks/<task>.py`` with a :class:`Task` subclass (every hook of
:class:`~embodied_gym.sim.tasks.base.Task`) and add it to :data:`TASKS` below;
``tests/test_tasks.py`` then checks it like the others. Shared pieces: ``base.py`` (the hooks,
contacts, poses, reward helpers), ``objects.py`` (object builders, the cup), ``planning.py`` (the
experts' waypoints).

The registered tasks (each module's ``summary`` and ``success_doc``):
"""

from __future__ import annotations

import inspect

from embodied_gym.sim.tasks.base import (
    Contacts,
    ObjectRange,
    Poses,
    Task,
    TaskStatus,
    body_frame,
    body_poses,
    layout_from_poses,
    quat_matrix,
    quat_yaw,
    reach_term,
    yaw_quat,
)
from embodied_gym.sim.tasks.cup_on_mat import MAT_HALF, CupOnMat
from embodied_gym.sim.tasks.objects import CUP_HEIGHT, CUP_RADIUS
from embodied_gym.sim.tasks.pen_in_cup import PEN_HALF_LENGTH, PEN_RADIUS, PENCUP_HEIGHT, PENCUP_INNER, PenInCup
from embodied_gym.sim.tasks.pick_cup import PickCup
from embodied_gym.sim.tasks.remote_in_box import BOX_HEIGHT, BOX_INNER_HALF, REMOTE_HALF, RemoteInBox

_REQUIRED_ATTRIBUTES = ("summary", "object_docs", "success_doc", "reward_doc", "reward_terms")


def _registry(*classes: type[Task]) -> dict[str, type[Task]]:
    """``{name: class}``, each class checked now so that an incomplete task fails at import."""
    out: dict[str, type[Task]] = {}
    for cls in classes:
        where = f"{cls.__module__}.{cls.__qualname__}"
        if inspect.isabstract(cls):
            raise TypeError(
                f"{where} does not implement {sorted(cls.__abstractmethods__)}; "
                f"see embodied_gym.sim.tasks.base.Task for each hook"
            )
        task = cls()
        missing = [a for a in _REQUIRED_ATTRIBUTES if not getattr(cls, a, None)]
        if missing:
            raise TypeError(f"{where} lacks the class attribute(s) {missing}; see embodied_gym.sim.tasks.base.Task")
        if not task.name or task.name in out:
            raise ValueError(f"{where}: task name {task.name!r} is empty or already registered; give it a unique name")
        if set(task.object_docs) != set(task.ranges):
            raise ValueError(
                f"{where}: object_docs names {sorted(task.object_docs)} differ from the ranges' "
                f"objects {sorted(task.ranges)}; document every object"
            )
        for attribute in ("grasped_object", "place_target"):
            named = getattr(cls, attribute)
            if named is not None and named not in task.ranges:
                raise ValueError(
                    f"{where}: {attribute} {named!r} is not one of its objects {sorted(task.ranges)}; "
                    f"name an object of ranges, or None"
                )
        if cls.place_target is not None and cls.grasped_object is None:
            raise ValueError(f"{where}: place_target {cls.place_target!r} needs a grasped_object (what is placed)")
        if task.reward_terms[-1:] != ("success",):
            raise ValueError(f"{where}: reward_terms {task.reward_terms} must end with 'success'")
        out[task.name] = cls
    return out


TASKS: dict[str, type[Task]] = _registry(PickCup, PenInCup, RemoteInBox, CupOnMat)

if __doc__ is not None:  # None under python -OO
    __doc__ += "".join(
        f"\n- ``{n}`` ({c.__module__}): {c.summary}. Success: {c.success_doc}\n" for n, c in TASKS.items()
    )


def make_task(name: str) -> Task:
    """A fresh instance of the registered task ``name``; ValueError naming the valid ones otherwise."""
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; valid tasks: {sorted(TASKS)}") from None


__all__ = [
    "BOX_HEIGHT",
    "BOX_INNER_HALF",
    "CUP_HEIGHT",
    # object dimensions, importable from here as before the split into modules
    "CUP_RADIUS",
    "MAT_HALF",
    "PENCUP_HEIGHT",
    "PENCUP_INNER",
    "PEN_HALF_LENGTH",
    "PEN_RADIUS",
    "REMOTE_HALF",
    "TASKS",
    "Contacts",
    "CupOnMat",
    "ObjectRange",
    "PenInCup",
    "PickCup",
    "Poses",
    "RemoteInBox",
    "Task",
    "TaskStatus",
    "body_frame",
    "body_poses",
    "layout_from_poses",
    "make_task",
    "quat_matrix",
    "quat_yaw",
    "reach_term",
    "yaw_quat",
]
