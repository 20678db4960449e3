"""A scripted operator for the stand-in robot, behind LeRobot's ``Teleoperator`` interface.

A real robot's demonstrations come from a person teleoperating it (a leader arm, a gamepad, a
phone): the scripted experts read object poses that hardware does not give. To test the path a real
user takes (``lerobot-record`` with a teleoperator, then ``embodied-gym`` on that dataset) without a
person, this teleoperator plays the person: it looks at the stand-in's table, as an operator looks at
theirs, and moves the arms with the task's scripted expert.

It sees the table through a twin of the stand-in world: the same hidden config and the same
``episode_seed``, stepped with the same joint targets it hands LeRobot, so the twin and the robot
``lerobot-record`` drives stay in the same state (MuJoCo is deterministic). Only the operator reads
the twin; the dataset holds what the robot measured. LeRobot never resets a robot's scene between
episodes, so record one episode per ``lerobot-record`` call (``--dataset.num_episodes=1``, then
``--resume=true`` with the next ``episode_seed`` on both the robot and the operator); see
``docs/your_robot.md``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from lerobot.teleoperators import Teleoperator, TeleoperatorConfig

from embodied_gym.robots.stand_in import StandInRobot, StandInRobotConfig, scene_seed_of
from embodied_gym.sim import robot as layout


@TeleoperatorConfig.register_subclass("embodied_gym_scripted")
@dataclass
class ScriptedOperatorConfig(TeleoperatorConfig):
    """Configuration of :class:`ScriptedOperator`: the same ``task``, ``config_path`` and ``episode_seed`` as
    the stand-in robot it operates (``--robot.type=embodied_gym_stand_in``)."""

    task: str = "PickCup"
    config_path: str | None = None  # the stand-in's hidden settings (YAML/JSON); None: the shipped default
    episode_seed: int | None = None  # the robot's episode_seed; required: the operator must see that table

    def __post_init__(self):
        if self.episode_seed is None or isinstance(self.episode_seed, bool) or self.episode_seed < 0:
            raise ValueError(
                f"teleop embodied_gym_scripted: episode_seed must be the robot's episode_seed (a whole number "
                f">= 0), got {self.episode_seed!r}; pass the same --teleop.episode_seed=N --robot.episode_seed=N"
            )


class ScriptedOperator(Teleoperator):
    """LeRobot ``Teleoperator`` that moves the stand-in's arms as the task's scripted expert would (see
    the module docstring). Actions: ``<joint>.pos`` targets for the 14 ALOHA joints, one per
    :meth:`get_action` call (one 20 ms control step)."""

    config_class = ScriptedOperatorConfig
    name = "embodied_gym_scripted"

    def __init__(self, config: ScriptedOperatorConfig):
        super().__init__(config)
        self.config = config
        self._env: Any = None
        self._scene_seed: int | None = None
        self._steps = 0
        self._succeeded_at: int | None = None

    @property
    def action_features(self) -> dict:
        return {f"{j}.pos": float for j in layout.JOINT_NAMES}

    @property
    def feedback_features(self) -> dict:
        return {}

    @property
    def is_connected(self) -> bool:
        return self._env is not None

    @property
    def is_calibrated(self) -> bool:
        return True

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            return
        from embodied_gym.envs.experts import make_expert
        from embodied_gym.envs.real_env import DEFAULT_MAX_RELATIVE_TARGET, AlohaRealEnv

        c = self.config
        twin = StandInRobot(StandInRobotConfig(task=c.task, config_path=c.config_path, camera_names=()))
        env = AlohaRealEnv(
            task=c.task,
            robot=twin,
            obs_type="state",
            cameras=(),
            realtime=False,  # lerobot-record keeps the clock
            # moves no faster than embodied-gym's Real env lets targets change (a person's hand is smooth too), so
            # a robot that limits its targets that much (or not at all) gets them unchanged and stays in step
            max_relative_target=DEFAULT_MAX_RELATIVE_TARGET,
            terminate_on_success=False,
        )
        self._env = env
        self._expert = make_expert(env)
        self.start_episode(scene_seed_of(int(c.episode_seed or 0)))  # the table of the robot's episode_seed

    def start_episode(self, scene_seed: int) -> None:
        """Look at a new table: the one a stand-in's ``reset_scene(scene_seed)`` set (``info["scene_seed"]``
        of a ``-Real-`` env's reset), for recordings that reset the robot between episodes
        (``embodied-gym record --teleop.type=embodied_gym_scripted``)."""
        if self._env is None:
            raise ConnectionError(f"{self} is not connected; call connect() first")
        self._report()
        self._obs, self._info = self._env.reset(options={"scene_seed": int(scene_seed)})
        self._expert.reset()
        self._scene_seed = int(scene_seed)
        self._steps = 0
        self._succeeded_at = None

    def _report(self) -> None:
        if self._steps:
            done = f"succeeded at step {self._succeeded_at}" if self._succeeded_at else "did not succeed"
            print(
                f"[embodied_gym_scripted] scene {self._scene_seed}: the task {done} in the operator's view "
                f"({self._steps} steps)",
                file=sys.stderr,
            )

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_action(self) -> dict[str, float]:
        if self._env is None:
            raise ConnectionError(f"{self} is not connected; call connect() first")
        action = self._expert(self._obs, self._info)
        self._obs, _, _, _, self._info = self._env.step(action)
        self._steps += 1
        if self._info.get("is_success") and self._succeeded_at is None:
            self._succeeded_at = self._steps
        targets = self._env.commanded_targets  # what the twin was sent (rate-limited): the robot gets the same
        return {f"{j}.pos": float(x) for j, x in zip(layout.JOINT_NAMES, targets)}

    def send_feedback(self, feedback: dict[str, Any]) -> None:
        pass

    def disconnect(self) -> None:
        if self._env is None:
            return
        self._report()
        self._env.close()
        self._env = None


__all__ = ["ScriptedOperator", "ScriptedOperatorConfig"]
