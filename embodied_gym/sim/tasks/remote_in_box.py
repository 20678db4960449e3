"""RemoteInBox: put a TV remote into an open box (``EmbodieDreamer-RemoteInBox-v0``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from embodied_gym.sim.kinematics import top_down_rotation
from embodied_gym.sim.tasks.base import ObjectRange, Task, body_frame, quat_yaw
from embodied_gym.sim.tasks.objects import add_free_body, open_box
from embodied_gym.sim.tasks.planning import (
    FINGERTIP_BELOW_TCP,
    ExpertPlan,
    closest_yaw,
    grip_command,
    natural_closing_yaw,
    pick,
    put_down,
)

REMOTE_HALF = (0.085, 0.0225, 0.01)
BOX_INNER_HALF = (0.13, 0.07)
BOX_HEIGHT = 0.07
BOX_WALL = 0.006
ABOVE_RIM = 0.05
"""TPO's target is this far above the box's rim."""


@dataclass
class RemoteInBox(Task):
    """Put a TV remote into an open box with the right arm."""

    name: str = "RemoteInBox"
    description: str = "Put the TV remote into the box."
    max_episode_steps: int = 350
    ranges: dict = field(
        default_factory=lambda: {
            "remote": ObjectRange((0.14, 0.20), (0.38, 0.45), (-0.3, 0.3)),
            "box": ObjectRange((-0.02, 0.04), (0.56, 0.62), (-0.15, 0.15)),
        }
    )

    summary = "put a TV remote into an open box"
    object_docs = {"remote": "17 x 4.5 x 2 cm, 100 g", "box": "open cardboard box, inner 26 x 14 cm, 7 cm tall, 400 g"}
    success_doc = (
        "The remote's centre is inside the box's inner footprint, its highest corner is below the rim, "
        "and no gripper touches it."
    )
    reward_doc = (
        "In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to the middle of the "
        "remote's top face), grasp (held or inside), transport (remote to the box centre, horizontally), "
        "inside, and success (counted twice)."
    )
    reward_terms = ("reach", "grasp", "transport", "inside", "success")
    paper_success = (60, 80)
    grasped_object = "remote"
    place_target = "box"

    def add_objects(self, spec):
        hx, hy, hz = REMOTE_HALF
        m = 0.1
        body = add_free_body(
            spec, "remote", m, hz, (m * (hy**2 + hz**2) / 3, m * (hx**2 + hz**2) / 3, m * (hx**2 + hy**2) / 3)
        )
        body.add_geom(
            name="remote",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=REMOTE_HALF,
            pos=(0, 0, hz),
            rgba=(0.08, 0.08, 0.09, 1),
            condim=4,
            friction=(1.0, 0.005, 0.0001),
        )
        open_box(spec, "box", BOX_INNER_HALF, BOX_HEIGHT, BOX_WALL, 0.4, (0.62, 0.47, 0.3, 1))

    def inside(self, data, idx) -> bool:
        rpos, rrot = body_frame(data, idx.object_bodies["remote"])
        bpos, brot = body_frame(data, idx.object_bodies["box"])
        centre = rpos + rrot[:, 2] * REMOTE_HALF[2]
        local = brot.T @ (centre - bpos)
        top = centre[2] + np.abs(rrot[2, :]) @ np.array(REMOTE_HALF)  # highest corner
        return bool(
            abs(local[0]) < BOX_INNER_HALF[0] and abs(local[1]) < BOX_INNER_HALF[1] and top < bpos[2] + BOX_HEIGHT
        )

    def reach_point(self, poses):
        """2 cm (the remote's thickness) above the remote's base centre."""
        return np.asarray(poses["remote"][:3], dtype=np.float64) + np.array([0, 0, 2 * REMOTE_HALF[2]])

    def evaluate(self, model, data, idx):
        return self._place_status(data, idx, "remote", "box", self.inside(data, idx), "inside")

    def score_target(self, start_poses, poses):
        """5 cm above the box's rim, over its centre."""
        x, y, z = poses["box"][:3]
        return np.array([x, y, z + BOX_HEIGHT + ABOVE_RIM])

    def expert_plan(self, poses):
        remote, box = poses["remote"], poses["box"]
        closing = closest_yaw(quat_yaw(remote[3:]) + math.pi / 2, natural_closing_yaw(1, remote[:2]))
        grasp_z = 2 * REMOTE_HALF[2] + FINGERTIP_BELOW_TCP - 0.018
        lift_z = 0.19
        wps = pick(remote[:2], grasp_z, closing, grip_command(REMOTE_HALF[1], 0.006), lift_z)
        rot = top_down_rotation(closest_yaw(quat_yaw(box[3:]) + math.pi / 2, closing))
        # Open 12 mm above the box's bottom (6 mm thick).
        return ExpertPlan(1, wps + put_down(box[:2], lift_z, BOX_WALL + 0.012 + grasp_z, rot, wps[-1].grip, 40))
