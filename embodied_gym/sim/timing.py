"""Timing shared by the sim env, the real env and the stand-in robot: the 50 Hz control rate
(:data:`~embodied_gym.sim.scene.CONTROL_DT`) and the camera rate (:func:`camera_period`)."""

from __future__ import annotations

import numbers

from embodied_gym.sim.scene import CONTROL_DT


def camera_period(camera_fps: float | None) -> int:
    """Control steps per camera frame for a camera running at ``camera_fps`` (None: a frame every
    control step, 50 Hz). A real camera runs at its own rate (LeRobot cameras have an ``fps``); between
    its frames an observation holds the last one.

    Raises:
        ValueError: ``camera_fps`` is not positive, is above the 50 Hz control rate, or does not divide it
            into whole steps (50, 25, 10, 5 ... Hz).
    """
    if camera_fps is None:
        return 1
    control_hz = 1.0 / CONTROL_DT
    if not isinstance(camera_fps, numbers.Real) or not 0 < camera_fps <= control_hz:
        raise ValueError(f"camera_fps must be in (0, {control_hz:g}] Hz (the control rate), got {camera_fps!r}")
    period = control_hz / float(camera_fps)
    if abs(period - round(period)) > 1e-6:
        raise ValueError(
            f"camera_fps={camera_fps:g} does not divide the {control_hz:g} Hz control rate into whole "
            f"steps; use {control_hz:g}/k Hz, e.g. 25, 10 or 5"
        )
    return int(round(period))


__all__ = ["CONTROL_DT", "camera_period"]
