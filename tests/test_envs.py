"""The env contract: spaces, API conformance, determinism, rendering, bad input."""

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import embodied_gym
from embodied_gym.sim import robot
from embodied_gym.sim.tasks import TASKS

IDS = [embodied_gym.env_id(t) for t in TASKS]
SMALL = (48, 64)


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("obs_type", ["state", "pixels", "pixels_state"])
def test_gymnasium_check_env(env_id, obs_type):
    env = gym.make(env_id, obs_type=obs_type, image_size=SMALL, render_mode="rgb_array")
    gym_check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("obs_type", ["state", "pixels_state"])
def test_sb3_check_env(env_id, obs_type):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(env_id, obs_type=obs_type, image_size=SMALL, control_mode="ee_delta")
    sb3_check_env(env.unwrapped, warn=False)
    env.close()


def test_import_path_id_and_registry():
    env = gym.make("embodied_gym:EmbodieDreamer-PickCup-v0", obs_type="state")
    assert env.spec.max_episode_steps == TASKS["PickCup"]().max_episode_steps
    assert isinstance(env.unwrapped.model, __import__("mujoco").MjModel)
    assert isinstance(env.unwrapped.data, __import__("mujoco").MjData)
    env.close()


@pytest.mark.parametrize("task", list(TASKS))
def test_task_env_classes_are_written_out_and_restate_their_task(task):
    """Each task's env class is a class statement in aloha_env.py (grep and IDEs find it), registered
    under its id, and its hand-written docstring says what the task module says (no drift)."""
    import inspect
    import re

    from embodied_gym.envs import aloha_env

    cls = aloha_env.TASK_ENVS[task]
    assert cls.__name__ == f"{task}Env" and cls.task_name == task
    assert re.search(rf"^class {task}Env\(AlohaTaskEnv\):$", inspect.getsource(aloha_env), re.M)
    assert gym.spec(embodied_gym.env_id(task)).entry_point == f"embodied_gym.envs.aloha_env:{task}Env"
    words = " ".join(cls.__doc__.split())
    for section, text in TASKS[task]().doc_sections().items():
        assert " ".join(text.split()) in words, (task, section)
    assert f'gym.make("{embodied_gym.env_id(task)}", ...)' in words


def _rollout(env, seed, actions):
    obs, _ = env.reset(seed=seed)
    states = [env.unwrapped.data.qpos.copy()]
    for a in actions:
        env.step(a)
        states.append(env.unwrapped.data.qpos.copy())
    return np.array(states)


def test_same_seed_and_actions_give_identical_trajectories():
    rng = np.random.default_rng(0)
    env = gym.make("EmbodieDreamer-CupOnMat-v0", obs_type="state", control_mode="joint_delta")
    actions = rng.uniform(-1, 1, (40, 14)).astype(np.float32)
    a = _rollout(env, 3, actions)
    b = _rollout(env, 3, actions)
    assert np.array_equal(a, b)
    c = _rollout(env, 4, actions)
    assert not np.array_equal(a, c)


def test_reset_without_seed_follows_np_random():
    def layouts(env):
        env.reset(seed=11)
        first = env.unwrapped.data.qpos.copy()
        env.reset()
        return first, env.unwrapped.data.qpos.copy()

    env1 = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    env2 = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    a0, a1 = layouts(env1)
    b0, b1 = layouts(env2)
    assert np.array_equal(a0, b0) and np.array_equal(a1, b1)
    assert not np.array_equal(a0, a1)


@pytest.mark.parametrize("camera", ["cam_high", "cam_front", "cam_left_wrist", "cam_right_wrist"])
def test_each_camera_renders_a_non_constant_image(camera):
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels", cameras=(camera,), image_size=(60, 80))
    obs, _ = env.reset(seed=0)
    img = obs[camera]
    assert img.shape == (60, 80, 3) and img.dtype == np.uint8
    assert img.std() > 5.0
    assert set(obs) == {camera}  # only requested cameras
    env.close()


def test_observation_is_flat_and_privileged_state_is_in_info():
    env = gym.make(
        "EmbodieDreamer-PenInCup-v0", obs_type="pixels_state", cameras=("cam_high", "cam_front"), image_size=SMALL
    )
    obs, info = env.reset(seed=0)
    assert set(obs) == {"joint_pos", "joint_vel", "cam_high", "cam_front"}
    assert all(isinstance(s, gym.spaces.Box) for s in env.observation_space.spaces.values())
    assert set(info["object_poses"]) == {"pen", "pencup"}
    assert info["task"] == "Put the pen into the pen cup."
    assert info["is_success"] is False
    np.testing.assert_allclose(obs["joint_pos"], robot.START_QPOS, atol=0.05)
    env.close()


