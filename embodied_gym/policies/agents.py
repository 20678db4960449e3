"""Load any policy we can run as an agent ``action = agent(obs, info)``.

- ``"expert"``: the task's scripted expert (:func:`embodied_gym.make_expert`).
- an ACT folder (``embodied-gym train act --out``, a checkpoint, or a ``pretrained_model`` folder):
  :class:`ACTAgent`, LeRobot's ``ACTPolicy`` with its processors.
- a ``.zip`` saved by stable-baselines3 (PPO, SAC, A2C, TD3, DDPG): :class:`SB3Agent`.

Loading never runs code from the file: the trust model is :mod:`embodied_gym.policies.safe_loading`
(an SB3 zip is read without unpickling, an ACT folder's config and processor files are checked against
allow-lists before LeRobot reads them); ``trust_policy_file=True`` (``eval --trust-policy-file``)
hands the file to the library's own loader instead.

Every agent has ``reset()`` (call it at each episode start) and ``requirements``: the env kwargs it
needs (``obs_type``, ``cameras``, ``image_size``, ``control_mode``), which
:func:`embodied_gym.factory.make_env_for` applies, so the same agent runs on a sim id, a
VisAligner-wrapped sim id and a Real id. They are the settings the policy was trained with (an ACT
folder's ``embodied_gym_policy.json``, an SB3 zip's ``<name>.env.json`` sidecar or its stored
spaces); ``load_agent``'s ``cameras``, ``image_size`` and ``control_mode`` override them. An agent
that reads the env itself (the expert) has ``bind(env)``, which ``make_env_for`` calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from embodied_gym.data import features as F
from embodied_gym.envs.experts import ScriptedExpert, make_expert
from embodied_gym.envs.spaces import normalise_cameras, normalise_image_size
from embodied_gym.perception.pose_entry import KEY
from embodied_gym.policies.act import POLICY_META, resize_images, resolve_pretrained_dir
from embodied_gym.policies.safe_loading import (
    SB3_SIDECAR_SUFFIX,
    check_act_folder,
    load_sb3_model,
    read_sb3_sidecar,
)


@dataclass
class EnvRequirements:
    """What an agent needs from the env it acts in."""

    obs_type: str = "state"
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] | None = None  # None: the env's default
    control_mode: str = "joint_pos"
    #: pose estimator folder whose estimate the policy reads (``obs["object_pose_estimate"]``);
    #: not a gym kwarg: :func:`~embodied_gym.factory.make_env_for` wraps the env with it
    pose_estimator: str | None = None
    #: the camera rate the policy's training data was recorded at (None: a frame per control step)
    camera_fps: float | None = None

    def env_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"obs_type": self.obs_type, "control_mode": self.control_mode}
        if self.camera_fps is not None and self.obs_type != "state":
            kw["camera_fps"] = self.camera_fps
        if self.cameras:
            kw["cameras"] = tuple(self.cameras)
        if self.image_size:
            kw["image_size"] = tuple(self.image_size)
        return kw


class ExpertAgent:
    """The task's scripted expert; it reads privileged ``info`` (object poses)."""

    name = "expert"

    def __init__(self, control_mode: str = "joint_pos"):
        self.requirements = EnvRequirements(obs_type="state", control_mode=control_mode)
        self._expert: ScriptedExpert | None = None
        self._env: gym.Env | None = None

    def bind(self, env: gym.Env) -> None:
        """Act in ``env`` (:func:`~embodied_gym.factory.make_env_for` calls it on every agent that has it)."""
        self._env = env
        self._expert = make_expert(env)

    def reset(self) -> None:
        if self._env is not None:
            self.bind(self._env)

    def __call__(self, obs, info) -> np.ndarray:
        if self._expert is None:
            raise RuntimeError("ExpertAgent.bind(env) must be called before acting (make_env_for does it)")
        return self._expert(obs, info)


