"""The perception path: pose estimator files, frame generation, training, the observation wrapper."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env

import embodied_gym
from embodied_gym.perception import (
    PoseEstimator,
    PoseEstimatorConfig,
    PoseTrainConfig,
    generate_frames,
    load_frames,
    per_frame,
    pose_errors,
    train_pose_estimator,
    write_episode,
)
from embodied_gym.perception.configuration import yaw_error_deg
from embodied_gym.wrappers.pose import PoseEstimateWrapper

# Tiny sizes: a 48x64 frame, its crop (24x38 px) resized to 20x32.
SMALL = (48, 64)


def tiny_config(task: str = "PickCup", **kw) -> PoseEstimatorConfig:
    return PoseEstimatorConfig(
        task=task, frame_size=SMALL, input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32, **kw
    )


def test_config_outputs_and_normalisation():
    cup = PoseEstimatorConfig()
    assert cup.output_names == ["cup.x", "cup.y", "cup.z"]
    pen = PoseEstimatorConfig(task="PenInCup")
    assert pen.output_names == [
        "pen.x",
        "pen.y",
        "pen.z",
        "pen.cos_yaw",
        "pen.sin_yaw",
        "pencup.x",
        "pencup.y",
        "pencup.z",
    ]
    # A pen turned by 180 degrees looks the same: its target does not change.
    poses = np.zeros((2, 2, 7))
    poses[:, :, 3] = 1.0
    poses[1, 0, 3:7] = [0.0, 0.0, 0.0, 1.0]  # yaw = pi
    t = pen.targets(poses)
    np.testing.assert_allclose(t[0], t[1], atol=1e-9)
    np.testing.assert_allclose(pen.denormalise(pen.normalise(t)), t, atol=1e-9)
    assert yaw_error_deg(np.cos(0.2), np.sin(0.2), 1.0, 0.0, 2) == pytest.approx(np.degrees(0.1))
    with pytest.raises(ValueError, match="not objects of PickCup"):
        PoseEstimatorConfig(objects=("pen",))
    with pytest.raises(ValueError, match="crop"):
        PoseEstimatorConfig(crop=(0.5, 0.2, 0.4, 0.8))


def _cup_segmentations(cfg: PoseEstimatorConfig, seeds):
    """Per reset of the PickCup sim: (seed, info, the cup's pixel mask in ``cfg.camera`` at ``cfg.frame_size``)."""
    import mujoco

    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    u = env.unwrapped
    seg = mujoco.Renderer(u.model, *cfg.frame_size)
    seg.enable_segmentation_rendering()
    cup = [
        i
        for i in range(u.model.ngeom)
        if (mujoco.mj_id2name(u.model, mujoco.mjtObj.mjOBJ_GEOM, i) or "").startswith("cup")
    ]
    try:
        for seed in seeds:
            _, info = env.reset(seed=seed)
            seg.update_scene(u.data, camera=cfg.camera)
            yield seed, info, np.isin(seg.render()[..., 0], cup)
    finally:
        seg.close()
        env.close()


def test_default_crop_keeps_the_cup_8px_wide():
    """At the default config the 5 cm cup is at least 8 px wide in the network input."""
    cfg = PoseEstimatorConfig()
    t, l, b, r = cfg.crop_box(cfg.frame_size)
    sx = cfg.input_size[1] / (r - l)
    widths = []
    for _, _, mask in _cup_segmentations(cfg, range(3)):
        xs = np.nonzero(mask)[1]
        assert xs.min() >= l and xs.max() < r  # inside the crop
        widths.append((xs.max() - xs.min() + 1) * sx)
    assert min(widths) >= 8, widths


def test_projection_and_keypoint_targets_land_on_the_cup():
    """project_to_pixels puts the cup's top centre inside the cup's segmentation in the rendered
    frame, and keypoint_positions maps it into the network input's [-1, 1] grid at the same place."""
    from embodied_gym.perception.training import keypoint_positions
    from embodied_gym.sim.scene import project_to_pixels

    cfg = PoseEstimatorConfig()
    t, l, b, r = cfg.crop_box(cfg.frame_size)
    for seed, info, mask in _cup_segmentations(cfg, range(3)):
        pose = np.asarray(info["object_poses"]["cup"], float)
        col, row = np.round(project_to_pixels(cfg.camera, pose[:3] + [0, 0, 0.05], cfg.frame_size)).astype(int)
        assert mask[row, col], (seed, col, row)
        rows, cols = np.nonzero(mask)
        # the keypoint target (the pose's origin) is in the input grid near the cup's pixels
        kx, ky = keypoint_positions(cfg, pose[None, None])[0, 0]
        assert abs(l + (kx + 1) / 2 * (r - l) - cols.mean()) < 4
        assert abs(t + (ky + 1) / 2 * (b - t) - rows.mean()) < 8
    with pytest.raises(ValueError, match="keypoint_weight=0"):
        keypoint_positions(PoseEstimatorConfig(camera="cam_left_wrist"), np.zeros((1, 1, 7)))


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = PoseEstimator(tiny_config("PenInCup")).eval()
    frame = np.random.default_rng(0).integers(0, 255, (*SMALL, 3), dtype=np.uint8)
    folder = model.save_pretrained(tmp_path / "est")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    loaded = PoseEstimator.from_pretrained(folder)
    assert loaded.config.to_dict() == model.config.to_dict()
    np.testing.assert_array_equal(loaded.estimate(frame), model.estimate(frame))
    assert loaded.estimate(frame).shape == (8,)


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no pose estimator folder"):
        PoseEstimator.from_pretrained(tmp_path / "missing")
    folder = PoseEstimator(tiny_config()).save_pretrained(tmp_path / "est")
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        PoseEstimator.from_pretrained(folder)
    other = PoseEstimator(tiny_config()).save_pretrained(tmp_path / "o")
    cfg = json.loads((other / "config.json").read_text())
    cfg["hidden"] = 64  # weights no longer fit
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not fit"):
        PoseEstimator.from_pretrained(other)
    cfg["colour"] = 1
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unknown keys"):
        PoseEstimator.from_pretrained(other)


def _untrained_estimator_and_env(real: bool):
    """A seeded untrained estimator and a small-frame PickCup env (the stand-in's for ``real``)."""
    torch.manual_seed(0)
    kw = {"realtime": False} if real else {}
    env = gym.make(embodied_gym.env_id("PickCup", real=real), obs_type="pixels_state", image_size=SMALL, **kw)
    return PoseEstimator(tiny_config()), env


@pytest.mark.parametrize("real", [False, True], ids=["sim", "real"])
def test_wrapper_passes_check_env(real):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    est, env = _untrained_estimator_and_env(real)
    wrapped = PoseEstimateWrapper(env.unwrapped, est)
    assert wrapped.observation_space["object_pose_estimate"].shape == (3,)
    gym_check_env(wrapped, skip_render_check=True)
    sb3_check_env(wrapped, warn=False)
    obs, _ = wrapped.reset(seed=1)
    assert obs["object_pose_estimate"] in wrapped.observation_space["object_pose_estimate"]
    np.testing.assert_allclose(obs["object_pose_estimate"], est.estimate(obs["cam_high"]), atol=1e-6)
    wrapped.close()


@pytest.mark.parametrize("real", [False, True], ids=["sim", "real"])
def test_reset_pose_error_is_the_estimates_distance_from_the_reported_poses(real):
    """The evaluation's diagnostic: the reset estimate's horizontal error against info["object_poses"]."""
    from embodied_gym.policies.evaluate import reset_pose_error_cm

    est, env = _untrained_estimator_and_env(real)
    wrapped = PoseEstimateWrapper(env, est)
    obs, info = wrapped.reset(seed=3)
    cup = np.asarray(info["object_poses"]["cup"])
    want = 100 * np.hypot(*(obs["object_pose_estimate"][:2] - cup[:2]))
    assert want > 0.1  # an untrained estimator is off
    assert reset_pose_error_cm(wrapped, obs, info) == pytest.approx(want, rel=1e-5)
    assert reset_pose_error_cm(env, env.reset(seed=3)[0], info) is None  # no estimate in the observation
    wrapped.close()
    if not real:  # the ground-truth entry is not an estimate: nothing to report
        from embodied_gym.factory import make_env

        gt = make_env(embodied_gym.env_id("PickCup"), pose_estimator=est, pose_source="ground_truth", obs_type="state")
        obs, info = gt.reset(seed=3)
        assert reset_pose_error_cm(gt, obs, info) is None
        gt.close()


def test_ground_truth_wrapper_gives_the_sim_poses_at_the_camera_rate(tmp_path):
    """Sim demos with exact labels: the entry is the true cup position in the estimator's layout, read
    at the camera's frames (10 Hz: every 5th control step) and held in between; no camera is needed."""
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper

    cfg = tiny_config()
    folder = PoseEstimator(cfg).save_pretrained(tmp_path / "est")
    env = make_env(
        "EmbodieDreamer-PickCup-v0", pose_estimator=folder, pose_source="ground_truth", obs_type="state", camera_fps=10
    )
    assert isinstance(env, GroundTruthPoseWrapper) and "cam_high" not in env.observation_space.spaces
    assert env.source["values"] == "ground_truth" and len(env.source["sha256"]) == 64
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=False)
    obs, info = env.reset(seed=4)
    np.testing.assert_allclose(obs[KEY], info["object_poses"]["cup"][:3], atol=1e-6)
    expert = embodied_gym.make_expert(env)
    held = obs[KEY]
    for _ in range(120):  # through the grasp and lift: the cup moves
        obs, _, _, _, info = env.step(expert(obs, info))
        true = np.asarray(info["object_poses"]["cup"][:3], np.float32)
        if info["step"] % 5 == 0:
            np.testing.assert_allclose(obs[KEY], true, atol=1e-6)
            held = obs[KEY]
        else:
            np.testing.assert_array_equal(obs[KEY], held)
    assert obs[KEY][2] > 0.03  # the lifted cup is seen lifted
    env.close()


