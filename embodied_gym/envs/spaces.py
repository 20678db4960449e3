"""Observation and action spaces shared by the simulated and the real-robot envs.

Both kinds of env build their spaces here, so a policy trained on one sees exactly the same
contract on the other.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from embodied_gym.sim import robot
from embodied_gym.sim.scene import CAMERAS

OBS_TYPES = ("state", "pixels", "pixels_state")
RENDER_MODES = ("rgb_array",)
CONTROL_MODES = ("joint_pos", "joint_delta", "ee_delta")

#: joint_delta: largest change of a joint target per control step (rad, and m for grippers).
MAX_JOINT_DELTA = np.where(np.isin(np.arange(14), robot.GRIPPER_INDICES), 0.004, 0.05)
#: ee_delta: largest TCP translation (m) and rotation (rad) per control step.
MAX_EE_TRANSLATION = 0.01
MAX_EE_ROTATION = 0.05

# Joint readings may overshoot the limits slightly (soft limits); observations are clipped to these.
_POS_MARGIN = 0.05
MAX_JOINT_SPEED = 20.0


def check_choice(kind: str, value, valid: Sequence[str]) -> None:
    try:
        ok = isinstance(value, str) and value in valid
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"unknown {kind} {value!r}; valid: {list(valid)}")


def normalise_cameras(cameras) -> tuple[str, ...]:
    """A camera name or a sequence of them, as a tuple of known, distinct names."""
    if isinstance(cameras, str):
        cameras = (cameras,)
    if not isinstance(cameras, (list, tuple, np.ndarray)):
        raise ValueError(
            f"cameras must be a camera name or a list of them (valid: {list(CAMERAS)}), "
            f"got {cameras!r} ({type(cameras).__name__})"
        )
    cameras = tuple(str(c) if isinstance(c, np.str_) else c for c in cameras)
    for c in cameras:
        check_choice("camera", c, CAMERAS)
    if len(set(cameras)) != len(cameras):
        raise ValueError(f"cameras {list(cameras)} lists a camera twice")
    return cameras


def _whole_number(v) -> int | None:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        return None
    if isinstance(v, numbers.Integral):
        return int(v)
    f = float(v)
    return int(f) if f.is_integer() else None


def normalise_image_size(image_size) -> tuple[int, int]:
    """``(height, width)`` as two whole numbers of pixels (``240.0`` is fine, ``48.5`` is not)."""
    form = "image_size must be (height, width), two whole numbers of pixels such as (240, 320)"
    if isinstance(image_size, (str, bytes)) or not isinstance(image_size, (list, tuple, np.ndarray)):
        raise ValueError(f"{form}, got {image_size!r}")
    sides = [_whole_number(v) for v in image_size]
    h, w = sides if len(sides) == 2 else (None, None)
    if h is None or w is None:
        raise ValueError(f"{form}, got {tuple(image_size)!r}")
    if not (16 <= h <= 2048 and 16 <= w <= 2048):
        raise ValueError(f"image_size {(h, w)} out of range; each side must be in [16, 2048]")
    return h, w


@dataclass(frozen=True)
class EnvOptions:
    """The interface kwargs every embodied-gym env (sim or real) takes, validated."""

    obs_type: str
    cameras: tuple[str, ...]
    image_size: tuple[int, int]
    control_mode: str
    render_mode: str | None

    @classmethod
    def validate(cls, obs_type, cameras, image_size, control_mode, render_mode) -> EnvOptions:
        check_choice("obs_type", obs_type, OBS_TYPES)
        check_choice("control_mode", control_mode, CONTROL_MODES)
        if render_mode is not None:
            check_choice("render_mode", render_mode, RENDER_MODES)
        return cls(obs_type, normalise_cameras(cameras), normalise_image_size(image_size), control_mode, render_mode)

    def observation_space(self) -> spaces.Dict:
        return observation_space(self.obs_type, self.cameras if self.obs_type != "state" else (), self.image_size)


def observation_space(obs_type: str, cameras: Sequence[str], image_size: tuple[int, int]) -> spaces.Dict:
    """A flat Dict: ``joint_pos`` and ``joint_vel`` (14 each) unless ``obs_type="pixels"``, and one
    ``(H, W, 3)`` uint8 image per camera unless ``obs_type="state"``."""
    check_choice("obs_type", obs_type, OBS_TYPES)
    parts: dict[str, spaces.Space] = {}
    if obs_type in ("state", "pixels_state"):
        parts["joint_pos"] = spaces.Box(
            (robot.JOINT_LOW - _POS_MARGIN).astype(np.float32),
            (robot.JOINT_HIGH + _POS_MARGIN).astype(np.float32),
            dtype=np.float32,
        )
        parts["joint_vel"] = spaces.Box(-MAX_JOINT_SPEED, MAX_JOINT_SPEED, (14,), dtype=np.float32)
    if obs_type in ("pixels", "pixels_state"):
        if not cameras:
            raise ValueError(f"obs_type={obs_type!r} needs at least one camera; valid: {list(CAMERAS)}")
        for cam in cameras:
            parts[cam] = spaces.Box(0, 255, (*image_size, 3), dtype=np.uint8)
    return spaces.Dict(parts)


def action_space(control_mode: str) -> spaces.Box:
    """``joint_pos``: absolute targets within the joint and gripper limits (rad, m).
    ``joint_delta`` and ``ee_delta``: [-1, 1] scaled per step (see module constants)."""
    check_choice("control_mode", control_mode, CONTROL_MODES)
    if control_mode == "joint_pos":
        return spaces.Box(robot.JOINT_LOW.astype(np.float32), robot.JOINT_HIGH.astype(np.float32), dtype=np.float32)
    return spaces.Box(-1.0, 1.0, (14,), dtype=np.float32)


def clip_observation(space: spaces.Dict, obs: dict) -> dict:
    """Joint readings as float32, clipped into the space (soft joint limits let them overshoot)."""
    for key in ("joint_pos", "joint_vel"):
        if key in obs:
            box = space[key]
            if not isinstance(box, spaces.Box):
                raise TypeError(f"observation space entry {key!r} must be a Box, got {type(box).__name__}")
            obs[key] = np.minimum(np.maximum(obs[key].astype(np.float32), box.low), box.high)
    return obs
