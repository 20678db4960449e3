"""``PhysicsRandomizationWrapper``: each episode of a sim env under physics drawn around a base.

A calibration is never exact; drawing the arm's gain, damping, dry friction and armature per episode
around the calibrated values, the domain randomisation of Tobin et al. (arXiv 1703.06907) and Peng et
al. (arXiv 1710.06537) applied to dynamics, lets demonstrations or RL rollouts cover the arms the
calibration cannot tell apart. Calibration from joint trajectories does not see the grip at all (the
finger gain, the pads' and objects' friction, the objects' mass): ``contact_spread`` draws those too, so
that RL in the aligned sim cannot prefer a grasp that holds only under the simulator's nominal contact.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from embodied_gym.envs.aloha_env import AlohaTaskEnv
from embodied_gym.sim.physics import ARM_JOINT_NAMES, PhysicsParams

RANDOMIZED_FIELDS: tuple[str, ...] = ("kp", "damping", "frictionloss", "armature")
"""The per-joint arm parameters the wrapper draws with ``spread``."""

CONTACT_FIELDS: tuple[str, ...] = ("gripper_kp", "pad_friction", "object_friction", "object_mass_scale")
"""The grip's parameters the wrapper draws with ``contact_spread`` (one factor each; delay and backlash
stay at the base)."""

_SEED_SALT = 0x50485953  # keeps the physics draw apart from the scene's draw of the same seed


def _check_spread(spread: float) -> float:
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"physics spread {spread!r} must be in [0, 1] (a log-scale half-width: 0.2 is about ±20 %)")
    return float(spread)


def _draw_scales(spread: float, rng: np.random.Generator, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per field, ``exp(u)``, ``u ~ U(-spread, spread)``: 12 factors for an arm field, one for a contact field."""
    return {
        name: np.exp(rng.uniform(-spread, spread, 1 if name in CONTACT_FIELDS else len(ARM_JOINT_NAMES)))
        for name in fields
    }


def _scaled(base: PhysicsParams, scales: dict[str, np.ndarray]) -> PhysicsParams:
    updates: dict[str, Any] = {}
    for name, k in scales.items():
        if name in CONTACT_FIELDS:
            updates[name] = float(getattr(base, name)) * float(k[0])
        else:
            updates[name] = tuple(float(v) for v in np.asarray(getattr(base, name), dtype=np.float64) * k)
    return dataclasses.replace(base, **updates)


def randomized_physics(
    base: PhysicsParams, spread: float, rng: np.random.Generator, fields: tuple[str, ...] = RANDOMIZED_FIELDS
) -> PhysicsParams:
    """``base`` with each arm joint's ``fields`` scaled by ``exp(u)``, ``u ~ U(-spread, spread)``
    drawn per joint and field (a parameter at zero stays zero); a field of :data:`CONTACT_FIELDS` gets
    one factor."""
    return _scaled(base, _draw_scales(_check_spread(spread), rng, fields))


class PhysicsRandomizationWrapper(gym.Wrapper):
    """A sim task env whose physics is redrawn at every reset (see the module docstring).

    Arguments: ``spread``, the log-scale half-width of the arm's draw (0.2: each parameter between
    0.82x and 1.22x its base value); ``base``, the physics to draw around (default: the env's
    physics when wrapped, e.g. a calibration result); ``contact_spread``, the same for
    :data:`CONTACT_FIELDS` (0: they stay at the base). The draw follows from the reset seed, so an
    episode reset with the same seed runs under the same physics; ``info["physics_scale"]`` holds
    each drawn field's factors (12 for an arm field, one for a contact field). Observation and action
    spaces are the env's.
    """

    def __init__(self, env: gym.Env, spread: float, base: PhysicsParams | None = None, contact_spread: float = 0.0):
        super().__init__(env)
        if not isinstance(env.unwrapped, AlohaTaskEnv):
            raise ValueError(
                f"physics randomisation applies to embodied-gym sim envs only, got {type(env.unwrapped).__name__} "
                "(a robot's physics is what it is)"
            )
        self._sim_env: AlohaTaskEnv = env.unwrapped
        self.spread = _check_spread(spread)
        self.contact_spread = _check_spread(contact_spread)
        self.base = base if base is not None else self._sim_env.physics
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng([seed, _SEED_SALT])
        scales = _draw_scales(self.spread, self._rng, RANDOMIZED_FIELDS) if self.spread else {}
        if self.contact_spread:
            scales.update(_draw_scales(self.contact_spread, self._rng, CONTACT_FIELDS))
        self._sim_env.set_physics(_scaled(self.base, scales))
        obs, info = self.env.reset(seed=seed, options=options)
        info["physics_scale"] = {name: k.round(4).tolist() for name, k in scales.items()}
        return obs, info


__all__ = ["CONTACT_FIELDS", "RANDOMIZED_FIELDS", "PhysicsRandomizationWrapper", "randomized_physics"]
