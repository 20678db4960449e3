"""Recording to LeRobotDataset, the dataset reader and writer, env ids, and open-loop replay."""

import json
import shutil

import gymnasium as gym
import numpy as np
import pytest

import embodied_gym
from embodied_gym.data import features as F
from embodied_gym.data.reader import DatasetError, load_episodes, open_dataset
from embodied_gym.data.replay import replay_episode
from embodied_gym.data.writer import EpisodeWriter
from embodied_gym.metrics import quat_to_mat, rotation_error
from embodied_gym.recording.episodes import record


def _short_env(eid="EmbodieDreamer-PickCup-v0", steps=25, **kw):
    return gym.make(
        eid, obs_type="pixels_state", cameras=("cam_high",), image_size=(32, 40), max_episode_steps=steps, **kw
    )


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


def test_reader_describes_the_dataset_and_decodes_what_lerobot_decodes(sim_dataset):
    from lerobot.datasets import LeRobotDataset

    ds = open_dataset(sim_dataset)
    assert ds.total_episodes == 2 and ds.fps == F.FPS and ds.cameras == ["cam_high"]
    assert ds.task == "PickCup" and not ds.is_real and ds.image_size("cam_high") == (32, 40)
    assert [r["episode_index"] for r in ds.rows()] == [0, 1] and ds.row(1)["seed"] == 1 and ds.row(7) == {}
    frames = ds.frames("cam_high", 1)
    assert frames.shape == (25, 32, 40, 3) and frames.dtype == np.uint8
    ref = LeRobotDataset("embodied_gym/pickcup", root=sim_dataset, video_backend="pyav")
    for t in (0, 13, 24):  # dataset rows 25.. are episode 1
        expected = (ref[25 + t]["observation.images.cam_high"] * 255).round().byte().permute(1, 2, 0).numpy()
        assert np.array_equal(frames[t], expected)
    with pytest.raises(DatasetError, match="no video for camera 'cam_front'.*cam_high"):
        ds.frames("cam_front", 0)


def test_a_truncated_parquet_file_is_named(sim_dataset, tmp_path, capsys):
    from embodied_gym.cli import main

    root = tmp_path / "broken"
    shutil.copytree(sim_dataset, root)
    victim = sorted((root / "data").rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    rel = str(victim.relative_to(root))
    with pytest.raises(DatasetError, match=f"dataset {root}: {rel} is damaged or truncated"):
        load_episodes(root)
    assert main(["replay", "--dataset", str(root), "--out", str(tmp_path / "r")]) == 2
    assert f"replay: error: dataset {root}: {rel} is damaged" in capsys.readouterr().err
    video_root = tmp_path / "broken_video"
    shutil.copytree(sim_dataset, video_root)
    video = sorted((video_root / "videos").rglob("*.mp4"))[-1]
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 3])
    with pytest.raises(
        DatasetError, match=f"cannot decode episode 1 of camera 'cam_high' from {video.relative_to(video_root)}"
    ):
        open_dataset(video_root).frames("cam_high", 1)


def test_an_episode_out_of_range_names_the_valid_ones(sim_dataset, tmp_path, capsys):
    from embodied_gym.cli import main

    with pytest.raises(DatasetError, match=r"has episodes 0-1; episode\(s\) \[99\] out of range"):
        load_episodes(sim_dataset, [99])
    assert main(["replay", "--dataset", str(sim_dataset), "--episodes", "99", "--out", str(tmp_path / "r")]) == 2
    assert f"dataset {sim_dataset} has episodes 0-1; episode(s) [99] out of range" in capsys.readouterr().err
    with pytest.raises(DatasetError, match="out of range"):
        open_dataset(sim_dataset).frames("cam_high", 2)
    assert (
        main(["train", "act", "--dataset", str(sim_dataset), "--episodes", "0", "99", "--out", str(tmp_path / "a")])
        == 2
    )
    assert "has episodes 0-1; episode(s) [99] out of range" in capsys.readouterr().err


def test_a_damaged_sidecar_line_is_named(sim_dataset, tmp_path):
    root = tmp_path / "side"
    shutil.copytree(sim_dataset, root)
    with open(root / F.SIDECAR, "a") as f:
        f.write("{not json\n")
    with pytest.raises(DatasetError, match="embodied_gym_episodes.jsonl line 3 is not valid JSON"):
        open_dataset(root).rows()


