"""The simulator core: one joint mapping and one set of actuator effects for every client."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import embodied_gym
from embodied_gym.envs.base import AlohaEnv
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.physaligner.transitions import OneStepSimulator
from embodied_gym.sim import robot
from embodied_gym.sim.core import ActuatorEffects, SimCore, StribeckFriction
from embodied_gym.sim.physics import PhysicsParams
from embodied_gym.sim.tasks import make_task


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


def test_physics_latency_and_backlash_change_a_replay_exactly_as_specified():
    """``PhysicsParams(latency_steps=2, backlash=0.01 on the right elbow)`` in the sim env: the actuators
    track the hand-computed sequence (dead band, then two steps late), and the replayed trajectory is
    identical to an ideal-actuator replay of that hand-computed sequence."""
    from embodied_gym.sim.physics import ARM_JOINT_NAMES

    elbow = robot.ARM_INDICES[ARM_JOINT_NAMES.index("right_elbow")]
    physics = PhysicsParams.from_dict({"latency_steps": 2, "backlash": {"right_elbow": 0.01}})
    start = robot.START_QPOS.copy()
    offsets = [0.005, 0.03, 0.025, 0.012, -0.02, -0.02, 0.0]  # right elbow commands, relative to the start
    # Dead band of half-width 0.01 around the tracked target (starts at 0): 0.005 inside -> 0;
    # 0.03 -> 0.02; 0.025 and 0.012 inside -> 0.02; -0.02 -> -0.01; -0.02 inside -> -0.01; 0.0 inside -> -0.01.
    banded = [0.0, 0.02, 0.02, 0.02, -0.01, -0.01, -0.01]
    tracked = [0.0, 0.0] + banded[:-2]  # two control steps late, the start pose held before
    commands, hand = [], []
    for t, off in enumerate(offsets):
        c = start.copy()
        c[elbow] += off
        c[0] += 0.01 * t  # the left waist (no backlash) only shows the delay
        commands.append(c)
        h = start.copy()
        h[elbow] += tracked[t]
        h[0] += 0.01 * max(0, t - 2)
        hand.append(h)

    def run(physics, actions):
        env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=physics)
        u = env.unwrapped
        env.reset(seed=3)
        ctrl, q = [], []
        for a in actions:
            env.step(a)
            ctrl.append(u.data.ctrl[u.sim.ctrl_index][:14][np.argsort(u.sim.ctrl_source[:14])].copy())
            q.append(u.joint_positions())
        env.close()
        return np.array(ctrl), np.array(q)

    ctrl, q = run(physics, commands)
    np.testing.assert_allclose(ctrl[:, elbow], start[elbow] + np.array(tracked), atol=1e-12)
    np.testing.assert_allclose(ctrl[:, 0], start[0] + 0.01 * np.maximum(0, np.arange(7) - 2), atol=1e-12)
    ideal_ctrl, ideal_q = run(PhysicsParams(), hand)
    np.testing.assert_array_equal(ctrl, ideal_ctrl)
    np.testing.assert_array_equal(q, ideal_q)  # same tracked targets, same physics: the same trajectory
    nominal_ctrl, nominal_q = run(PhysicsParams(), commands)
    assert np.abs(nominal_q - q).max() > 1e-4  # and the effects do change the replay


def test_applied_targets_is_the_logic_the_core_applies():
    """The pure function calibration uses gives the core's step-by-step targets, for batched backlash too."""
    from embodied_gym.sim.core import applied_targets

    rng = np.random.default_rng(0)
    backlash = np.abs(rng.normal(0, 0.01, 14))
    core = _core(latency_steps=3, backlash=backlash)
    core.reset_scene(rng)
    commands = robot.START_QPOS + np.cumsum(rng.normal(0, 0.01, (30, 14)), axis=0)
    stepwise = np.array([core.command(c) for c in commands])
    np.testing.assert_array_equal(applied_targets(commands, robot.START_QPOS, 3, backlash), stepwise)
    batched = applied_targets(commands, robot.START_QPOS, 3, np.stack([backlash, np.zeros(14)]))
    np.testing.assert_array_equal(batched[:, 0], stepwise)
    np.testing.assert_array_equal(batched[3:, 1], commands[:-3])


def test_core_effects_follow_the_physics_unless_given():
    core = SimCore(make_task("PickCup"), PhysicsParams())
    assert core.effects.is_ideal
    core.set_physics(PhysicsParams.from_dict({"latency_steps": 1, "backlash": {"left_waist": 0.02}}))
    assert core.effects.latency_steps == 1 and core.effects.backlash[0] == 0.02 and core.effects.backlash[6] == 0
    core.set_physics(PhysicsParams())
    assert core.effects.is_ideal
    # Explicit effects (the stand-in's hidden ones, with their friction) survive set_physics.
    hidden = _core(latency_steps=2)
    hidden.set_physics(PhysicsParams.from_dict({"latency_steps": 1}))
    assert hidden.effects.latency_steps == 2


def test_stand_in_keeps_its_hidden_effects_in_one_section(tmp_path):
    """latency_steps/backlash in a stand-in config's physics section would bypass its effects (and their
    friction): refused, naming the section they belong in."""
    from embodied_gym.robots.stand_in import load_settings

    bad = tmp_path / "w.yaml"
    bad.write_text("physics: {latency_steps: 1}\n")
    with pytest.raises(ValueError, match="effects.latency_steps"):
        load_settings(bad)
