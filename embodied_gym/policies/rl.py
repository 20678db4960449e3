"""A reach stage of our tasks for reinforcement learning from state (stable-baselines3 and the like).

Learning a whole pick-and-place from state alone is out of reach of a CPU budget, and the task
envs' state observation (joint positions and velocities) does not say where the object is. The
reach stage is the first stage of every task's dense reward: the observation gains the
(privileged, sim-only) reach point and the reward is minus the gripper's distance to it.

:func:`save_sb3` saves any SB3 model with the env settings it was trained with (``<name>.env.json``),
which ``embodied-gym eval`` reads.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np


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
        self._task = env.unwrapped.task
        spaces = dict(env.observation_space.spaces)
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


def make_reach_env(task: str = "PickCup", max_episode_steps: int = 40, **kwargs) -> gym.Env:
    """``EmbodieDreamer-<task>-v0`` with state observations and ``ee_delta`` control, reach stage."""
    import embodied_gym

    kwargs = {"obs_type": "state", "control_mode": "ee_delta", **kwargs}
    return ReachStageWrapper(gym.make(embodied_gym.env_id(task), max_episode_steps=max_episode_steps, **kwargs))


def env_settings(env) -> dict:
    """The embodied-gym settings of ``env`` (a gymnasium env or an SB3 ``VecEnv`` of them): ``env_id``,
    ``obs_type``, ``cameras``, ``image_size``, ``control_mode`` (what :func:`save_sb3` records)."""

    def attr(name):
        if hasattr(env, "get_attr"):  # an SB3 VecEnv (also across SubprocVecEnv workers)
            try:
                return env.get_attr(name, [0])[0]
            except (AttributeError, EOFError, OSError):  # no such attribute, or a closed SubprocVecEnv
                return None
        try:
            return env.get_wrapper_attr(name)
        except AttributeError:
            return getattr(env.unwrapped, name, None)

    spec = attr("spec")
    out = {"env_id": getattr(spec, "id", None)}
    for name in ("obs_type", "cameras", "image_size", "control_mode"):
        value = attr(name)
        out[name] = list(value) if isinstance(value, tuple) else value
    if out.get("obs_type") == "state":  # a state env renders no camera into its observation
        out["cameras"] = []
    return out


def save_sb3(model, path, env=None, **settings) -> Path:
    """Save a stable-baselines3 model to ``path`` (``.zip`` added if missing) with its env settings in
    ``<name>.env.json`` beside it, so ``embodied-gym eval --policy <name>.zip`` makes the env it was
    trained in (obs type, cameras, image size, control mode).

    The settings come from ``env`` (default: the model's env; a gymnasium env or an SB3 VecEnv of
    embodied-gym envs, unwrapped through wrappers); ``settings`` adds or overrides keys (e.g.
    ``task="PickCup"``, ``wrapper="ReachStageWrapper"``). Both files are written atomically (temporary
    file, then rename). Returns the zip's path."""
    from embodied_gym.atomic import atomic_path, write_json
    from embodied_gym.policies.loading import SB3_SIDECAR_SUFFIX

    path = Path(path)
    if path.suffix != ".zip":
        path = path.with_name(path.name + ".zip")
    env = env if env is not None else model.get_env()
    meta = {"format": "embodied_gym.sb3_env", "version": 1, "algo": type(model).__name__}
    if env is not None:
        meta.update(env_settings(env))
    meta.update(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        model.save(str(tmp))
    write_json(path.with_suffix(SB3_SIDECAR_SUFFIX), meta)
    return path
