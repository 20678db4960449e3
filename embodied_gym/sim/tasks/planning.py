"""The scripted experts' planning toolkit: TCP waypoints and the pick motion every task starts with.

A task's :meth:`~embodied_gym.sim.tasks.base.Task.expert_plan` returns an :class:`ExpertPlan`
built from these pieces; :class:`embodied_gym.envs.experts.ScriptedExpert` tracks it through IK.
Positions are the TCP's (world frame, m), rotations the gripper's (3x3), ``grip`` the finger's
rail position (m).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embodied_gym.sim import robot
from embodied_gym.sim.kinematics import top_down_rotation

PAD_INSET = 0.0224
"""The inner face of a finger pad sits this far inside the finger's rail position (measured on the mesh)."""
FINGERTIP_BELOW_TCP = 0.024
"""Fingertips reach this far past the TCP along the approach axis."""
SETTLE_STEPS = 15
"""Steps the expert waits at the grasp pose, for the arm (and any integral action) to settle, before closing."""
HOLD_BELOW = 0.002
"""A joint whose planned target moves less than this per control step (0.1 rad/s at 50 Hz) is held:
the default :attr:`ExpertPlan.integral_below`."""
ARM_BASES = np.array([[-0.469, 0.5], [0.469, 0.5]])
"""(x, y) of the left and right arm's base (m)."""


def grip_command(half_width: float, squeeze: float) -> float:
    """Rail position that closes the pads ``squeeze`` metres into an object ``2*half_width`` wide."""
    return float(np.clip(half_width + PAD_INSET - squeeze, robot.GRIPPER_CLOSED, robot.GRIPPER_OPEN))


@dataclass
class Waypoint:
    """Reach ``pos``/``rot`` with the gripper at ``grip`` over ``steps`` control steps."""

    steps: int
    pos: np.ndarray
    rot: np.ndarray
    grip: float


Feedback = Callable[[int, dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``feedback(step, object_poses, pos, rot, tcp_pos, tcp_rot) -> pos``: see :class:`ExpertPlan`."""


@dataclass
class ExpertPlan:
    """The arm that does the task (0 left, 1 right) and its waypoints, followed in order from the
    start pose; the other arm holds its start pose.

    ``feedback`` (optional) closes a loop around the plan: every step the expert calls it with the
    step, that step's ``info["object_poses"]`` (what a real robot's perception or motion capture
    gives), the plan's TCP position and rotation for the step, and the TCP pose measured through
    forward kinematics of the measured joints; it returns the TCP position to track instead of the
    plan's. ``None`` (the default) follows the plan open-loop in Cartesian space. Feedback objects
    keep state over an episode: a plan (and its feedback) is made afresh at each episode's step 0.

    ``integral_below`` (rad per control step) switches on the expert's joint-space integral term
    on the joints whose planned target moves less than that per step: it drives the measured joints
    onto the IK solution where soft gains sag under gravity and friction, so a hold (the settle at
    the grasp pose) ends where the plan means, whatever the robot's gains. ``None`` turns it off.
    Integrating while the arm moves adds tracking lag to the term, which winds up under command
    latency, so integrating on every slow joint costs the PickCup and CupOnMat experts episodes on a
    robot whose commands act late, where :data:`HOLD_BELOW` does not (``benchmarks/experts.py``;
    BENCHMARKS.md, Scripted experts section). PenInCup's pinch of a 12 mm pen needs the term through its slow
    carry too and sets 0.01."""

    arm: int
    waypoints: list[Waypoint]
    feedback: Feedback | None = None
    integral_below: float | None = HOLD_BELOW


def natural_closing_yaw(arm: int, xy: np.ndarray) -> float:
    """The yaw of the closing axis when the gripper points straight out from ``arm``'s base to ``xy``."""
    d = xy - ARM_BASES[arm]
    return math.atan2(d[1], d[0]) + math.pi / 2


def closest_yaw(yaw: float, reference: float) -> float:
    """``yaw`` or ``yaw ± π`` (the gripper is symmetric), whichever is nearest ``reference``."""
    cands = [yaw + k * math.pi for k in (-2, -1, 0, 1, 2)]
    return min(cands, key=lambda c: abs(c - reference))


def pick(centre_xy, grasp_z: float, closing_yaw: float, grip: float, lift_z: float) -> list[Waypoint]:
    """Top-down pick: above the object, down to ``grasp_z``, settle, close to ``grip``, lift to ``lift_z``."""
    rot = top_down_rotation(closing_yaw)
    above = np.array([*centre_xy, grasp_z + 0.10])
    at = np.array([*centre_xy, grasp_z])
    return [
        Waypoint(40, above, rot, robot.GRIPPER_OPEN),
        Waypoint(30, at, rot, robot.GRIPPER_OPEN),
        Waypoint(SETTLE_STEPS, at, rot, robot.GRIPPER_OPEN),  # let the integral action settle
        Waypoint(15, at, rot, grip),
        Waypoint(40, np.array([*centre_xy, lift_z]), rot, grip),
    ]


def put_down(xy, carry_z: float, low_z: float, rot: np.ndarray, grip: float, descend_steps: int) -> list[Waypoint]:
    """Carry the held object over ``xy`` at ``carry_z``, lower the TCP to ``low_z``, open, back off 12 cm up."""
    low = np.array([*xy, low_z])
    return [
        Waypoint(60, np.array([*xy, carry_z]), rot, grip),
        Waypoint(descend_steps, low, rot, grip),
        Waypoint(15, low, rot, robot.GRIPPER_OPEN),
        Waypoint(30, low + np.array([0, 0, 0.12]), rot, robot.GRIPPER_OPEN),
    ]
