import dataclasses

import numpy as np
import pytest

from embodied_gym import PhysicsParams
from embodied_gym.sim.physics import ARM_JOINT_NAMES


def test_nominal_values_are_menagerie_figures():
    p = PhysicsParams()
    assert p.kp[:6] == (43.0, 265.0, 227.0, 78.0, 37.0, 10.4)
    assert p.damping[6:] == (5.76, 20.0, 18.49, 6.78, 6.28, 1.2)
    assert p.gripper_kp == 2000.0


def test_round_trip(tmp_path):
    p = PhysicsParams.from_dict({"damping": {"right_elbow": 3.0}, "object_mass_scale": 2.0})
    p.save(tmp_path / "p.json")
    q = PhysicsParams.load(tmp_path / "p.json")
    assert q == p
    assert q.damping[ARM_JOINT_NAMES.index("right_elbow")] == 3.0


def test_calibration_result_files_load(tmp_path):
    import json

    (tmp_path / "r.json").write_text(json.dumps({"method": "x", "values": {"pad_friction": 0.7}}))
    assert PhysicsParams.load(tmp_path / "r.json").pad_friction == 0.7


@pytest.mark.parametrize(
    "change,match",
    [
        ({"kp": (1.0,) * 11}, "11 values"),
        ({"armature": (float("nan"),) * 12}, "armature"),
        ({"object_friction": 0.0}, "object_friction"),
    ],
)
def test_invalid_values_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PhysicsParams(), **change)


def test_unknown_joint_is_named():
    with pytest.raises(ValueError, match="left_wrist"):
        PhysicsParams.from_dict({"kp": {"left_wrist": 1.0}})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        PhysicsParams.load(tmp_path / "nope.json")


# ---------------------------------------------------------------- bad physics files name their cause
@pytest.mark.parametrize(
    "content,needles",
    [
        ({"pad_friction": None}, ["pad_friction", "null", "number"]),
        ({"kp": 300}, ["kp", "300", "list of 12 numbers", "{joint name: number}"]),
        ({"kp": {"right_elbow": {"x": 1}}}, ["kp[right_elbow]", '{"x": 1}', "number"]),
        ({"pad_friction": "0.8"}, ["pad_friction", '"0.8"', "without quotes"]),
        ({"object_friction": True}, ["object_friction", "true", "number"]),
        ({"damping": [1.0] * 11 + ["a"]}, ["damping[right_wrist_rotate]", '"a"']),
        ({"values": {"armature": "big"}}, ["armature", '"big"']),
        ([0.5, 1.0], ["JSON object", "[0.5, 1.0]"]),
    ],
)
def test_wrong_types_in_a_physics_file_name_file_parameter_and_form(tmp_path, content, needles):
    import json

    path = tmp_path / "physics.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError) as err:
        PhysicsParams.load(path)
    msg = str(err.value)
    assert str(path) in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_physics_directory_is_named_with_its_json_files(tmp_path):
    from embodied_gym.sim.physics import resolve_physics

    (tmp_path / "calibrated.json").write_text("{}")
    with pytest.raises(ValueError, match=rf"{tmp_path} is a directory.*calibrated\.json"):
        resolve_physics(tmp_path)


def test_binary_physics_file_is_named(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ValueError, match="p.json"):
        PhysicsParams.load(path)


@pytest.mark.parametrize(
    "physics,needles",
    [
        ({"pad_friction": None}, ["physics (dict)", "pad_friction", "null"]),
        (3.0, ["PhysicsParams, a dict or a path", "3.0 (float)"]),
    ],
)
def test_bad_physics_kwarg_names_its_cause(physics, needles):
    from embodied_gym.sim.physics import resolve_physics

    with pytest.raises((ValueError, TypeError)) as err:
        resolve_physics(physics)
    for needle in needles:
        assert needle in str(err.value)


def test_numpy_values_are_still_accepted():
    import numpy as np

    p = PhysicsParams.from_dict({"kp": np.full(12, 50.0), "pad_friction": np.float32(0.5), "gripper_kp": 1500})
    assert p.kp == (50.0,) * 12 and p.pad_friction == 0.5 and p.gripper_kp == 1500.0


def test_a_calibration_result_written_before_the_redesign_still_loads():
    """tests/data/ holds a result JSON written by the code before the sim core, task registry and
    configs were restructured (sysid on a 3-episode stand-in recording); it must keep working as
    physics= and PhysicsParams.load."""
    import json
    from pathlib import Path

    import gymnasium as gym

    import embodied_gym  # noqa: F401

    path = Path(__file__).parent / "data" / "calibration_result_written_by_0.1.0_before_the_redesign.json"
    saved = json.loads(path.read_text())
    params = PhysicsParams.load(path)
    assert params.to_dict()["kp"]["right_elbow"] == saved["values"]["kp"]["right_elbow"]
    assert params.to_dict()["damping"]["right_elbow"] == saved["values"]["damping"]["right_elbow"]
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=str(path))
    env.reset(seed=0)
    assert env.unwrapped.physics == params
    env.close()


