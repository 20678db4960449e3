"""Every registered task implements every hook (as MuJoCo Playground's manipulation tests check each env).

Parameterised over the registry ``embodied_gym.sim.tasks.TASKS``: a task added there is checked here
without editing this file.
"""

from dataclasses import dataclass

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import embodied_gym
from embodied_gym.demo.report import PAPER
from embodied_gym.envs.aloha_env import ENV_DOC_SECTIONS, TASK_ENVS
from embodied_gym.policies.scoring import target_distance, task_target
from embodied_gym.sim import robot
from embodied_gym.sim.physics import PhysicsParams
from embodied_gym.sim.scene import compile_scene
from embodied_gym.sim.tasks import TASKS, PickCup, Task, _registry, make_task, quat_yaw, reach_term
from embodied_gym.sim.tasks.planning import HOLD_BELOW, ExpertPlan
from embodied_gym.wrappers.reach import ReachStageWrapper

NAMES = list(TASKS)


@pytest.fixture(scope="module", params=NAMES)
def task_env(request):
    env = gym.make(embodied_gym.env_id(request.param), obs_type="state")
    yield request.param, env
    env.close()


def test_registry_names_match_classes_and_envs():
    assert NAMES and all(TASKS[n]().name == n for n in NAMES)
    assert list(TASK_ENVS) == NAMES
    with pytest.raises(ValueError, match="valid tasks"):
        make_task("FoldLaundry")


@pytest.mark.parametrize("name", NAMES)
def test_env_ids_registered_with_the_time_limit(name):
    steps = make_task(name).max_episode_steps
    for real in (False, True):
        spec = gym.spec(embodied_gym.env_id(name, real=real))
        assert spec.max_episode_steps == steps
    cls = TASK_ENVS[name]
    assert gym.spec(embodied_gym.env_id(name)).entry_point == f"{cls.__module__}:{cls.__name__}"
    assert getattr(__import__(cls.__module__, fromlist=[cls.__name__]), cls.__name__) is cls


@pytest.mark.parametrize("name", NAMES)
def test_scene_builds_with_every_object(name):
    task = make_task(name)
    model, idx, _ = compile_scene(task, PhysicsParams())
    assert set(idx.object_bodies) == set(task.ranges) == set(task.object_docs)
    for obj in task.ranges:
        joint = model.joint(f"{obj}_joint")
        assert joint.type[0] == mujoco.mjtJoint.mjJNT_FREE


@pytest.mark.parametrize("name", NAMES)
def test_sampled_layouts_lie_in_the_ranges(name):
    task = make_task(name)
    rng = np.random.default_rng(0)
    for _ in range(50):
        layout = task.sample_layout(rng)
        assert list(layout) == list(task.ranges)
        assert all(task.ranges[o].contains(*xyyaw) for o, xyyaw in layout.items())


def test_reset_places_objects_in_their_ranges(task_env):
    name, env = task_env
    task = env.unwrapped.task
    for seed in range(3):
        _, info = env.reset(seed=seed)
        for obj, r in task.ranges.items():
            pose = info["object_poses"][obj]
            # settling for 0.1 s may move an object a few mm
            assert r.contains(pose[0], pose[1], quat_yaw(pose[3:7]), tol=0.01), (obj, pose)
            assert -0.005 < pose[2] < 0.02, (obj, pose)


def test_evaluate_reward_terms_and_reach_point(task_env):
    name, env = task_env
    task = env.unwrapped.task
    _, info = env.reset(seed=1)
    u = env.unwrapped
    status = task.evaluate(u.model, u.data, u.idx)
    assert tuple(status.terms) == task.reward_terms and task.reward_terms[-1] == "success"
    assert all(np.isfinite(v) and 0.0 <= v <= 1.0 for v in status.terms.values())
    assert np.isfinite(status.reward) and 0.0 <= status.reward <= 1.0 and not status.success
    point = np.asarray(task.reach_point(info["object_poses"]))
    assert point.shape == (3,) and np.all(np.isfinite(point))
    tcp = np.asarray(info["tcp_poses"])[:, :3]
    # evaluate's reach term measures the same point the hook returns
    expected = reach_term(float(np.min(np.linalg.norm(tcp - point, axis=1))))
    assert status.terms["reach"] == pytest.approx(expected, abs=1e-9)
    # the RL reach stage uses the hook too
    wrapped = ReachStageWrapper(env)
    obs, winfo = wrapped.reset(seed=1)
    np.testing.assert_allclose(obs["reach_target"], point, atol=1e-6)


