"""Differentiable forward kinematics (torch) of both arms' TCPs, read off the compiled scene.

Stage 3 scores the surrogate's predicted joint states in Cartesian space, so it needs TCP poses
that gradients flow through. The chain (body offsets, joint axes, TCP site offset) comes from the
same ``MjModel`` the simulator uses; ``tests/test_physaligner.py`` checks it against MuJoCo.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from embodied_gym.sim.scene import SceneIndex


def _quat_to_mat(q: np.ndarray) -> np.ndarray:
    m = np.zeros(9)
    mujoco.mju_quat2Mat(m, np.asarray(q, dtype=np.float64))
    return m.reshape(3, 3)


def _axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues' formula: (..., 3, 3) rotations by ``angle`` (...) about unit ``axis`` (3)."""
    k = torch.tensor([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]], dtype=angle.dtype)
    s, c = torch.sin(angle)[..., None, None], torch.cos(angle)[..., None, None]
    return torch.eye(3, dtype=angle.dtype) + s * k + (1 - c) * (k @ k)


class ArmFK(torch.nn.Module):
    """``forward(q14) -> (positions (..., 2, 3), rotations (..., 2, 3, 3))`` of both TCPs."""

    def __init__(self, model: mujoco.MjModel, idx: SceneIndex):
        super().__init__()
        self.chains = []
        for arm in range(2):
            site = idx.tcp_sites[arm]
            body = model.site_bodyid[site]
            chain = []
            while body > 0:
                chain.append(body)
                body = model.body_parentid[body]
            links = []
            for b in reversed(chain):
                joint = int(model.body_jntadr[b]) if model.body_jntnum[b] else -1
                links.append(
                    (
                        torch.tensor(model.body_pos[b], dtype=torch.float64),
                        torch.tensor(_quat_to_mat(model.body_quat[b]), dtype=torch.float64),
                        torch.tensor(model.jnt_axis[joint], dtype=torch.float64) if joint >= 0 else None,
                        joint,
                    )
                )
            self.chains.append(
                (
                    links,
                    torch.tensor(model.site_pos[site], dtype=torch.float64),
                    torch.tensor(_quat_to_mat(model.site_quat[site]), dtype=torch.float64),
                )
            )
        # Which entry of the 14-D joint vector drives each joint id.
        qpos_of_joint = {int(model.jnt_qposadr[j]): j for j in range(model.njnt)}
        self.column = {qpos_of_joint[int(a)]: i for i, a in enumerate(idx.joint_qpos)}

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = q.to(torch.float64)
        batch = q.shape[:-1]
        positions, rotations = [], []
        for links, site_pos, site_rot in self.chains:
            pos = torch.zeros(*batch, 3, dtype=torch.float64)
            rot = torch.eye(3, dtype=torch.float64).expand(*batch, 3, 3)
            for body_pos, body_rot, axis, joint in links:
                pos = pos + rot @ body_pos
                rot = rot @ body_rot
                if axis is not None:
                    rot = rot @ _axis_angle(axis, q[..., self.column[joint]])
            positions.append(pos + rot @ site_pos)
            rotations.append(rot @ site_rot)
        return torch.stack(positions, -2), torch.stack(rotations, -3)
