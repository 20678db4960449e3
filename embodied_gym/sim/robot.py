"""The bimanual ALOHA robot as our envs see it: joint layout, limits, start pose.

Two Trossen ViperX-300 6-DoF arms face each other across a table. Each arm has a parallel
gripper whose two fingers slide on a rail; the fingers are mirrored, so one number (the left
finger's rail position, metres) describes the gripper. The 14-D joint vector used for state
and action everywhere in the package is ``[left arm 6, left gripper, right arm 6, right gripper]``,
the layout of LeRobot's ALOHA datasets.
"""

from __future__ import annotations

import numpy as np

ARMS: tuple[str, str] = ("left", "right")
ARM_JOINTS: tuple[str, ...] = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")

#: Names of the 14 entries of every joint vector (LeRobot's ALOHA motor names).
JOINT_NAMES: tuple[str, ...] = tuple(f"{arm}_{j}" for arm in ARMS for j in (*ARM_JOINTS, "gripper"))
#: Indices of the arm joints (12) and grippers (2) inside the 14-D vector.
ARM_INDICES = np.array([i for i, n in enumerate(JOINT_NAMES) if not n.endswith("gripper")])
GRIPPER_INDICES = np.array([i for i, n in enumerate(JOINT_NAMES) if n.endswith("gripper")])

# Joint limits of the ViperX-300 (rad), as in the robot's MJCF, and the finger rail (m).
_ARM_LOW = np.array([-3.14158, -1.85005, -1.76278, -3.14158, -1.8675, -3.14158])
_ARM_HIGH = np.array([3.14158, 1.25664, 1.6057, 3.14158, 2.23402, 3.14158])
GRIPPER_CLOSED = 0.021  # finger rail position at which the pads touch (m)
GRIPPER_OPEN = 0.057  # fully open: 6.9 cm between the pads

JOINT_LOW = np.concatenate([_ARM_LOW, [GRIPPER_CLOSED], _ARM_LOW, [GRIPPER_CLOSED]])
JOINT_HIGH = np.concatenate([_ARM_HIGH, [GRIPPER_OPEN], _ARM_HIGH, [GRIPPER_OPEN]])

# Arms folded above the table, grippers open: ALOHA's sleep pose, clear of every task object.
_ARM_START = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])
START_QPOS = np.concatenate([_ARM_START, [GRIPPER_OPEN], _ARM_START, [GRIPPER_OPEN]])

#: The tool centre point: between the finger pads, 13 cm ahead of the wrist-rotate axis.
TCP_OFFSET = 0.13


def mjcf_joint(arm: str, joint: str) -> str:
    """Name of a joint in the MJCF (gym-aloha's naming)."""
    return f"vx300s_{arm}/{joint}"


def tcp_site(arm: str) -> str:
    return f"{arm}_tcp"
