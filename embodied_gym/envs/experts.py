"""Scripted experts: Cartesian waypoints for the TCP, tracked through IK.

``expert = make_expert(env)`` returns a callable ``expert(obs, info) -> action`` that works in any
control mode. It plans from the privileged object poses in ``info`` at the first step of each
episode (``info["step"] == 0``) and then follows the plan open-loop in Cartesian space; each step
it solves IK for the active arm and converts the joint targets into the env's action format.
The other arm holds its start pose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from embodied_gym.envs import robot, spaces as sp
from embodied_gym.envs.kinematics import ArmKinematics, horizontal_rotation, rotation_error, top_down_rotation
from embodied_gym.envs.tasks import (CUP_HEIGHT, CUP_RADIUS, MAT_HALF, PEN_HALF_LENGTH, PEN_RADIUS, quat_yaw,
                                     REMOTE_HALF)

# Inner face of a finger pad sits this far inside the finger's rail position (measured on the mesh).
_PAD_INSET = 0.0224
# Fingertips reach this far past the TCP along the approach axis.
_FINGERTIP_BELOW_TCP = 0.024
_KI, _LEAK, _MAX_INTEGRAL, _STILL = 0.05, 0.995, 0.15, 0.01
_SETTLE_STEPS = 15
_ARM_BASES = np.array([[-0.469, 0.5], [0.469, 0.5]])


def grip_command(half_width: float, squeeze: float) -> float:
    """Rail position that closes the pads ``squeeze`` metres into an object ``2*half_width`` wide."""
    return float(np.clip(half_width + _PAD_INSET - squeeze, robot.GRIPPER_CLOSED, robot.GRIPPER_OPEN))


@dataclass
class Waypoint:
    """Reach ``pos``/``rot`` with the gripper at ``grip`` over ``steps`` control steps."""

    steps: int
    pos: np.ndarray
    rot: np.ndarray
    grip: float


def _slerp_rot(r0: np.ndarray, r1: np.ndarray, s: float) -> np.ndarray:
    err = rotation_error(r1, r0)  # world-frame axis-angle from r0 to r1
    angle = np.linalg.norm(err)
    if angle < 1e-9:
        return r1.copy()
    k = err / angle
    a = s * angle
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return (np.eye(3) + math.sin(a) * kx + (1 - math.cos(a)) * kx @ kx) @ r0


def _closest_yaw(yaw: float, reference: float) -> float:
    """``yaw`` or ``yaw ± π`` (the gripper is symmetric), whichever is nearest ``reference``."""
    cands = [yaw + k * math.pi for k in (-2, -1, 0, 1, 2)]
    return min(cands, key=lambda c: abs(c - reference))


class ScriptedExpert:
    """Waypoint-following expert for one env (see module docstring)."""

    def __init__(self, env: gym.Env):
        self.env = env.unwrapped
        self.task = self.env.task
        # Both the sim and the real env carry the arm model their controller uses for IK.
        kin = self.env.kinematics
        self.kin = ArmKinematics(kin.model, kin.idx)
        self.plan: list[Waypoint] | None = None
        self.arm = 1

    def reset(self) -> None:
        self.plan = None

    # ---------------------------------------------------------------- planning
    def _start_pose(self, arm):
        return self.kin.tcp_pose(robot.START_QPOS[robot.ARM_INDICES], arm)

    def _natural_closing_yaw(self, arm: int, xy: np.ndarray) -> float:
        d = xy - _ARM_BASES[arm]
        return math.atan2(d[1], d[0]) + math.pi / 2

    def _pick(self, arm, centre_xy, grasp_z, closing_yaw, grip, lift_z):
        rot = top_down_rotation(closing_yaw)
        above = np.array([*centre_xy, grasp_z + 0.10])
        at = np.array([*centre_xy, grasp_z])
        return [
            Waypoint(40, above, rot, robot.GRIPPER_OPEN),
            Waypoint(30, at, rot, robot.GRIPPER_OPEN),
            Waypoint(_SETTLE_STEPS, at, rot, robot.GRIPPER_OPEN),  # let the integral action settle
            Waypoint(15, at, rot, grip),
            Waypoint(40, np.array([*centre_xy, lift_z]), rot, grip),
        ]

    def _plan(self, info) -> list[Waypoint]:
        poses = info["object_poses"]
        name = self.task.name
        if name == "PickCup":
            cup = poses["cup"][:3]
            self.arm = 1 if cup[0] >= 0 else 0
            grasp_z = CUP_HEIGHT - 0.035
            wps = self._pick(self.arm, cup[:2], grasp_z, self._natural_closing_yaw(self.arm, cup[:2]),
                             grip_command(CUP_RADIUS, 0.006), grasp_z + 0.10)
            return wps + [Waypoint(20, wps[-1].pos, wps[-1].rot, wps[-1].grip)]
        self.arm = 1
        if name == "PenInCup":
            pen, cup = poses["pen"], poses["pencup"]
            pen_yaw = quat_yaw(pen[3:])
            closing = _closest_yaw(pen_yaw + math.pi / 2, self._natural_closing_yaw(1, pen[:2]))
            grasp_z = 2 * PEN_RADIUS + _FINGERTIP_BELOW_TCP - 0.009
            wps = self._pick(1, pen[:2], grasp_z, closing, grip_command(PEN_RADIUS, 0.004), 0.25)
            # Pitch the gripper level (turning about the closing axis), so the pen hangs vertical;
            # then turn about the vertical (the pen stays vertical) to point away from the arm's base.
            pen_dir = np.array([math.cos(pen_yaw), math.sin(pen_yaw), 0.0])
            approach = -pen_dir if pen_dir[0] > 0 else pen_dir  # point towards the table centre
            level = horizontal_rotation(approach, closing)
            radial = np.array([*(cup[:2] - _ARM_BASES[1]), 0.0])
            turn = math.atan2(radial[1], radial[0]) - math.atan2(approach[1], approach[0])
            c, s_ = math.cos(turn), math.sin(turn)
            over_cup = np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1]]) @ level
            # Where the pen's centre sits in the TCP frame after the grasp.
            offset_local = wps[1].rot.T @ (np.array([*pen[:2], PEN_RADIUS]) - wps[1].pos)
            hold = wps[-1].pos

            def tcp_for(centre):
                return centre - over_cup @ offset_local

            above_cup = tcp_for(np.array([*cup[:2], 0.12 + PEN_HALF_LENGTH]))
            inside = tcp_for(np.array([*cup[:2], 0.07 + PEN_HALF_LENGTH]))
            g = wps[-1].grip
            return wps + [
                Waypoint(50, hold, level, g),
                Waypoint(60, above_cup, over_cup, g),
                Waypoint(30, inside, over_cup, g),
                Waypoint(15, inside, over_cup, robot.GRIPPER_OPEN),
                Waypoint(30, inside + np.array([0, 0, 0.10]), over_cup, robot.GRIPPER_OPEN),
            ]
        if name == "RemoteInBox":
            remote, box = poses["remote"], poses["box"]
            closing = _closest_yaw(quat_yaw(remote[3:]) + math.pi / 2, self._natural_closing_yaw(1, remote[:2]))
            grasp_z = 2 * REMOTE_HALF[2] + _FINGERTIP_BELOW_TCP - 0.018
            lift_z = 0.19
            wps = self._pick(1, remote[:2], grasp_z, closing, grip_command(REMOTE_HALF[1], 0.006), lift_z)
            place_yaw = _closest_yaw(quat_yaw(box[3:]) + math.pi / 2, closing)
            rot = top_down_rotation(place_yaw)
            g = wps[-1].grip
            low = np.array([*box[:2], 0.006 + 0.012 + grasp_z])
            return wps + [
                Waypoint(60, np.array([*box[:2], lift_z]), rot, g),
                Waypoint(40, low, rot, g),
                Waypoint(15, low, rot, robot.GRIPPER_OPEN),
                Waypoint(30, low + np.array([0, 0, 0.12]), rot, robot.GRIPPER_OPEN),
            ]
        if name == "CupOnMat":
            cup, mat = poses["cup"], poses["mat"]
            grasp_z = CUP_HEIGHT - 0.035
            closing = self._natural_closing_yaw(1, cup[:2])
            wps = self._pick(1, cup[:2], grasp_z, closing, grip_command(CUP_RADIUS, 0.006), grasp_z + 0.10)
            rot, g = wps[-1].rot, wps[-1].grip
            low = np.array([*mat[:2], 2 * MAT_HALF[2] + 0.008 + grasp_z])
            return wps + [
                Waypoint(60, np.array([*mat[:2], grasp_z + 0.10]), rot, g),
                Waypoint(30, low, rot, g),
                Waypoint(15, low, rot, robot.GRIPPER_OPEN),
                Waypoint(30, low + np.array([0, 0, 0.12]), rot, robot.GRIPPER_OPEN),
            ]
        raise ValueError(f"no scripted expert for task {name!r}")

    # ---------------------------------------------------------------- acting
    def _desired(self, t: int) -> tuple[np.ndarray, np.ndarray, float]:
        pos, rot = self._start_pose(self.arm)
        grip = robot.GRIPPER_OPEN
        for wp in self.plan:
            if t < wp.steps:
                s = 0.5 - 0.5 * math.cos(math.pi * (t + 1) / wp.steps)  # eased
                return pos + s * (wp.pos - pos), _slerp_rot(rot, wp.rot, s), grip + s * (wp.grip - grip)
            t -= wp.steps
            pos, rot, grip = wp.pos, wp.rot, wp.grip
        return pos, rot, grip

    def __call__(self, obs, info) -> np.ndarray:
        if self.plan is None or info.get("step", 0) == 0:
            self.plan = self._plan(info)
            self._q = robot.START_QPOS[robot.ARM_INDICES].copy()
            self._integral = np.zeros(12)
        t = int(info.get("step", 0))
        pos, rot, grip = self._desired(t)
        previous = self._q
        self._q = self.kin.solve(self._q, self.arm, pos, rot, iterations=30)
        # Joint-space integral action on the measured joints: soft position gains sag under
        # gravity and friction by different amounts on every robot, so an open-loop plan misses.
        measured = obs["joint_pos"] if isinstance(obs, dict) and "joint_pos" in obs else self.env.joint_positions()
        error = self._q - np.asarray(measured, dtype=np.float64)[robot.ARM_INDICES]
        # Integrate only on joints that are nearly still: tracking lag while moving is not sag.
        still = np.abs(self._q - previous) < _STILL
        self._integral = np.clip(_LEAK * self._integral + _KI * error * still, -_MAX_INTEGRAL, _MAX_INTEGRAL)
        targets = robot.START_QPOS.copy()
        targets[robot.ARM_INDICES] = self._q + self.kin.gravity_sag(self._q) + self._integral
        targets[robot.GRIPPER_INDICES[self.arm]] = grip
        return self._to_action(targets, pos, rot, grip).astype(np.float32)

    def _to_action(self, targets, pos, rot, grip) -> np.ndarray:
        mode = self.env.control_mode
        if mode == "joint_pos":
            return targets
        if mode == "joint_delta":
            return np.clip((targets - self.env.joint_targets) / sp.MAX_JOINT_DELTA, -1, 1)
        ee_pos, ee_rot = self.env.ee_targets
        action = np.zeros(14)
        for arm in range(2):
            seg = slice(arm * 7, arm * 7 + 7)
            g = self.env.joint_targets[robot.GRIPPER_INDICES[arm]]
            if arm == self.arm:
                action[seg][:3] = (pos - ee_pos[arm]) / sp.MAX_EE_TRANSLATION
                action[seg][3:6] = rotation_error(rot, ee_rot[arm]) / sp.MAX_EE_ROTATION
                g = grip
            action[arm * 7 + 6] = 2 * (g - robot.GRIPPER_CLOSED) / (robot.GRIPPER_OPEN - robot.GRIPPER_CLOSED) - 1
        return np.clip(action, -1, 1)


def make_expert(env: gym.Env) -> ScriptedExpert:
    """The scripted expert for ``env``'s task: ``expert(obs, info) -> action``."""
    return ScriptedExpert(env)
