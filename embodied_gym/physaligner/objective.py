"""The calibration objective every method is judged by: open-loop replay in the real simulator.

SimplerEnv's system-identification objective: replay each recorded episode open-loop under θ and
average TCP translation error (m) + rotation error (rad, arcsin(‖ΔR‖_F / 2√2)) over steps and
episodes. PhysAligner optimises through its surrogate but is reported with this, never with the
surrogate's own loss.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import embodied_gym
from embodied_gym.data.replay import Episode, replay_episode
from embodied_gym.physaligner.space import ParameterSpace


class ReplayObjective:
    """``objective(theta_normalised) -> mean translation + rotation error`` over ``episodes``."""

    def __init__(self, episodes: list[Episode], task: str, space: ParameterSpace):
        self.episodes = episodes
        self.space = space
        self.env = gym.make(embodied_gym.env_id(task), obs_type="state", physics=space.base,
                            terminate_on_success=False)
        self.task = task
        self.evaluations = 0

    def errors(self, theta_u: np.ndarray) -> dict[str, float]:
        physics = self.space.to_physics(self.space.denormalise(theta_u))
        rows = [replay_episode(ep, self.task, physics=physics, env=self.env).summary() for ep in self.episodes]
        self.evaluations += 1
        return {k: float(np.mean([r[k] for r in rows]))
                for k in ("translation_error_m", "rotation_error_rad", "joint_rmse_rad")}

    def __call__(self, theta_u: np.ndarray) -> float:
        e = self.errors(theta_u)
        return e["translation_error_m"] + e["rotation_error_rad"]

    def close(self) -> None:
        self.env.close()
