import dataclasses

import pytest

from embodied_gym import PhysicsParams
from embodied_gym.envs.physics import ARM_JOINT_NAMES


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


@pytest.mark.parametrize("change,match", [
    ({"kp": (1.0,) * 11}, "11 values"),
    ({"armature": (float("nan"),) * 12}, "armature"),
    ({"object_friction": 0.0}, "object_friction"),
])
def test_invalid_values_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PhysicsParams(), **change)


def test_unknown_joint_is_named():
    with pytest.raises(ValueError, match="left_wrist"):
        PhysicsParams.from_dict({"kp": {"left_wrist": 1.0}})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        PhysicsParams.load(tmp_path / "nope.json")


def test_latency_and_backlash_round_trip_and_default_to_none(tmp_path):
    assert PhysicsParams().latency_steps == 0 and PhysicsParams().backlash == (0.0,) * 12
    p = PhysicsParams.from_dict({"latency_steps": 2, "backlash": {"right_wrist_rotate": 0.012}})
    p.save(tmp_path / "p.json")
    q = PhysicsParams.load(tmp_path / "p.json")
    assert q == p and q.latency_steps == 2 and isinstance(q.latency_steps, int)
    assert q.backlash[ARM_JOINT_NAMES.index("right_wrist_rotate")] == 0.012


@pytest.mark.parametrize("change,match", [
    ({"latency_steps": 1.5}, "latency_steps"),
    ({"latency_steps": -1}, "latency_steps"),
    ({"backlash": (-0.01,) + (0.0,) * 11}, r"backlash\[left_waist\]"),
    ({"backlash": (0.0,) * 11}, "backlash has 11 values"),
])
def test_invalid_latency_and_backlash_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PhysicsParams(), **change)
