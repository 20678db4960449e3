"""Load any policy we can run as an agent ``action = agent(obs, info)``.

- ``"expert"``: the task's scripted expert (:func:`embodied_gym.make_expert`).
- an ACT folder (``embodied-gym train act --out``, a checkpoint, or a ``pretrained_model`` folder):
  :class:`ACTAgent`, LeRobot's ``ACTPolicy`` with its processors.
- a ``.zip`` saved by stable-baselines3 (PPO, SAC, A2C, TD3, DDPG): :class:`SB3Agent`.

Every agent has ``reset()`` (call it at each episode start) and ``requirements``: the env kwargs it
needs (``obs_type``, ``cameras``, ``image_size``, ``control_mode``), which :func:`make_env_for`
applies, so the same agent runs on a sim id, a VisAligner-wrapped sim id and a Real id.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_gym.data import features as F
from embodied_gym.policies.act import POLICY_META, resize_images, resolve_pretrained_dir


@dataclass
class EnvRequirements:
    """What an agent needs from the env it acts in."""

    obs_type: str = "state"
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] | None = None  # None: the env's default
    control_mode: str = "joint_pos"

    def env_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"obs_type": self.obs_type, "control_mode": self.control_mode}
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
        self._expert = None
        self._env = None

    def bind(self, env) -> None:
        import embodied_gym

        self._env = env
        self._expert = embodied_gym.make_expert(env)

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
    """

    name = "act"

    def __init__(self, path: str | os.PathLike, device: str = "cpu", temporal_ensemble_coeff: float | None = None):
        from lerobot.policies import make_pre_post_processors
        from lerobot.policies.act.modeling_act import ACTPolicy, ACTTemporalEnsembler

        self.path = resolve_pretrained_dir(path)
        meta_path = self.path / POLICY_META
        if meta_path.exists():
            self.meta = json.loads(meta_path.read_text())
        else:  # a LeRobot-trained ACT (lerobot-train): infer what it needs from its config
            self.meta = None
        self.policy = ACTPolicy.from_pretrained(str(self.path))
        self.policy.config.device = device
        self.policy.to(device).eval()
        if temporal_ensemble_coeff is not None:
            self.policy.config.temporal_ensemble_coeff = temporal_ensemble_coeff
            self.policy.config.n_action_steps = 1
            self.policy.temporal_ensembler = ACTTemporalEnsembler(temporal_ensemble_coeff, self.policy.config.chunk_size)
        self.pre, self.post = make_pre_post_processors(
            self.policy.config, pretrained_path=str(self.path),
            preprocessor_overrides={"device_processor": {"device": device}})
        image_keys = list(self.policy.config.image_features)
        self.cameras = tuple(F.camera_of(k) for k in image_keys)
        self.image_size = tuple(self.policy.config.image_features[image_keys[0]].shape[-2:]) if image_keys else None
        # Render at the size the training frames were recorded at, so resizing matches training.
        recorded = (self.meta or {}).get("recorded_image_size")
        self.requirements = EnvRequirements(obs_type="pixels_state", cameras=self.cameras, control_mode="joint_pos",
                                            image_size=tuple(recorded) if recorded else self.image_size)
        self.policy.reset()

    def reset(self) -> None:
        self.policy.reset()

    def observation_batch(self, obs: dict) -> dict[str, torch.Tensor]:
        """Env observation -> LeRobot batch (before the preprocessor): state and resized float images."""
        batch = {F.STATE: torch.as_tensor(np.asarray(obs["joint_pos"], np.float32))[None]}
        for cam in self.cameras:
            if cam not in obs:
                raise KeyError(f"the policy needs camera {cam!r} but the observation has {sorted(obs)}; make the env "
                               f"with cameras={self.cameras} and obs_type='pixels_state'")
            img = torch.as_tensor(np.ascontiguousarray(obs[cam])).permute(2, 0, 1)[None]
            batch[F.image_key(cam)] = resize_images(img, self.image_size).float().div_(255.0)
        return batch

    @torch.no_grad()
    def __call__(self, obs, info=None) -> np.ndarray:
        batch = self.pre(self.observation_batch(obs))
        action = self.post(self.policy.select_action(batch))
        return action.squeeze(0).cpu().numpy().astype(np.float32)


