"""What the simulated and the real ALOHA envs share: the contract consumers may rely on.

:class:`AlohaEnv` is the base class of :class:`~embodied_gym.envs.aloha_env.AlohaTaskEnv` (sim)
and :class:`~embodied_gym.envs.real_env.AlohaRealEnv` (a LeRobot robot, the stand-in by
default). Code that takes "an embodied-gym env" (experts, recording, evaluation, TPO, wrappers)
uses only what is declared here, through ``env.unwrapped``; ``is_simulated`` tells the two apart
where it matters (a sim env additionally offers its :class:`~embodied_gym.sim.core.SimCore`
as ``env.unwrapped.sim``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import gymnasium as gym
import numpy as np

from embodied_gym.envs import spaces as sp
from embodied_gym.envs.control import JointTargetController
from embodied_gym.sim.kinematics import ArmKinematics
from embodied_gym.sim.scene import CONTROL_DT
from embodied_gym.sim.tasks import Task


class AlohaEnv(gym.Env):
    """Base class of the ALOHA task envs, sim and real.

    Attributes every env has: ``task`` (:class:`~embodied_gym.sim.tasks.Task`), ``obs_type``,
    ``cameras``, ``image_size``, ``control_mode``, ``render_mode``, ``terminate_on_success``,
    ``controller`` (:class:`~embodied_gym.envs.control.JointTargetController`, which maps actions
    to joint targets) and ``kinematics`` (the arm model its IK uses).
    """

    metadata = {"render_modes": list(sp.RENDER_MODES), "render_fps": round(1 / CONTROL_DT)}
    #: True for envs backed by a simulator core (``env.unwrapped.sim``), False for robots.
    is_simulated: ClassVar[bool] = False
    observation_space: gym.spaces.Dict
    action_space: gym.spaces.Box

    def _init_contract(
        self, task: Task, opts: sp.EnvOptions, terminate_on_success: bool, kinematics: ArmKinematics
    ) -> None:
        self.task = task
        self.obs_type, self.cameras, self.image_size = opts.obs_type, opts.cameras, opts.image_size
        self.control_mode, self.render_mode = opts.control_mode, opts.render_mode
        self.observation_space = opts.observation_space()
        self.terminate_on_success = terminate_on_success
        self.kinematics = kinematics
        self.controller = JointTargetController(opts.control_mode, kinematics)
        self.action_space = self.controller.action_space

    @property
    def joint_targets(self) -> np.ndarray:
        """The 14 joint targets the controller holds now (what the last action asked for)."""
        return self.controller.targets.copy()

    @property
    def ee_targets(self) -> tuple[np.ndarray, np.ndarray]:
        """(2x3 positions, 2x3x3 rotations) of the ``ee_delta`` TCP targets."""
        return self.controller.ee_pos.copy(), self.controller.ee_rot.copy()

    @property
    @abstractmethod
    def commanded_targets(self) -> np.ndarray:
        """The 14 joint targets last sent to the actuators (what a recording stores as action)."""

    @abstractmethod
    def joint_positions(self) -> np.ndarray:
        """The 14 joint positions last observed."""


def aloha_env(env: gym.Env) -> AlohaEnv:
    """``env.unwrapped`` as the :class:`AlohaEnv` it must be; TypeError naming what it is otherwise."""
    inner = env.unwrapped
    if not isinstance(inner, AlohaEnv):
        raise TypeError(f"expected an embodied-gym ALOHA env (AlohaEnv), got {type(inner).__name__}")
    return inner


__all__ = ["AlohaEnv", "aloha_env"]