def test_latency_and_backlash_round_trip_and_default_to_none(tmp_path):
    assert PhysicsParams().latency_steps == 0 and PhysicsParams().backlash == (0.0,) * 12
    p = PhysicsParams.from_dict({"latency_steps": 2, "backlash": {"right_wrist_rotate": 0.012}})
    p.save(tmp_path / "p.json")
    q = PhysicsParams.load(tmp_path / "p.json")
    assert q == p and q.latency_steps == 2 and isinstance(q.latency_steps, int)
    assert q.backlash[ARM_JOINT_NAMES.index("right_wrist_rotate")] == 0.012


@pytest.mark.parametrize(
    "change,match",
    [
        ({"latency_steps": 1.5}, "latency_steps"),
        ({"latency_steps": -1}, "latency_steps"),
        ({"backlash": (-0.01,) + (0.0,) * 11}, r"backlash\[left_waist\]"),
        ({"backlash": (0.0,) * 11}, "backlash has 11 values"),
    ],
)
def test_invalid_latency_and_backlash_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PhysicsParams(), **change)


def test_physics_randomization_redraws_arm_physics_per_seed():
    """Each reset seed draws its own arm physics within the spread, the same seed the same physics,
    and the physics in the model is the drawn one (a parameter at zero stays zero)."""
    import embodied_gym
    from embodied_gym.factory import make_env

    base = PhysicsParams()
    env = make_env(embodied_gym.env_id("PickCup"), obs_type="state", physics_spread=0.2)
    try:
        draws = {}
        for seed in (1, 2, 1):
            _, info = env.reset(seed=seed)
            kp = np.asarray(env.unwrapped.model.actuator_gainprm[env.unwrapped.sim._handles.arm_actuators, 0])
            scale = np.asarray(info["physics_scale"]["kp"])
            assert np.allclose(kp, np.asarray(base.kp) * scale, rtol=1e-3)
            assert np.all(scale >= np.exp(-0.2) - 1e-4) and np.all(scale <= np.exp(0.2) + 1e-4)
            draws.setdefault(seed, []).append(scale)
        assert np.array_equal(draws[1][0], draws[1][1])
        assert not np.allclose(draws[1][0], draws[2][0])
        friction = np.asarray(env.unwrapped.physics.frictionloss)
        assert np.all(friction[np.asarray(base.frictionloss) == 0] == 0)
    finally:
        env.close()


def test_contact_randomization_redraws_the_grip_per_seed_and_leaves_the_arm():
    """contact_spread draws one factor per grip parameter from the seed, and the model simulates it;
    the arm stays at its base without physics_spread."""
    import embodied_gym
    from embodied_gym.factory import make_env
    from embodied_gym.wrappers.physics import CONTACT_FIELDS

    base = PhysicsParams()
    env = make_env(embodied_gym.env_id("PickCup"), obs_type="state", contact_spread=0.3)
    try:
        draws = {}
        for seed in (3, 4, 3):
            _, info = env.reset(seed=seed)
            scale = info["physics_scale"]
            assert set(scale) == set(CONTACT_FIELDS)
            physics = env.unwrapped.physics
            for name in CONTACT_FIELDS:
                assert len(scale[name]) == 1 and np.exp(-0.3) - 1e-4 <= scale[name][0] <= np.exp(0.3) + 1e-4
                assert getattr(physics, name) == pytest.approx(getattr(base, name) * scale[name][0], rel=1e-3)
            handles = env.unwrapped.sim._handles
            assert np.allclose(env.unwrapped.model.geom_friction[handles.object_geoms, 0], physics.object_friction)
            assert physics.kp == base.kp
            draws.setdefault(seed, []).append(scale)
        assert draws[3][0] == draws[3][1] and draws[3][0] != draws[4][0]
    finally:
        env.close()


def test_physics_randomization_rejects_a_robot_and_a_bad_spread():
    import embodied_gym
    from embodied_gym.factory import make_env

    with pytest.raises(ValueError, match="physics_spread"):
        make_env(embodied_gym.env_id("PickCup", real=True), obs_type="state", physics_spread=0.2)
    with pytest.raises(ValueError, match=r"spread 1.5 must be in \[0, 1\]"):
        make_env(embodied_gym.env_id("PickCup"), obs_type="state", physics_spread=1.5)
    with pytest.raises(ValueError, match="contact_spread"):
        make_env(embodied_gym.env_id("PickCup", real=True), obs_type="state", contact_spread=0.2)
