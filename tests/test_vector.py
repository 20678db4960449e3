"""Vector envs in worker processes after the test process has rendered (issue: async hang).

Each scenario runs in a fresh interpreter under a timeout, so a regression (a forked worker waiting
forever on the parent's OpenGL driver state) fails the test instead of hanging the suite.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys, time
import gymnasium as gym
import embodied_gym
from embodied_gym.rendering import ForkedGLContextError

ID, KW = "EmbodieDreamer-PickCup-v0", dict(obs_type="pixels", image_size=(48, 64))


def make_one():
    return gym.make(ID, **KW)


def _render_inherited(env, q):
    try:
        env.render()
        q.put("rendered")
    except ForkedGLContextError as e:
        q.put(str(e))


def main(case):
    out = {}
    parent = gym.make(ID, render_mode="rgb_array", **KW)
    parent.reset(seed=0)
    out["parent_frame"] = list(parent.render().shape)
    t = time.monotonic()
    if case == "fork":
        v = gym.make_vec(ID, num_envs=2, vectorization_mode="async", vector_kwargs={"context": "fork"}, **KW)
        try:
            v.reset(seed=0)
            out["error"] = None
        except ForkedGLContextError as e:
            out["error"] = str(e)
        out["seconds"] = time.monotonic() - t
        procs = list(v.processes)
        v.close()
        for p in procs:
            p.join(10)
        out["alive"] = [p.is_alive() for p in procs]
        # The parent's own env, copied into a forked child, refuses too instead of hanging.
        import multiprocessing as mp

        q = mp.get_context("fork").SimpleQueue()
        child = mp.get_context("fork").Process(target=_render_inherited, args=(parent, q))
        child.start()
        child.join(60)
        out["inherited"] = q.get() if not q.empty() else "no answer (hung?)"
        if child.is_alive():
            child.kill()
    elif case == "spawn":
        v = gym.make_vec(ID, num_envs=2, vectorization_mode="async", vector_kwargs={"context": "spawn"}, **KW)
        obs, _ = v.reset(seed=0)
        obs, *_ = v.step(v.action_space.sample())
        out["shape"] = list(obs["cam_high"].shape)
        out["std"] = float(obs["cam_high"].std())
        out["seconds"] = time.monotonic() - t
        v.close()
    elif case == "sb3":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        v = SubprocVecEnv([make_one, make_one])  # SB3's default start method (forkserver)
        obs = v.reset()
        obs, *_ = v.step(v.action_space.sample()[None].repeat(2, 0))
        out["shape"] = list(obs["cam_high"].shape)
        out["seconds"] = time.monotonic() - t
        v.close()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _run(tmp_path, case: str, timeout: float = 240) -> dict:
    script = tmp_path / "vector_after_render.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    try:
        proc = subprocess.run(
            [sys.executable, str(script), case], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"vector env scenario {case!r} hung for {timeout} s after the parent rendered:\n{e.stderr}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"scenario {case!r} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def test_forked_workers_after_render_fail_fast_naming_spawn(tmp_path):
    out = _run(tmp_path, "fork")
    assert out["parent_frame"] == [48, 64, 3]
    assert out["error"] is not None, "a forked worker rendered after the parent's GL context (expected an error)"
    assert 'vector_kwargs={"context": "spawn"}' in out["error"]
    assert out["seconds"] < 60
    assert out["alive"] == [False, False], "workers outlived the failed vector env"
    assert 'vector_kwargs={"context": "spawn"}' in out["inherited"]


def test_spawned_async_workers_after_render_reset_and_step(tmp_path):
    out = _run(tmp_path, "spawn")
    assert out["shape"] == [2, 48, 64, 3]
    assert out["std"] > 1.0  # a real image, not a blank buffer
    assert out["seconds"] < 120


def test_sb3_subproc_vec_env_after_render(tmp_path):
    out = _run(tmp_path, "sb3")
    assert out["shape"] == [2, 48, 64, 3]
