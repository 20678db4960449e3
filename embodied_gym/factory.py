"""The one place envs and agents are made from names: env ids, policy specs, command-line options.

Every command, the demo and the benchmarks go through these, so "a -Real- id takes a robot
config", "VisAligner wraps a sim env's camera" and "the agent decides the env's kwargs" are each
written once.
"""

from __future__ import annotations

import os
from typing import Any, Callable


def make_env(env_id: str, *, robot_config: str | os.PathLike | None = None, physics=None,
             visaligner: str | os.PathLike | None = None, visaligner_steps: int | None = None,
             realtime: bool = False, **kwargs: Any):
    """``gym.make(env_id, **kwargs)`` with the options every command shares.

    Args:
        env_id: a registered ``EmbodieDreamer-...`` id (sim or ``-Real-``).
        robot_config: stand-in robot config for ``-Real-`` ids.
        physics: physics for sim ids (a calibration result JSON, a dict, a ``PhysicsParams``).
        visaligner: a VisAligner model folder: the sim env's first camera is rendered through it.
        visaligner_steps: its denoising steps per generated frame (default: the model's).
        realtime: hold the 50 Hz control rate on ``-Real-`` ids (default: as fast as possible).
        **kwargs: the env's own kwargs (``obs_type``, ``cameras``, ``image_size``, ...).

    Raises:
        ValueError: an unknown id, or an option that does not apply to it.
    """
    import gymnasium as gym

    import embodied_gym

    if env_id not in gym.registry:
        ids = sorted(k for k in gym.registry if k.startswith("EmbodieDreamer-"))
        raise ValueError(f"unknown env id {env_id!r}; valid: {ids}")
    real = embodied_gym.parse_env_id(env_id).real
    kw = dict(kwargs)
    if physics is not None:
        kw["physics"] = physics
    if real:
        kw["realtime"] = realtime
        if robot_config:
            kw["robot_config"] = str(robot_config)
    elif robot_config:
        raise ValueError(f"--robot-config only applies to -Real- env ids, not {env_id}")
    if not visaligner:
        return gym.make(env_id, **kw)
    if real:
        raise ValueError("--visaligner renders sim frames photoreal; it makes no sense on a -Real- id")
    from embodied_gym.wrappers.visaligner import VisAlignerWrapper

    cams = tuple(kw.get("cameras", ()))
    return VisAlignerWrapper(gym.make(env_id, **kw), visaligner, camera=cams[0] if cams else "cam_high",
                             num_inference_steps=visaligner_steps)


def make_agent(spec: str, env, *, trust_policy_file: bool = False) -> Callable:
    """``agent(obs, info) -> action`` for ``spec`` ("expert", an ACT folder, an SB3 ``.zip``) acting in
    ``env``; it resets itself at every episode start.

    Raises:
        ValueError: the policy needs a control mode or cameras ``env`` does not have (the message
            says which).
    """
    import embodied_gym

    if spec == "expert":
        return embodied_gym.make_expert(env)
    from embodied_gym.policies.loading import load_agent

    agent = load_agent(spec, trust_policy_file=trust_policy_file)
    need, have = agent.requirements, env.unwrapped
    if need.control_mode != have.control_mode or not set(need.cameras) <= set(have.cameras):
        raise ValueError(f"policy {spec!r} needs control_mode={need.control_mode!r} and cameras "
                         f"{list(need.cameras)}; the env has control_mode={have.control_mode!r} and cameras "
                         f"{list(have.cameras)} (record with --cameras {' '.join(need.cameras) or 'cam_high'})")
    agent.reset()
    return _ResettingAgent(agent)


class _ResettingAgent:
    """Calls the agent's ``reset()`` when a new episode starts (``info["step"] == 0``)."""

    def __init__(self, agent):
        self.agent = agent

    def __call__(self, obs, info):
        if info.get("step") == 0:
            self.agent.reset()
        return self.agent(obs, info)


__all__ = ["make_env", "make_agent"]
