"""Our envs for LeRobot's own tools (``lerobot-eval``), following LeRobot's env-plugin conventions.

``lerobot-eval`` builds envs from an ``EnvConfig`` subclass registered under a type name; this
module registers ``embodied_gym``. Import it with LeRobot's plugin flag::

    lerobot-eval --policy.path=runs/act/checkpoints/002000/pretrained_model \\
        --env.type=embodied_gym --env.discover_packages_path=embodied_gym.policies.lerobot_env \\
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

import gymnasium as gym
import numpy as np
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig

from embodied_gym.data import features as F


class LeRobotObservationWrapper(gym.ObservationWrapper):
    """Regroups our flat observation into LeRobot's env convention (``pixels`` dict + ``agent_pos``).

    Observation space: ``Dict(pixels=Dict(<camera>: Box(0, 255, (H, W, 3), uint8)),
    agent_pos=Box(14, float32))``. Actions, rewards, termination and ``info`` pass through;
    ``task_description`` and ``task`` hold the task's language description.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.cameras = tuple(k for k in space.spaces if k.startswith("cam_"))
        if "joint_pos" not in space.spaces or not self.cameras:
            raise ValueError("LeRobotObservationWrapper needs obs_type='pixels_state' with at least one camera")
        self.observation_space = gym.spaces.Dict(
            {
                "pixels": gym.spaces.Dict({c: space[c] for c in self.cameras}),
                "agent_pos": space["joint_pos"],
            }
        )
        self.task_description = env.unwrapped.task.description
        self.task = self.task_description

    def observation(self, obs):
        return {"pixels": {c: obs[c] for c in self.cameras}, "agent_pos": np.asarray(obs["joint_pos"], np.float32)}


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

        return embodied_gym.env_id(self.task, real=self.real)

    @property
    def gym_kwargs(self) -> dict:
        kw = {
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

        cls = gym.vector.AsyncVectorEnv if (use_async_envs and n_envs > 1) else gym.vector.SyncVectorEnv
        extra = {"context": "forkserver"} if cls is gym.vector.AsyncVectorEnv else {}
        vec = cls([self.make_env for _ in range(n_envs)], autoreset_mode=AutoresetMode.SAME_STEP, **extra)
        return {self.type: {0: vec}}
