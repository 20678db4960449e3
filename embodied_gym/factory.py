"""The one place envs are made from names: env ids and the options every command shares.

Every command, the demo and the benchmarks go through :func:`make_env`, so "a -Real- id takes a
robot config" and "VisAligner wraps a sim env's camera" are each written once. :func:`make_env_for`
makes the env an agent (:mod:`embodied_gym.policies.agents`) needs, from its ``requirements``.

The wrappers that need torch (VisAligner, the pose estimator) are imported when they are used, so
importing this module stays light.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

from embodied_gym.data import features as F
from embodied_gym.registration import parse_env_id


def _gym_kwargs(
    env_id: str, real: bool, kwargs: dict[str, Any], physics, robot_config, realtime: bool
) -> dict[str, Any]:
    """``gym.make``'s kwargs: the env's own, plus ``physics`` and (``-Real-`` ids only) the robot's."""
    kw = dict(kwargs)
    if physics is not None:
        kw["physics"] = physics
    if real:
        kw["realtime"] = realtime
        if robot_config is not None and not isinstance(robot_config, (str, os.PathLike)):
            kw["robot"] = robot_config  # a LeRobot RobotConfig (--robot.type=...)
        elif robot_config:
            kw["robot_config"] = str(robot_config)
    elif robot_config:
        raise ValueError(f"--robot-config / --robot.type only apply to -Real- env ids, not {env_id}")
    elif kw.get("joint_map") or kw.get("camera_map"):
        raise ValueError(f"--joint-map / --camera-map map a robot's names; {env_id} is a sim id")
    else:
        kw.pop("joint_map", None)
        kw.pop("camera_map", None)
    return kw


def _ground_truth_poses(env_id: str, real: bool, pose_source: str, pose_estimator) -> bool:
    """Whether the pose entry holds the simulator's true poses (``pose_source="ground_truth"``),
    checked to apply."""
    if pose_source != "estimate":  # the perception package (torch) is imported only when it is used
        from embodied_gym.perception.pose_entry import POSE_SOURCES

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
    return ground_truth


def _load_pose_estimator(pose_estimator, kw: dict[str, Any], ground_truth: bool):
    """The ``PoseEstimator`` (loaded from its folder unless given loaded); ``kw`` gets what it needs:
    its camera and a pixel observation (unless ``ground_truth``: no camera read), its frame size."""
    from embodied_gym.perception.modeling import PoseEstimator

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
    return pose_estimator


def _with_visaligner(env: gym.Env, visaligner, kw: dict[str, Any], visaligner_steps: int | None) -> gym.Env:
    """``env`` with its first camera (default ``cam_high``) rendered through the VisAligner model."""
    from embodied_gym.wrappers.visaligner import VisAlignerWrapper

    cams = tuple(kw.get("cameras", ()))
    return VisAlignerWrapper(
        env, visaligner, camera=cams[0] if cams else "cam_high", num_inference_steps=visaligner_steps
    )


def _with_pose_entry(env: gym.Env, pose_estimator, source, ground_truth: bool, pose_update: str) -> gym.Env:
    """``env`` with the pose entry (estimated, or the true poses in the estimator's layout); ``source``
    is what ``make_env`` was given: a folder is recorded as the env's ``source``."""
    from embodied_gym.perception.modeling import PoseEstimator
    from embodied_gym.perception.pose_entry import estimator_source
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper, PoseEstimateWrapper

    env = (GroundTruthPoseWrapper if ground_truth else PoseEstimateWrapper)(env, pose_estimator, update=pose_update)
    if not isinstance(source, PoseEstimator):
        env.source = estimator_source(source)
    return env