@pytest.mark.parametrize("real", [False, True], ids=["sim", "real"])
def test_at_reset_holds_the_reset_frames_estimate_for_the_episode(tmp_path, real):
    """``update="at_reset"``: the estimator runs on the reset frame only; every step of the episode
    holds that estimate, the next reset estimates afresh, and the recording names the setting."""
    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY

    torch.manual_seed(0)
    folder = PoseEstimator(tiny_config()).save_pretrained(tmp_path / "est")
    kw = {"realtime": False} if real else {}
    env = make_env(
        embodied_gym.env_id("PickCup", real=real), pose_estimator=folder, pose_update="at_reset", image_size=SMALL, **kw
    )
    assert env.source["update"] == "at_reset"
    gym_check_env(env, skip_render_check=True)
    calls = []
    estimate = env.estimator.estimate
    env.estimator.estimate = lambda frame: calls.append(1) or estimate(frame)
    obs, info = env.reset(seed=3)
    first = obs[KEY].copy()
    np.testing.assert_allclose(first, estimate(obs["cam_high"]), atol=1e-6)
    expert = embodied_gym.make_expert(env)
    for _ in range(20):
        obs, _, _, _, info = env.step(expert(obs, info))
        np.testing.assert_array_equal(obs[KEY], first)
    assert len(calls) == 1
    obs, _ = env.reset(seed=4)
    assert len(calls) == 2 and not np.array_equal(obs[KEY], first)
    env.close()
    every = make_env(embodied_gym.env_id("PickCup", real=real), pose_estimator=folder, image_size=SMALL, **kw)
    assert "update" not in every.source  # the default, every_frame, is not written
    every.close()
    with pytest.raises(ValueError, match="pose_update must be one of"):
        make_env("EmbodieDreamer-PickCup-v0", pose_estimator=folder, pose_update="sometimes", image_size=SMALL)


