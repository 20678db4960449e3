"""The ``embodied-gym`` command line itself: what its help imports and shows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "diffusers", "lerobot")


def _run_python(code: str) -> str:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_command_list_imports_no_torch():
    """`embodied-gym --help` builds the top-level parser and its help without torch, diffusers or
    LeRobot: each command's flags (and config module) are loaded only when that command is used."""
    out = _run_python(
        "import sys, embodied_gym.cli as cli\n"
        "p = cli.build_parser()\n"
        "text = p.format_help()\n"
        "assert 'demo' in text and 'record' in text, text\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    assert out == "[]", f"building the top-level parser imported {out}"


def test_a_commands_help_imports_only_its_own_config():
    """`embodied-gym record --help` (no torch-backed config) stays free of torch."""
    out = _run_python(
        "import sys, contextlib, io, embodied_gym.cli as cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):\n"
        "    cli.build_parser().parse_args(['record', '--help'])\n"
        "assert '--episodes' in buf.getvalue(), buf.getvalue()\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    assert out == "[]", f"record --help imported {out}"


def _help(argv: list[str], capsys) -> str:
    from embodied_gym.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare words


def _flag_help(text: str, flag: str) -> str:
    """The help words after ``flag`` up to the next flag."""
    start = text.index(f" {flag} ")
    end = text.find(" --", start + len(flag) + 2)
    return text[start:end]


def test_demo_help_shows_the_profile_it_runs(capsys):
    """`demo --help` shows the chosen profile's values (quick by default), not the trainers' defaults."""
    from embodied_gym.demo.configuration import load_config

    quick, full = load_config("quick"), load_config("full")
    assert quick.record.episodes == 20 and quick.record.episodes != full.record.episodes  # what this test tells apart

    text = _help(["demo", "--help"], capsys)
    assert "Defaults shown: quick profile" in text
    assert "(default 20)" in _flag_help(text, "--record.episodes")
    assert _help(["demo", "--quick", "--help"], capsys) == text

    text = _help(["demo", "--full", "--help"], capsys)
    assert "Defaults shown: full profile" in text
    assert f"(default {full.record.episodes})" in _flag_help(text, "--record.episodes")
    assert "Defaults shown: smoke profile" in _help(["demo", "--profile", "smoke", "--help"], capsys)


def test_demo_help_with_an_override_file_and_a_bad_profile(tmp_path, capsys):
    cfg = tmp_path / "more.yaml"
    cfg.write_text("record: {episodes: 7}\n")
    text = _help(["demo", "--config", str(cfg), "--help"], capsys)
    assert "(default 7)" in _flag_help(text, "--record.episodes")
    # an unknown profile still shows the help (the run reports the error)
    assert "could not be read" in _help(["demo", "--profile", "nope", "--help"], capsys)


def test_every_command_still_builds_its_flags():
    """Each command's lazily added flags build (and a group's subcommands resolve through it)."""
    from embodied_gym.cli import build_parser

    top = build_parser()
    for name, parser in top._subparsers._group_actions[0].choices.items():
        subs = parser._subparsers
        children = subs._group_actions[0].choices.values() if subs is not None else [parser]
        for child in children:
            child.add_command_arguments()
            assert any(a.option_strings and a.option_strings[0] != "-h" for a in child._actions), name
