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
from embodied_gym.data.reader import Episode
from embodied_gym.data.replay import replay_episode
from embodied_gym.metrics import quat_to_mat
from embodied_gym.physaligner.space import ParameterSpace


def _mean_errors(replays) -> dict[str, float]:
    rows = [r.summary() for r in replays]
    return {
        k: float(np.mean([r[k] for r in rows])) for k in ("translation_error_m", "rotation_error_rad", "joint_rmse_rad")
    }


def score(errors: dict[str, float]) -> float:
    """The objective's value from :meth:`ReplayObjective.errors`: translation (m) + rotation (rad)."""
    return errors["translation_error_m"] + errors["rotation_error_rad"]


class ReplayObjective:
    """``objective(theta_normalised) -> mean translation + rotation error`` over ``episodes``."""

    def __init__(self, episodes: list[Episode], task: str, space: ParameterSpace):
        self.episodes = episodes
        self.space = space
        self.env = gym.make(embodied_gym.env_id(task), obs_type="state", physics=space.base, terminate_on_success=False)
        self.task = task
        self.evaluations = 0

    def replays(self, theta_u: np.ndarray):
        return self.replays_of(self.space.to_physics(self.space.denormalise(theta_u)))

    def replays_of(self, physics):
        """Replays under a whole :class:`PhysicsParams` (its latency and backlash included)."""
        self.evaluations += 1
        return [replay_episode(ep, self.task, physics=physics, env=self.env) for ep in self.episodes]

    def errors_of(self, physics) -> dict[str, float]:
        return _mean_errors(self.replays_of(physics))

    def errors(self, theta_u: np.ndarray) -> dict[str, float]:
        return _mean_errors(self.replays(theta_u))

    def __call__(self, theta_u: np.ndarray) -> float:
        e = self.errors(theta_u)
        return e["translation_error_m"] + e["rotation_error_rad"]

    def residuals(self, theta_u: np.ndarray) -> np.ndarray:
        """Least-squares form for Gauss-Newton methods: per step and arm, the TCP position difference (m)
        and the rotation-matrix difference / √8 (whose squared norm is sin²(θ/2), the smooth rotation
        term of SimplerEnv's system identification, arXiv 2405.05941), scaled so that the squared norm is a mean over steps and episodes."""
        parts = []
        for r in self.replays(theta_u):
            sim, real = r.sim_ee.reshape(-1, 2, 7), r.real_ee.reshape(-1, 2, 7)
            dp = sim[..., :3] - real[..., :3]
            dr = (quat_to_mat(sim[..., 3:]) - quat_to_mat(real[..., 3:])) / np.sqrt(8.0)
            parts.append(np.concatenate([dp.reshape(len(dp), -1), dr.reshape(len(dr), -1)], axis=1).ravel())
        n_steps = sum(len(ep.action) - 1 for ep in self.episodes)
        return np.concatenate(parts) / np.sqrt(n_steps)

    def close(self) -> None:
        self.env.close()