def make_env(
    env_id: str,
    *,
    robot_config: str | os.PathLike | Any = None,
    physics=None,
    physics_spread: float = 0.0,
    contact_spread: float = 0.0,
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
        robot_config: for ``-Real-`` ids: a stand-in robot config file, or any LeRobot ``RobotConfig``
            (the robot is made from it with LeRobot's ``make_robot_from_config``).
        physics: physics for sim ids (a calibration result JSON, a dict, a ``PhysicsParams``).
        physics_spread: sim ids: redraw the arm physics around ``physics`` at every reset, each
            parameter scaled by ``exp(U(-spread, spread))``
            (:class:`~embodied_gym.wrappers.physics.PhysicsRandomizationWrapper`); 0 keeps it fixed.
        contact_spread: sim ids: the same for the grip (finger gain, pad and object friction, object
            mass; :data:`~embodied_gym.wrappers.physics.CONTACT_FIELDS`), one factor each.
        visaligner: a VisAligner model folder: the sim env's first camera is rendered through it.
        visaligner_steps: its denoising steps per generated frame (default: the model's).
        realtime: hold the 50 Hz control rate on ``-Real-`` ids (default: as fast as possible).
        pose_estimator: a pose estimator folder (or a loaded ``PoseEstimator``): the env is wrapped
            with :class:`~embodied_gym.wrappers.pose.PoseEstimateWrapper`, which adds the estimate as
            ``obs["object_pose_estimate"]``. Its camera is added to ``cameras``, ``obs_type="state"``
            becomes ``"pixels_state"`` and ``image_size`` defaults to the estimator's frame size.
        pose_source: with ``pose_estimator``: ``"estimate"`` (the above) or ``"ground_truth"`` (sim
            ids only): :class:`~embodied_gym.wrappers.pose.GroundTruthPoseWrapper` puts the
            simulator's true poses in that entry, in the estimator's layout, for recording demos
            with exact labels; no camera is added.
        pose_update: with ``pose_estimator``: ``"every_frame"`` or ``"at_reset"`` (the reset frame's
            poses, held for the episode; :data:`~embodied_gym.perception.pose_entry.POSE_UPDATES`).
        **kwargs: the env's own kwargs (``obs_type``, ``cameras``, ``image_size``, ...).

    Raises:
        ValueError: an unknown id, or an option that does not apply to it.
        FileNotFoundError: ``pose_estimator`` is not an estimator folder.
    """
    if env_id not in gym.registry:
        ids = sorted(k for k in gym.registry if k.startswith("EmbodieDreamer-"))
        raise ValueError(f"unknown env id {env_id!r}; valid: {ids}")
    real = parse_env_id(env_id).real
    kw = _gym_kwargs(env_id, real, kwargs, physics, robot_config, realtime)
    ground_truth = _ground_truth_poses(env_id, real, pose_source, pose_estimator)
    source = pose_estimator  # a folder, or an estimator given loaded
    if pose_estimator is not None:
        pose_estimator = _load_pose_estimator(pose_estimator, kw, ground_truth)
    if visaligner and real:
        raise ValueError("--visaligner renders sim frames photoreal; it makes no sense on a -Real- id")
    if (physics_spread or contact_spread) and real:
        raise ValueError(
            "physics_spread and contact_spread randomise sim physics; a -Real- id's physics is the robot's own"
        )
    env = gym.make(env_id, **kw)
    if physics_spread or contact_spread:
        from embodied_gym.wrappers.physics import PhysicsRandomizationWrapper

        env = PhysicsRandomizationWrapper(env, physics_spread, contact_spread=contact_spread)
    if visaligner:
        env = _with_visaligner(env, visaligner, kw, visaligner_steps)
    if pose_estimator is not None:
        env = _with_pose_entry(env, pose_estimator, source, ground_truth, pose_update)
    return env


def make_env_for(
    agent,
    env_id: str,
    *,
    physics=None,
    visaligner: str | None = None,
    robot_config: str | None = None,
    render_mode: str | None = None,
    extra_cameras: tuple[str, ...] = (),
    visaligner_steps: int | None = None,
    pose_estimator: str | os.PathLike | None = None,
    pose_update: str | None = None,
    **kwargs,
):
    """The env ``env_id`` made with what ``agent`` (:mod:`embodied_gym.policies.agents`) needs (sim,
    Real or VisAligner-wrapped sim; ``visaligner_steps`` denoising steps per generated frame, default
    the model's), through :func:`make_env`; an agent with ``bind(env)`` (the expert) is bound to it.
    A policy that reads estimated object poses gets the env
    wrapped with its pose estimator (``agent.requirements.pose_estimator``) and the camera and
    image size the estimator reads; ``pose_estimator`` replaces that folder, or wraps the env of an
    agent that reads no estimate (e.g. the expert, to record the estimate). ``pose_update``
    (``"every_frame"`` / ``"at_reset"``) overrides when the estimate is refreshed; by default the
    policy's data decides (its recording's ``pose_estimator.update``, else ``every_frame``).

    Raises:
        FileNotFoundError: the policy's pose estimator folder is missing.
        ValueError: the policy names no estimator, or the folder holds other weights or outputs than
            the policy was trained with.
    """
    agent = getattr(agent, "base_agent", agent)  # a residual policy acts on its base policy's observation
    kw = agent.requirements.env_kwargs()
    if extra_cameras:
        cams = tuple(dict.fromkeys(tuple(kw.get("cameras", ())) + tuple(extra_cameras)))
        kw["cameras"] = cams
        if kw["obs_type"] == "state":
            kw["obs_type"] = "pixels_state"
    kw.update(kwargs)
    if render_mode:
        kw["render_mode"] = render_mode
    if pose_estimator is not None and getattr(agent, "env_state", False):
        agent.requirements.pose_estimator, agent.estimator_overridden = str(pose_estimator), True
        pose_estimator = None
    estimator = pose_estimator if pose_estimator is not None else _estimator_for(agent)
    if estimator is not None:
        recorded = (getattr(agent, "estimator_source", None) or {}).get("update", "every_frame")
        kw["pose_update"] = pose_update or recorded
    env = make_env(
        env_id,
        robot_config=robot_config,
        physics=physics,
        visaligner=visaligner,
        visaligner_steps=visaligner_steps,
        pose_estimator=estimator,
        **kw,
    )
    if getattr(agent, "env_state", False):
        _check_estimate_fits(agent, env)
    bind = getattr(agent, "bind", None)
    if bind is not None:  # an agent that reads the env itself (the expert)
        bind(env)
    return env


def _estimator_for(agent) -> str | None:
    """The pose estimator folder ``agent`` needs (None if it reads no estimate), checked to exist and,
    unless overridden, to hold the weights the policy's data was recorded with."""
    if not getattr(agent, "env_state", False):
        return None
    folder = agent.requirements.pose_estimator
    where = agent.meta_path
    if not folder:
        raise ValueError(
            f"policy {agent.path} reads estimated object poses ({F.ENV_STATE}) but {where} names no pose "
            f"estimator (its dataset was not recorded with --pose-estimator); pass the estimator folder "
            f"with `eval --pose-estimator DIR` (load_agent(pose_estimator=...))"
        )
    from embodied_gym.perception.pose_entry import estimator_source

    try:
        have = estimator_source(folder)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"the pose estimator {folder} that policy {agent.path} reads ({where}: "
            f"pose_estimator.path) is not there; restore it or pass another with "
            f"`eval --pose-estimator DIR`"
        ) from None
    want = (agent.estimator_source or {}).get("sha256")
    if want and have["sha256"] != want and not getattr(agent, "estimator_overridden", False):
        raise ValueError(
            f"the pose estimator {folder} now holds other weights (sha256 {have['sha256'][:12]}...) than "
            f"the ones policy {agent.path} was trained with ({want[:12]}..., {where}); pass "
            f"`eval --pose-estimator {folder}` to use them anyway, or restore the original"
        )
    return folder


def _check_estimate_fits(agent, env) -> None:
    from embodied_gym.perception.pose_entry import KEY

    names = agent.env_state_names
    dim = agent.policy.config.input_features[F.ENV_STATE].shape[0]
    got = env.observation_space[KEY]
    try:
        est = env.get_wrapper_attr("estimator").config
    except AttributeError:  # GroundTruthPoseWrapper: the true poses in the estimator's layout
        est = env.get_wrapper_attr("config")
    if got.shape != (dim,) or (names and list(est.output_names) != names):
        env.close()
        raise ValueError(
            f"the pose estimator gives {list(est.output_names)} but policy {agent.path} was trained on "
            f"{names or dim} ({F.ENV_STATE}); use an estimator of the same task and outputs"
        )


__all__ = ["make_env", "make_env_for"]
