"""``ReachStageWrapper``: the reach stage of a task env, for reinforcement learning from state
(:mod:`embodied_gym.policies.rl` makes and trains it)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from embodied_gym.envs.base import aloha_env


class ReachStageWrapper(gym.Wrapper):
    """The reach stage of a task env made with ``obs_type="state"``.

    Observation space: the env's ``Dict`` plus ``reach_target`` (3, float32), the world position
    of the point the task's reach term measures (the task's ``reach_point``, e.g. 3 cm below the
    paper cup's rim; from privileged ``info["object_poses"]``), and ``reach_vector`` (6, float32),
    that point minus each arm's TCP position (the TCPs follow from the joint positions by forward
    kinematics, so a real robot knows them too).
    Reward: ``-d`` per step, d (m) the distance from the nearest TCP to the reach point. The task's
    own reach term 1 - tanh(10 d) is almost flat at the start distance (~0.3 m: 0.007), which
    starves small CPU budgets of signal; -d is linear everywhere. ``info["reach_distance"]`` is d.
    Actions, termination and truncation are the env's (make the env with a short
    ``max_episode_steps``, e.g. 40).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._task = aloha_env(env).task
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise TypeError(f"ReachStageWrapper needs a Dict observation space (obs_type='state'), got {space}")
        spaces = dict(space.spaces)
        spaces["reach_target"] = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)
        spaces["reach_vector"] = gym.spaces.Box(-4.0, 4.0, (6,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)

    def _augment(self, obs, info):
        target = np.asarray(self._task.reach_point(info["object_poses"]), np.float64)
        tcp = np.asarray(info["tcp_poses"])[:, :3]
        info["reach_distance"] = float(np.min(np.linalg.norm(tcp - target, axis=1)))
        return dict(
            obs, reach_target=target.astype(np.float32), reach_vector=(target - tcp).astype(np.float32).ravel()
        ), info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._augment(obs, info)

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        if "physics_error" in info:
            zeros = {"reach_target": np.zeros(3, np.float32), "reach_vector": np.zeros(6, np.float32)}
            return dict(obs, **zeros), -1.0, terminated, truncated, info
        obs, info = self._augment(obs, info)
        return obs, -info["reach_distance"], terminated, truncated, info


__all__ = ["ReachStageWrapper"]