@pytest.mark.parametrize("task", list(TASKS))
def test_expert_succeeds(task):
    env = gym.make(embodied_gym.env_id(task), obs_type="state")
    expert = embodied_gym.make_expert(env)
    for seed in (100, 101):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
            assert 0.0 <= reward <= 1.0
            done = terminated or truncated
        assert info["is_success"], f"{task} expert failed on seed {seed}: {info['reward_terms']}"
        assert terminated
    env.close()


def test_expert_works_in_every_control_mode():
    for mode in ("joint_delta", "ee_delta"):
        env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", control_mode=mode)
        expert = embodied_gym.make_expert(env)
        obs, info = env.reset(seed=5)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert(obs, info))
            done = terminated or truncated
        assert info["is_success"], mode


@pytest.mark.parametrize("task", list(TASKS))
def test_random_policy_never_succeeds(task):
    env = gym.make(embodied_gym.env_id(task), obs_type="state", control_mode="joint_delta")
    env.action_space.seed(0)
    for ep in range(4):
        obs, info = env.reset(seed=ep)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(env.action_space.sample())
            assert not info["is_success"]
            done = terminated or truncated
    env.close()


def test_lifting_is_needed_touching_is_not_enough():
    """Closing the gripper on the cup without lifting it must not count as success."""
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    expert = embodied_gym.make_expert(env)
    obs, info = env.reset(seed=1)
    plan = expert._plan(info)
    closing = next(i for i, wp in enumerate(plan) if wp.grip < robot.GRIPPER_OPEN)
    grasp_steps = sum(wp.steps for wp in plan[: closing + 1])
    last = None
    for _ in range(grasp_steps + 10):
        action = expert(obs, info) if info["step"] < grasp_steps else last
        last = action
        obs, _, _, _, info = env.step(action)
    assert info["reward_terms"]["grasp"] == 1.0
    assert not info["is_success"]


# ---------------------------------------------------------------- bad input
@pytest.fixture
def env():
    e = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    e.reset(seed=0)
    yield e
    e.close()


@pytest.mark.parametrize("bad", [np.full(14, np.nan), np.r_[np.zeros(13), np.inf]])
def test_non_finite_action_raises(env, bad):
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(bad)


def test_wrong_shape_raises(env):
    with pytest.raises(ValueError, match=r"shape \(13,\)"):
        env.step(np.zeros(13))


def test_out_of_bounds_action_is_clipped_and_counted(env):
    a = robot.START_QPOS.copy()
    a[0] = 10.0
    a[6] = -1.0
    _, _, _, _, info = env.step(a)
    assert info["action_clipped"] == 2
    assert env.unwrapped.joint_targets[0] == pytest.approx(robot.JOINT_HIGH[0])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(cameras=("cam_top",)), "cam_high"),
        (dict(obs_type="rgb"), "pixels_state"),
        (dict(control_mode="torque"), "ee_delta"),
        (dict(task="FoldLaundry"), "PickCup"),
        (dict(image_size=(5, 5)), "image_size"),
    ],
)
def test_unknown_names_list_the_valid_ones(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("EmbodieDreamer-PickCup-v0", **kwargs)


@pytest.mark.parametrize(
    "kwargs,needles",
    [
        (dict(cameras=None), ["cameras must be a camera name or a list", "None", "cam_high"]),
        (dict(cameras=[None]), ["unknown camera None", "cam_high"]),
        (dict(image_size=(48.5, 64)), ["image_size", "(48.5, 64)", "whole numbers"]),
        (dict(image_size=(48, "64")), ["image_size", "'64'", "whole numbers"]),
        (dict(image_size=48), ["image_size", "48", "(height, width)"]),
        (dict(obs_type=None), ["obs_type None", "pixels_state"]),
        (dict(physics=[1.0]), ["physics must be", "[1.0]"]),
    ],
)
def test_bad_env_kwargs_name_their_cause(kwargs, needles):
    with pytest.raises((ValueError, TypeError)) as err:
        gym.make("EmbodieDreamer-PickCup-v0", obs_type=kwargs.pop("obs_type", "state"), **kwargs)
    for needle in needles:
        assert needle in str(err.value), f"{needle!r} not in {str(err.value)!r}"


def test_whole_float_image_size_still_accepted():
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels", image_size=(48.0, np.int64(64)))
    assert env.unwrapped.image_size == (48, 64)
    assert env.observation_space["cam_high"].shape == (48, 64, 3)
    env.close()


def test_physics_directory_kwarg_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"physics file {tmp_path} is a directory"):
        gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=tmp_path)


