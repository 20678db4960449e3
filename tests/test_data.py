"""Recording to LeRobotDataset and open-loop replay."""

import json

import gymnasium as gym
import numpy as np
import pytest

import embodied_gym
from embodied_gym.data.recording import record
from embodied_gym.data.replay import load_episodes, replay_episode
from embodied_gym.metrics import quat_to_mat, rotation_error


def _short_env(eid="EmbodieDreamer-PickCup-v0", steps=25, **kw):
    return gym.make(eid, obs_type="pixels_state", cameras=("cam_high",), image_size=(32, 40),
                    max_episode_steps=steps, **kw)


@pytest.fixture(scope="module")
def sim_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "pickcup"
    env = _short_env()
    summary = record(env, embodied_gym.make_expert(env), root, 2, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    assert summary.episodes == 2
    return root


def test_dataset_round_trip(sim_dataset):
    from lerobot.datasets import LeRobotDataset

    ds = LeRobotDataset("embodied_gym/pickcup", root=sim_dataset, video_backend="pyav")
    assert ds.meta.total_episodes == 2
    assert ds.fps == 50
    assert ds.meta.info["codebase_version"] == "v3.0"
    assert len(ds) == 50  # 2 episodes x 25 steps
    item = ds[3]
    assert item["observation.state"].shape == (14,)
    assert item["observation.velocity"].shape == (14,)
    assert item["observation.ee_pose"].shape == (14,)
    assert item["action"].shape == (14,)
    assert item["observation.images.cam_high"].shape == (3, 32, 40)
    assert item["task"] == "Grab the paper cup and lift it."
    rows = [json.loads(line) for line in (sim_dataset / "meta/embodied_gym_episodes.jsonl").read_text().splitlines()]
    assert [r["episode_index"] for r in rows] == [0, 1]
    assert all(r["success"] is False for r in rows)  # 25 steps is too short to lift the cup
    assert not bool(np.any(np.stack(ds.hf_dataset["next.success"])))


def test_resume_continues_and_refuses_to_overwrite(sim_dataset, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(sim_dataset, root)
    env = _short_env(steps=10)
    with pytest.raises(FileExistsError, match="resume"):
        record(env, embodied_gym.make_expert(env), root, 1, progress=False)
    summary = record(env, embodied_gym.make_expert(env), root, 1, resume=True, progress=False)
    env.close()
    assert summary.episodes == 3
    eps = load_episodes(root)
    assert [e.index for e in eps] == [0, 1, 2]
    assert eps[2].seed == 2 and len(eps[2].action) == 10


def test_replay_reproduces_a_sim_recording_and_not_under_other_physics(sim_dataset):
    ep = load_episodes(sim_dataset, [1])[0]
    same = replay_episode(ep, "PickCup").summary()
    assert same["translation_error_m"] < 1e-4 and same["joint_rmse_rad"] < 1e-4
    other = replay_episode(ep, "PickCup", physics={"kp": [25.0] * 12}).summary()
    assert other["translation_error_m"] > 1e-2 and other["joint_rmse_rad"] > 1e-2


def test_record_works_on_a_real_id(tmp_path):
    env = _short_env("EmbodieDreamer-PickCup-Real-v0", steps=8, realtime=False)
    summary = record(env, embodied_gym.make_expert(env), tmp_path / "real", 1, progress=False)
    env.close()
    ep = load_episodes(tmp_path / "real")[0]
    assert len(ep.action) == 8 and np.isfinite(ep.ee_pose).all()
    assert summary.recorded == 1


def test_load_rejects_missing_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a LeRobotDataset"):
        load_episodes(tmp_path)


def _rot(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    q = np.r_[np.cos(angle / 2), np.sin(angle / 2) * axis]
    return quat_to_mat(q)


@pytest.mark.parametrize("angle", [0.0, 0.3, 1.0, 2.5, np.pi])
def test_rotation_error_is_half_the_angle(angle):
    r = _rot([0.3, -1, 0.5], 0.7)
    assert rotation_error(r, r) == pytest.approx(0.0, abs=1e-7)
    assert rotation_error(_rot([1, 2, 3], angle) @ r, r) == pytest.approx(angle / 2, abs=1e-6)
    assert rotation_error(_rot([1, 2, 3], angle) @ r, r) <= np.pi / 2 + 1e-12
