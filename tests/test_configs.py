"""One typed config per trainer is also its command line and its YAML."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from embodied_gym import configs
from embodied_gym.configs import setting


@dataclass
class Inner:
    steps: int = setting(10, help="inner steps")
    image_size: tuple[int, int] | None = setting(None, help="H W")


@dataclass
class Outer:
    dataset: str = setting(help="dataset folder")
    batch_size: int = setting(8, help="batch")
    mode: Literal["a", "b"] = setting("a", help="mode")
    cameras: tuple[str, ...] | None = setting(None, help="cameras")
    episodes: list[int] | None = setting(None, help="episodes")
    resume: bool = setting(False, help="resume")
    num_threads: int | None = setting(None, flag="--threads", help="torch threads")
    overrides: dict = setting(default_factory=dict, help="extra")
    inner: Inner = field(default_factory=Inner)


def _parse(argv, config=None):
    p = argparse.ArgumentParser()
    configs.add_arguments(p, Outer)
    return configs.from_args(Outer, p.parse_args(argv), config)


def test_flags_follow_field_names_and_types():
    cfg = _parse(
        [
            "--dataset",
            "d",
            "--batch-size",
            "4",
            "--mode",
            "b",
            "--cameras",
            "x",
            "y",
            "--episodes",
            "1",
            "2",
            "--resume",
            "--threads",
            "2",
            "--overrides",
            "lr=0.001",
            "name=z",
            "--inner.steps",
            "5",
            "--inner.image-size",
            "48",
            "64",
        ]
    )
    assert (cfg.dataset, cfg.batch_size, cfg.mode, cfg.cameras, cfg.episodes) == ("d", 4, "b", ("x", "y"), [1, 2])
    assert cfg.resume is True and cfg.num_threads == 2
    assert cfg.overrides == {"lr": 0.001, "name": "z"}
    assert cfg.inner.steps == 5 and cfg.inner.image_size == (48, 64)


def test_yaml_then_command_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("dataset: from_file\nbatch_size: 2\ninner: {steps: 3, image_size: [24, 32]}\n")
    cfg = _parse(["--batch-size", "6"], f)
    assert cfg.dataset == "from_file" and cfg.batch_size == 6  # the flag wins over the file
    assert cfg.inner.steps == 3 and cfg.inner.image_size == (24, 32)
    assert cfg.mode == "a"  # untouched: the default


def test_errors_name_the_file_and_key(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("dataset: d\ninner: {stepz: 3}\n")
    with pytest.raises(ValueError, match=r"bad.yaml.inner: unknown setting 'stepz'"):
        _parse([], f)
    with pytest.raises(ValueError, match=r"missing required setting\(s\) \['dataset'\]: pass --dataset"):
        _parse([])
    with pytest.raises(SystemExit):
        _parse(["--dataset", "d", "--mode", "c"])  # not a choice


def test_every_setting_reachable_from_yaml_has_a_flag():
    p = argparse.ArgumentParser()
    configs.add_arguments(p, Outer)
    dests = {a.dest for a in p._actions}
    assert {
        "dataset",
        "batch_size",
        "mode",
        "cameras",
        "episodes",
        "resume",
        "num_threads",
        "overrides",
        "inner__steps",
        "inner__image_size",
    } <= dests


def test_demo_settings_are_reachable_from_the_command_line(tmp_path):
    """Every profile setting of the demo has a dotted flag; the flags override the profile."""
    from embodied_gym.cli import build_parser
    from embodied_gym.demo.configuration import DemoConfig, load_config

    args = build_parser().parse_args(
        [
            "demo",
            "--profile",
            "smoke",
            "--act.steps",
            "7",
            "--calibrate.method",
            "sa",
            "--tasks",
            "PickCup",
            "CupOnMat",
            "--no-evaluate.expert",
        ]
    )
    cfg = load_config("smoke")
    configs.merge(cfg, configs.given(args, DemoConfig), "command line")
    assert cfg.act.steps == 7 and cfg.calibrate.method == "sa" and cfg.tasks == ["PickCup", "CupOnMat"]
    assert cfg.evaluate.expert is False
    assert cfg.act.preset == load_config("smoke").act.preset  # untouched settings keep the profile's value
    demo = build_parser()._subparsers._group_actions[0].choices["demo"].add_command_arguments()
    dests = {a.dest for a in demo._actions}
    assert "act__steps" in dests
    assert "act__dataset" not in dests  # paths the demo fills itself are not flags


def test_help_shows_an_instances_values_as_defaults():
    """With ``defaults`` (a loaded profile, say) the help shows what a run without the flag gets."""
    p = argparse.ArgumentParser()
    obj = Outer(dataset="d", batch_size=32, cameras=("a", "b"), num_threads=2)
    obj.inner.steps = 99
    configs.add_arguments(p, Outer, defaults=obj, defaults_from="quick profile")
    helps = {a.dest: a.help for a in p._actions}
    assert helps["batch_size"] == "batch (default 32)" and helps["cameras"] == "cameras (default a b)"
    assert helps["inner__steps"] == "inner steps (default 99)" and helps["dataset"] == "dataset folder (default d)"
    assert helps["episodes"] == "episodes"  # None: nothing to show

    @dataclass
    class Described:
        workers: int | None = setting(None, help="processes (default: the CPU count)")
        steps: int = setting(5, help="steps (default: the preset's)")

    p = argparse.ArgumentParser()
    configs.add_arguments(p, Described, defaults=Described(workers=None, steps=7), defaults_from="quick profile")
    helps = {a.dest: a.help for a in p._actions}
    assert helps["workers"] == "processes (default: the CPU count)"
    assert helps["steps"] == "steps (default: the preset's) (quick profile: 7)"
    p = argparse.ArgumentParser()
    configs.add_arguments(p, Described, defaults=Described(), defaults_from="quick profile")
    assert {a.dest: a.help for a in p._actions}["steps"] == "steps (default: the preset's)"
