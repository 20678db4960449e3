"""Expert demonstrations rolled out by worker processes (local or Ray) and written in seed order:
the same dataset as the serial recorder, resumable after an interrupted run."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

import embodied_gym
from embodied_gym.data import features as F
from embodied_gym.data.reader import open_dataset
from embodied_gym.factory import make_env
from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
from embodied_gym.recording.episodes import record
from embodied_gym.recording.parallel import record_expert_demos

ENV = "EmbodieDreamer-PickCup-v0"
STATE_ONLY = {"obs_type": "state", "max_episode_steps": 8}


def _serial(root, env_kwargs, episodes, **kw):
    env = make_env(ENV, **env_kwargs)
    try:
        return record(env, embodied_gym.make_expert(env), root, episodes, env_id=ENV, progress=False, **kw)
    finally:
        env.close()


def assert_same_dataset(a_root, b_root, cameras=(), first=None):
    """Every frame column (state, velocity, TCP poses, action, reward/success/done, env state, indices),
    every sidecar row and every camera frame equal (of the ``first`` episodes of ``a``: all by default)."""
    a, b = open_dataset(a_root), open_dataset(b_root)
    n = b.total_episodes
    assert n == (first or a.total_episodes)
    assert a.rows()[:n] == b.rows()
    ta, tb = a.table(list(range(n))), b.table()
    assert sorted(ta.column_names) == sorted(tb.column_names)
    for col in ta.column_names:
        assert np.array_equal(np.asarray(ta[col]), np.asarray(tb[col])), col
    for cam in cameras:
        for e in range(n):
            # equal up to the lossy codec: two H.264 encodes of the same frames on a loaded machine
            # differed by up to 10 levels on ~2 % of pixels (the frames themselves are equal: the
            # environment-state column above, estimated from them, matches bit for bit)
            fa, fb = a.frames(cam, e).astype(np.int16), b.frames(cam, e).astype(np.int16)
            assert fa.shape == fb.shape and np.abs(fa - fb).mean() < 0.5, (cam, e)


@pytest.fixture
def default_sigint():
    """Ctrl-C as in a plain Python process (KeyboardInterrupt), whatever an earlier test installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def serial_state(tmp_path_factory):
    """Seeds 0..3 of the serial recorder, state only."""
    root = tmp_path_factory.mktemp("serial") / "state"
    _serial(root, STATE_ONLY, 4)
    return root


@pytest.fixture(scope="module")
def estimator(tmp_path_factory):
    torch.manual_seed(0)
    cfg = PoseEstimatorConfig(
        task="PickCup", frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )
    return str(PoseEstimator(cfg).save_pretrained(tmp_path_factory.mktemp("est") / "est"))


def test_two_local_workers_record_what_the_serial_recorder_does(tmp_path, estimator):
    # a camera video and a pose estimate (observation.environment_state), 3 seeds
    kw = {"obs_type": "pixels_state", "cameras": ("cam_high",), "pose_estimator": estimator, "max_episode_steps": 8}
    _serial(tmp_path / "serial", kw, 3, seed=5)
    summary = record_expert_demos(ENV, kw, tmp_path / "parallel", 3, seed=5, workers=2, progress=False)
    assert (summary.episodes, summary.recorded) == (3, 3)
    ds = open_dataset(tmp_path / "parallel")
    assert [r["seed"] for r in ds.rows()] == [5, 6, 7]
    assert F.ENV_STATE in ds.features and ds.rows()[0]["pose_estimator"]["path"]
    assert_same_dataset(tmp_path / "serial", tmp_path / "parallel", cameras=("cam_high",))
    assert not multiprocessing.active_children(), multiprocessing.active_children()  # the workers are gone


def test_ray_backend_records_what_the_serial_recorder_does(tmp_path, serial_state):
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("ray is not installed")
    summary = record_expert_demos(ENV, STATE_ONLY, tmp_path / "ray", 2, workers=2, backend="ray", progress=False)
    assert (summary.episodes, summary.recorded) == (2, 2)
    assert_same_dataset(serial_state, tmp_path / "ray", first=2)  # seeds 0 and 1 of the serial recording


