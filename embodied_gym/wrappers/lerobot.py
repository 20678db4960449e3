"""``LeRobotObservationWrapper``: our observation in LeRobot's env convention, for LeRobot's own tools
(``lerobot-eval`` through :mod:`embodied_gym.policies.lerobot_env`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from embodied_gym.envs.base import aloha_env


class LeRobotObservationWrapper(gym.ObservationWrapper):
    """Regroups our flat observation into LeRobot's env convention (``pixels`` dict + ``agent_pos``).

    Observation space: ``Dict(pixels=Dict(<camera>: Box(0, 255, (H, W, 3), uint8)),
    agent_pos=Box(14, float32))``. Actions, rewards, termination and ``info`` pass through;
    ``task_description`` and ``task`` hold the task's language description.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError("LeRobotObservationWrapper needs obs_type='pixels_state' with at least one camera")
        self.cameras = tuple(k for k in space.spaces if k.startswith("cam_"))
        if "joint_pos" not in space.spaces or not self.cameras:
            raise ValueError("LeRobotObservationWrapper needs obs_type='pixels_state' with at least one camera")
        self.observation_space = gym.spaces.Dict(
            {
                "pixels": gym.spaces.Dict({c: space[c] for c in self.cameras}),
                "agent_pos": space["joint_pos"],
            }
        )
        self.task_description = aloha_env(env).task.description
        self.task = self.task_description

    def observation(self, obs):
        return {"pixels": {c: obs[c] for c in self.cameras}, "agent_pos": np.asarray(obs["joint_pos"], np.float32)}


__all__ = ["LeRobotObservationWrapper"]
