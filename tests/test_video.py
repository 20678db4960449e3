"""Video output through the ecosystem's recorders, and a quiet terminal while datasets are encoded."""

import os

import av
import gymnasium as gym
import numpy as np

import embodied_gym  # noqa: F401
from embodied_gym.sim import robot

SMALL = (48, 64)


def _frames(path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def test_gymnasium_record_video_writes_an_mp4(tmp_path):
    from gymnasium.wrappers import RecordVideo

    env = gym.make(
        "EmbodieDreamer-PickCup-v0", obs_type="state", image_size=SMALL, render_mode="rgb_array", max_episode_steps=5
    )
    env = RecordVideo(env, str(tmp_path / "videos"), episode_trigger=lambda e: True)
    env.reset(seed=0)
    truncated = False
    while not truncated:
        *_, truncated, _ = env.step(robot.START_QPOS)
    env.close()
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["rl-video-episode-0.mp4"]
    assert _frames(videos[0]) == 6  # the reset frame and 5 steps


def test_sb3_vec_video_recorder_writes_an_mp4(tmp_path):
    from stable_baselines3.common.vec_env import DummyVecEnv, VecVideoRecorder

    venv = DummyVecEnv(
        [lambda: gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", image_size=SMALL, render_mode="rgb_array")]
    )
    venv = VecVideoRecorder(venv, str(tmp_path), record_video_trigger=lambda step: step == 0, video_length=4)
    venv.reset()
    for _ in range(5):
        venv.step(robot.START_QPOS[None])
    venv.close()
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and _frames(videos[0]) >= 4


def test_recording_a_dataset_prints_no_libx264_banner(tmp_path, capfd):
    from embodied_gym.recording.episodes import record

    av.logging.set_libav_level(av.logging.INFO)  # FFmpeg's default, as in a fresh process
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels_state", image_size=SMALL, max_episode_steps=3)
    summary = record(env, lambda obs, info: robot.START_QPOS, tmp_path / "ds", 2, progress=False)
    env.close()
    assert summary.episodes == 2
    assert len(list((tmp_path / "ds").rglob("*.mp4"))) >= 1
    err = capfd.readouterr().err
    assert "264 - core" not in err, err[-2000:]


def test_libx264_banner_shows_without_quiet_libav_and_not_with_it(tmp_path, capfd):
    """The control for the test above: FFmpeg's own printer does print the banner at INFO."""
    from embodied_gym.video import quiet_libav

    def encode(path):
        av.logging.restore_default_callback()  # what LeRobot does after each video
        try:
            with av.open(str(path), mode="w") as c:
                s = c.add_stream("libx264", rate=10)
                s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
                for i in range(3):
                    img = np.full((48, 64, 3), 40 * i, np.uint8)
                    c.mux(s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
                c.mux(s.encode())
        finally:
            av.logging.set_level(None)  # PyAV's default: FFmpeg's logs discarded
        return capfd.readouterr().err

    av.logging.set_libav_level(av.logging.INFO)
    assert "264 - core" in encode(tmp_path / "a.mp4")
    quiet_libav()
    assert "264 - core" not in encode(tmp_path / "b.mp4")
    assert os.path.getsize(tmp_path / "b.mp4") > 0
