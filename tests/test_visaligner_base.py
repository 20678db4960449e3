"""VisAligner's base model: randomised-look pairs, the script that trains it, and fine-tuning from it."""

import json

import diffusers
import gymnasium as gym
import numpy as np
import pytest
import torch

import embodied_gym
from embodied_gym.recording.episodes import record
from embodied_gym.visaligner.base import export_base, randomized_paired_episode
from embodied_gym.visaligner.configuration import VisAlignerConfig
from embodied_gym.visaligner.pipeline import CONFIG_NAME, VisAlignerPipeline
from embodied_gym.visaligner.training import VisAlignerTrainConfig, model_config, stored_stride, train


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def test_randomized_pairs_show_one_state_in_two_looks():
    ep = randomized_paired_episode(3, "PickCup", 500_000, frame_size=(48, 64), step_stride=4, max_episode_steps=20)
    assert ep.index == 3 and ep.step_stride == 4 and ep.real.shape == (5, 48, 64, 3)  # steps 0, 4, ..., 16
    # the same state: the objects' masks overlap (the look moves the camera by at most 1.5 cm) ...
    assert np.mean([_iou(r, s) for r, s in zip(ep.real_mask, ep.sim_mask)]) > 0.5
    # ... in another look
    assert np.abs(ep.real.astype(int) - ep.sim.astype(int)).mean() > 10
    other = randomized_paired_episode(4, "PickCup", 500_001, frame_size=(48, 64), max_episode_steps=4)
    assert np.abs(other.real[0].astype(int) - ep.real[0].astype(int)).mean() > 10  # a look per episode


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """The script's base model at a tiny size: one task, two short episodes, a few steps."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "make_visaligner_base.py"
    spec = importlib.util.spec_from_file_location("make_visaligner_base", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    main = script.main
    out = tmp_path_factory.mktemp("base") / "run"
    args = ["--out", str(out), "--tasks", "PickCup", "--episodes-per-task", "2", "--max-episode-steps", "24"]
    args += ["--image-size", "32", "48", "--vae-steps", "3", "--steps", "3", "--batch-size", "2"]
    assert main(args + ["--checkpoint-every", "3"]) == 0
    return out


def test_the_script_writes_a_diffusers_pipeline_on_the_estimator_crop(base_model):
    from embodied_gym.perception.configuration import PoseEstimatorConfig

    pipe = diffusers.DiffusionPipeline.from_pretrained(base_model / "model", local_files_only=True)
    assert isinstance(pipe, VisAlignerPipeline)
    cfg = VisAlignerConfig.load(base_model / "model" / CONFIG_NAME)
    assert cfg.crop == PoseEstimatorConfig().crop and cfg.image_size == (32, 48) and cfg.frame_stride == 4
    ref = np.zeros((32, 48, 3), np.uint8)
    clip = pipe(ref, np.zeros((cfg.num_frames, 32, 48, 3), np.uint8), num_inference_steps=1).frames[0]
    assert clip.shape == (cfg.num_frames, 32, 48, 3) and clip.dtype == np.uint8


@pytest.fixture(scope="module")
def standin_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("base") / "standin"
    env = gym.make(
        "EmbodieDreamer-PickCup-Real-v0",
        obs_type="pixels_state",
        cameras=("cam_high",),
        image_size=(96, 128),
        realtime=False,
        max_episode_steps=24,
    )
    record(env, embodied_gym.make_expert(env), root, 1, progress=False, env_id="EmbodieDreamer-PickCup-Real-v0")
    env.close()
    return root


def test_fine_tune_keeps_the_base_vae_and_trains_its_denoiser(base_model, standin_dataset, tmp_path):
    shipped = tmp_path / "shipped"
    export_base(base_model / "model", shipped)
    base = VisAlignerPipeline.from_pretrained(shipped, dtype=torch.float32)
    assert next(base.unet.parameters()).dtype == torch.float32
    from safetensors import safe_open

    with safe_open(shipped / "unet" / "diffusion_pytorch_model.safetensors", "pt") as f:
        names = f.keys()
        assert {f.get_tensor(k).dtype for k in names} == {torch.float16}  # half the size on disk
    tc = VisAlignerTrainConfig(
        dataset=str(standin_dataset),
        out=str(tmp_path / "ft"),
        init=str(shipped),
        model={"num_inference_steps": 2},
        steps=2,
        batch_size=1,
        sample_every=2,
        sample_steps=1,
        progress=False,
    )
    tuned = train(tc)
    for a, b in zip(tuned.vae.parameters(), base.vae.parameters()):
        torch.testing.assert_close(a, b)  # frozen
    assert any(not torch.equal(a, b) for a, b in zip(tuned.unet.parameters(), base.unet.parameters()))
    got = VisAlignerConfig.load(tmp_path / "ft" / "model" / CONFIG_NAME).to_dict()
    want = {**VisAlignerConfig.load(shipped / CONFIG_NAME).to_dict(), "num_inference_steps": 2}
    assert got == want and tuned.config.num_inference_steps == 2
    rows = [json.loads(x) for x in (tmp_path / "ft" / "loss.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows] == ["unet", "unet"]  # no VAE steps
    from embodied_gym.rendering import crop_box

    t, left, b, r = crop_box((96, 128), tuned.config.crop)
    assert tuned.reference_image.shape == (b - t, r - left, 3)  # the recording's first frame, cut to the crop


def test_fine_tune_refuses_what_would_change_the_base_weights(base_model, tmp_path):
    init = str(base_model / "model")
    with pytest.raises(ValueError, match=r"model.num_frames=4: the init model .* num_frames=8"):
        model_config(VisAlignerTrainConfig(out="x", init=init, model={"num_frames": 4}))
    with pytest.raises(ValueError, match="model.no_such_setting"):
        model_config(VisAlignerTrainConfig(out="x", init=init, model={"no_such_setting": 1}))
    with pytest.raises(FileNotFoundError, match="visaligner_config.json"):
        model_config(VisAlignerTrainConfig(out="x", init=str(tmp_path)))
    with pytest.raises(ValueError, match="every 4th step, but the episodes keep every 3th"):
        stored_stride(model_config(VisAlignerTrainConfig(out="x", init=init)), 3)


def test_the_shipped_base_model_loads_and_fine_tunes_by_name(standin_dataset, tmp_path):
    """`init: base` is the model in the package: made by the script (its config says so), half precision on
    disk, a diffusers pipeline that generates clips."""
    from embodied_gym.perception.configuration import PoseEstimatorConfig
    from embodied_gym.visaligner.configuration import BASE_MODEL_DIR
    from embodied_gym.visaligner.training import init_model_dir

    assert init_model_dir("base") == BASE_MODEL_DIR
    cfg = VisAlignerConfig.load(BASE_MODEL_DIR / CONFIG_NAME)
    assert cfg.preset == "tiny" and cfg.crop == PoseEstimatorConfig().crop and cfg.frame_stride == 4
    size = sum(f.stat().st_size for f in BASE_MODEL_DIR.rglob("*") if f.is_file())
    assert size < 5e6, f"{size} bytes: the shipped base model should stay a few MB"
    pipe = diffusers.DiffusionPipeline.from_pretrained(BASE_MODEL_DIR, local_files_only=True)
    h, w = cfg.image_size
    clip = pipe(np.zeros((h, w, 3), np.uint8), np.zeros((cfg.num_frames, h, w, 3), np.uint8), num_inference_steps=1)
    assert clip.frames[0].shape == (cfg.num_frames, h, w, 3)
    tc = VisAlignerTrainConfig(
        dataset=str(standin_dataset),
        out=str(tmp_path / "ft"),
        init="base",
        steps=1,
        batch_size=1,
        sample_steps=1,
        progress=False,
    )
    tuned = train(tc)
    assert tuple(tuned.config.crop) == cfg.crop
