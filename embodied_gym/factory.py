"""The one place envs are made from names: env ids and the options every command shares.

Every command, the agent loader (:func:`embodied_gym.policies.loading.make_env_for`), the demo and
the benchmarks go through :func:`make_env`, so "a -Real- id takes a robot config" and "VisAligner
wraps a sim env's camera" are each written once.
"""

from __future__ import annotations

import os
from typing import Any


def make_env(
    env_id: str,
    *,
    robot_config: str | os.PathLike | None = None,
    physics=None,
    visaligner: str | os.PathLike | None = None,
    visaligner_steps: int | None = None,
    realtime: bool = False,
    pose_estimator=None,
    pose_source: str = "estimate",
    pose_update: str = "every_frame",
    **kwargs: Any,
):
    """``gym.make(env_id, **kwargs)`` with the options every command shares.

    Args:
        env_id: a registered ``EmbodieDreamer-...`` id (sim or ``-Real-``).
        robot_config: stand-in robot config for ``-Real-`` ids.
        physics: physics for sim ids (a calibration result JSON, a dict, a ``PhysicsParams``).
        visaligner: a VisAligner model folder: the sim env's first camera is rendered through it.
        visaligner_steps: its denoising steps per generated frame (default: the model's).
        realtime: hold the 50 Hz control rate on ``-Real-`` ids (default: as fast as possible).
        pose_estimator: a pose estimator folder (or a loaded ``PoseEstimator``): the env is wrapped
            with :class:`~embodied_gym.perception.PoseEstimateWrapper`, which adds the estimate as
            ``obs["object_pose_estimate"]``. Its camera is added to ``cameras``, ``obs_type="state"``
            becomes ``"pixels_state"`` and ``image_size`` defaults to the estimator's frame size.
        pose_source: with ``pose_estimator``: ``"estimate"`` (the above) or ``"ground_truth"`` (sim
            ids only): :class:`~embodied_gym.perception.wrapper.GroundTruthPoseWrapper` puts the
            simulator's true poses in that entry, in the estimator's layout, for recording demos
            with exact labels; no camera is added.
        pose_update: with ``pose_estimator``: ``"every_frame"`` or ``"at_reset"`` (the reset frame's
            poses, held for the episode; :data:`~embodied_gym.perception.wrapper.POSE_UPDATES`).
        **kwargs: the env's own kwargs (``obs_type``, ``cameras``, ``image_size``, ...).

    Raises:
        ValueError: an unknown id, or an option that does not apply to it.
        FileNotFoundError: ``pose_estimator`` is not an estimator folder.
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
    if pose_source != "estimate":  # the perception package (torch) is imported only when it is used
        from embodied_gym.perception.wrapper import POSE_SOURCES

        if pose_source not in POSE_SOURCES:
            raise ValueError(f"pose_source must be one of {list(POSE_SOURCES)}, got {pose_source!r}")
    ground_truth = pose_source == "ground_truth"
    if ground_truth and pose_estimator is None:
        raise ValueError(
            "pose_source='ground_truth' needs the pose estimator the policy will run on "
            "(pose_estimator=DIR): it fixes the layout of the recorded poses"
        )
    if ground_truth and real:
        raise ValueError(
            f"pose_source='ground_truth' records the simulator's true object poses; {env_id} is a robot, "
            f"which has none to give a policy: record it with pose_source='estimate'"
        )
    if pose_estimator is not None:
        from embodied_gym.perception.modeling import PoseEstimator

        source = pose_estimator
        if not isinstance(pose_estimator, PoseEstimator):
            pose_estimator = PoseEstimator.from_pretrained(pose_estimator)  # raises naming the folder
        est = pose_estimator.config
        if not ground_truth:  # the estimator reads its camera's frame
            if kw.get("obs_type", "state") == "state":
                kw["obs_type"] = "pixels_state"
            cams = tuple(kw.get("cameras") or ())
            if est.camera not in cams:
                kw["cameras"] = cams + (est.camera,)
        kw.setdefault("image_size", tuple(est.frame_size))
    if visaligner and real:
        raise ValueError("--visaligner renders sim frames photoreal; it makes no sense on a -Real- id")
    env = gym.make(env_id, **kw)
    if visaligner:
        from embodied_gym.wrappers.visaligner import VisAlignerWrapper

        cams = tuple(kw.get("cameras", ()))
        env = VisAlignerWrapper(
            env, visaligner, camera=cams[0] if cams else "cam_high", num_inference_steps=visaligner_steps
        )
    if pose_estimator is not None:
        from embodied_gym.perception.wrapper import GroundTruthPoseWrapper, PoseEstimateWrapper, estimator_source

        env = (GroundTruthPoseWrapper if ground_truth else PoseEstimateWrapper)(env, pose_estimator, update=pose_update)
        if not isinstance(source, PoseEstimator):
            env.source = estimator_source(source)
    return env


__all__ = ["make_env"]
