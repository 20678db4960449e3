"""PenInCup: put a pen into a pen cup (``EmbodieDreamer-PenInCup-v0``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from embodied_gym.sim import robot
from embodied_gym.sim.kinematics import horizontal_rotation, top_down_rotation
from embodied_gym.sim.tasks.base import ObjectRange, Task, body_frame, quat_matrix, quat_yaw
from embodied_gym.sim.tasks.objects import add_free_body, hollow_cylinder
from embodied_gym.sim.tasks.planning import (
    ARM_BASES,
    FINGERTIP_BELOW_TCP,
    ExpertPlan,
    Waypoint,
    closest_yaw,
    grip_command,
    natural_closing_yaw,
)

PEN_RADIUS = 0.006
PEN_HALF_LENGTH = 0.075
PENCUP_INNER = 0.03
PENCUP_HEIGHT = 0.09
ABOVE_RIM = 0.05
"""TPO's target is this far above the pen cup's rim (the pen is dropped from there)."""
PRE_GRASP_HEIGHT = 0.04
"""The expert hovers this far above its grasp pose, settling, before it goes straight down."""


@dataclass
class PenInCup(Task):
    """Put a pen into a pen cup with the right arm."""

    name: str = "PenInCup"
    description: str = "Put the pen into the pen cup."
    max_episode_steps: int = 350
    ranges: dict = field(
        default_factory=lambda: {
            "pen": ObjectRange((0.10, 0.18), (0.40, 0.46), (-0.3, 0.3)),
            "pencup": ObjectRange((0.0, 0.06), (0.55, 0.60)),
        }
    )

    summary = "put a pen into a pen cup"
    object_docs = {
        "pen": "15 cm long, 12 mm thick, 12 g, lying on the table, its long axis near the x axis",
        "pencup": "inner radius 3 cm, 9 cm tall, 300 g",
    }
    success_doc = "The pen's lower tip is inside the pen cup's inner volume and no gripper touches the pen."
    reward_doc = (
        "In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to the pen's middle), "
        "grasp (pen held or inside), transport (pen tip to above the cup), inside, and success "
        "(counted twice)."
    )
    reward_terms = ("reach", "grasp", "transport", "inside", "success")
    paper_success = (20, 70)
    grasped_object = "pen"
    place_target = "pencup"

    def add_objects(self, spec):
        m, L, r = 0.012, PEN_HALF_LENGTH, PEN_RADIUS
        # The pen's long axis is its body x axis; it lies on the table.
        body = add_free_body(spec, "pen", m, r, (m * r**2 / 2, m * L**2 / 3, m * L**2 / 3))
        body.add_geom(
            name="pen",
            type=mujoco.mjtGeom.mjGEOM_CAPSULE,
            size=(r, L - r, 0),
            pos=(0, 0, r),
            quat=(math.cos(math.pi / 4), 0, math.sin(math.pi / 4), 0),
            rgba=(0.1, 0.2, 0.75, 1),
            condim=4,
            friction=(1.0, 0.005, 0.0001),
        )
        hollow_cylinder(spec, "pencup", PENCUP_INNER + 0.004, PENCUP_HEIGHT, 0.004, 0.3, (0.25, 0.25, 0.28, 1))

    def pen_tips(self, data, idx) -> tuple[np.ndarray, np.ndarray]:
        """(lower tip, upper tip) of the pen's axis, world frame."""
        pos, rot = body_frame(data, idx.object_bodies["pen"])
        centre = pos + rot[:, 2] * PEN_RADIUS
        a, b = centre + rot[:, 0] * PEN_HALF_LENGTH, centre - rot[:, 0] * PEN_HALF_LENGTH
        return (a, b) if a[2] <= b[2] else (b, a)

    def tip_inside(self, data, idx) -> bool:
        low, _ = self.pen_tips(data, idx)
        cpos, crot = body_frame(data, idx.object_bodies["pencup"])
        local = crot.T @ (low - cpos)
        return bool(np.hypot(local[0], local[1]) < PENCUP_INNER and 0.0 <= local[2] <= PENCUP_HEIGHT)

    def reach_point(self, poses):
        """The middle of the pen's axis."""
        pose = np.asarray(poses["pen"], dtype=np.float64)
        return pose[:3] + quat_matrix(pose[3:7])[:, 2] * PEN_RADIUS

    def evaluate(self, model, data, idx):
        low, _ = self.pen_tips(data, idx)
        return self._place_status(data, idx, "pen", "pencup", self.tip_inside(data, idx), "inside", moved_xy=low[:2])

    def score_target(self, start_poses, poses):
        """5 cm above the pen cup's rim, over its centre."""
        x, y = poses["pencup"][:2]
        return np.array([x, y, PENCUP_HEIGHT + ABOVE_RIM])

    def expert_plan(self, poses):
        """Pinch the pen in its middle from above, turn it upright, lower its tip into the cup, let go.

        Built to survive a robot that is not the simulator (the stand-in's latency, backlash and
        friction; BENCHMARKS.md, Scripted experts section): the gripper first hovers 4 cm above the pen until the
        joint integral action has settled, then goes straight down to a grasp height that keeps
        the fingertips clear of the table, settles again and closes. While the pen is carried over
        the cup and lowered into it, :class:`_TipFeedback` puts the pen's measured lower tip, not the
        plan's idea of it, over the cup."""
        pen, cup = poses["pen"], poses["pencup"]
        pen_yaw = quat_yaw(pen[3:])
        closing = closest_yaw(pen_yaw + math.pi / 2, natural_closing_yaw(1, pen[:2]))
        grasp_z = 2 * PEN_RADIUS + FINGERTIP_BELOW_TCP - 0.009
        rot = top_down_rotation(closing)
        grip = grip_command(PEN_RADIUS, 0.004)
        pre = np.array([*pen[:2], grasp_z + PRE_GRASP_HEIGHT])
        at = np.array([*pen[:2], grasp_z])
        wps = [
            Waypoint(40, pre, rot, robot.GRIPPER_OPEN),
            Waypoint(30, pre, rot, robot.GRIPPER_OPEN),  # hover: let the integral action settle
            Waypoint(20, at, rot, robot.GRIPPER_OPEN),  # straight down
            Waypoint(10, at, rot, robot.GRIPPER_OPEN),
            Waypoint(15, at, rot, grip),
            Waypoint(35, np.array([*pen[:2], 0.25]), rot, grip),
        ]
        # Pitch the gripper level (turning about the closing axis), so the pen hangs vertical;
        # then turn about the vertical (the pen stays vertical) to point away from the arm's base.
        pen_dir = np.array([math.cos(pen_yaw), math.sin(pen_yaw), 0.0])
        approach = -pen_dir if pen_dir[0] > 0 else pen_dir  # point towards the table centre
        level = horizontal_rotation(approach, closing)
        radial = np.array([*(cup[:2] - ARM_BASES[1]), 0.0])
        turn = math.atan2(radial[1], radial[0]) - math.atan2(approach[1], approach[0])
        c, s_ = math.cos(turn), math.sin(turn)
        over_cup = np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1]]) @ level
        # Where the pen's centre sits in the TCP frame after the grasp.
        offset_local = rot.T @ (np.array([*pen[:2], PEN_RADIUS]) - at)
        hold = wps[-1].pos

        def tcp_for(centre):
            return centre - over_cup @ offset_local

        above_cup = tcp_for(np.array([*cup[:2], 0.12 + PEN_HALF_LENGTH]))
        inside = tcp_for(np.array([*cup[:2], 0.07 + PEN_HALF_LENGTH]))
        wps += [
            Waypoint(50, hold, level, grip),
            Waypoint(60, above_cup, over_cup, grip),
            Waypoint(30, inside, over_cup, grip),
            Waypoint(15, inside, over_cup, robot.GRIPPER_OPEN),
            Waypoint(30, inside + np.array([0, 0, 0.10]), over_cup, robot.GRIPPER_OPEN),
        ]
        starts = np.cumsum([0] + [w.steps for w in wps])
        # The plan's lower tip in the TCP frame, the pen hanging vertical below its centre.
        tip_local = offset_local - over_cup.T @ np.array([0.0, 0.0, PEN_HALF_LENGTH])
        # The pen's pinch needs the joints on the IK solution to a millimetre through the slow carry
        # as well as the holds: integral action below 0.01 rad per step (without it the pinch fails
        # on both stand-in worlds; benchmarks/experts.py, BENCHMARKS.md, Scripted experts section).
        return ExpertPlan(1, wps, _TipFeedback(int(starts[7]), int(starts[9]), tip_local), integral_below=0.01)


