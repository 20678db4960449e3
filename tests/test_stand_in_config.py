"""A broken stand-in robot config is refused with a message naming the file, the key and the form."""

import copy
from pathlib import Path

import pytest
import yaml

from embodied_gym.robots.stand_in import DEFAULT_CONFIG, load_settings

BASE = yaml.safe_load(Path(DEFAULT_CONFIG).read_text())


def _set(*keys, value):
    def mutate(cfg):
        d = cfg
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return mutate


@pytest.mark.parametrize(
    "mutate,needles",
    [
        (_set("physics", "pad_friction", value=None), ["pad_friction", "null"]),
        (_set("physics", "kp", value=300), ["kp", "list of 12 numbers"]),
        (_set("effects", "latency_steps", value=1.5), ["effects.latency_steps", "1.5", "whole number"]),
        (_set("effects", "backlash", "left_waist", value="x"), ["effects.backlash.left_waist", "'x'"]),
        (_set("effects", "stribeck", "static", value=[1, 2]), ["effects.stribeck.static", "6 numbers"]),
        (_set("effects", "stribeck", "stribeck_velocity", value=0), ["stribeck_velocity", "> 0"]),
        (_set("effects", value=[1]), ["'effects'", "mapping"]),
        (_set("look", "white_balance", value=[1, 1]), ["look.white_balance", "3 numbers"]),
        (_set("look", "shadows", value="yes"), ["look.shadows", "true or false"]),
        (_set("look", "camera_offsets", "cam_high", "pos", value=[0, 0]), ["camera_offsets.cam_high.pos", "3 numbers"]),
        (_set("seed", value="7"), ["seed", "integer"]),
    ],
)
def test_bad_stand_in_config_names_file_and_key(tmp_path, mutate, needles):
    cfg = copy.deepcopy(BASE)
    mutate(cfg)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError) as err:
        load_settings(path)
    msg = str(err.value)
    assert str(path) in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


@pytest.mark.parametrize(
    "name,text,needle",
    [
        ("robot.yaml", "physics: [1,\n", "is not valid YAML"),
        ("robot.json", "{", "is not valid JSON"),
    ],
)
def test_unparsable_stand_in_config_is_named(tmp_path, name, text, needle):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=rf"{tmp_path / name} {needle}"):
        load_settings(tmp_path / name)


def test_stand_in_config_directory_is_named(tmp_path):
    with pytest.raises(ValueError, match=rf"{tmp_path} is a directory"):
        load_settings(tmp_path)


def test_default_config_still_loads():
    s = load_settings()
    assert s["physics"].gripper_kp == BASE["physics"]["gripper_kp"]
    assert s["effects"]["latency_steps"] == 1
