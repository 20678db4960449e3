"""Your own robot from the command line: LeRobot's own `lerobot-record` on the stand-in (found as a LeRobot
plugin, driven by the registered scripted operator), its sidecar-free dataset through the loop, LeRobot
robot configs on our commands, and the errors that name the missing setting."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embodied_gym.cli import main
from embodied_gym.data import features as F
from embodied_gym.data.reader import DatasetError, open_dataset, read_sidecar
from embodied_gym.envs.real_env import DEFAULT_MAX_RELATIVE_TARGET
from embodied_gym.recording.lerobot_import import ImportConfig, import_lerobot_dataset
from embodied_gym.sim.robot import JOINT_HIGH, JOINT_LOW, START_QPOS

BIN = Path(sys.executable).parent
WORLD2 = str(Path(__file__).resolve().parents[1] / "embodied_gym" / "robots" / "stand_in_world2.yaml")


def lerobot_record(root: Path, episode_seed: int, resume: bool, config_path: str = WORLD2) -> None:
    """One episode with LeRobot's own lerobot-record: the stand-in robot, the scripted operator."""
    cmd = [
        str(BIN / "lerobot-record"),
        "--robot.type=embodied_gym_stand_in",
        f"--robot.config_path={config_path}",
        f"--robot.episode_seed={episode_seed}",
        "--robot.camera_names=[cam_high]",
        "--robot.image_size=[240,320]",  # the pose estimator's frames
        "--robot.camera_fps=10",
        "--teleop.type=embodied_gym_scripted",
        f"--teleop.config_path={config_path}",
        f"--teleop.episode_seed={episode_seed}",
        "--dataset.repo_id=local/demos",
        f"--dataset.root={root}",
        "--dataset.fps=50",
        # wall-clock seconds: a busy machine records fewer frames, and the import test compares 30 of them
        "--dataset.episode_time_s=6",
        "--dataset.reset_time_s=0",
        "--dataset.num_episodes=1",
        "--dataset.single_task=pick up the paper cup",
        "--dataset.push_to_hub=false",
        "--dataset.no_stamp=true",
        "--play_sounds=false",
        *(["--resume=true"] if resume else []),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.fixture(scope="module")
def lerobot_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lerobot") / "demos"
    lerobot_record(root, episode_seed=0, resume=False)
    lerobot_record(root, episode_seed=1, resume=True)
    return root


def test_lerobot_record_finds_our_robot_and_operator_and_writes_lerobot_names(lerobot_dataset):
    info = json.loads((lerobot_dataset / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["robot_type"] == "embodied_gym_stand_in"
    state_names = info["features"][F.STATE]["names"]
    assert state_names[:2] == ["left_waist.pos", "left_shoulder.pos"] and "right_gripper.vel" in state_names
    assert F.image_key("cam_high") in info["features"]
    assert read_sidecar(lerobot_dataset) == []  # nothing of ours: LeRobot's recording only
    with pytest.raises(DatasetError, match="embodied-gym import"):
        open_dataset(lerobot_dataset).episodes()  # every stage says how to read it


def test_import_of_a_lerobot_episode_matches_our_own_recording_of_its_seed(lerobot_dataset, tmp_path):
    """The operator and the stand-in stay in step: a lerobot-record episode is the one `embodied-gym record`
    rolls out from the same seed (same table, same expert actions, same sensor noise)."""
    out = tmp_path / "imported"
    assert main(["import", "--source", str(lerobot_dataset), "--out", str(out), "--task", "PickCup"]) == 0
    ours = tmp_path / "ours"
    record = ["record", "--env", "EmbodieDreamer-PickCup-Real-v0", "--robot-config", WORLD2, "--episodes", "1"]
    assert main([*record, "--cameras", "none", "--workers", "1", "--out", str(ours)]) == 0
    imported, recorded = open_dataset(out).episodes()[0], open_dataset(ours).episodes()[0]
    n = min(len(imported.state), len(recorded.state))
    assert n >= 30  # lerobot-record keeps the wall clock: a busy machine records fewer frames
    np.testing.assert_allclose(imported.state[:n], recorded.state[:n], atol=1e-6)
    np.testing.assert_allclose(imported.velocity[:n], recorded.velocity[:n], atol=1e-6)
    # the operator moves no faster than the env's rate limit: its targets are the ones the env sent the robot
    # (the expert's own targets, recorded by `record`, differ where the limit held them back)
    limited, sent = np.zeros((n, 14)), START_QPOS.copy()
    for t in range(n):  # what AlohaRealEnv._send does to each target
        step = np.clip(recorded.action[t] - sent, -DEFAULT_MAX_RELATIVE_TARGET, DEFAULT_MAX_RELATIVE_TARGET)
        limited[t] = sent = np.clip(sent + step, JOINT_LOW, JOINT_HIGH)
    np.testing.assert_allclose(imported.action[:n], limited, atol=1e-5)
    # tool positions by forward kinematics of the noisy readings, against the stand-in's own: within 2 cm
    tcp = lambda ee: ee.reshape(-1, 2, 7)[:, :, :3]
    assert np.abs(tcp(imported.ee_pose[:n]) - tcp(recorded.ee_pose[:n])).max() < 0.02
    # replayed at the recorded rate on a fresh robot from the same seed, the actions reach the same state
    from embodied_gym.data.replay import replay_on_robot
    from embodied_gym.factory import make_env

    env = make_env("EmbodieDreamer-PickCup-Real-v0", robot_config=WORLD2, obs_type="state")
    try:
        assert replay_on_robot(env, recorded.action, speed=1.0, seed=0) == len(recorded.action) - 1
        np.testing.assert_allclose(env.unwrapped.joint_positions(), recorded.state[-1], atol=1e-6)
    finally:
        env.close()
    row = open_dataset(out).row(0)
    assert row["seed"] is None and row["layout"] == {} and row["env_id"] == "EmbodieDreamer-PickCup-Real-v0"
    # resumable: a rerun imports nothing more
    again = import_lerobot_dataset(ImportConfig(source=str(lerobot_dataset), out=str(out), task="PickCup"))
    assert again.imported == 0 and again.episodes == 2


def test_the_loop_runs_from_a_lerobot_recording(lerobot_dataset, tmp_path):
    """`demo --demos`: perception, import, ACT on the robot's demos, calibration, sim demos, ACT there, TPO,
    the estimator's offset and the evaluation on the stand-in, all from LeRobot's dataset."""
    args = ["demo", "--profile", "smoke", "--demos", str(lerobot_dataset), "--robot-config", WORLD2]
    assert main([*args, "--runs", str(tmp_path), "--name", "byo"]) == 0
    summary = json.loads((tmp_path / "byo" / "summary.json").read_text())
    task = summary["tasks"]["PickCup"]
    record = task["stages"]["record"]["outputs"]
    assert record["imported_from"] == str(lerobot_dataset) and record["episodes"] == 2
    imported = open_dataset(record["dataset"])
    assert F.ENV_STATE in imported.features  # the estimator's estimate of each frame, as a robot recording has
    assert Path(task["stages"]["calibrate"]["outputs"]["result"]).is_file()
    assert {"act_stand_in", "act_aligned"} <= set(task["evaluation"])
    assert "imported from" in (tmp_path / "byo" / "report.html").read_text()


def test_robot_type_and_robot_config_record_the_same_episodes(tmp_path):
    common = ["record", "--env", "EmbodieDreamer-PickCup-Real-v0", "--episodes", "1", "--cameras", "none"]
    assert main([*common, "--workers", "1", "--robot-config", WORLD2, "--out", str(tmp_path / "a")]) == 0
    by_type = ["--robot.type=embodied_gym_stand_in", f"--robot.config_path={WORLD2}", "--robot.camera_names=[]"]
    assert main([*common, "--workers", "1", *by_type, "--out", str(tmp_path / "b")]) == 0
    a, b = open_dataset(tmp_path / "a").episodes()[0], open_dataset(tmp_path / "b").episodes()[0]
    np.testing.assert_array_equal(a.state, b.state)
    np.testing.assert_array_equal(a.action, b.action)


def test_eval_dry_run_replays_a_recorded_episode_slowly_first(lerobot_dataset, tmp_path, capsys):
    imported = tmp_path / "imported"
    assert main(["import", "--source", str(lerobot_dataset), "--out", str(imported), "--task", "PickCup"]) == 0
    common = ["eval", "--policy", "expert", "--env", "EmbodieDreamer-PickCup-Real-v0", "--episodes", "1"]
    dry = ["--dry-run", str(imported), "--dry-run-speed", "0.5", "--robot-config", WORLD2]
    assert main([*common, *dry]) == 0
    frames = open_dataset(imported).episode_length(0)
    assert f"replayed at 0.5x ({2 * (frames - 1)} control steps)" in capsys.readouterr().out
    assert main([*common[:4], "EmbodieDreamer-PickCup-v0", "--dry-run", str(imported)]) == 2  # a sim id


def test_record_with_a_lerobot_teleoperator(tmp_path):
    args = ["record", "--env", "EmbodieDreamer-PickCup-Real-v0", "--episodes", "2", "--cameras", "none"]
    devices = ["--robot.type=embodied_gym_stand_in", "--robot.camera_names=[]"]
    operator = ["--teleop.type=embodied_gym_scripted", "--teleop.episode_seed=0"]
    assert main([*args, *devices, *operator, "--out", str(tmp_path / "t")]) == 0
    rows = read_sidecar(tmp_path / "t")
    assert [r["success"] for r in rows] == [True, True]  # the operator saw each episode's new table


def _renamed_dataset(root: Path) -> Path:
    """A LeRobot dataset of a robot whose motors have other names (written with LeRobot's own API)."""
    from lerobot.datasets import LeRobotDataset

    from embodied_gym.sim import robot as layout

    names = [f"motor_{j}.pos" for j in layout.JOINT_NAMES]
    feats = {
        F.STATE: {"dtype": "float32", "shape": (14,), "names": names},
        F.ACTION: {"dtype": "float32", "shape": (14,), "names": names},
    }
    ds = LeRobotDataset.create("local/renamed", fps=30, features=feats, root=root, use_videos=False)
    for t in range(6):
        q = layout.START_QPOS.astype(np.float32).copy()
        q[0] += 0.01 * t  # left_waist turns at 0.3 rad/s
        ds.add_frame({F.STATE: q, F.ACTION: q, "task": "pick up the paper cup"})
    ds.save_episode()
    ds.finalize()
    return root


def test_import_errors_name_the_setting_and_a_joint_map_fixes_them(tmp_path, capsys):
    src = _renamed_dataset(tmp_path / "renamed")
    base = dict(source=str(src), task="PickCup", store_video=False)
    with pytest.raises(DatasetError, match=r"joint_map .*--joint-map JOINT=MOTOR"):
        import_lerobot_dataset(ImportConfig(out=str(tmp_path / "a"), **base))
    assert main(["import", "--source", str(src), "--out", str(tmp_path / "c")]) == 2  # no --task: named
    assert "missing required setting(s) ['task']: pass --task" in capsys.readouterr().err
    from embodied_gym.sim import robot as layout

    joint_map = {j: f"motor_{j}" for j in layout.JOINT_NAMES}
    with pytest.raises(DatasetError, match=r"no camera 'cam_high'; it has no camera\. .*camera_map"):
        import_lerobot_dataset(
            ImportConfig(out=str(tmp_path / "b"), joint_map=joint_map, **{**base, "store_video": True})
        )
    s = import_lerobot_dataset(ImportConfig(out=str(tmp_path / "d"), joint_map=joint_map, **base))
    ep = open_dataset(s.root).episodes()[0]
    assert s.velocity == "differentiated" and s.notes == ["resampled from 30 fps to the 50 Hz control rate"]
    assert len(ep.state) == 9  # 5 intervals of 1/30 s at 50 Hz, and the first frame
    np.testing.assert_allclose(ep.velocity[1:-1, 0], 0.01 * 30, rtol=1e-4)  # 0.01 rad per 1/30 s
    with pytest.raises(ValueError, match="unknown joints"):
        import_lerobot_dataset(ImportConfig(out=str(tmp_path / "e"), joint_map={"left_knee": "x"}, **base))


def test_demo_checks_its_robot_and_demos_before_any_stage(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("effects: {latency_steps: -1}\n")
    runs = ["--runs", str(tmp_path / "runs")]
    assert main(["demo", "--profile", "smoke", "--robot-config", str(bad), *runs]) == 2
    err = capsys.readouterr().err
    assert "robot_config: stand-in config" in err and "effects.latency_steps" in err
    src = _renamed_dataset(tmp_path / "renamed")
    assert main(["demo", "--profile", "smoke", "--demos", str(src), "--tasks", "PickCup", "CupOnMat", *runs]) == 2
    assert "one task" in capsys.readouterr().err
    assert main(["demo", "--profile", "smoke", "--demos", str(src), *runs]) == 2
    assert "--joint-map JOINT=MOTOR" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_device_flags_are_refused_where_no_robot_is_driven_and_named_when_wrong(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["calibrate", "--dataset", "x", "--task", "PickCup", "--out", "y", "--robot.type=embodied_gym_stand_in"])
    assert "does not take --robot.type" in capsys.readouterr().err
    args = ["record", "--env", "EmbodieDreamer-PickCup-Real-v0", "--out", str(tmp_path / "r")]
    assert main([*args, "--robot.type=no_such_robot"]) == 2
    assert "invalid choice: 'no_such_robot'" in capsys.readouterr().err
    assert main([*args, "--robot.type=koch_follower", "--robot.port=/dev/null"]) == 2
    assert "teleoperator" in capsys.readouterr().err  # the expert cannot see a real table
    demo = ["demo", "--profile", "smoke", "--runs", str(tmp_path / "runs")]
    assert main([*demo, "--robot.type=koch_follower", "--robot.port=/dev/null"]) == 2
    assert "--demos DATASET" in capsys.readouterr().err  # the demo's evaluation needs the stand-in
    assert main([*demo, "--robot.type=embodied_gym_stand_in", "--robot.config_path=nope.yaml"]) == 2
    assert "robot_config nope.yaml: no such file" in capsys.readouterr().err


def test_real_env_says_once_per_episode_when_it_overran_its_period():
    import gymnasium as gym

    env = gym.make("EmbodieDreamer-PickCup-Real-v0", obs_type="pixels_state", image_size=(480, 640), realtime=True)
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.unwrapped.commanded_targets)
    with pytest.warns(UserWarning, match=r"of 3 steps of the last episode overran .* \(achieved [0-9.]+ Hz\)"):
        env.reset(seed=1)
    env.close()
