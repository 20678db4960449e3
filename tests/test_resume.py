"""Interrupted long jobs: Ctrl-C ends a command with one line (exit 130) and keeps what it can (PhysAligner:
its trust-region checkpoint); user errors print one ``error:`` line (exit 2), bugs a traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import embodied_gym
from embodied_gym.data.replay import load_episodes
from embodied_gym.recording import record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume") / "pickcup"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", max_episode_steps=30)
    record(env, embodied_gym.make_expert(env), root, 2, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    return root


def _env():
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONFAULTHANDLER": "1",
    }


def _popen(args, **kw):
    # Its own session, like a terminal's foreground job; SIGINT at its default even if ours is ignored.
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=_env(),
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kw,
    )


def _wait_for(cond, proc, timeout=300.0, poll=0.002):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (rc {proc.returncode}) before the condition held")
        time.sleep(poll)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"the condition did not hold within {timeout} s")


def _interrupt(args, ready, tmp_path):
    """Run ``embodied-gym ARGS`` in a subprocess, Ctrl-C its process group once ``ready()``; (rc, stderr)."""
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = _popen(["-m", "embodied_gym.cli", *args], stdout=subprocess.DEVNULL, stderr=f)
        _wait_for(ready, proc, poll=0.05)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the workers get it too
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            proc.wait(timeout=30)
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no exit within 60 s of Ctrl-C:\n{err.read_text()[-6000:]}") from None
    return rc, err.read_text().replace("\r", "\n")


def _last_line(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.strip()][-1]


def test_record_ctrl_c_prints_one_line_and_keeps_the_episodes(tmp_path):
    root = tmp_path / "d"
    sidecar = root / "meta" / "embodied_gym_episodes.jsonl"
    rc, stderr = _interrupt(
        [
            "record",
            "--env",
            "EmbodieDreamer-PickCup-v0",
            "--episodes",
            "200",
            "--out",
            str(root),
            "--image-size",
            "24",
            "32",
        ],
        lambda: sidecar.exists() and sidecar.read_text().count("\n") >= 1,
        tmp_path,
    )
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert _last_line(stderr).startswith(
        f"embodied-gym record: interrupted; the episodes finished so far are saved in {root}"
    )
    assert "--resume" in _last_line(stderr)
    assert 1 <= len(load_episodes(root)) < 200


def test_calibrate_ctrl_c_in_physaligner_keeps_its_trust_region_checkpoint(tiny_dataset, tmp_path):
    """Ctrl-C after PhysAligner's first trust-region iteration: one line, the iteration kept."""
    out = tmp_path / "r.json"
    work = tmp_path / "r.json.work"

    def checkpointed():
        return any(work.glob("trust-region-*.json"))

    rc, stderr = _interrupt(
        [
            "calibrate",
            "--dataset",
            str(tiny_dataset),
            "--method",
            "physaligner",
            "--out",
            str(out),
            "--free",
            "kp.right_elbow",
            "damping.right_elbow",
            "--tr-iterations",
            "400",
            "--latency",
            "0",
        ],
        checkpointed,
        tmp_path,
    )
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert _last_line(stderr).startswith(
        f"embodied-gym calibrate: interrupted; PhysAligner's trust-region state "
        f"(written after every iteration) is kept in {work}"
    )
    assert checkpointed() and not out.exists()


def test_user_errors_print_one_line_and_exit_2(tiny_dataset, tmp_path, capsys):
    from embodied_gym.cli import main

    assert (
        main(
            [
                "replay",
                "--dataset",
                str(tiny_dataset),
                "--physics",
                str(tmp_path / "nope.json"),
                "--out",
                str(tmp_path / "rep"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.strip() == f"embodied-gym replay: error: physics file {tmp_path / 'nope.json'} does not exist"
    assert main(["visaligner", "train", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "vis")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("embodied-gym visaligner train: error: dataset ")
    assert "cam_high" in err[0]


def test_bugs_are_not_user_errors():
    import json

    from embodied_gym.errors import UserInputError, is_user_error, user_message
    from embodied_gym.physaligner.calibrate import split_episodes
    from embodied_gym.physaligner.transitions import episode_transitions

    def caught(fn):
        try:
            fn()
        except Exception as e:
            return e
        raise AssertionError("no exception")

    assert is_user_error(caught(lambda: split_episodes([], 0.3, 0)))  # too few episodes to calibrate
    assert not is_user_error(caught(lambda: episode_transitions([])))  # numpy fails inside our code: a bug
    assert not is_user_error(caught(lambda: json.loads("{")))  # raised inside a library
    assert is_user_error(UserInputError("bad"))
    assert user_message(KeyError("no camera 'x'")) == "no camera 'x'"


@pytest.mark.parametrize(
    "argv,says",
    [
        (["demo", "--name", "n", "--runs", "R"], ["R/n", "rerun the same command"]),
        (["record", "--env", "E", "--out", "D"], ["saved in D", "plus --resume"]),
        (["record", "--env", "E", "--out", "D", "--resume"], ["saved in D", "with the same command"]),
        (["replay", "--dataset", "D"], ["nothing was written"]),
        (["calibrate", "--dataset", "D", "--out", "r.json", "--method", "physaligner"], ["r.json.work", "rerun"]),
        (["calibrate", "--dataset", "D", "--out", "r.json", "--method", "sa"], ["keeps no checkpoint"]),
        (["generate", "--out", "G", "--task", "PickCup"], ["kept in G/sim", "rerun the same command"]),
        (["visaligner", "train", "--dataset", "D", "--out", "V"], ["V/checkpoints", "rerun the same command"]),
        (["visaligner", "render", "--dataset", "D", "--model", "M", "--out", "G"], ["saved in G", "--resume"]),
        (["train", "act", "--dataset", "D", "--out", "A"], ["A/checkpoints", "plus --resume"]),
        (["train", "tpo", "--policy", "A", "--env", "E", "--out", "T"], ["kept in T", "rerun the same command"]),
        (["eval", "--policy", "expert", "--env", "E"], ["nothing was written"]),
    ],
)
def test_every_long_command_says_what_ctrl_c_kept(argv, says):
    from embodied_gym.cli import build_parser

    args = build_parser().parse_args(argv)
    note = args._command.interrupted(args)
    assert all(s in note for s in says), note