def test_ground_truth_at_reset_holds_the_true_start_pose(tmp_path):
    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY

    folder = PoseEstimator(tiny_config()).save_pretrained(tmp_path / "est")
    env = make_env(
        "EmbodieDreamer-PickCup-v0",
        pose_estimator=folder,
        pose_source="ground_truth",
        obs_type="state",
        pose_update="at_reset",
    )
    assert env.source["values"] == "ground_truth" and env.source["update"] == "at_reset"
    obs, info = env.reset(seed=4)
    start = obs[KEY].copy()
    np.testing.assert_allclose(start, info["object_poses"]["cup"][:3], atol=1e-6)
    expert = embodied_gym.make_expert(env)
    for _ in range(120):  # through the grasp and lift: the cup moves, the entry does not
        obs, _, _, _, info = env.step(expert(obs, info))
        np.testing.assert_array_equal(obs[KEY], start)
    assert info["object_poses"]["cup"][2] > 0.03
    env.close()


def test_ground_truth_wrapper_refuses_a_robot_and_bad_options(tmp_path, capsys):
    from embodied_gym.factory import make_env
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper

    folder = PoseEstimator(tiny_config()).save_pretrained(tmp_path / "est")
    with pytest.raises(ValueError, match="is a robot.*pose_source='estimate'"):
        make_env("EmbodieDreamer-PickCup-Real-v0", pose_estimator=folder, pose_source="ground_truth")
    with pytest.raises(ValueError, match="a robot has none"):
        GroundTruthPoseWrapper(gym.make("EmbodieDreamer-PickCup-Real-v0", obs_type="state", realtime=False), folder)
    with pytest.raises(ValueError, match="needs the pose estimator"):
        make_env("EmbodieDreamer-PickCup-v0", pose_source="ground_truth")
    with pytest.raises(ValueError, match="pose_source must be one of"):
        make_env("EmbodieDreamer-PickCup-v0", pose_estimator=folder, pose_source="truth")
    with pytest.raises(ValueError, match="trained for PickCup"):
        GroundTruthPoseWrapper(gym.make("EmbodieDreamer-CupOnMat-v0", obs_type="state"), folder)
    from embodied_gym.cli import main

    out = tmp_path / "ds"
    assert (
        main(
            [
                "record",
                "--env",
                "EmbodieDreamer-PickCup-v0",
                "--episodes",
                "1",
                "--out",
                str(out),
                "--pose-source",
                "ground_truth",
                "--cameras",
                "none",
            ]
        )
        == 2
    )
    assert "needs --pose-estimator DIR" in capsys.readouterr().err and not out.exists()
    assert (
        main(
            [
                "record",
                "--env",
                "EmbodieDreamer-PickCup-v0",
                "--episodes",
                "1",
                "--out",
                str(out),
                "--pose-update",
                "at_reset",
                "--cameras",
                "none",
            ]
        )
        == 2
    )
    assert "--pose-update at_reset needs --pose-estimator DIR" in capsys.readouterr().err and not out.exists()


