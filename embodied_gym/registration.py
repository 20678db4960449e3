"""Gymnasium ids of the embodied-gym envs: built by :func:`env_id`, read back by :func:`parse_env_id`.

These two functions are the only code that knows the id's layout
(``EmbodieDreamer-<Task>[-Real]-v<N>``); everything else asks them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import gymnasium as gym

from embodied_gym.envs.aloha_env import TASK_ENVS
from embodied_gym.sim.tasks import make_task

PREFIX = "EmbodieDreamer"
_ID = re.compile(rf"^{PREFIX}-(?P<task>[A-Za-z0-9]+)(?P<real>-Real)?-v(?P<version>\d+)$")


@dataclass(frozen=True)
class EnvId:
    """The parts of an embodied-gym env id."""

    task: str  # e.g. "PickCup"
    real: bool  # True for the real-robot (or stand-in) env, ``-Real-``
    version: int = 0

    def __str__(self) -> str:
        return f"{PREFIX}-{self.task}{'-Real' if self.real else ''}-v{self.version}"


def env_id(task: str, real: bool = False) -> str:
    """``EmbodieDreamer-<task>-v0`` (``-Real-v0`` for the real-robot env)."""
    make_task(task)  # validates the name
    return str(EnvId(task, real))


def parse_env_id(value: str) -> EnvId:
    """Split an env id into task, sim-or-real and version.

    Args:
        value: an id as :func:`env_id` writes it, e.g. ``"EmbodieDreamer-PickCup-Real-v0"``.

    Returns:
        Its :class:`EnvId`.

    Raises:
        ValueError: ``value`` is not of the form ``EmbodieDreamer-<Task>[-Real]-v<N>`` or names an
            unknown task; the message lists the valid tasks.
    """
    m = _ID.match(value or "") if isinstance(value, str) else None
    if m is None:
        raise ValueError(
            f"{value!r} is not an embodied-gym env id; expected {PREFIX}-<Task>-v0 or "
            f"{PREFIX}-<Task>-Real-v0, e.g. {env_id('PickCup')!r}"
        )
    make_task(m["task"])  # unknown task -> ValueError listing the valid ones
    return EnvId(m["task"], m["real"] is not None, int(m["version"]))


def register_envs() -> None:
    for task, cls in TASK_ENVS.items():
        steps = make_task(task).max_episode_steps
        if env_id(task) not in gym.registry:
            gym.register(id=env_id(task), entry_point=f"{cls.__module__}:{cls.__name__}", max_episode_steps=steps)
        if env_id(task, real=True) not in gym.registry:
            gym.register(
                id=env_id(task, real=True),
                entry_point="embodied_gym.envs.real_env:AlohaRealEnv",
                max_episode_steps=steps,
                kwargs={"task": task},
            )
