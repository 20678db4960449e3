"""Our envs for LeRobot's own tools (``lerobot-eval``), following LeRobot's env-plugin conventions.

``lerobot-eval`` builds envs from an ``EnvConfig`` subclass registered under a type name; this
module registers ``embodied_gym``. LeRobot imports it through the plugin package
``plugins/lerobot_robot_embodied_gym`` (installed by ``scripts/setup.sh``), so no flag is needed::

    lerobot-eval --policy.path=runs/act/checkpoints/002000/pretrained_model \\
        --env.type=embodied_gym \\
        --env.task=PickCup --env.cameras='[cam_high]' --env.image_height=72 --env.image_width=96 \\
        --eval.n_episodes=50 --eval.batch_size=1 --policy.device=cpu --output_dir=runs/lerobot_eval

LeRobot's conventions this follows: observations ``{"pixels": {camera: HxWx3 uint8},
"agent_pos": 14 joint positions}`` (mapped to ``observation.images.<camera>`` and
``observation.state``, the keys our datasets use), ``info["is_success"]``, the language task in
``env.task_description`` / ``env.task``, and vector envs with same-step autoreset.
``--env.real=true`` evaluates on the Real id (the stand-in robot by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig

from embodied_gym.data import features as F
from embodied_gym.wrappers.lerobot import LeRobotObservationWrapper


@EnvConfig.register_subclass("embodied_gym")
@dataclass
class EmbodiedGymEnvConfig(EnvConfig):
    """``--env.type=embodied_gym``: one of our task envs (sim, or Real with ``real=True``), joint-position control."""

    task: str | None = "PickCup"
    fps: int = 50
    cameras: list[str] = field(default_factory=lambda: ["cam_high"])
    image_height: int = 240
    image_width: int = 320
    real: bool = False
    physics: str | None = None  # a physics / calibration JSON for sim ids
    features: dict[str, PolicyFeature] = field(default_factory=dict)
    features_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.features = {
            "action": PolicyFeature(type=FeatureType.ACTION, shape=(14,)),
            "agent_pos": PolicyFeature(type=FeatureType.STATE, shape=(14,)),
        }
        self.features_map = {"action": F.ACTION, "agent_pos": F.STATE}
        for cam in self.cameras:
            self.features[f"pixels/{cam}"] = PolicyFeature(
                type=FeatureType.VISUAL, shape=(self.image_height, self.image_width, 3)
            )
            self.features_map[f"pixels/{cam}"] = F.image_key(cam)

    @property
    def package_name(self) -> str:
        return "embodied_gym"

    @property
    def gym_id(self) -> str:
        import embodied_gym

        if self.task is None:
            raise ValueError("--env.task is required: a task name such as PickCup")
        return embodied_gym.env_id(self.task, real=self.real)

    @property
    def gym_kwargs(self) -> dict:
        kw: dict[str, Any] = {
            "obs_type": "pixels_state",
            "cameras": tuple(self.cameras),
            "render_mode": "rgb_array",
            "image_size": (self.image_height, self.image_width),
            "control_mode": "joint_pos",
        }
        if self.real:
            kw["realtime"] = False
        elif self.physics:
            kw["physics"] = self.physics
        return kw

    def make_env(self) -> gym.Env:
        import embodied_gym  # noqa: F401  (registers the ids)

        return LeRobotObservationWrapper(
            gym.make(self.gym_id, disable_env_checker=self.disable_env_checker, **self.gym_kwargs)
        )

    def create_envs(self, n_envs: int, use_async_envs: bool = False) -> dict[str, dict[int, gym.vector.VectorEnv]]:
        from gymnasium.vector import AutoresetMode

        fns = [self.make_env for _ in range(n_envs)]
        vec: gym.vector.VectorEnv
        if use_async_envs and n_envs > 1:
            vec = gym.vector.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="forkserver")
        else:
            vec = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
        return {self.type: {0: vec}}