def test_expert_plan_and_the_expert_acts(task_env):
    name, env = task_env
    obs, info = env.reset(seed=2)
    plan = env.unwrapped.task.expert_plan(info["object_poses"])
    assert isinstance(plan, ExpertPlan) and plan.arm in (0, 1) and plan.waypoints
    for wp in plan.waypoints:
        assert wp.steps > 0 and np.all(np.isfinite(wp.pos)) and robot.GRIPPER_CLOSED <= wp.grip <= robot.GRIPPER_OPEN
        np.testing.assert_allclose(wp.rot @ wp.rot.T, np.eye(3), atol=1e-9)
    assert sum(wp.steps for wp in plan.waypoints) <= env.spec.max_episode_steps
    expert = embodied_gym.make_expert(env)
    tcp0 = np.asarray(info["tcp_poses"])[plan.arm, :3]
    first = plan.waypoints[0].pos
    for _ in range(25):
        action = expert(obs, info)
        assert env.action_space.contains(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.isfinite(reward) and not truncated
    assert expert.arm == plan.arm
    tcp = np.asarray(info["tcp_poses"])[plan.arm, :3]
    assert np.linalg.norm(tcp - first) < np.linalg.norm(tcp0 - first) - 0.02  # heading to the first waypoint


def test_expert_integral_action_reacts_to_the_measured_joints_and_switches_off(task_env):
    """Every plan's integral term closes a loop on the measured joints; with it off
    (``integral_below=None``) a plan without feedback is followed open-loop: the actions depend on the
    step and the start poses only."""
    name, env = task_env
    obs, info = env.reset(seed=2)
    plan = env.unwrapped.task.expert_plan(info["object_poses"])
    assert plan.integral_below is not None and plan.integral_below > 0
    assert plan.integral_below == (0.01 if name == "PenInCup" else HOLD_BELOW)  # the pen's carry needs more
    planned, planned_misled = embodied_gym.make_expert(env), embodied_gym.make_expert(env)
    off, off_misled = (embodied_gym.make_expert(env, integral_below=None) for _ in range(2))
    for _ in range(40):
        shifted = dict(obs, joint_pos=obs["joint_pos"] + 0.02)
        action, action_misled = planned(obs, info), planned_misled(shifted, info)
        action_off, action_off_misled = off(obs, info), off_misled(shifted, info)
        obs, reward, terminated, truncated, info = env.step(action)
    assert not np.allclose(action, action_misled, atol=1e-4)
    if plan.feedback is None:
        np.testing.assert_allclose(action_off, action_off_misled, atol=1e-6)


def test_pen_in_cup_feedback_puts_the_measured_tip_where_the_plan_wants_it():
    """PenInCup's closed loop shifts the TCP target by how far the pen's lower tip hangs from where
    the plan assumed, only from the carry over the cup on, keeps the shift while the gripper opens,
    and never chases a pen more than MAX_SHIFT away. Other tasks' plans stay open-loop."""
    from embodied_gym.sim.tasks.pen_in_cup import PEN_HALF_LENGTH, _TipFeedback, lower_tip

    env = gym.make("EmbodieDreamer-PenInCup-v0", obs_type="state")
    _, info = env.reset(seed=0)
    env.close()
    task = make_task("PenInCup")
    plan = task.expert_plan(info["object_poses"])
    fb = plan.feedback
    assert isinstance(fb, _TipFeedback) and 0 < fb.start < fb.end <= sum(w.steps for w in plan.waypoints)
    carry = plan.waypoints[7]  # the TCP over the cup, the pen hanging upright
    pos, rot = carry.pos, carry.rot

    def pen_pose(tip):  # a pen hanging vertical with its lower tip at ``tip``
        # body x axis vertical (pointing up), body z horizontal: quaternion of a -90 degree turn about y
        q = np.array([np.cos(-np.pi / 4), 0.0, np.sin(-np.pi / 4), 0.0])
        rot_pen = np.array([[0.0, 0, -1], [0, 1, 0], [1, 0, 0]])
        centre = tip + rot_pen[:, 0] * PEN_HALF_LENGTH
        return np.r_[centre - rot_pen[:, 2] * 0.006, q]

    planned_tip = pos + rot @ fb.tip_local
    np.testing.assert_allclose(lower_tip(pen_pose(planned_tip)), planned_tip, atol=1e-9)
    off = np.array([0.01, -0.015, 0.005])  # pinched off-centre: the tip hangs 19 mm off the plan
    poses = {"pen": pen_pose(planned_tip + off), "pencup": info["object_poses"]["pencup"]}
    assert np.array_equal(fb(fb.start - 1, poses, pos, rot, pos, rot), pos)  # before the carry: the plan
    for t in range(fb.start, fb.start + 40):  # the arm exactly on the plan; the moving average converges
        target = fb(t, poses, pos, rot, pos, rot)
    np.testing.assert_allclose(target, pos - off, atol=1e-4)
    far = {"pen": pen_pose(planned_tip + 0.3), "pencup": poses["pencup"]}  # dropped: ignored from here on
    after = fb(fb.end, far, pos, rot, pos, rot)
    np.testing.assert_allclose(after, pos - off, atol=1e-4)
    for t in range(fb.start, fb.start + 60):
        target = fb(t, far, pos, rot, pos, rot)
    assert np.linalg.norm(target - pos) == pytest.approx(_TipFeedback.MAX_SHIFT)
    for name in ("PickCup", "RemoteInBox", "CupOnMat"):
        other = gym.make(embodied_gym.env_id(name), obs_type="state")
        _, oinfo = other.reset(seed=0)
        assert other.unwrapped.task.expert_plan(oinfo["object_poses"]).feedback is None
        other.close()


def test_tpo_score_target(task_env):
    name, env = task_env
    _, start = env.reset(seed=3)
    target = task_target(name, start["object_poses"], start["object_poses"])
    assert target.shape == (3,) and np.all(np.isfinite(target)) and target[2] > 0.0
    d = target_distance(name, start, start)
    tcp = np.asarray(start["tcp_poses"])[:, :3]
    assert d == pytest.approx(float(np.min(np.linalg.norm(tcp - target, axis=1))))
    assert 0.05 < d < 1.0  # the grippers start in the sleep pose, far from any task's end
    assert task_target(env.unwrapped.task, start["object_poses"], start["object_poses"]) == pytest.approx(target)


@pytest.mark.parametrize("name", NAMES)
def test_env_class_docstring_has_the_sections(name):
    doc = TASK_ENVS[name].__doc__
    assert doc.startswith(f"``{embodied_gym.env_id(name)}``")
    for section in ENV_DOC_SECTIONS:
        assert f"## {section}\n" in doc, section
    task = make_task(name)
    for obj, r in task.ranges.items():
        assert f"``{obj}`` ({task.object_docs[obj]}): {r.describe()}" in doc
    assert f"{task.max_episode_steps} steps" in doc


@pytest.mark.parametrize("name", NAMES)
def test_paper_numbers_come_from_the_task(name):
    cls = TASKS[name]
    assert PAPER.get(name) == cls.paper_success
    if cls.paper_success is not None:
        before, after = cls.paper_success
        assert 0 <= before <= after <= 100


# ---------------------------------------------------------------- the registry rejects incomplete tasks
def test_registry_rejects_a_task_without_a_hook():
    @dataclass
    class NoPlan(Task):
        name: str = "NoPlan"
        summary = "nothing"
        object_docs = {}
        success_doc = reward_doc = "-"
        reward_terms = ("success",)

        def add_objects(self, spec):
            pass

        def evaluate(self, model, data, idx):
            return self._finish({}, False)

        def reach_point(self, poses):
            return np.zeros(3)

        def score_target(self, start_poses, poses):
            return np.zeros(3)

    with pytest.raises(TypeError, match="expert_plan"):
        _registry(NoPlan)


def test_registry_accepts_a_fifth_task_and_rejects_missing_docs():
    @dataclass
    class LiftCupHigh(PickCup):
        name: str = "LiftCupHigh"
        lift_height: float = 0.1

    assert list(_registry(*TASKS.values(), LiftCupHigh)) == NAMES + ["LiftCupHigh"]
    with pytest.raises(ValueError, match="already registered"):
        _registry(PickCup, PickCup)

    @dataclass
    class Undocumented(PickCup):
        name: str = "Undocumented"
        success_doc = ""

    with pytest.raises(TypeError, match="success_doc"):
        _registry(Undocumented)