@pytest.mark.parametrize(
    "bad,needle",
    [
        (robot.START_QPOS.astype(np.complex128), "complex"),
        (list(robot.START_QPOS[:13]) + [1j], "complex"),
        (np.zeros(14, dtype=bool), "boolean"),
        (["0.1"] * 14, "string"),
        ([0.0] * 13 + [None], "non-numeric"),
    ],
)
def test_non_real_action_raises_naming_the_kind(env, bad, needle):
    before = env.unwrapped.data.qpos.copy()
    with pytest.raises(ValueError, match=f"real-valued.*got {needle} values"):
        env.step(bad)
    assert np.array_equal(env.unwrapped.data.qpos, before)  # nothing was simulated


def test_physics_blow_up_truncates_without_nan(env):
    u = env.unwrapped
    u.data.qvel[:] = 1e12  # force a divergence
    obs, reward, terminated, truncated, info = env.step(robot.START_QPOS)
    assert truncated and not terminated
    assert "physics_error" in info
    assert all(np.isfinite(v).all() for v in obs.values())


def test_physics_blow_up_returns_a_fresh_observation(env):
    first, *_ = env.step(robot.START_QPOS)
    env.unwrapped.data.qvel[:] = 1e12
    obs, *_, truncated, info = env.step(robot.START_QPOS)
    assert truncated and "physics_error" in info
    assert obs is not first
    for k in obs:
        assert np.array_equal(obs[k], first[k]) and not np.shares_memory(obs[k], first[k])


def test_physics_file(tmp_path):
    from embodied_gym import PhysicsParams

    p = PhysicsParams.from_dict({"kp": {"left_waist": 99.0}, "object_friction": 0.4})
    path = tmp_path / "physics.json"
    p.save(path)
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=str(path))
    u = env.unwrapped
    act = u.idx.arm_actuators[0]
    assert u.model.actuator_gainprm[act, 0] == 99.0
    assert u.model.geom_friction[u.idx.object_geoms["cup"], 0] == pytest.approx(0.4)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kp_typo": 1.0, "damping": {"left_elbow": -1.0}}))
    with pytest.raises(ValueError, match="kp_typo"):
        gym.make("EmbodieDreamer-PickCup-v0", physics=str(bad))
    bad.write_text(json.dumps({"damping": {"left_elbow": -1.0}}))
    with pytest.raises(ValueError, match=r"damping\[left_elbow\]"):
        gym.make("EmbodieDreamer-PickCup-v0", physics=str(bad))


def test_physics_changes_dynamics():
    from embodied_gym import PhysicsParams

    actions = [robot.START_QPOS + np.r_[0.3, 0.2, -0.2, 0, 0, 0, 0, 0.3, 0.2, -0.2, 0, 0, 0, 0]] * 15
    soft = PhysicsParams.from_dict({"kp": [10.0] * 12})
    a = _rollout(gym.make("EmbodieDreamer-PickCup-v0", obs_type="state"), 0, actions)
    b = _rollout(gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=soft), 0, actions)
    assert np.abs(a - b).max() > 0.05


# ----------------------------------------------------------------------------- camera rate
@pytest.mark.parametrize("env_id", ["EmbodieDreamer-PickCup-v0", "EmbodieDreamer-PickCup-Real-v0"])
def test_camera_fps_holds_the_frame_between_camera_frames(env_id):
    import embodied_gym

    kw = {"realtime": False} if "Real" in env_id else {}
    env = gym.make(env_id, obs_type="pixels_state", cameras=("cam_high",), image_size=(32, 40), camera_fps=10, **kw)
    expert = embodied_gym.make_expert(env)
    obs, info = env.reset(seed=0)
    frames = [obs["cam_high"]]
    for _ in range(11):
        obs, *_, info = env.step(expert(obs, info))
        frames.append(obs["cam_high"])
    env.close()
    new = [t for t in range(1, 12) if not np.array_equal(frames[t], frames[t - 1])]
    assert new == [5, 10]  # a 10 Hz camera under 50 Hz control: a new frame every 5th step
    assert frames[1] is not frames[0]  # held frames are copies (gymnasium's checker asks for it)


def test_camera_fps_rejects_rates_that_do_not_divide_the_control_rate():
    with pytest.raises(ValueError, match="camera_fps"):
        gym.make("EmbodieDreamer-PickCup-v0", camera_fps=7)
    with pytest.raises(ValueError, match="camera_fps"):
        gym.make("EmbodieDreamer-PickCup-v0", camera_fps=100)
