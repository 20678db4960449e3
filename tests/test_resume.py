"""Interrupted long jobs: stage 1 of calibration resumes from its finished chunks after a SIGKILL; Ctrl-C
ends a command with one line (exit 130); user errors print one ``error:`` line (exit 2), bugs a traceback."""

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import embodied_gym
from embodied_gym.data.recording import record
from embodied_gym.data.replay import load_episodes
from embodied_gym.physaligner import ParameterSpace
from embodied_gym.physaligner.space import parameter_names
from embodied_gym.physaligner.transitions import Transitions, simulate_transitions

REPO = Path(__file__).resolve().parents[1]
LOGGER = "embodied_gym.physaligner.transitions"
CHUNK = re.compile(r"chunk-\d+-\d+\.npz")
SPACE = ParameterSpace(frozen=[n for n in parameter_names() if not n.startswith("kp.right")])


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


def _chunks(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.glob("*.chunks/*") if CHUNK.fullmatch(p.name))


# Stage 1 in a subprocess, on the episodes as JSON (floats round-trip exactly; LeRobot's import is slow).
STAGE1 = """
import json, sys
import numpy as np
from embodied_gym.data.replay import Episode
from embodied_gym.physaligner import ParameterSpace
from embodied_gym.physaligner.space import parameter_names
from embodied_gym.physaligner.transitions import simulate_transitions
space = ParameterSpace(frozen=[n for n in parameter_names() if not n.startswith("kp.right")])
episodes = [Episode(**{k: np.array(v) if isinstance(v, list) else v for k, v in e.items()})
            for e in json.load(open(sys.argv[1]))]
simulate_transitions(episodes, "PickCup", space, int(sys.argv[3]), workers=1, cache_dir=sys.argv[2],
                     progress=False, chunk_samples=int(sys.argv[4]))
"""


def _episodes_json(episodes, path):
    import json
    from dataclasses import asdict

    path.write_text(
        json.dumps(
            [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in asdict(e).items()} for e in episodes]
        )
    )
    return path


def test_stage1_sigkill_resumes_from_finished_chunks(tiny_dataset, tmp_path, caplog):
    from embodied_gym.physaligner.transitions import _run_key, _write_chunk

    samples, size = 32, 2
    episodes = load_episodes(tiny_dataset)
    reference = simulate_transitions(episodes, "PickCup", SPACE, samples, workers=1, progress=False)

    cache = tmp_path / "work"
    proc = _popen(
        ["-c", STAGE1, str(_episodes_json(episodes, tmp_path / "episodes.json")), str(cache), str(samples), str(size)]
    )
    _wait_for(lambda: _chunks(cache), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = _chunks(cache)
    assert not list(cache.glob("transitions-*.npz")), "the run finished before the kill; nothing to resume"
    assert 1 <= len(kept) < samples // size
    stamps = {p.name: p.stat().st_mtime_ns for p in kept}
    folder = kept[0].parent

    # Files that are not this run's finished chunks: a write cut short, and a chunk of another sample set.
    (folder / "chunk-000030-000032.npz.tmp").write_bytes(b"partial")
    _write_chunk(
        folder,
        _run_key(episodes, "PickCup", SPACE, samples, seed=1),
        30,
        32,
        SPACE.sample(samples, seed=1)[30:],
        np.zeros((2, len(reference.state), 28)),
    )
    assert {p.name: p.stat().st_mtime_ns for p in kept} == stamps  # the kill's chunks are untouched so far

    caplog.set_level(logging.DEBUG, logger=LOGGER)
    resumed = simulate_transitions(
        episodes, "PickCup", SPACE, samples, workers=1, cache_dir=cache, progress=False, chunk_samples=size
    )
    written = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stage 1: wrote")]
    assert len(written) == samples // size - len(kept)  # only the missing chunks were simulated
    assert not {Path(w.split()[-1]).name for w in written} & set(stamps)
    assert any("discarding" in r.getMessage() and "another dataset" in r.getMessage() for r in caplog.records)
    assert any(f"{len(kept) * size} of {samples} θ samples already simulated" in r.getMessage() for r in caplog.records)
    # Bit-identical to the uninterrupted run, in memory and in the cache file; the chunks are gone.
    for got in (resumed, Transitions.load(next(cache.glob("transitions-*.npz")))):
        for name in ("theta", "state", "action", "next_state", "episode"):
            np.testing.assert_array_equal(getattr(got, name), getattr(reference, name), err_msg=name)
    assert not folder.exists()


def test_stage1_chunks_on_a_process_pool(tiny_dataset, tmp_path, caplog):
    episodes = load_episodes(tiny_dataset)[:1]
    reference = simulate_transitions(episodes, "PickCup", SPACE, 4, workers=1, progress=False)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    pooled = simulate_transitions(
        episodes, "PickCup", SPACE, 4, workers=2, cache_dir=tmp_path, progress=False, chunk_samples=3
    )
    np.testing.assert_array_equal(pooled.next_state, reference.next_state)
    written = sorted(
        Path(r.getMessage().split()[-1]).name for r in caplog.records if r.getMessage().startswith("stage 1: wrote")
    )
    assert written == ["chunk-000000-000003.npz", "chunk-000003-000004.npz"]
    with pytest.raises(ValueError, match="chunk_samples"):
        simulate_transitions(episodes, "PickCup", SPACE, 4, chunk_samples=0)


def test_stage1_on_ray_resumes_the_same_chunks(tiny_dataset, tmp_path, caplog):
    pytest.importorskip("ray")
    from embodied_gym.physaligner.transitions import _run_key, _write_chunk

    episodes = load_episodes(tiny_dataset)[:1]
    local = simulate_transitions(episodes, "PickCup", SPACE, 4, workers=1, progress=False)
    key = _run_key(episodes, "PickCup", SPACE, 4, 0)
    folder = tmp_path / f"transitions-{key[:20]}.chunks"
    folder.mkdir()
    _write_chunk(folder, key, 0, 1, local.theta[:1], local.next_state[:1])
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    on_ray = simulate_transitions(
        episodes, "PickCup", SPACE, 4, workers=1, cache_dir=tmp_path, progress=False, backend="ray", chunk_samples=1
    )
    written = [r for r in caplog.records if r.getMessage().startswith("stage 1: wrote")]
    assert len(written) == 3 and not folder.exists()
    np.testing.assert_array_equal(on_ray.next_state[0], local.next_state[0])  # the resumed chunk
    np.testing.assert_allclose(on_ray.next_state, local.next_state)


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
    from embodied_gym.physaligner.transitions import episode_transitions

    def caught(fn):
        try:
            fn()
        except Exception as e:
            return e
        raise AssertionError("no exception")

    assert is_user_error(caught(lambda: simulate_transitions([], "PickCup", SPACE, 1, backend="dask")))
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
