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

from embodied_gym.wrappers.reach import ReachStageWrapper


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
    from embodied_gym.policies.safe_loading import SB3_SIDECAR_SUFFIX

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
