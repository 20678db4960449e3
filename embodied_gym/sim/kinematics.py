"""Forward and inverse kinematics of the arms' tool centre points, on a scratch ``MjData``.

The IK is damped least squares on one arm's six joints, position and orientation together.
It runs on its own ``MjData`` so that solving never disturbs the simulation state.
"""

from __future__ import annotations

import mujoco
import numpy as np

from embodied_gym.sim import robot
from embodied_gym.sim.scene import SceneIndex


def rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Axis-angle vector (world frame) rotating ``current`` onto ``target`` (3x3 matrices)."""
    quat_t, quat_c, err = np.zeros(4), np.zeros(4), np.zeros(3)
    mujoco.mju_mat2Quat(quat_t, target.ravel())
    mujoco.mju_mat2Quat(quat_c, current.ravel())
    mujoco.mju_subQuat(err, quat_t, quat_c)  # in current's local frame
    return current @ err


class ArmKinematics:
    """TCP pose and IK of both arms of a compiled scene."""

    def __init__(self, model: mujoco.MjModel, idx: SceneIndex):
        self.model = model
        self.idx = idx
        self.scratch = mujoco.MjData(model)
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._bias = np.zeros(model.nv)
        lo = model.jnt_range[[model.dof_jntid[d] for d in idx.arm_dof], 0]
        hi = model.jnt_range[[model.dof_jntid[d] for d in idx.arm_dof], 1]
        self.arm_low, self.arm_high = lo.reshape(2, 6), hi.reshape(2, 6)
        self.rest = robot.START_QPOS[robot.ARM_INDICES].reshape(2, 6)

    def _set(self, qpos_arms: np.ndarray) -> None:
        self.scratch.qpos[self.idx.arm_qpos] = qpos_arms
        mujoco.mj_kinematics(self.model, self.scratch)
        mujoco.mj_comPos(self.model, self.scratch)

    def tcp_pose(self, qpos_arms: np.ndarray, arm: int) -> tuple[np.ndarray, np.ndarray]:
        """(position, rotation matrix) of ``arm``'s TCP for the 12 arm joint angles."""
        self._set(qpos_arms)
        s = self.idx.tcp_sites[arm]
        return self.scratch.site_xpos[s].copy(), self.scratch.site_xmat[s].reshape(3, 3).copy()

    def gravity_sag(self, qpos_arms: np.ndarray) -> np.ndarray:
        """How far (rad) each arm joint's position servo sags under gravity at ``qpos_arms``:
        gravity torque / kp of the model's actuators. Adding it to a target pre-compensates."""
        self._set(qpos_arms)
        self.scratch.qvel[:] = 0.0
        mujoco.mj_rne(self.model, self.scratch, 0, self._bias)
        kp = self.model.actuator_gainprm[self.idx.arm_actuators, 0]
        return self._bias[self.idx.arm_dof] / kp

    def solve(
        self,
        qpos_arms: np.ndarray,
        arm: int,
        pos: np.ndarray,
        rot: np.ndarray | None = None,
        iterations: int = 50,
        damping: float = 1e-3,
        rot_weight: float = 0.3,
        tol: float = 1e-4,
        posture_gain: float = 0.05,
    ) -> np.ndarray:
        """Joint angles (all 12; only ``arm``'s six change) that put ``arm``'s TCP at ``pos``
        (and ``rot`` if given), starting from ``qpos_arms``."""
        q = np.array(qpos_arms, dtype=float)
        cols = self.idx.arm_dof[arm * 6 : (arm + 1) * 6]
        site = self.idx.tcp_sites[arm]
        for _ in range(iterations):
            self._set(q)
            err_p = pos - self.scratch.site_xpos[site]
            mujoco.mj_jacSite(self.model, self.scratch, self._jacp, self._jacr, site)
            if rot is None:
                err, jac = err_p, self._jacp[:, cols]
            else:
                err_r = rotation_error(rot, self.scratch.site_xmat[site].reshape(3, 3))
                err = np.concatenate([err_p, rot_weight * err_r])
                jac = np.vstack([self._jacp[:, cols], rot_weight * self._jacr[:, cols]])
            if np.linalg.norm(err) < tol:
                break
            seg = slice(arm * 6, (arm + 1) * 6)
            jinv = jac.T @ np.linalg.inv(jac @ jac.T + damping * np.eye(len(err)))
            dq = jinv @ err
            # In the null space, drift towards the rest posture, away from roll-joint wrap-around.
            dq += posture_gain * (np.eye(6) - jinv @ jac) @ (self.rest[arm] - q[seg])
            dq = np.clip(dq, -0.3, 0.3)
            q[seg] = np.clip(q[seg] + dq, self.arm_low[arm], self.arm_high[arm])
        return q


def top_down_rotation(closing_axis_yaw: float) -> np.ndarray:
    """TCP orientation pointing straight down, fingers closing along the horizontal direction
    at ``closing_axis_yaw``. Columns: approach (x), closing (y), z = x × y."""
    x = np.array([0.0, 0.0, -1.0])
    y = np.array([np.cos(closing_axis_yaw), np.sin(closing_axis_yaw), 0.0])
    return np.stack([x, y, np.cross(x, y)], axis=1)


def horizontal_rotation(approach: np.ndarray, closing_axis_yaw: float) -> np.ndarray:
    """TCP orientation pointing horizontally along ``approach``, closing along the horizontal
    direction at ``closing_axis_yaw`` (must be perpendicular to ``approach``)."""
    x = np.asarray(approach, float) / np.linalg.norm(approach)
    y = np.array([np.cos(closing_axis_yaw), np.sin(closing_axis_yaw), 0.0])
    y = y - x * (x @ y)
    y /= np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)], axis=1)


__all__ = ["ArmKinematics", "horizontal_rotation", "rotation_error", "top_down_rotation"]