def test_writer_refuses_to_resume_with_other_settings(sim_dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(sim_dataset, root)
    with pytest.raises(
        DatasetError,
        match=r"observation.images.cam_high: \('video', \(32, 40, 3\)\) "
        r"\(now \('video', \(48, 64, 3\)\)\)",
    ):
        EpisodeWriter(root, F.dataset_features(("cam_high",), (48, 64)), resume=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not a LeRobotDataset"):
        EpisodeWriter(tmp_path / "other", F.dataset_features((), (0, 0)))


def test_an_interrupted_episode_is_dropped_and_resume_continues(tmp_path):
    env = _short_env(steps=6)
    expert, calls = embodied_gym.make_expert(env), []

    def flaky(obs, info):  # dies in the middle of the second episode
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt
        return expert(obs, info)

    with pytest.raises(KeyboardInterrupt):
        record(env, flaky, tmp_path / "d", 3, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    ds = open_dataset(tmp_path / "d")
    assert ds.total_episodes == 1 and [r["episode_index"] for r in ds.rows()] == [0]
    assert len(ds.episodes()[0].action) == 6
    summary = record(env, expert, tmp_path / "d", 2, resume=True, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    ds = open_dataset(tmp_path / "d")
    assert summary.episodes == 3 and [e.seed for e in ds.episodes()] == [0, 1, 2]
    assert [r["episode_index"] for r in ds.rows()] == [0, 1, 2] and ds.frames("cam_high", 2).shape[0] == 6


def _record_like_v0_1(env, root, episodes, env_id):
    """The writer loop of embodied-gym 0.1 (before data/writer.py), independent of today's code: the
    same LeRobot calls (create, then resume per episode, finalised after each), the same sidecar rows
    written whole (feature names left out, which LeRobot's own tools also allow)."""
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets import LeRobotDataset

    u = env.unwrapped
    feats = {
        "observation.state": {"dtype": "float32", "shape": (14,), "names": None},
        "observation.velocity": {"dtype": "float32", "shape": (14,), "names": None},
        "observation.ee_pose": {"dtype": "float32", "shape": (14,), "names": None},
        "action": {"dtype": "float32", "shape": (14,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "observation.images.cam_high": {
            "dtype": "video",
            "shape": (32, 40, 3),
            "names": ["height", "width", "channels"],
        },
    }
    enc = RGBEncoderConfig(vcodec="h264", extra_options={"x264-params": "log=-1"})
    expert, rows = embodied_gym.make_expert(env), []
    for index in range(episodes):
        ds = (
            LeRobotDataset.create(
                "embodied_gym/old",
                fps=50,
                features=feats,
                root=root,
                robot_type="aloha",
                use_videos=True,
                video_backend="pyav",
                rgb_encoder=enc,
            )
            if index == 0
            else LeRobotDataset.resume("embodied_gym/old", root=root, video_backend="pyav", rgb_encoder=enc)
        )
        obs, info = env.reset(seed=index)
        done = False
        while not done:
            frame = {
                "observation.state": obs["joint_pos"].astype(np.float32),
                "observation.velocity": obs["joint_vel"].astype(np.float32),
                "observation.ee_pose": np.asarray(info["tcp_poses"], np.float32).reshape(14),
                "observation.images.cam_high": obs["cam_high"],
            }
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
            done = terminated or truncated
            frame.update(
                {
                    "action": np.asarray(u.commanded_targets, np.float32),
                    "next.reward": np.array([reward], np.float32),
                    "next.success": np.array([False]),
                    "next.done": np.array([done]),
                    "task": u.task.description,
                }
            )
            ds.add_frame(frame)
        ds.save_episode()
        ds.finalize()
        rows.append(
            {
                "episode_index": index,
                "seed": index,
                "success": False,
                "length": int(info["step"]),
                "env_id": env_id,
                "control_mode": "joint_pos",
                "layout": {},
            }
        )
        (root / "meta" / "embodied_gym_episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_dataset_written_by_the_previous_writer_loads_and_resumes(tmp_path):
    root = tmp_path / "old"
    env = _short_env("EmbodieDreamer-PickCup-Real-v0", steps=6, realtime=False)
    _record_like_v0_1(env, root, 2, "EmbodieDreamer-PickCup-Real-v0")
    ds = open_dataset(root)
    assert ds.task == "PickCup" and ds.is_real and ds.total_episodes == 2
    eps = ds.episodes()
    assert [(e.index, e.seed, len(e.action)) for e in eps] == [(0, 0, 6), (1, 1, 6)]
    assert ds.frames("cam_high", 1).shape == (6, 32, 40, 3)
    summary = record(
        env,
        embodied_gym.make_expert(env),
        root,
        1,
        resume=True,
        progress=False,
        env_id="EmbodieDreamer-PickCup-Real-v0",
    )
    env.close()
    assert summary.episodes == 3 and [r["episode_index"] for r in open_dataset(root).rows()] == [0, 1, 2]
    # without the sidecar (a dataset from LeRobot's own tools): episodes load, the task must be given
    (root / F.SIDECAR).unlink()
    bare = open_dataset(root)
    assert bare.task is None and not bare.is_real and bare.episodes([2])[0].seed is None
    with pytest.raises(DatasetError, match="cannot tell the task.*--task"):
        bare.require_task()


def test_parse_env_id_inverts_env_id():
    from embodied_gym.registration import EnvId, parse_env_id
    from embodied_gym.sim.tasks import TASKS

    for task in TASKS:
        for real in (False, True):
            assert parse_env_id(embodied_gym.env_id(task, real)) == EnvId(task, real, 0)
            assert str(parse_env_id(embodied_gym.env_id(task, real))) == embodied_gym.env_id(task, real)
    for bad in ("EmbodieDreamer-PickCup", "CartPole-v1", "EmbodieDreamer-PickCup-Sim-v0", None):
        with pytest.raises(ValueError, match="not an embodied-gym env id; expected EmbodieDreamer-<Task>-v0"):
            parse_env_id(bad)
    with pytest.raises(ValueError, match="unknown task 'Juggle'"):
        parse_env_id("EmbodieDreamer-Juggle-v0")


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


def test_recording_continues_past_success_with_frames_marked(tmp_path):
    """Episodes go on after_success_steps past the first success (the env's own terminate_on_success
    is switched off meanwhile and restored); each frame's next.success says whether the task is done."""
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")  # terminate_on_success=True, as registered
    summary = record(
        env, embodied_gym.make_expert(env), tmp_path / "after", 1, seed=4, progress=False, after_success_steps=12
    )
    stop = record(
        env, embodied_gym.make_expert(env), tmp_path / "stop", 1, seed=4, progress=False, after_success_steps=0
    )
    assert env.unwrapped.terminate_on_success is True
    env.close()
    assert summary.success_rate == 1.0 and stop.success_rate == 1.0
    row = open_dataset(tmp_path / "after").row(0)
    first = row["success_step"]
    table = open_dataset(tmp_path / "after").table().with_format("numpy")
    success = np.asarray(table[F.SUCCESS]).reshape(-1)
    done = np.asarray(table[F.DONE]).reshape(-1)
    assert row["success"] is True and isinstance(first, int) and first > 0
    assert len(success) == first + 13 == row["length"]  # the success frame, then 12 more
    assert not success[:first].any() and success[first:].all()  # the cup stays lifted and held
    assert done[-1] and not done[:-1].any()
    stopped = open_dataset(tmp_path / "stop")
    assert stopped.row(0)["success_step"] == first and stopped.episode_length(0) == first + 1
    with pytest.raises(ValueError, match="after_success_steps"):
        record(env, embodied_gym.make_expert(env), tmp_path / "bad", 1, after_success_steps=-1, progress=False)


def _small_object_frames(n=20, h=64, w=80):
    """A textured table (gravel-like noise) and a 3x3-px bright object moving 1 px per frame."""
    rng = np.random.default_rng(0)
    table = np.clip(110 + rng.normal(0, 18, (h, w, 1)) + rng.normal(0, 6, (h, w, 3)), 0, 255)
    frames, masks = [], []
    for i in range(n):
        f, m = table.copy(), np.zeros((h, w), bool)
        r, c = 30, 20 + i
        f[r : r + 3, c : c + 3] = (200, 196, 185)
        m[r : r + 3, c : c + 3] = True
        frames.append(f.astype(np.uint8))
        masks.append(m)
    return np.stack(frames), np.stack(masks), table.astype(np.float64)


def _contrast(frames, masks, table):
    luma = np.array([0.299, 0.587, 0.114])
    return float(np.mean([np.abs((f.astype(np.float64) - table) @ luma)[m].mean() for f, m in zip(frames, masks)]))


def test_video_quality_keeps_a_small_objects_contrast(tmp_path):
    from embodied_gym.data.writer import DEFAULT_CRF

    frames, masks, table = _small_object_frames()
    raw = _contrast(frames, masks, table)
    kept = {}
    for crf in (30, DEFAULT_CRF, 0):
        root = tmp_path / f"crf{crf}"
        with EpisodeWriter(root, F.dataset_features(("cam_high",), frames.shape[1:3]), crf=crf) as w:
            for f in frames:
                w.add_frame(
                    {
                        F.STATE: np.zeros(14, np.float32),
                        F.VELOCITY: np.zeros(14, np.float32),
                        F.EE_POSE: np.zeros(14, np.float32),
                        F.image_key("cam_high"): f,
                        F.ACTION: np.zeros(14, np.float32),
                        F.REWARD: np.zeros(1, np.float32),
                        F.SUCCESS: np.array([False]),
                        F.DONE: np.array([False]),
                        F.TASK: "t",
                    }
                )
            w.save_episode({})
        decoded = open_dataset(root).frames("cam_high", 0)
        assert decoded.shape == frames.shape
        kept[crf] = _contrast(decoded, masks, table) / raw
    assert kept[DEFAULT_CRF] > 0.9, kept
    assert kept[0] > 0.98, kept  # lossless up to the RGB/YUV rounding
    assert kept[DEFAULT_CRF] > kept[30], kept  # LeRobot's default quality loses more
    with pytest.raises(ValueError, match="crf"):
        EpisodeWriter(tmp_path / "neg", F.dataset_features(("cam_high",), (8, 8)), crf=-1)