def test_wrapper_rejects_bad_input(tmp_path):
    est = PoseEstimator(tiny_config())
    with pytest.raises(ValueError, match=r"no 'cam_high' frame.*cameras=\('cam_high',\)"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-PickCup-v0", obs_type="state"), est)
    with pytest.raises(ValueError, match=r"no 'cam_high' frame.*obs_type='pixels_state'"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-PickCup-v0", cameras=("cam_front",), image_size=SMALL), est)
    with pytest.raises(ValueError, match=r"too small.*image_size=\(48, 64\)"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-PickCup-v0", image_size=(24, 32)), est)
    with pytest.raises(ValueError, match="aspect ratio"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-PickCup-v0", image_size=(64, 64)), est)
    with pytest.raises(ValueError, match="trained for PickCup"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-CupOnMat-v0", image_size=SMALL), est)
    with pytest.raises(FileNotFoundError, match="no pose estimator folder"):
        PoseEstimateWrapper(gym.make("EmbodieDreamer-PickCup-v0", image_size=SMALL), tmp_path / "nothing")


def test_frames_generation_resumes_and_checks_its_folder(tmp_path):
    cfg = tiny_config()
    out = tmp_path / "frames"
    files = generate_frames(out, cfg, seeds=[0], frame_stride=50, progress=False)
    assert [f.name for f in files] == ["episode_000000.npz"]
    stamp = files[0].stat().st_mtime_ns
    # The existing episode is kept; only the new seed runs. A transform changes the stored frames.
    inverted = tmp_path / "inverted"
    generate_frames(inverted, cfg, seeds=[0], frame_stride=50, transform=per_frame(lambda f: 255 - f), progress=False)
    generate_frames(out, cfg, seeds=[0, 1], frame_stride=50, progress=False)
    assert files[0].stat().st_mtime_ns == stamp
    frames = load_frames(out, cfg)
    assert frames.inputs.shape[1:] == (20, 32, 3) and frames.poses.shape[1:] == (1, 7)
    assert len(np.unique(frames.episode)) == 2
    with np.load(files[0], allow_pickle=False) as z:
        steps = z["steps"]
    assert steps.tolist() == list(range(0, 200, 50))  # the whole time limit, past success
    inv = load_frames(inverted, cfg)
    np.testing.assert_array_equal(inv.poses, frames.poses[frames.episode == 0])
    assert not np.array_equal(inv.inputs, frames.inputs[frames.episode == 0])
    with pytest.raises(ValueError, match="written for other frames"):
        generate_frames(out, tiny_config(crop=(0.2, 0.2, 0.8, 0.8)), seeds=[2], progress=False)
    with pytest.raises(ValueError, match="one pose row"):
        write_episode(tmp_path / "w", cfg, 0, [np.zeros((*SMALL, 3), np.uint8)], np.zeros((2, 1, 7)))
    # Frames of the crop region alone (a generator of the table region) give the same inputs.
    with np.load(files[0], allow_pickle=False) as z:
        poses = z["poses"]
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    env.reset(seed=0)
    frame = env.unwrapped.render_camera("cam_high", SMALL)
    env.close()
    t, l, b, r = cfg.crop_box(frame.shape)
    write_episode(tmp_path / "crops", cfg, 0, [frame[t:b, l:r]], poses[:1], cropped=True)
    np.testing.assert_array_equal(load_frames(tmp_path / "crops", cfg).inputs[0], frames.inputs[0])
    with pytest.raises(ValueError, match="aspect ratio"):
        write_episode(tmp_path / "crops", cfg, 1, [frame], poses[:1], cropped=True)
    with pytest.raises(FileNotFoundError, match="not a frame folder"):
        load_frames(tmp_path / "nothing", cfg)


@pytest.fixture(scope="module")
def expert_frames(tmp_path_factory):
    """~50 frames of three PickCup expert episodes at the tiny config."""
    data = tmp_path_factory.mktemp("perception") / "frames"
    generate_frames(data, tiny_config(), seeds=range(3), frame_stride=12, progress=False)
    return data


def test_keypoint_map_loss_wants_the_mass_on_the_object():
    """A map spread over two far places whose mean is the object's position satisfies the coordinate
    loss exactly; the map loss prefers the map peaked on the object, and ignores objects outside."""
    from embodied_gym.perception.modeling import SpatialSoftArgmax
    from embodied_gym.perception.training import keypoint_map_loss

    h, w = 13, 21
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")

    def bump(r, c):  # logits of a Gaussian of width 1 cell at cell (r, c)
        return -((rows - r) ** 2 + (cols - c) ** 2) / 2.0

    peaked = bump(6, 10).view(1, 1, h, w).float()
    # two bumps 8 cells either side: the same expected position as the peaked map
    spread = torch.logaddexp(bump(6, 2), bump(6, 18)).view(1, 1, h, w).float()
    target = torch.tensor([[[0.0, 0.0]]])  # the middle cell, (6, 10)
    soft = SpatialSoftArgmax(h, w)
    assert torch.allclose(soft(spread), soft(peaked), atol=1e-4)
    assert keypoint_map_loss(peaked, target, 1.0) < 0.01 and keypoint_map_loss(spread, target, 1.0) > 5.0
    outside = torch.tensor([[[1.5, 0.0]]])
    assert keypoint_map_loss(spread, outside, 1.0) == 0.0
    # it moves the mass: a few gradient steps on the logits bring the expected position to the object
    logits = spread.clone().requires_grad_(True)
    opt = torch.optim.SGD([logits], lr=5.0)
    for _ in range(50):
        opt.zero_grad()
        keypoint_map_loss(logits, target, 1.0).backward()
        opt.step()
    p = torch.softmax(logits.detach().reshape(-1), 0)
    assert p[6 * w + 10] > 0.1 > p[6 * w + 2]


def test_tiny_end_to_end(tmp_path, expert_frames):
    """~50 frames of expert episodes, 20 training steps: the loss falls; the wrapped env estimates."""
    cfg = tiny_config()
    data = expert_frames
    assert len(load_frames(data, cfg)) == 3 * 17
    out = tmp_path / "train"
    tc = PoseTrainConfig(
        data=[str(data)],
        out=str(out),
        steps=20,
        batch_size=16,
        lr=3e-3,
        eval_every=10,
        save_every=10,
        val_fraction=0.34,
        augment=False,
        heatmap_weight=0.1,
        progress=False,
    )
    result = train_pose_estimator(tc, cfg)
    loss = result.history["train_loss"]
    assert np.mean(loss[-5:]) < np.mean(loss[:5])
    assert (out / "loss.png").stat().st_size > 0 and (out / "model" / "model.safetensors").exists()
    assert result.val_errors["cup"]["xy_cm"] > 0
    # Resume: a finished run does not train again and keeps its history.
    again = train_pose_estimator(PoseTrainConfig(**{**tc.__dict__, "resume": True}), cfg)
    assert again.history["train_loss"] == loss
    errs = pose_errors(result.model, data)
    assert errs["frames"] == 51 and np.isfinite(errs["cup"]["z_cm"])

    env = PoseEstimateWrapper(
        gym.make("EmbodieDreamer-PickCup-Real-v0", image_size=SMALL, realtime=False), out / "model"
    )
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample() * 0 + env.unwrapped.joint_targets.astype(np.float32))
        est = obs["object_pose_estimate"]
        assert est.shape == (3,) and np.all(np.isfinite(est))
    env.close()


def test_resume_continues_the_same_run(tmp_path, expert_frames):
    import shutil

    cfg = tiny_config()
    base = dict(
        data=[str(expert_frames)], steps=8, batch_size=8, eval_every=4, save_every=4, val_fraction=0.34, progress=False
    )
    full = train_pose_estimator(PoseTrainConfig(out=str(tmp_path / "a"), **base), cfg)
    # A run that crashed after its step-4 checkpoint: the same folder without the step-8 checkpoint.
    shutil.copytree(tmp_path / "a" / "checkpoints", tmp_path / "b" / "checkpoints")
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "000008")
    (tmp_path / "b" / "checkpoints" / "last.json").write_text(json.dumps({"path": "000004", "unit": "step", "step": 4}))
    resumed = train_pose_estimator(PoseTrainConfig(out=str(tmp_path / "b"), resume=True, **base), cfg)
    assert len(resumed.history["train_loss"]) == 8
    np.testing.assert_allclose(resumed.history["train_loss"], full.history["train_loss"], rtol=1e-4)


def test_randomized_looks_change_the_frames_not_the_poses(tmp_path, expert_frames):
    from embodied_gym.perception import randomized_look

    a, b = randomized_look(3), randomized_look(3)
    assert a.shadows == b.shadows and (a.table_texture is None or np.array_equal(a.table_texture, b.table_texture))
    assert any(randomized_look(0).table_rgba != randomized_look(s).table_rgba for s in range(1, 4))
    cfg = tiny_config()
    out = generate_frames(
        tmp_path / "dr", cfg, seeds=[0], frame_stride=100, look=randomized_look, layouts_per_episode=3, progress=False
    )
    with np.load(out[0], allow_pickle=False) as z:
        dr_inputs, dr_poses, steps = z["inputs"], z["poses"], z["steps"]
    assert steps.tolist() == [0, 100, -1, -1, -1]
    assert len({tuple(np.round(p[0, :2], 6)) for p in dr_poses[2:]}) == 3  # three fresh layouts
    raw = load_frames(expert_frames, cfg)
    np.testing.assert_allclose(dr_poses[0], raw.poses[0], atol=1e-9)  # same seed, same layout
    assert np.abs(dr_inputs[0].astype(int) - raw.inputs[0].astype(int)).mean() > 5
    assert json.loads((tmp_path / "dr" / "frames.json").read_text())["source"].endswith("+look:randomized_look")
    with pytest.raises(ValueError, match="is a robot"):
        generate_frames(tmp_path / "x", cfg, seeds=[0], env_id="EmbodieDreamer-PickCup-Real-v0", look=randomized_look)


def test_frames_from_worker_processes_are_those_of_one_process(tmp_path):
    """``generate_frames(workers=2)`` writes the files one process writes (an episode depends only on
    its seed); a look that cannot be sent to a worker is named."""
    from embodied_gym.perception import randomized_look

    cfg = tiny_config()
    kw = dict(seeds=[0, 1], frame_stride=100, look=randomized_look, layouts_per_episode=2, progress=False)
    serial = generate_frames(tmp_path / "one", cfg, **kw)
    parallel = generate_frames(tmp_path / "two", cfg, workers=2, **kw)
    assert [p.name for p in parallel] == [p.name for p in serial] == ["episode_000000.npz", "episode_000001.npz"]
    for a, b in zip(serial, parallel):
        with np.load(a, allow_pickle=False) as za, np.load(b, allow_pickle=False) as zb:
            for key in ("inputs", "poses", "steps"):
                np.testing.assert_array_equal(za[key], zb[key])
    with pytest.raises(ValueError, match="look=.*cannot be sent to a worker"):
        generate_frames(tmp_path / "x", cfg, seeds=[0, 1], look=lambda s: randomized_look(s), workers=2, progress=False)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        generate_frames(tmp_path / "y", cfg, seeds=[0], workers=0, progress=False)


def test_visaligner_frames_are_the_generated_crops_with_the_sims_poses(tmp_path):
    """generate_visaligner_frames: the expert episode of each seed, rendered with its masks at the
    model's stride and generated by VisAligner; the poses and steps are those of the raw frames."""
    from embodied_gym.visaligner.configuration import preset
    from embodied_gym.visaligner.pipeline import build_pipeline
    from embodied_gym.visaligner.pose_frames import generate_visaligner_frames

    cfg = tiny_config()
    model = tmp_path / "visaligner"
    settings = dict(image_size=(24, 40), num_frames=4, frame_stride=50, num_inference_steps=1)
    build_pipeline(preset("tiny", crop=cfg.crop, **settings)).save_pretrained(model)
    reference = np.full((*SMALL, 3), 120, np.uint8)
    files = generate_visaligner_frames(tmp_path / "aligned", cfg, [0], model, reference, progress=False)
    generate_frames(tmp_path / "raw", cfg, [0], frame_stride=50, progress=False)
    aligned, raw = load_frames(tmp_path / "aligned", cfg), load_frames(tmp_path / "raw", cfg)
    np.testing.assert_allclose(aligned.poses, raw.poses)
    assert aligned.inputs.shape == raw.inputs.shape == (4, 20, 32, 3)
    assert not np.array_equal(aligned.inputs, raw.inputs)  # generated, not the render
    with np.load(files[0], allow_pickle=False) as z:
        assert z["steps"].tolist() == [0, 50, 100, 150]
    stamp = files[0].stat().st_mtime_ns
    generate_visaligner_frames(tmp_path / "aligned", cfg, [0], model, reference, progress=False)
    assert files[0].stat().st_mtime_ns == stamp  # resumes: the episode is kept
    other = tmp_path / "other"
    build_pipeline(preset("tiny", crop=(0.2, 0.2, 0.8, 0.8), **settings)).save_pretrained(other)
    with pytest.raises(ValueError, match="--crop 0.3 0.2 0.8 0.8"):
        generate_visaligner_frames(tmp_path / "x", cfg, [0], other, reference, progress=False)
    with pytest.raises(ValueError, match="is a robot"):
        generate_visaligner_frames(
            tmp_path / "x", cfg, [0], model, reference, env_id="EmbodieDreamer-PickCup-Real-v0", progress=False
        )


def test_perception_commands_frames_train_eval(tmp_path, capsys):
    """`perception frames` -> `perception train` -> `perception eval` from the command line: the estimator's
    input is the frames' (no model flags repeated), a second training into the same folder needs --resume,
    and settings that do not fit the look or the env are errors naming the flag."""
    from embodied_gym.cli import main

    frames, train = tmp_path / "frames", tmp_path / "train"
    small = ["--frame-size", "48", "64", "--input-size", "20", "32"]
    assert main(["perception", "frames", "--out", str(frames), "--episodes", "2", "--frame-stride", "50", *small]) == 0
    assert "2 episodes, 8 frames (raw)" in capsys.readouterr().out
    assert json.loads((frames / "frames.json").read_text())["input_size"] == [20, 32]
    args = [
        "perception",
        "train",
        "--data",
        str(frames),
        "--out",
        str(train),
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        "--val-fraction",
        "0.5",
        "--no-augment",
    ]
    assert main(args) == 0
    assert "held-out episodes' horizontal error: cup" in capsys.readouterr().out
    model = PoseEstimator.from_pretrained(train / "model")
    assert model.config.input_size == (20, 32) and model.config.frame_size == SMALL
    assert main(args) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "perception",
                "eval",
                "--model",
                str(train / "model"),
                "--data",
                str(frames),
                "--out",
                str(tmp_path / "errors.json"),
            ]
        )
        == 0
    )
    assert "over 8 frames" in capsys.readouterr().out
    errors = json.loads((tmp_path / "errors.json").read_text())["errors"]
    assert errors["frames"] == 8 and errors["cup"]["xy_cm"] > 0

    bad = [
        (["--look", "visaligner"], "--visaligner-model"),
        (["--robot-config", "embodied_gym/robots/stand_in_world2.yaml"], "-Real- id as --env"),
        (["--env", "EmbodieDreamer-PickCup-Real-v0", "--physics", "x.json"], "drop --physics"),
        (["--reference", "x.png"], "for --look visaligner"),
    ]
    for extra, message in bad:
        assert main(["perception", "frames", "--out", str(tmp_path / "bad"), *small, *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["perception", "train", "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "t2")]) == 2
    assert "not a frame folder" in capsys.readouterr().err