class SB3Agent:
    """A stable-baselines3 model (deterministic actions) as an agent.

    The control mode and observation type come from ``embodied_gym_env.json`` saved next to the
    zip by our training example, else from the model's spaces (``joint_pos`` unless the action
    space is [-1, 1]^14, which means ``ee_delta`` or ``joint_delta``: pass ``control_mode``)."""

    name = "sb3"
    _ALGOS = ("PPO", "SAC", "A2C", "TD3", "DDPG")

    def __init__(self, path: str | os.PathLike, control_mode: str | None = None, device: str = "cpu"):
        import stable_baselines3 as sb3

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"stable-baselines3 model {path} not found")
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
        algo = _sb3_algo_name(data)
        if algo not in self._ALGOS:
            raise ValueError(f"{path}: cannot tell the SB3 algorithm (found {algo!r}); supported: {self._ALGOS}")
        self.model = getattr(sb3, algo).load(str(path), device=device)
        sidecar = path.with_suffix(".env.json")
        env_meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        space = self.model.observation_space
        cams = tuple(k for k in getattr(space, "spaces", {}) if k.startswith("cam_"))
        mode = control_mode or env_meta.get("control_mode")
        if mode is None:
            low = np.asarray(self.model.action_space.low)
            mode = "ee_delta" if np.allclose(low, -1.0) else "joint_pos"
        self.requirements = EnvRequirements(obs_type=env_meta.get("obs_type", "pixels_state" if cams else "state"),
                                            cameras=cams, control_mode=mode)

    def reset(self) -> None:
        pass

    def __call__(self, obs, info=None) -> np.ndarray:
        action, _ = self.model.predict(obs, deterministic=True)
        return np.asarray(action, dtype=np.float32)


def _sb3_algo_name(data: dict) -> str:
    policy_class = data.get("policy_class", {})
    module = policy_class.get(":serialized:", "") if isinstance(policy_class, dict) else ""
    # The serialized policy class is a pickle; its module path names the algorithm package.
    import base64

    try:
        raw = base64.b64decode(module).decode("latin-1")
    except Exception:  # noqa: BLE001  (not base64: fall through to an explicit error upstream)
        raw = ""
    for algo in ("ppo", "sac", "a2c", "td3", "ddpg"):
        if f"stable_baselines3.{algo}" in raw:
            return algo.upper()
    if "stable_baselines3.common.policies" in raw:  # ActorCriticPolicy: on-policy algorithms
        return "PPO"
    return ""


def load_agent(spec: str, device: str = "cpu", temporal_ensemble_coeff: float | None = None,
               control_mode: str | None = None):
    """``"expert"``, an SB3 ``.zip`` or an ACT folder -> an agent (see the module docstring)."""
    if spec == "expert":
        return ExpertAgent(control_mode or "joint_pos")
    p = Path(spec)
    if p.suffix == ".zip":
        return SB3Agent(p, control_mode=control_mode, device=device)
    if p.is_dir():
        return ACTAgent(p, device=device, temporal_ensemble_coeff=temporal_ensemble_coeff)
    raise FileNotFoundError(f"cannot load policy {spec!r}: give 'expert', a stable-baselines3 .zip, or an ACT folder "
                            f"(from `embodied-gym train act --out DIR`)")


def make_env_for(agent, env_id: str, *, physics=None, visaligner: str | None = None, robot_config: str | None = None,
                 render_mode: str | None = None, extra_cameras: tuple[str, ...] = (),
                 visaligner_steps: int | None = None, **kwargs):
    """The env ``env_id`` made with what ``agent`` needs (sim, Real or VisAligner-wrapped sim;
    ``visaligner_steps`` denoising steps per generated frame, default the model's)."""
    import gymnasium as gym

    import embodied_gym  # noqa: F401  (registers the ids)

    if env_id not in gym.registry:
        ids = sorted(k for k in gym.registry if k.startswith("EmbodieDreamer-"))
        raise ValueError(f"unknown env id {env_id!r}; valid: {ids}")
    real = embodied_gym.parse_env_id(env_id).real
    kw = agent.requirements.env_kwargs()
    if extra_cameras:
        cams = tuple(dict.fromkeys(tuple(kw.get("cameras", ())) + tuple(extra_cameras)))
        kw["cameras"] = cams
        if kw["obs_type"] == "state":
            kw["obs_type"] = "pixels_state"
    kw.update(kwargs)
    if physics is not None:
        kw["physics"] = physics
    if render_mode:
        kw["render_mode"] = render_mode
    if real:
        kw.setdefault("realtime", False)
        if robot_config:
            kw["robot_config"] = robot_config
    elif robot_config:
        raise ValueError("robot_config only applies to -Real- env ids")
    if visaligner:
        if real:
            raise ValueError("--visaligner renders sim frames photoreal; it makes no sense on a -Real- id")
        try:
            from embodied_gym.wrappers.visaligner import VisAlignerWrapper
        except ImportError as e:
            raise RuntimeError(f"VisAligner is not available in this installation ({e}); it comes with issue 5 "
                               f"(embodied_gym.wrappers.visaligner). Evaluate without --visaligner meanwhile.") from None
        cams = tuple(kw.get("cameras", ()))
        env = VisAlignerWrapper(gym.make(env_id, **kw), visaligner, camera=cams[0] if cams else "cam_high",
                                num_inference_steps=visaligner_steps)
    else:
        env = gym.make(env_id, **kw)
    if isinstance(agent, ExpertAgent):
        agent.bind(env)
    return env
