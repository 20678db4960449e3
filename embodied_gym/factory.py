"""The one place envs are made from names: env ids and the options every command shares.

Every command, the agent loader (:func:`embodied_gym.policies.loading.make_env_for`), the demo and
the benchmarks go through :func:`make_env`, so "a -Real- id takes a robot config" and "VisAligner
wraps a sim env's camera" are each written once.
"""

from __future__ import annotations

import os
from typing import Any


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


__all__ = ["make_env"]