class ACTAgent:
    """LeRobot ``ACTPolicy`` as an agent: env observation -> 14 absolute joint targets (``joint_pos``).

    Images are resized to the size the policy was trained at with the training code's own resize.
    ``temporal_ensemble_coeff`` switches on ACT's temporal ensembling (a new chunk every step,
    exponentially weighted); otherwise the policy runs ``n_action_steps`` actions of each chunk.
    A policy with the ``observation.environment_state`` input reads ``obs["object_pose_estimate"]``
    (a :class:`~embodied_gym.wrappers.pose.PoseEstimateWrapper`'s estimate from the camera, never the
    simulator's state); its requirements name the estimator its training data was recorded with,
    from the policy's ``embodied_gym_policy.json``.
    """

    name = "act"
    #: True once ``--pose-estimator`` replaced the estimator the training data was recorded with.
    estimator_overridden = False

    def __init__(
        self,
        path: str | os.PathLike,
        device: str = "cpu",
        temporal_ensemble_coeff: float | None = None,
        *,
        trust_policy_file: bool = False,
    ):
        self.path = resolve_pretrained_dir(path)
        check_act_folder(self.path, trust_policy_file=trust_policy_file)  # before LeRobot reads any of it

        from lerobot.policies import make_pre_post_processors
        from lerobot.policies.act.modeling_act import ACTPolicy, ACTTemporalEnsembler

        self.meta_path = meta_path = self.path / POLICY_META
        if meta_path.exists():
            self.meta = json.loads(meta_path.read_text())
            if not isinstance(self.meta, dict):
                raise ValueError(f"{meta_path}: expected a JSON object")
        else:  # a LeRobot-trained ACT (lerobot-train): infer what it needs from its config
            self.meta = None
        self.policy = ACTPolicy.from_pretrained(str(self.path))
        self.policy.config.device = device
        self.policy.to(device).eval()
        if temporal_ensemble_coeff is not None:
            self.policy.config.temporal_ensemble_coeff = temporal_ensemble_coeff
            self.policy.config.n_action_steps = 1
            self.policy.temporal_ensembler = ACTTemporalEnsembler(
                temporal_ensemble_coeff, self.policy.config.chunk_size
            )
        self.pre, self.post = make_pre_post_processors(
            self.policy.config,
            pretrained_path=str(self.path),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
        image_keys = list(self.policy.config.image_features)
        self.cameras = tuple(F.camera_of(k) for k in image_keys)
        self.image_size = tuple(self.policy.config.image_features[image_keys[0]].shape[-2:]) if image_keys else None
        # Render at the size the training frames were recorded at, so resizing matches training.
        recorded = (self.meta or {}).get("recorded_image_size")
        self.env_state = F.ENV_STATE in self.policy.config.input_features
        self.env_state_names = list((self.meta or {}).get("env_state") or [])
        self.estimator_source = (self.meta or {}).get("pose_estimator") if self.env_state else None
        source = self.estimator_source or {}
        estimator = source.get("path")
        if self.env_state and not recorded and source.get("image_size"):
            recorded = source["image_size"]  # the size the estimator saw at recording
        self.requirements = EnvRequirements(
            obs_type="pixels_state" if (self.cameras or self.env_state) else "state",
            cameras=self.cameras,
            control_mode="joint_pos",
            image_size=tuple(recorded) if recorded else self.image_size,
            pose_estimator=estimator,
            camera_fps=(self.meta or {}).get("camera_fps"),
        )
        self.policy.reset()

    def reset(self) -> None:
        self.policy.reset()

    def action_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """The demonstrations' action mean and std (the normaliser's), in joint units: (14,), (14,)."""
        for step in self.post.steps:
            stats = getattr(step, "stats", None)
            if stats and F.ACTION in stats and {"mean", "std"} <= set(stats[F.ACTION]):
                mean, std = (np.asarray(torch.as_tensor(stats[F.ACTION][k]).cpu(), np.float32) for k in ("mean", "std"))
                return mean, std
        raise RuntimeError(
            f"{self.path}: the policy's postprocessor has no action mean/std (a MEAN_STD-normalised ACT)"
        )

    def observation_batch(self, obs: dict) -> dict[str, torch.Tensor]:
        """Env observation -> LeRobot batch (before the preprocessor): state and resized float images."""
        batch = {F.STATE: torch.as_tensor(np.asarray(obs["joint_pos"], np.float32))[None]}
        if self.env_state:
            if KEY not in obs:
                raise KeyError(
                    f"the policy {self.path} reads {KEY!r} (estimated object poses) but the observation has "
                    f"{sorted(obs)}; wrap the env with PoseEstimateWrapper (make_env_for does, from the "
                    f"policy's pose estimator; `eval --pose-estimator DIR`)"
                )
            batch[F.ENV_STATE] = torch.as_tensor(np.asarray(obs[KEY], np.float32))[None]
        for cam in self.cameras:
            if cam not in obs:
                raise KeyError(
                    f"the policy needs camera {cam!r} but the observation has {sorted(obs)}; make the env "
                    f"with cameras={self.cameras} and obs_type='pixels_state'"
                )
            img = torch.as_tensor(np.ascontiguousarray(obs[cam])).permute(2, 0, 1)[None]
            batch[F.image_key(cam)] = resize_images(img, self.image_size).float().div_(255.0)
        return batch

    @torch.no_grad()
    def __call__(self, obs, info=None) -> np.ndarray:
        batch = self.pre(self.observation_batch(obs))
        action = self.post(self.policy.select_action(batch))
        return action.squeeze(0).cpu().numpy().astype(np.float32)


class SB3Agent:
    """A stable-baselines3 model (deterministic actions) as an agent, loaded without unpickling
    (:func:`load_sb3_model`; ``trust_policy_file=True`` for SB3's own loader).

    Requirements, in order of precedence: the ``control_mode`` argument; the sidecar
    ``<name>.env.json`` beside the zip (``obs_type``, ``cameras``, ``image_size``, ``control_mode``,
    ``env_id``, ``algo``; written by :func:`embodied_gym.policies.rl.save_sb3`); the model's stored
    spaces (cameras and image size from its image entries, ``obs_type`` from its keys, ``joint_pos``
    unless the action space is [-1, 1]^14, which means ``ee_delta`` or ``joint_delta``: the sidecar or
    ``control_mode`` tells which, ``ee_delta`` otherwise). Camera images whose size differs from the
    model's (an ``image_size`` override) are resized to it with the ACT code's antialiased resize."""

    name = "sb3"
    _ALGOS = ("PPO", "SAC", "A2C", "TD3", "DDPG")  # = SB3_ALGOS

    def __init__(
        self,
        path: str | os.PathLike,
        control_mode: str | None = None,
        device: str = "cpu",
        *,
        trust_policy_file: bool = False,
    ):
        path = Path(path)
        self.path = path
        self.model, self.info = load_sb3_model(path, device=device, trust_policy_file=trust_policy_file)
        self.env_meta = meta = read_sb3_sidecar(path)
        sidecar = path.with_suffix(SB3_SIDECAR_SUFFIX)
        space = self.model.observation_space
        self._keys = tuple(space.spaces) if hasattr(space, "spaces") else None
        self._image_hw = {k: _image_hw(s.shape) for k, s in getattr(space, "spaces", {}).items() if len(s.shape) == 3}
        cams = tuple(k for k in self._image_hw if k.startswith("cam_"))
        if meta.get("cameras") is not None:
            if sorted(meta["cameras"]) != sorted(cams):
                raise ValueError(
                    f"{sidecar}: cameras {meta['cameras']} but the model's observation space has "
                    f"{list(cams)}; the sidecar belongs to another model: fix or delete it"
                )
            cams = tuple(meta["cameras"])
        sizes = sorted({self._image_hw[c] for c in cams})
        if len(sizes) > 1:
            raise ValueError(
                f"{path}: the model's cameras have different image sizes {sizes}; our envs render "
                f"every camera at one image_size"
            )
        image_size = sizes[0] if sizes else None
        if meta.get("image_size") is not None and image_size is not None and tuple(meta["image_size"]) != image_size:
            raise ValueError(f"{sidecar}: image_size {meta['image_size']} but the model takes {list(image_size)}")
        mode = control_mode or meta.get("control_mode")
        if mode is None:
            low = np.asarray(self.model.action_space.low)
            mode = "ee_delta" if np.allclose(low, -1.0) else "joint_pos"
        keys = set(self._keys or ())
        derived = ("pixels_state" if "joint_pos" in keys else "pixels") if cams else "state"
        self.requirements = EnvRequirements(
            obs_type=meta.get("obs_type") or derived, cameras=cams, control_mode=mode, image_size=image_size
        )

    def reset(self) -> None:
        pass

    def __call__(self, obs, info=None) -> np.ndarray:
        if self._keys is not None and isinstance(obs, dict):
            missing = [k for k in self._keys if k not in obs]
            if missing:
                raise KeyError(
                    f"the SB3 model needs observation keys {missing} but the observation has {sorted(obs)}; "
                    f"make the env with {self.requirements.env_kwargs()}"
                )
            obs = {k: self._sized(k, obs[k]) for k in self._keys}  # extra keys (e.g. video cameras) dropped
        action, _ = self.model.predict(obs, deterministic=True)
        return np.asarray(action, dtype=np.float32)

    def _sized(self, key, value):
        hw = self._image_hw.get(key)
        value = np.asarray(value)
        if hw is None or value.ndim != 3 or value.shape[:2] == hw or value.shape[1:] == hw:
            return value
        img = torch.as_tensor(np.ascontiguousarray(value)).permute(2, 0, 1)[None]
        return resize_images(img, hw)[0].permute(1, 2, 0).numpy()


def _image_hw(shape) -> tuple[int, int]:
    """(3, H, W) (SB3's VecTransposeImage) or (H, W, 3) -> (H, W)."""
    shape = tuple(int(s) for s in shape)
    return shape[1:] if shape[0] in (1, 3) and shape[-1] not in (1, 3) else shape[:2]


def load_agent(
    spec: str,
    device: str = "cpu",
    temporal_ensemble_coeff: float | None = None,
    control_mode: str | None = None,
    *,
    cameras=None,
    image_size=None,
    trust_policy_file: bool = False,
    pose_estimator: str | os.PathLike | None = None,
):
    """``"expert"``, an SB3 ``.zip`` or an ACT folder -> an agent (see the module docstring).

    ``cameras``, ``image_size`` (H, W) and ``control_mode`` override the settings the policy was trained
    with: ``cameras`` must include the policy's (extra ones are rendered, e.g. for videos), images are
    rendered at ``image_size`` and resized to the policy's input size. ``trust_policy_file`` loads with
    the library's own loader (it can run code from the file; only for files you trust).
    ``pose_estimator`` replaces the estimator folder of a policy that reads estimated object poses
    (default: the one its training data was recorded with)."""
    from embodied_gym.policies.residual import ResidualAgent, is_residual_folder

    agent: ExpertAgent | SB3Agent | ACTAgent | ResidualAgent
    if spec == "expert":
        agent = ExpertAgent(control_mode or "joint_pos")
    else:
        p = Path(spec)
        if p.is_dir() and is_residual_folder(p):
            agent = ResidualAgent(p, device=device, trust_policy_file=trust_policy_file)
        elif p.suffix == ".zip":
            agent = SB3Agent(p, control_mode=control_mode, device=device, trust_policy_file=trust_policy_file)
        elif p.is_dir():
            agent = ACTAgent(
                p, device=device, temporal_ensemble_coeff=temporal_ensemble_coeff, trust_policy_file=trust_policy_file
            )
            if control_mode is not None and control_mode != agent.requirements.control_mode:
                raise ValueError(
                    f"{spec}: ACT policies act in control_mode={agent.requirements.control_mode!r}, "
                    f"not {control_mode!r}"
                )
        else:
            raise FileNotFoundError(
                f"cannot load policy {spec!r}: give 'expert', a stable-baselines3 .zip, or an ACT "
                f"folder (from `embodied-gym train act --out DIR`)"
            )
    req = agent.requirements
    if pose_estimator is not None:
        act = agent.base_agent if isinstance(agent, ResidualAgent) else agent  # a residual reads its base's input
        if not isinstance(act, ACTAgent) or not act.env_state:
            raise ValueError(
                f"--pose-estimator {pose_estimator}: policy {spec!r} does not read estimated object poses "
                f"(it has no {F.ENV_STATE} input)"
            )
        req.pose_estimator = str(pose_estimator)
        act.estimator_overridden = True
    if cameras:
        cameras = normalise_cameras(cameras)
        missing = [c for c in req.cameras if c not in cameras]
        if missing:
            raise ValueError(
                f"policy {spec!r} needs cameras {list(req.cameras)}; --cameras {' '.join(cameras)} lacks {missing}"
            )
        req.cameras = tuple(cameras)
        if req.obs_type == "state":
            req.obs_type = "pixels_state"
    if image_size:
        req.image_size = normalise_image_size(image_size)
    return agent


def make_agent(spec: str, env, *, trust_policy_file: bool = False) -> Callable:
    """``agent(obs, info) -> action`` for ``spec`` ("expert", an ACT folder, an SB3 ``.zip``) acting in
    ``env``; it resets itself at every episode start.

    Raises:
        ValueError: the policy needs a control mode or cameras ``env`` does not have (the message
            says which).
    """
    if spec == "expert":
        return make_expert(env)
    agent = load_agent(spec, trust_policy_file=trust_policy_file)
    need, have = agent.requirements, env.unwrapped
    if need.control_mode != have.control_mode or not set(need.cameras) <= set(have.cameras):
        raise ValueError(
            f"policy {spec!r} needs control_mode={need.control_mode!r} and cameras "
            f"{list(need.cameras)}; the env has control_mode={have.control_mode!r} and cameras "
            f"{list(have.cameras)} (record with --cameras {' '.join(need.cameras) or 'cam_high'})"
        )
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


class TeleopAgent:
    """A LeRobot ``Teleoperator`` (a leader arm, a gamepad, embodied-gym's scripted operator) as an agent of a
    ``-Real-`` env in ``joint_pos`` control: each call reads ``teleop.get_action()`` and returns its
    ``<motor>.pos`` targets in our joint order (``joint_map``: our joint -> the teleoperator's motor name,
    the env's own by default). At an episode start a teleoperator that can look at a new table
    (``start_episode(scene_seed)``, the scripted operator) is shown the one the robot's reset set."""

    def __init__(self, teleop, joint_map: dict[str, str] | None = None):
        from embodied_gym.sim import robot as layout

        self.teleop = teleop
        self.keys = [f"{(joint_map or {}).get(j, j)}.pos" for j in layout.JOINT_NAMES]
        missing = [k for k in self.keys if k not in teleop.action_features]
        if missing:
            raise ValueError(
                f"teleoperator {teleop} has no action {missing}; map our joints to its motors with --joint-map "
                f"JOINT=MOTOR (its actions: {sorted(teleop.action_features)})"
            )

    def __call__(self, obs, info) -> np.ndarray:
        if info.get("step") == 0 and info.get("scene_seed") is not None and hasattr(self.teleop, "start_episode"):
            self.teleop.start_episode(info["scene_seed"])
        action = self.teleop.get_action()
        return np.array([float(action[k]) for k in self.keys], dtype=np.float32)


__all__ = ["ACTAgent", "EnvRequirements", "ExpertAgent", "SB3Agent", "TeleopAgent", "load_agent", "make_agent"]
