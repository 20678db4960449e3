"""PickCup: grab a paper cup and lift it at least 5 cm (``EmbodieDreamer-PickCup-v0``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embodied_gym.sim.tasks.base import Contacts, ObjectRange, Task, reach_term
from embodied_gym.sim.tasks.objects import CUP_GRASP_BELOW_RIM, CUP_GRASP_OFFSET, CUP_HEIGHT, CUP_RADIUS, add_cup
from embodied_gym.sim.tasks.planning import ExpertPlan, Waypoint, grip_command, natural_closing_yaw, pick


@dataclass
class PickCup(Task):
    """Grab a paper cup and lift it at least :attr:`lift_height`; either arm may take it."""

    name: str = "PickCup"
    description: str = "Grab the paper cup and lift it."
    max_episode_steps: int = 200
    lift_height: float = 0.05
    ranges: dict = field(default_factory=lambda: {"cup": ObjectRange((-0.15, 0.15), (0.42, 0.58))})

    summary = "grab a paper cup and lift it at least 5 cm"
    object_docs = {"cup": "paper cup, radius 2.5 cm, 8 cm tall, 15 g"}
    arm_doc = "Either arm may take it (the expert uses the arm on the cup's side)."
    success_doc = (
        "The cup's base is at least 5 cm above the table, both finger pads of one gripper touch it, "
        "and it does not touch the table."
    )
    reward_doc = (
        "In [0, 1]: mean of reach (1 - tanh(10·d), d = distance from the nearest TCP to a point 3 cm "
        "below the rim), grasp (1 while both pads of one gripper touch the cup), lift (height / 5 cm "
        "while grasped) and success (counted twice)."
    )
    reward_terms = ("reach", "grasp", "lift", "success")
    paper_success = (50, 90)
    grasped_object = "cup"

    def add_objects(self, spec):
        add_cup(spec, 0.015, (0.93, 0.92, 0.86, 1))

    def reach_point(self, poses):
        return np.asarray(poses["cup"][:3], dtype=np.float64) + CUP_GRASP_OFFSET

    def evaluate(self, model, data, idx):
        cup = idx.object_bodies["cup"]
        contacts = Contacts(data, idx)
        pos = data.xpos[cup]
        arm = contacts.grasping_arm("cup")
        on_table = contacts.touch("table", "cup")
        height = float(pos[2])
        success = arm is not None and not on_table and height >= self.lift_height
        terms = {
            "reach": reach_term(self.nearest_tcp_distance(data, idx, self.reach_point({"cup": pos}))),
            "grasp": float(arm is not None),
            "lift": float(arm is not None) * min(max(height / self.lift_height, 0.0), 1.0),
        }
        return self._finish(terms, success)

    def score_target(self, start_poses, poses):
        """The cup's grasp point at the cup's *start* position, raised by the lift height: where a
        successful lift ends."""
        x, y = start_poses["cup"][:2]
        return np.array([x, y, CUP_HEIGHT - CUP_GRASP_BELOW_RIM + self.lift_height])

    def expert_plan(self, poses):
        cup = poses["cup"][:3]
        arm = 1 if cup[0] >= 0 else 0
        grasp_z = CUP_HEIGHT - 0.035
        wps = pick(cup[:2], grasp_z, natural_closing_yaw(arm, cup[:2]), grip_command(CUP_RADIUS, 0.006), grasp_z + 0.10)
        return ExpertPlan(arm, wps + [Waypoint(20, wps[-1].pos, wps[-1].rot, wps[-1].grip)])
