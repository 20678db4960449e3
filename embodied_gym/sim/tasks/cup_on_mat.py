"""CupOnMat: place a cup upright on a mat (``EmbodieDreamer-CupOnMat-v0``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from embodied_gym.sim.tasks.base import ObjectRange, Task, body_frame
from embodied_gym.sim.tasks.objects import (
    CUP_GRASP_BELOW_RIM,
    CUP_GRASP_OFFSET,
    CUP_HEIGHT,
    CUP_RADIUS,
    add_cup,
    add_free_body,
)
from embodied_gym.sim.tasks.planning import ExpertPlan, grip_command, natural_closing_yaw, pick, put_down

MAT_HALF = (0.06, 0.06, 0.002)


@dataclass
class CupOnMat(Task):
    """Place a cup upright on a mat with the right arm."""

    name: str = "CupOnMat"
    description: str = "Place the cup upright on the mat."
    max_episode_steps: int = 350
    max_tilt_deg: float = 15.0
    ranges: dict = field(
        default_factory=lambda: {
            "cup": ObjectRange((0.10, 0.18), (0.40, 0.46)),
            "mat": ObjectRange((-0.04, 0.04), (0.56, 0.62), (-0.3, 0.3)),
        }
    )

    summary = "place a cup upright on a mat"
    object_docs = {"cup": "radius 2.5 cm, 8 cm tall, 30 g", "mat": "12 x 12 cm, 4 mm thick, 200 g"}
    success_doc = (
        "The cup is upright (tilt under 15 degrees), its base centre lies within the mat and rests on it "
        "(less than 1.5 cm above), and no gripper touches it."
    )
    reward_doc = (
        "In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to a point 3 cm "
        "below the cup's rim), grasp (held or on the mat), transport (cup to the mat centre, "
        "horizontally), on_mat, and success (counted twice)."
    )
    reward_terms = ("reach", "grasp", "transport", "on_mat", "success")
    paper_success = (40, 70)
    grasped_object = "cup"
    place_target = "mat"

    def add_objects(self, spec):
        add_cup(spec, 0.03, (0.85, 0.3, 0.25, 1))
        m = 0.2
        hx, hy, hz = MAT_HALF
        body = add_free_body(spec, "mat", m, hz, (m * hy**2 / 3, m * hx**2 / 3, m * (hx**2 + hy**2) / 3))
        body.add_geom(
            name="mat",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=MAT_HALF,
            pos=(0, 0, hz),
            rgba=(0.2, 0.55, 0.3, 1),
            condim=3,
            friction=(1.2, 0.005, 0.0001),
        )

    def on_mat(self, data, idx) -> bool:
        cpos, crot = body_frame(data, idx.object_bodies["cup"])
        mpos, mrot = body_frame(data, idx.object_bodies["mat"])
        local = mrot.T @ (cpos - mpos)
        upright = crot[2, 2] > math.cos(math.radians(self.max_tilt_deg))
        resting = -0.005 < local[2] - 2 * MAT_HALF[2] < 0.015
        return bool(upright and abs(local[0]) < MAT_HALF[0] and abs(local[1]) < MAT_HALF[1] and resting)

    def reach_point(self, poses):
        """The cup's grasp point, 3 cm below its rim."""
        return np.asarray(poses["cup"][:3], dtype=np.float64) + CUP_GRASP_OFFSET

    def evaluate(self, model, data, idx):
        return self._place_status(data, idx, "cup", "mat", self.on_mat(data, idx), "on_mat")

    def score_target(self, start_poses, poses):
        """The cup's grasp point when the cup stands on the mat's centre."""
        x, y, z = poses["mat"][:3]
        return np.array([x, y, z + 2 * MAT_HALF[2] + CUP_HEIGHT - CUP_GRASP_BELOW_RIM])

    def expert_plan(self, poses):
        cup, mat = poses["cup"], poses["mat"]
        grasp_z = CUP_HEIGHT - 0.035
        wps = pick(cup[:2], grasp_z, natural_closing_yaw(1, cup[:2]), grip_command(CUP_RADIUS, 0.006), grasp_z + 0.10)
        # Open 8 mm above the mat.
        return ExpertPlan(
            1, wps + put_down(mat[:2], grasp_z + 0.10, 2 * MAT_HALF[2] + 0.008 + grasp_z, wps[-1].rot, wps[-1].grip, 30)
        )
