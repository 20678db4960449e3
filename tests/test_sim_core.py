"""The simulator core: one joint mapping and one set of actuator effects for every client."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import embodied_gym
from embodied_gym.sim import robot
from embodied_gym.envs.base import AlohaEnv
from embodied_gym.sim.physics import PhysicsParams
from embodied_gym.sim.core import ActuatorEffects, SimCore, StribeckFriction
from embodied_gym.sim.tasks import make_task
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.transitions import OneStepSimulator


def _core(**effects) -> SimCore:
    return SimCore(make_task("PickCup"), PhysicsParams(), effects=ActuatorEffects(**effects))


def test_delay_and_backlash_follow_the_hand_computed_target_sequence():
    """Backlash 0.01 on the left waist and 2 steps of delay: the tracked target is the dead-band
    output of the command two control steps earlier."""
    backlash = np.zeros(14)
    backlash[0] = 0.01
    core = _core(latency_steps=2, backlash=backlash)
    core.reset_scene(np.random.default_rng(0))
    start = robot.START_QPOS.copy()
    waist = [0.005, 0.03, 0.025, 0.012, -0.02]  # left waist commands
    # Dead band of half-width 0.01 around the effective target (starts at 0):
    # 0.005 inside -> 0; 0.03 -> 0.02; 0.025 inside -> 0.02; 0.012 inside -> 0.02; -0.02 -> -0.01.
    effective = [0.0, 0.02, 0.02, 0.02, -0.01]
    expected = [start[0], start[0], *effective[:3]]  # two steps of delay, first filled with the start pose
    for cmd, want in zip(waist, expected):
        target = start.copy()
        target[0] = cmd
        applied = core.command(target)
        assert applied[0] == pytest.approx(want, abs=1e-12)
        # The actuator's control holds exactly what was applied (the left waist is actuator 0 of the arm list).
        assert core.data.ctrl[core.ctrl_index[0]] == pytest.approx(want, abs=1e-12)
        # Joints without backlash pass through unchanged (after the delay).
        np.testing.assert_allclose(applied[1:], start[1:])
        core.step()


def test_ideal_effects_send_the_command_straight_to_the_actuators():
    core = _core()
    core.reset_scene(np.random.default_rng(0))
    target = robot.START_QPOS + 0.05
    np.testing.assert_array_equal(core.command(target), target)
    # Mirrored fingers: the second finger's actuator gets the negated gripper target.
    ctrl = core.data.ctrl[core.ctrl_index]
    np.testing.assert_allclose(ctrl[14:], -target[robot.GRIPPER_INDICES])


def test_hold_restarts_the_delay_line():
    core = _core(latency_steps=3)
    core.reset_scene(np.random.default_rng(0))
    q = robot.START_QPOS + 0.1
    core.hold(q)
    np.testing.assert_allclose(core.command(robot.START_QPOS), q)  # the held target is still in the line


def test_invalid_effects_are_refused_with_their_name():
    with pytest.raises(ValueError, match="latency_steps"):
        ActuatorEffects(latency_steps=1.5)
    with pytest.raises(ValueError, match="backlash"):
        ActuatorEffects(backlash=-np.ones(14))


def test_stribeck_friction_breaks_away_then_drops():
    f = StribeckFriction(static=np.full(12, 1.0), coulomb=np.full(12, 0.4), viscous=np.zeros(12), stribeck_velocity=0.1)
    v = np.array([0.0, 0.05, 0.1, 1.0, -1.0, 2.0, 0, 0, 0, 0, 0, 0])
    tau = f.torque(v)
    assert tau[0] == 0.0
    assert -1.0 < tau[1] < tau[3] < 0  # near the static level at low speed, about Coulomb at high speed
    assert tau[3] == pytest.approx(-0.4, abs=1e-3)
    assert tau[4] == pytest.approx(0.4, abs=1e-3)


def test_env_and_one_step_simulator_share_the_core_mapping():
    """The sim env's step and calibration's one-step simulator give the same next joint state from
    the same state and targets: both go through SimCore's one mapping."""
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    u = env.unwrapped
    env.reset(seed=0)
    # The one-step simulator starts from empty object placement: compare with the objects far away.
    sim = OneStepSimulator("PickCup", ParameterSpace())
    sim.set_theta(ParameterSpace().normalise(ParameterSpace().values_of(PhysicsParams())))
    sim.place({})
    q, v = u.joint_positions(), u.joint_velocities()
    a = robot.START_QPOS + 0.02
    nxt = sim.step(np.r_[q, v], a)
    assert nxt.shape == (28,) and np.isfinite(nxt).all()
    # Same mapping: targets written by the env reach the same actuator entries as the simulator's.
    u.apply_joint_targets(a)
    np.testing.assert_array_equal(u.data.ctrl[u.sim.ctrl_index], sim.data.ctrl[sim.core.ctrl_index])
    env.close()


@pytest.mark.parametrize("env_id", ["EmbodieDreamer-PickCup-v0", "EmbodieDreamer-PickCup-Real-v0"])
def test_sim_and_real_envs_declare_one_interface(env_id):
    kw = {"realtime": False} if "Real" in env_id else {}
    env = gym.make(env_id, obs_type="state", **kw)
    u = env.unwrapped
    assert isinstance(u, AlohaEnv)
    assert u.is_simulated == ("Real" not in env_id)
    obs, info = env.reset(seed=0)
    for name in ("task", "obs_type", "cameras", "image_size", "control_mode", "kinematics", "controller"):
        assert hasattr(u, name), name
    assert u.joint_targets.shape == (14,) and u.commanded_targets.shape == (14,)
    assert u.joint_positions().shape == (14,)
    pos, rot = u.ee_targets
    assert pos.shape == (2, 3) and rot.shape == (2, 3, 3)
    env.step(embodied_gym.make_expert(env)(obs, info))
    env.close()


def test_stand_in_runs_on_the_core_with_its_hidden_effects():
    from embodied_gym.robots.stand_in import StandInRobot, StandInRobotConfig

    bot = StandInRobot(StandInRobotConfig(task="PickCup", camera_names=()))
    bot.connect()
    assert isinstance(bot._world, SimCore)
    eff = bot._world.effects
    assert eff.latency_steps == 1 and eff.backlash.any() and eff.friction is not None
    bot.disconnect()