class _TipFeedback:
    """PenInCup's closed loop (:attr:`ExpertPlan.feedback`): from step ``start`` (the carry over the
    cup) to ``end`` (the release), it estimates where the pen's lower tip hangs in the gripper
    (a moving average of the tip, from that step's ``info["object_poses"]``, in the TCP frame measured
    through forward kinematics) and shifts the TCP target by the difference to ``tip_local``, the
    plan's assumption, so that the measured tip, however the pen was pinched or swings, goes into
    the cup. From ``end`` on the last shift is kept, so opening does not jerk the arm. On a real
    robot the pen pose comes from perception or motion capture, as ``info["object_poses"]`` does
    for the stand-in."""

    SMOOTHING = 0.2
    """Weight of the newest reading in the moving average."""
    MAX_SHIFT = 0.05
    """Largest shift of the TCP target (m): a pen dropped or knocked away is not chased."""

    def __init__(self, start: int, end: int, tip_local: np.ndarray):
        self.start, self.end, self.tip_local = start, end, tip_local
        self.hand: np.ndarray | None = None
        self.shift = np.zeros(3)

    def __call__(self, t, poses, pos, rot, tcp_pos, tcp_rot):
        if t < self.start:
            return pos
        if t < self.end:
            tip = lower_tip(poses["pen"])
            hand = tcp_rot.T @ (tip - tcp_pos)
            self.hand = hand if self.hand is None else (1 - self.SMOOTHING) * self.hand + self.SMOOTHING * hand
            shift = rot @ (self.tip_local - self.hand)
            norm = np.linalg.norm(shift)
            self.shift = shift * min(1.0, self.MAX_SHIFT / norm) if norm > 0 else shift
        return pos + self.shift


def lower_tip(pose) -> np.ndarray:
    """The lower end of the pen's axis (world frame) from its ``[x, y, z, qw, qx, qy, qz]`` pose."""
    pose = np.asarray(pose, dtype=np.float64)
    rot = quat_matrix(pose[3:7])
    centre = pose[:3] + rot[:, 2] * PEN_RADIUS
    a, b = centre + rot[:, 0] * PEN_HALF_LENGTH, centre - rot[:, 0] * PEN_HALF_LENGTH
    return a if a[2] <= b[2] else b