def test_an_interrupted_parallel_run_keeps_its_episodes_in_order_and_resumes(tmp_path, serial_state, default_sigint):
    root = tmp_path / "d"
    sidecar = root / F.SIDECAR

    def interrupt_after_the_first_episode():
        deadline = time.time() + 120
        while time.time() < deadline and not (sidecar.exists() and sidecar.read_text().count("\n") >= 1):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in this (the writing) process

    watcher = threading.Thread(target=interrupt_after_the_first_episode, daemon=True)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        record_expert_demos(ENV, STATE_ONLY, root, 40, workers=2, progress=False)
    watcher.join()
    assert not multiprocessing.active_children(), multiprocessing.active_children()  # the workers were stopped
    kept = open_dataset(root)
    done = kept.total_episodes
    assert 1 <= done < 4, done  # nothing written out of order, and the run did stop early
    assert [r["episode_index"] for r in kept.rows()] == list(range(done))
    assert [r["seed"] for r in kept.rows()] == list(range(done))
    summary = record_expert_demos(ENV, STATE_ONLY, root, 4 - done, workers=2, resume=True, progress=False)
    assert (summary.episodes, summary.recorded) == (4, 4 - done)
    assert_same_dataset(serial_state, root)


def test_ctrl_c_while_an_episode_is_written_keeps_it(tmp_path, default_sigint):
    """A Ctrl-C inside LeRobot's save of an episode would leave a half-saved episode it cannot drop; the
    interrupt takes effect once the episode is saved."""
    from dataclasses import replace

    from embodied_gym.data.writer import EpisodeWriter
    from embodied_gym.recording.episodes import plan_recording, rollout_episode, write_episode

    env = make_env(ENV, **STATE_ONLY)
    plan = plan_recording(env)
    episode = rollout_episode(env, embodied_gym.make_expert(env), 3)
    env.close()

    def frames_then_ctrl_c():
        for i, frame in enumerate(episode.frames):
            if i == 2:
                os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, mid-episode
            yield frame

    writer = EpisodeWriter(tmp_path / "d", plan.features)
    with pytest.raises(KeyboardInterrupt):
        write_episode(writer, replace(episode, frames=frames_then_ctrl_c()), plan.row(episode, ENV))
    ds = open_dataset(tmp_path / "d")
    assert ds.total_episodes == 1 and ds.rows()[0]["seed"] == 3
    assert len(ds.episodes()[0].action) == len(episode.frames) == 8
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_bad_workers_backend_and_missing_ray_are_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="workers must be at least 1.*got 0"):
        record_expert_demos(ENV, STATE_ONLY, tmp_path / "a", 2, workers=0)
    with pytest.raises(ValueError, match="unknown recording backend 'dask'; valid: 'local', 'ray'"):
        record_expert_demos(ENV, STATE_ONLY, tmp_path / "a", 2, backend="dask")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ValueError, match=r"needs Ray.*pip install 'embodied-gym\[ray\]'.*backend='local'"):
        record_expert_demos(ENV, STATE_ONLY, tmp_path / "a", 2, backend="ray")
    with pytest.raises(ValueError, match=r"env_kwargs\['physics'\].*cannot be sent to a worker"):
        record_expert_demos(ENV, {"physics": lambda: None}, tmp_path / "a", 2, workers=2)
    assert not (tmp_path / "a").exists()  # nothing written


def test_cli_record_takes_workers_for_the_expert_only(tmp_path, capsys):
    # (a parallel `embodied-gym record` run, its default, is test_resume's Ctrl-C test)
    from embodied_gym.cli import main

    base = ["record", "--env", ENV, "--episodes", "2", "--out", str(tmp_path / "x")]
    assert main(base + ["--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main(base + ["--policy", str(tmp_path / "act"), "--workers", "2"]) == 2
    assert "--workers and --backend apply to --policy expert" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's choices
        main(base + ["--backend", "dask"])
    assert "invalid choice: 'dask'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_workers_build_the_expert_with_the_integral_setting_asked_for():
    """``record_expert_demos(..., expert_integral_below=...)`` reaches the expert each worker builds
    (benchmarks/policies.py --expert-integral-below records the demonstrator ablations this way)."""
    from embodied_gym.recording import parallel

    for setting in ("plan", None, 0.01):
        env, expert = parallel._worker_env(("EmbodieDreamer-PickCup-v0", {"obs_type": "state"}, setting))
        assert expert.integral_below == setting
    env.close()
    parallel._WORKER.clear()


_ORPHAN_PARENT = """
import os
from embodied_gym.processes import WorkerPool
if __name__ == "__main__":
    pool = WorkerPool(1)
    print(pool.result(pool.submit(os.getpid)), flush=True)
    os._exit(0)  # like SIGKILL: no shutdown, no clean-up runs
"""


def test_a_local_worker_exits_when_its_parent_is_killed(tmp_path):
    """A recording killed from outside (SIGTERM, SIGKILL: no ``finally`` runs) leaves no worker behind."""
    import subprocess

    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True)
    worker = int(out.stdout.split()[-1])
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    pytest.fail(f"worker {worker} outlived its killed parent by 20 s")
