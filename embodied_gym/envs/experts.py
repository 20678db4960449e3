"""Scripted experts: Cartesian waypoints for the TCP, tracked through IK.

``expert = make_expert(env)`` returns a callable ``expert(obs, info) -> action`` that works in any
control mode. It asks the env's task for its plan (``task.expert_plan``, written in each task's
module under ``embodied_gym/sim/tasks/``) from the privileged object poses in ``info`` at the first
step of each episode (``info["step"] == 0``) and then follows it open-loop in Cartesian space, unless
the plan brings a ``feedback`` (:class:`~embodied_gym.sim.tasks.planning.ExpertPlan`; PenInCup's
does), which corrects the TCP target each step from the measured joints (forward kinematics) and
that step's object poses. Each step it solves IK for the active arm, adds the arm's gravity sag (and,
on the joints the plan holds, a joint-space integral term: ``ExpertPlan.integral_below``) and converts
the joint targets into the env's action format. The other arm holds its start pose.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

from embodied_gym.envs import spaces as sp
from embodied_gym.envs.base import aloha_env
from embodied_gym.sim import robot
from embodied_gym.sim.kinematics import ArmKinematics, rotation_error

# Waypoint and grip_command are importable from here as before; each task's plan is in its task module.
from embodied_gym.sim.tasks.planning import Feedback, Waypoint, grip_command  # noqa: F401

_KI, _LEAK, _MAX_INTEGRAL = 0.05, 0.995, 0.15
FROM_PLAN = "plan"


def _slerp_rot(r0: np.ndarray, r1: np.ndarray, s: float) -> np.ndarray:
    err = rotation_error(r1, r0)  # world-frame axis-angle from r0 to r1
    angle = np.linalg.norm(err)
    if angle < 1e-9:
        return r1.copy()
    k = err / angle
    a = s * angle
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return (np.eye(3) + math.sin(a) * kx + (1 - math.cos(a)) * kx @ kx) @ r0


class ScriptedExpert:
    """Waypoint-following expert for one env (see module docstring)."""

    def __init__(self, env: gym.Env, integral_below: float | str | None = FROM_PLAN):
        self.env = aloha_env(env)
        # FROM_PLAN: each plan's own ExpertPlan.integral_below; a number or None overrides it (an ablation).
        self.integral_below = integral_below
        self.task = self.env.task
        # Both the sim and the real env carry the arm model their controller uses for IK.
        kin = self.env.kinematics
        self.kin = ArmKinematics(kin.model, kin.idx)
        self.plan: list[Waypoint] | None = None
        self._feedback: Feedback | None = None
        self._below: float | None = None
        self.arm = 1

    def reset(self) -> None:
        self.plan = None

    # ---------------------------------------------------------------- planning
    def _start_pose(self, arm):
        return self.kin.tcp_pose(robot.START_QPOS[robot.ARM_INDICES], arm)

    def _plan(self, info) -> list[Waypoint]:
        """The task's waypoint plan (:meth:`Task.expert_plan`) from the start poses in ``info``; sets the arm."""
        plan = self.task.expert_plan(info["object_poses"])
        self.arm = plan.arm
        self._feedback = plan.feedback
        if self.integral_below == FROM_PLAN:
            self._below = plan.integral_below
        elif isinstance(self.integral_below, str):
            raise ValueError(f"integral_below must be a number, None or {FROM_PLAN!r}, got {self.integral_below!r}")
        else:
            self._below = self.integral_below
        return plan.waypoints

    # ---------------------------------------------------------------- acting
    def _desired(self, t: int) -> tuple[np.ndarray, np.ndarray, float]:
        pos, rot = self._start_pose(self.arm)
        grip = robot.GRIPPER_OPEN
        if self.plan is None:
            raise RuntimeError("the expert has no plan yet: call it with the first step's info first")
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
        measured = obs["joint_pos"] if isinstance(obs, dict) and "joint_pos" in obs else self.env.joint_positions()
        measured = np.asarray(measured, dtype=np.float64)[robot.ARM_INDICES]
        if self._feedback is not None and "object_poses" in info:  # the task's closed loop (skipped when a
            # robot reports no object poses after the first step)
            tcp_pos, tcp_rot = self.kin.tcp_pose(measured, self.arm)
            pos = np.asarray(self._feedback(t, info["object_poses"], pos, rot, tcp_pos, tcp_rot), dtype=np.float64)
        previous = self._q
        self._q = self.kin.solve(self._q, self.arm, pos, rot, iterations=30)
        # Joint-space integral action on the measured joints: soft position gains sag under
        # gravity and friction by different amounts on every robot, so an open-loop plan misses.
        error = self._q - measured
        # Integrate only on joints the plan holds: tracking lag while moving is not sag.
        if self._below is not None:
            held = np.abs(self._q - previous) < self._below
            self._integral = np.clip(_LEAK * self._integral + _KI * error * held, -_MAX_INTEGRAL, _MAX_INTEGRAL)
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


def make_expert(env: gym.Env, integral_below: float | str | None = FROM_PLAN) -> ScriptedExpert:
    """The scripted expert for ``env``'s task: ``expert(obs, info) -> action``.

    ``integral_below`` overrides every plan's :attr:`~embodied_gym.sim.tasks.planning.ExpertPlan.integral_below`
    (rad per control step; ``None`` turns the integral term off); the default, ``"plan"``, leaves it
    to the task's plan."""
    return ScriptedExpert(env, integral_below)
