"""Trajectory errors shared by replay and calibration (SimplerEnv's system-identification metric).

Rotation error between two rotations: e_r = arcsin(‖R_a − R_b‖_F / (2√2)). ‖R_a − R_b‖_F equals
2√2·sin(θ/2) for a relative rotation by θ, so e_r = θ/2: 0 for equal rotations, at most π/2.
"""

from __future__ import annotations

import numpy as np


def quat_to_mat(quat: np.ndarray) -> np.ndarray:
    """(..., 4) quaternions (w, x, y, z) to (..., 3, 3) rotation matrices."""
    q = np.asarray(quat, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def rotation_error(r_a: np.ndarray, r_b: np.ndarray) -> np.ndarray:
    """arcsin(‖R_a − R_b‖_F / (2√2)) for (..., 3, 3) rotation matrices (radians, in [0, π/2])."""
    diff = np.linalg.norm(np.asarray(r_a) - np.asarray(r_b), axis=(-2, -1))
    return np.arcsin(np.clip(diff / (2 * np.sqrt(2)), 0.0, 1.0))


def ee_errors(pose_a: np.ndarray, pose_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-step translation (m) and rotation (rad) errors between (T, 14) two-arm TCP poses
    ``[left xyz qwxyz, right xyz qwxyz]``, averaged over the two arms."""
    a = np.asarray(pose_a, dtype=np.float64).reshape(-1, 2, 7)
    b = np.asarray(pose_b, dtype=np.float64).reshape(-1, 2, 7)
    trans = np.linalg.norm(a[..., :3] - b[..., :3], axis=-1).mean(axis=1)
    rot = rotation_error(quat_to_mat(a[..., 3:]), quat_to_mat(b[..., 3:])).mean(axis=1)
    return trans, rot
