"""From actions to joint targets, the same way for the simulated and the real-robot envs.

:class:`JointTargetController` validates an action (shape, NaN/inf), clips it to the action
space (counting clipped entries), and turns it into the 14 joint targets that the arm
controllers track, for each control mode:

- ``joint_pos``: the action is the targets.
- ``joint_delta``: action x :data:`~embodied_gym.envs.spaces.MAX_JOINT_DELTA` is added to the
  current targets (not to the measured joints, so targets do not drift with gravity sag).
- ``ee_delta``: per arm, the TCP target moves and turns by action x (1 cm, 0.05 rad) in the world
  frame, is kept inside a box around the table, and is solved to joint targets by damped
  least-squares IK on the arm model; the gripper entry is absolute (-1 closed, 1 open).
"""

from __future__ import annotations

import math
import numbers

import mujoco
import numpy as np

from embodied_gym.envs import spaces as sp
from embodied_gym.sim import robot
from embodied_gym.sim.kinematics import ArmKinematics

EE_WORKSPACE_LOW = np.array([-0.5, 0.05, 0.0])
EE_WORKSPACE_HIGH = np.array([0.5, 0.95, 0.6])


def axis_angle_matrix(v: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.eye(3)
    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, v / angle, angle)
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


class JointTargetController:
    """Action -> joint targets for one control mode (see module docstring)."""

    def __init__(self, control_mode: str, kinematics: ArmKinematics):
        self.control_mode = control_mode
        self.action_space = sp.action_space(control_mode)
        self.kinematics = kinematics
        self._low = self.action_space.low.astype(np.float64)
        self._high = self.action_space.high.astype(np.float64)
        self.targets = robot.START_QPOS.copy()
        self.ee_pos = np.zeros((2, 3))
        self.ee_rot = np.tile(np.eye(3), (2, 1, 1))

    def reset(self, targets: np.ndarray) -> None:
        """Start from ``targets``; the ee targets become their TCP poses."""
        self.targets = np.array(targets, dtype=np.float64)
        for arm in range(2):
            self.ee_pos[arm], self.ee_rot[arm] = self.kinematics.tcp_pose(self.targets[robot.ARM_INDICES], arm)

    @staticmethod
    def validate(action) -> np.ndarray:
        """``action`` as 14 finite float64 values; anything else raises ``ValueError`` saying why.

        Only real numbers are accepted: complex values (whose imaginary part NumPy would drop),
        strings, booleans and objects are refused rather than converted.
        """
        form = "a real-valued array of shape (14,) ([left arm 6, left gripper, right arm 6, right gripper])"
        try:
            raw = np.asarray(action)
        except (TypeError, ValueError):
            raise ValueError(f"action must be {form}, got {type(action).__name__}") from None
        if raw.dtype.kind not in "iuf":
            what = {"c": "complex", "b": "boolean", "U": "string", "S": "bytes"}.get(raw.dtype.kind)
            if what is None:  # an object array: a list mixing numbers with something else
                real = all(isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in raw.flat)
                what = None if real else "non-numeric"
            if what is not None:
                raise ValueError(f"action must be {form}, got {what} values (dtype {raw.dtype}): {action!r:.120}")
        a = raw.astype(np.float64, copy=False)
        if a.shape != (14,):
            raise ValueError(
                f"action has shape {a.shape}, expected (14,) ([left arm 6, left gripper, right arm 6, right gripper])"
            )
        if not math.isfinite(a.sum()):
            names = [robot.JOINT_NAMES[i] for i in np.flatnonzero(~np.isfinite(a))]
            raise ValueError(f"action contains NaN or inf at {names}")
        return a

    def __call__(self, action) -> tuple[np.ndarray, int]:
        """New joint targets for ``action``, and how many action entries were clipped."""
        a = self.validate(action)
        clipped = int(np.count_nonzero((a < self._low) | (a > self._high)))
        if clipped:
            a = np.minimum(np.maximum(a, self._low), self._high)
        self.targets = self._to_targets(a)
        return self.targets, clipped

    def _to_targets(self, a: np.ndarray) -> np.ndarray:
        if self.control_mode == "joint_pos":
            return a.copy()
        if self.control_mode == "joint_delta":
            return np.clip(self.targets + a * sp.MAX_JOINT_DELTA, robot.JOINT_LOW, robot.JOINT_HIGH)
        targets = self.targets.copy()
        q = targets[robot.ARM_INDICES]
        for arm in range(2):
            d = a[arm * 7 : (arm + 1) * 7]
            self.ee_pos[arm] = np.clip(
                self.ee_pos[arm] + d[:3] * sp.MAX_EE_TRANSLATION, EE_WORKSPACE_LOW, EE_WORKSPACE_HIGH
            )
            self.ee_rot[arm] = axis_angle_matrix(d[3:6] * sp.MAX_EE_ROTATION) @ self.ee_rot[arm]
            q = self.kinematics.solve(q, arm, self.ee_pos[arm], self.ee_rot[arm], iterations=10)
            g = (d[6] + 1) / 2
            targets[robot.GRIPPER_INDICES[arm]] = robot.GRIPPER_CLOSED + g * (robot.GRIPPER_OPEN - robot.GRIPPER_CLOSED)
        targets[robot.ARM_INDICES] = q
        return targets
