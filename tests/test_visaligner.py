"""VisAligner: conditioning, paired data, tiny model training, pipeline round trip, svd loading,
offline rendering, the observation wrapper and the metrics."""

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

import embodied_gym
from embodied_gym.checkpoints import latest
from embodied_gym.recording.episodes import record
from embodied_gym.visaligner import metrics as M
from embodied_gym.visaligner.conditioning import ClassicalObjectMasker, condition_video
from embodied_gym.visaligner.configuration import preset
from embodied_gym.visaligner.paired import SimCameraRenderer, build_paired_episodes
from embodied_gym.visaligner.pipeline import (
    CONFIG_NAME,
    VisAlignerPipeline,
    VisAlignerPipelineOutput,
    build_pipeline,
    pipeline_settings,
)
from embodied_gym.visaligner.training import VisAlignerTrainConfig, train

SIZE = (32, 40)
TINY = dict(image_size=SIZE, num_frames=4, frame_stride=2, num_inference_steps=2)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # far faster than 2 threads on a busy 2-core machine
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def standin_dataset(tmp_path_factory):
    """Two short stand-in PickCup episodes with cam_high at 32x40."""
    root = tmp_path_factory.mktemp("vis") / "standin"
    env = gym.make(
        "EmbodieDreamer-PickCup-Real-v0",
        obs_type="pixels_state",
        cameras=("cam_high",),
        image_size=SIZE,
        realtime=False,
        max_episode_steps=30,
    )
    record(env, embodied_gym.make_expert(env), root, 2, progress=False, env_id="EmbodieDreamer-PickCup-Real-v0")
    env.close()
    return root


@pytest.fixture(scope="module")
def trained(standin_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("vis") / "train"
    tc = VisAlignerTrainConfig(
        dataset=str(standin_dataset),
        out=str(out),
        model=TINY,
        vae_steps=40,
        vae_batch_size=8,
        steps=40,
        batch_size=2,
        sample_every=40,
        checkpoint_every=20,
        sample_steps=2,
        progress=False,
    )
    pipe = train(tc)
    return out, pipe, tc


def test_condition_masks_exactly_where_the_object_is():
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    env.reset(seed=3)
    u = env.unwrapped
    cam = SimCameraRenderer(env, "cam_high", (96, 120))
    rgb, mask = cam()
    assert mask.sum() > 5
    # Independent check: the pixels that change when the cup is made invisible are the mask.
    geoms = u.idx.object_geoms["cup"]
    alpha = u.model.geom_rgba[geoms, 3].copy()
    u.model.geom_rgba[geoms, 3] = 0.0
    without, _ = cam()
    u.model.geom_rgba[geoms, 3] = alpha
    cam.close()
    env.close()
    changed = np.any(rgb != without, axis=-1)
    assert (changed == mask).mean() > 0.998 and (changed & mask).sum() >= 0.95 * mask.sum()

    sims, masks = np.stack([rgb] * 3), np.stack([mask] * 3)
    ref = np.full_like(rgb, 7)
    cond = condition_video(ref, sims, masks)
    assert (cond[0] == 7).all()  # frame 0: the real reference
    assert (cond[1:][masks[1:]] == 255).all()  # white silhouettes exactly on the mask ...
    assert (cond[1:][~masks[1:]] == sims[1:][~masks[1:]]).all()  # ... and the render everywhere else
    assert (condition_video(ref, sims, None)[1:] == sims[1:]).all()
    with pytest.raises(ValueError, match="reference image"):
        condition_video(ref[:10], sims, masks)


def test_classical_real_masks_find_a_shifted_object():
    real = np.full((5, 32, 40, 3), 120, np.uint8)
    real[:, 10:14, 21:25] = (200, 40, 40)  # the real object, 1 px off the sim's
    sim_mask = np.zeros((5, 32, 40), bool)
    sim_mask[:, 11:15, 20:24] = True
    found = ClassicalObjectMasker()(real, sim_mask)
    truth = np.zeros_like(sim_mask)
    truth[:, 10:14, 21:25] = True
    assert (found == truth).all()


def test_paired_episodes_align_real_and_sim(standin_dataset):
    eps = build_paired_episodes(standin_dataset, "cam_high", progress=False)
    assert [e.index for e in eps] == [0, 1]
    for e in eps:
        assert e.real.shape == e.sim.shape == (30, *SIZE, 3) and e.real.dtype == np.uint8
        assert e.sim_mask.shape == e.real_mask.shape == (30, *SIZE)
        assert e.sim_mask[0].any() and e.real_mask[0].any()
        assert not np.array_equal(e.real, e.sim)  # the stand-in's look differs from the flat render
    with pytest.raises(ValueError, match="no video for camera"):
        build_paired_episodes(standin_dataset, "cam_front", progress=False)


def test_tiny_model_trains_with_decreasing_loss_and_resumes(trained):
    out, pipe, tc = trained
    rows = [json.loads(x) for x in (out / "loss.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows]
    assert len(losses) == 40 and np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
    vae = json.loads((out / "vae_loss.json").read_text())
    assert np.mean([r["loss"] for r in vae[-5:]]) < 0.7 * np.mean([r["loss"] for r in vae[:5]])
    for f in (
        "loss.png",
        "samples/step_000040.png",
        "samples/step_000040.mp4",
        "model/reference.png",
        "checkpoints/000040/trainer_state.json",
        "checkpoints/last.json",
    ):
        assert (out / f).exists(), f
    assert latest(out).counter == 40 and latest(out).unit == "step"
    # resume: 40 -> 45 steps continues from the checkpoint instead of starting over
    tc.steps = 45
    train(tc)
    state = json.loads((latest(out).path / "trainer_state.json").read_text())
    assert state["step"] == 45 and len([r for r in state["loss"] if r["stage"] == "unet"]) == 45
    assert latest(out).counter == 45 and not (out / "checkpoints" / "000040").exists()  # keeps the newest


def test_checkpoint_of_the_old_layout_resumes(trained, tmp_path):
    import dataclasses
    import shutil

    from embodied_gym.visaligner.configuration import VisAlignerConfig

    out, _, tc = trained
    work = tmp_path / "train"
    work.mkdir()
    for name in ("paired.npz", "vae_loss.json", "vae"):
        (shutil.copytree if (out / name).is_dir() else shutil.copy)(out / name, work / name)
    ckpt = work / "checkpoint"  # the layout before out/checkpoints/<step>
    shutil.copytree(latest(out).path, ckpt)
    pipe, cfg = VisAlignerPipeline.from_pretrained(ckpt), VisAlignerConfig.load(ckpt / CONFIG_NAME)
    for d in ("vae", "unet", "reference_encoder", "scheduler"):
        shutil.rmtree(ckpt / d)
    _save_old_layout(pipe, cfg, ckpt)
    step = json.loads((ckpt / "trainer_state.json").read_text())["step"]
    resumed = train(dataclasses.replace(tc, out=str(work), steps=step + 2, sample_every=1000))
    assert json.loads((latest(work).path / "trainer_state.json").read_text())["step"] == step + 2
    assert type(resumed.unet).__name__ == "UNetSpatioTemporalConditionModel"  # the plain network, never a wrapper
    index = json.loads((work / "model" / "model_index.json").read_text())
    assert index["unet"] == ["diffusers", "UNetSpatioTemporalConditionModel"]
    assert VisAlignerConfig.load(work / "model" / CONFIG_NAME) == cfg


def test_pipeline_save_load_round_trip_offline(trained, tmp_path):
    _, pipe, _ = trained
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    pipe.save_pretrained(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").rglob("*") if p.is_file()}
    assert "diffusion_pytorch_model.safetensors" in files and not any(f.endswith((".bin", ".pt")) for f in files)
    loaded = VisAlignerPipeline.from_pretrained(tmp_path / "m")
    for a, b in zip(pipe.unet.state_dict().values(), loaded.unet.state_dict().values()):
        assert torch.equal(a, b)
    rng = np.random.default_rng(0)
    ref, sims = rng.integers(0, 255, (*SIZE, 3), np.uint8), rng.integers(0, 255, (4, *SIZE, 3), np.uint8)
    masks = np.zeros((4, *SIZE), bool)
    a = pipe(ref, sims, masks, 2, torch.Generator().manual_seed(0)).frames[0]
    b = loaded(ref, sims, masks, 2, torch.Generator().manual_seed(0)).frames[0]
    assert a.shape == (4, *SIZE, 3) and (a[0] == ref).all()
    assert np.abs(a.astype(int) - b).max() <= 1
    long = loaded.generate_video(
        ref, np.concatenate([sims] * 3), np.concatenate([masks] * 3), 2, torch.Generator().manual_seed(0)
    )
    assert long.shape == (12, *SIZE, 3)
    # episodes of different lengths generated together: each keeps its own length and reference
    ref2 = rng.integers(0, 255, (*SIZE, 3), np.uint8)
    both = loaded.generate_videos(
        [ref, ref2],
        [np.concatenate([sims] * 3), sims[:3]],
        [np.concatenate([masks] * 3), masks[:3]],
        2,
        torch.Generator().manual_seed(0),
    )
    assert [v.shape for v in both] == [(12, *SIZE, 3), (3, *SIZE, 3)]
    assert (both[0][0] == ref).all() and (both[1][0] == ref2).all()
    # one generator per episode: an episode's frames do not depend on what it is batched with
    seeded = loaded.generate_videos(
        [ref, ref2],
        [np.concatenate([sims] * 3), sims[:3]],
        [np.concatenate([masks] * 3), masks[:3]],
        2,
        [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)],
    )
    alone = loaded.generate_video(ref2, sims[:3], masks[:3], 2, torch.Generator().manual_seed(2))
    assert np.abs(seeded[1].astype(int) - alone).max() <= 1
    with pytest.raises(FileNotFoundError, match="not a VisAligner model folder"):
        VisAlignerPipeline.from_pretrained(tmp_path)


def _clip_inputs(seed=0, n=4):
    rng = np.random.default_rng(seed)
    ref, sims = rng.integers(0, 255, (*SIZE, 3), np.uint8), rng.integers(0, 255, (n, *SIZE, 3), np.uint8)
    masks = np.zeros((n, *SIZE), bool)
    masks[:, 10:16, 12:20] = True
    return ref, sims, masks


def test_pipeline_is_a_diffusers_pipeline_loadable_both_ways(tmp_path):
    from diffusers import DiffusionPipeline

    pipe = build_pipeline(preset("tiny", **TINY))
    assert isinstance(pipe, DiffusionPipeline)
    pipe.reference_image = np.full((*SIZE, 3), 9, np.uint8)
    pipe.save_pretrained(tmp_path / "m")
    index = json.loads((tmp_path / "m" / "model_index.json").read_text())
    assert index["_class_name"] == "VisAlignerPipeline"
    assert index["vae"] == ["diffusers", "AutoencoderKL"] and index["scheduler"] == ["diffusers", "DDIMScheduler"]
    assert index["unet"] == ["diffusers", "UNetSpatioTemporalConditionModel"]
    assert index["reference_encoder"] == ["embodied_gym.visaligner.modeling", "ReferenceEncoder"]
    assert index["image_size"] == list(SIZE) and index["num_frames"] == 4 and index["frame_stride"] == 2
    ref, sims, masks = _clip_inputs()
    want = pipe(ref, sims, masks, 2, torch.Generator().manual_seed(0))
    assert isinstance(want, VisAlignerPipelineOutput) and want.frames.shape == (1, 4, *SIZE, 3)
    for loaded in (
        VisAlignerPipeline.from_pretrained(tmp_path / "m"),
        DiffusionPipeline.from_pretrained(tmp_path / "m"),
    ):
        assert type(loaded) is VisAlignerPipeline
        assert loaded.config.image_size == SIZE and loaded.config.frame_stride == 2
        assert (loaded.reference_image == 9).all()  # reference.png
        for a, b in zip(pipe.unet.state_dict().values(), loaded.unet.state_dict().values()):
            assert torch.equal(a, b)
        got = loaded(ref, sims, masks, 2, torch.Generator().manual_seed(0)).frames
        assert np.abs(got.astype(int) - want.frames).max() <= 1  # float rounding of the uint8 frames
    # output types and return_dict=False
    (pt,) = pipe(ref, sims, masks, 2, torch.Generator().manual_seed(0), output_type="pt", return_dict=False)
    assert pt.shape == (1, 4, 3, *SIZE)
    assert torch.allclose(pt * 255, torch.from_numpy(want.frames).permute(0, 1, 4, 2, 3).float(), atol=1e-3)
    lat = pipe(ref, sims, masks, 2, output_type="latent").frames
    assert lat.shape == (1, 4, 4, SIZE[0] // 4, SIZE[1] // 4)
    pil = pipe(ref, sims, masks, 2, output_type="pil").frames
    assert len(pil) == 1 and len(pil[0]) == 4 and pil[0][0].size == (SIZE[1], SIZE[0])
    # a batch: one generator per clip gives each clip the frames it gets alone
    ref2, sims2, masks2 = _clip_inputs(1)
    both = pipe(
        [ref, ref2],
        [sims, sims2],
        [masks, None],
        2,
        [torch.Generator().manual_seed(0), torch.Generator().manual_seed(5)],
    ).frames
    assert both.shape == (2, 4, *SIZE, 3) and np.abs(both[0].astype(int) - want.frames[0]).max() <= 1
    assert (both[1][0] == ref2).all()


def test_pipeline_check_inputs_names_the_bad_argument():
    pipe = build_pipeline(preset("tiny", **TINY))
    ref, sims, masks = _clip_inputs()
    cases = [
        (dict(sim_frames=sims[:1]), "N >= 2"),
        (dict(sim_frames=sims.astype(np.float32)), "uint8"),
        (dict(reference=ref[..., 0]), "reference image"),
        (dict(masks=masks[:, :5]), "masks"),
        (dict(output_type="jpg"), "output_type"),
        (dict(num_inference_steps=0), "num_inference_steps"),
        (dict(reference=[ref], sim_frames=[sims, sims], masks=None), "reference images for 2 clips"),
        (dict(generator=[torch.Generator()] * 2), "generators for 1 clips"),
    ]
    for change, message in cases:
        kw = dict(reference=ref, sim_frames=sims, masks=masks, num_inference_steps=1) | change
        with pytest.raises(ValueError, match=message):
            pipe(**kw)


def _save_old_layout(pipe, cfg, path):
    """The folder layout that ``VisAlignerPipeline.save_pretrained`` wrote before the pipeline was a
    ``DiffusionPipeline`` (its code, kept to check that such folders still load)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("vae", "unet", "reference_encoder"):
        getattr(pipe, name).save_pretrained(path / name, safe_serialization=True)
    pipe.scheduler.save_pretrained(path / "scheduler")
    cfg.save(path / CONFIG_NAME)
    index = {
        "_class_name": type(pipe).__name__,
        "vae": type(pipe.vae).__name__,
        "unet": type(pipe.unet).__name__,
        "reference_encoder": type(pipe.reference_encoder).__name__,
        "scheduler": type(pipe.scheduler).__name__,
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2))


def test_old_layout_folder_still_loads(tmp_path):
    import cv2

    cfg = preset("tiny", **TINY)
    pipe = build_pipeline(cfg)
    _save_old_layout(pipe, cfg, tmp_path / "old")
    cv2.imwrite(str(tmp_path / "old" / "reference.png"), np.full((*SIZE, 3), 30, np.uint8))
    assert json.loads((tmp_path / "old" / "model_index.json").read_text())["vae"] == "AutoencoderKL"
    loaded = VisAlignerPipeline.from_pretrained(tmp_path / "old")
    assert loaded.config.num_frames == 4 and loaded.config.image_size == SIZE and (loaded.reference_image == 30).all()
    ref, sims, masks = _clip_inputs()
    a = pipe(ref, sims, masks, 2, torch.Generator().manual_seed(0)).frames
    assert np.abs(loaded(ref, sims, masks, 2, torch.Generator().manual_seed(0)).frames.astype(int) - a).max() <= 1
    # re-saved, it is in diffusers' layout
    loaded.save_pretrained(tmp_path / "new")
    assert json.loads((tmp_path / "new" / "model_index.json").read_text())["vae"] == ["diffusers", "AutoencoderKL"]
    bad = json.loads((tmp_path / "old" / "model_index.json").read_text()) | {"unet": "SomethingElse"}
    (tmp_path / "old" / "model_index.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="'unet' is 'SomethingElse'"):
        VisAlignerPipeline.from_pretrained(tmp_path / "old")


def test_model_index_outside_the_allow_list_is_refused(tmp_path):
    from diffusers import DiffusionPipeline

    build_pipeline(preset("tiny", **TINY)).save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "model_index.json"
    good = json.loads(path.read_text())
    with pytest.raises(ValueError, match="does not run code"):
        VisAlignerPipeline.from_pretrained(tmp_path / "m", custom_pipeline="pipeline")
    for change, message in [
        ({"reference_encoder": ["embodied_gym.visaligner.modeling", "AutoencoderKL"]}, "component 'reference_encoder'"),
        ({"vae": ["os", "system"]}, "component 'vae'"),
        ({"extra": ["diffusers", "AutoencoderKL"]}, "unknown key 'extra'"),
        ({"_class_name": ["pipeline", "VisAlignerPipeline"]}, "_class_name"),
    ]:
        path.write_text(json.dumps(good | change))
        with pytest.raises(ValueError, match=message):
            VisAlignerPipeline.from_pretrained(tmp_path / "m")
        if "_class_name" not in change:  # diffusers' own loader runs the same check before loading components
            with pytest.raises(ValueError, match=message):
                DiffusionPipeline.from_pretrained(tmp_path / "m")
    with pytest.raises(FileNotFoundError, match="not a VisAligner model folder"):
        VisAlignerPipeline.from_pretrained(tmp_path)


def test_svd_preset_widens_conv_in_with_zero_channels(tmp_path):
    from diffusers import AutoencoderKLTemporalDecoder, UNetSpatioTemporalConditionModel

    from embodied_gym.visaligner.modeling import load_svd_models

    unet = UNetSpatioTemporalConditionModel(
        in_channels=8,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        cross_attention_dim=32,
        num_attention_heads=(2, 4),
        addition_time_embed_dim=32,
        projection_class_embeddings_input_dim=96,
        num_frames=4,
    )
    unet.save_pretrained(tmp_path / "svd" / "unet")
    AutoencoderKLTemporalDecoder(
        block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2, latent_channels=4
    ).save_pretrained(tmp_path / "svd" / "vae")
    with pytest.raises(FileNotFoundError, match="lacks"):
        load_svd_models(preset("svd", pretrained_path=str(tmp_path)))
    with pytest.raises(ValueError, match="pretrained_path"):
        load_svd_models(preset("svd"))
    cfg = preset("svd", pretrained_path=str(tmp_path / "svd"))
    vae, wide, ref = load_svd_models(cfg)
    assert wide.conv_in.in_channels == 9 and wide.config.in_channels == 9
    assert torch.equal(wide.conv_in.weight[:, :8], unet.conv_in.weight)
    assert (wide.conv_in.weight[:, 8:] == 0).all()
    assert ref.config.dim == 32 == cfg.cross_attention_dim
    x, mask = torch.randn(1, 4, 8, 8, 10), torch.rand(1, 4, 1, 8, 10)
    tok, ids = torch.randn(1, 5, 32), torch.tensor([[7.0, 127.0, 0.0]])
    with torch.no_grad():  # the zero channels leave the pretrained function unchanged
        assert torch.allclose(
            wide(torch.cat([x, mask], 2), 10, tok, ids).sample, unet(x, 10, tok, ids).sample, atol=1e-5
        )
    # SVD's temporal decoder is recognised (through diffusers' forward hooks) and decodes a clip
    from embodied_gym.visaligner.pipeline import make_scheduler

    pipe = VisAlignerPipeline(vae.eval(), wide.eval(), ref.eval(), make_scheduler(cfg), **pipeline_settings(cfg))
    assert pipe.temporal_vae
    assert pipe.decode_latents(torch.randn(4, 4, 8, 10), batch=4).shape == (4, 16, 20, 3)


def test_wrapper_passes_check_env_and_times_frames(trained):
    from gymnasium.utils.env_checker import check_env

    from embodied_gym.wrappers import VisAlignerWrapper

    _, pipe, _ = trained
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels_state", image_size=SIZE)
    w = VisAlignerWrapper(env, pipe, camera="cam_high", frame_stride=2, num_inference_steps=1)
    check_env(w, skip_render_check=True)
    obs, info = w.reset(seed=0)
    assert (obs["cam_high"] == w.reference).all() and info["visaligner"]["generated_at_step"] == 0
    seen = []
    for _ in range(8):
        obs, *_, info = w.step(w.action_space.sample())
        assert w.observation_space.contains(obs)
        seen.append((info["visaligner"]["generated_at_step"], info["visaligner"]["chunk"]))
    # keyframes every 2 steps, held in between; chunks of 4 keyframes overlapping by one
    assert seen == [(0, 0), (2, 0), (2, 0), (4, 0), (4, 0), (6, 1), (6, 1), (8, 1)]
    w.close()
    with pytest.raises(ValueError, match="obs_type"):
        VisAlignerWrapper(gym.make("EmbodieDreamer-PickCup-v0", obs_type="state"), pipe)


def test_render_cli_writes_a_new_dataset(trained, standin_dataset, tmp_path):
    from lerobot.datasets import LeRobotDataset

    from embodied_gym.cli import main

    out, _, _ = trained
    ref = tmp_path / "ref.png"
    import cv2

    cv2.imwrite(str(ref), np.full((*SIZE, 3), 30, np.uint8))
    assert (
        main(
            [
                "visaligner",
                "render",
                "--dataset",
                str(standin_dataset),
                "--model",
                str(out / "model"),
                "--out",
                str(tmp_path / "r"),
                "--episodes",
                "1",
                "--steps",
                "1",
                "--reference",
                str(ref),
            ]
        )
        == 0
    )
    ds = LeRobotDataset("embodied_gym/r", root=tmp_path / "r", video_backend="pyav")
    src = LeRobotDataset("embodied_gym/standin", root=standin_dataset, episodes=[1], video_backend="pyav")
    assert ds.meta.total_episodes == 1 and len(ds) == 30
    assert torch.equal(ds[3]["action"], src[3]["action"])
    first = (ds[0]["observation.images.cam_high"] * 255).round()
    assert (first - 30).abs().mean() < 8  # frame 0 is the swapped-in reference (through H.264)
    row = json.loads((tmp_path / "r" / "meta" / "embodied_gym_episodes.jsonl").read_text().splitlines()[0])
    assert row["source_episode"] == 1 and "ref.png" in row["visaligner"]["reference"]

    # two episodes generated in one batch, every 3rd frame generated (and held until the next one)
    from embodied_gym.visaligner.paired import read_episode_frames

    assert (
        main(
            [
                "visaligner",
                "render",
                "--dataset",
                str(standin_dataset),
                "--model",
                str(out / "model"),
                "--out",
                str(tmp_path / "s"),
                "--episodes",
                "0",
                "1",
                "--steps",
                "1",
                "--frame-stride",
                "3",
                "--batch-episodes",
                "2",
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in (tmp_path / "s" / "meta" / "embodied_gym_episodes.jsonl").read_text().splitlines()]
    assert [r["source_episode"] for r in rows] == [0, 1] and rows[0]["visaligner"]["frame_stride"] == 3
    frames = read_episode_frames(tmp_path / "s", "cam_high", [0, 1])
    assert [len(frames[e]) for e in (0, 1)] == [30, 30]


def test_metrics_on_known_inputs(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (4, 32, 40, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-20, 21, a.shape), 0, 255).astype(np.uint8)
    assert M.psnr(a, a) == M.PSNR_CAP_DB and M.ssim(a, a) == pytest.approx(1.0)
    assert 15 < M.psnr(a, b) < 40 and M.ssim(a, b) < 1
    mse = ((a.astype(float) - b) ** 2).mean(axis=(1, 2, 3))
    assert M.psnr(a, b) == pytest.approx(np.mean(10 * np.log10(255**2 / mse)))
    assert M.flicker(a, a) == 0 and M.flicker(np.repeat(a[:1], 4, 0), a) > 0
    # Fréchet distance against the closed form for two Gaussians
    m1, m2 = np.array([0.0, 1.0]), np.array([2.0, -1.0])
    s1, s2 = np.diag([1.0, 4.0]), np.diag([9.0, 1.0])
    closed = ((m1 - m2) ** 2).sum() + ((np.sqrt(np.diag(s1)) - np.sqrt(np.diag(s2))) ** 2).sum()
    assert M.frechet_distance(m1, s1, m2, s2) == pytest.approx(closed)
    A = rng.normal(size=(3, 3))
    s = A @ A.T + np.eye(3)
    assert M.frechet_distance(m1[:1].repeat(3), s, m1[:1].repeat(3), s) == pytest.approx(0, abs=1e-6)
    f1, f2 = rng.normal(m1, np.sqrt(np.diag(s1)), (40000, 2)), rng.normal(m2, np.sqrt(np.diag(s2)), (40000, 2))
    assert M.frechet_distance_features(f1, f2) == pytest.approx(closed, rel=0.03)
    # FD-local3D: trained here, its hash recorded
    vids = [rng.integers(0, 256, (12, 16, 20, 3), dtype=np.uint8) for _ in range(2)]
    r = M.train_local3d(
        vids,
        [v // 2 for v in vids],
        tmp_path / "n.safetensors",
        steps=2,
        batch=6,
        clip_length=4,
        stride=1,
        progress=False,
    )
    assert r.sha256 == M.file_sha256(tmp_path / "n.safetensors") and len(r.sha256) == 64
    net = M.load_local3d(tmp_path / "n.safetensors")
    assert M.fd_local3d(net, vids, vids, clip_length=4, stride=1) == pytest.approx(0, abs=1e-6)
    # LPIPS / FVD only from user files
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        M.LPIPS(tmp_path / "alexnet.pth", tmp_path / "alex.pth")
    with pytest.raises(FileNotFoundError, match="I3D"):
        M.FVD(tmp_path / "i3d_torchscript.pt")
    from torchvision.models import alexnet

    torch.save(alexnet().state_dict(), tmp_path / "alexnet.pth")
    chans = (64, 192, 384, 256, 256)
    torch.save({f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1) for i, c in enumerate(chans)}, tmp_path / "alex.pth")
    lp = M.LPIPS(tmp_path / "alexnet.pth", tmp_path / "alex.pth")
    big = rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    assert lp(big, big) == pytest.approx(0, abs=1e-7) and lp(big, 255 - big) > 0
    assert set(lp.sha256) == {"alexnet", "lpips"}


def test_crop_model_trains_on_the_region_and_is_refused_where_whole_frames_are_needed(
    standin_dataset, tmp_path, capsys
):
    """``--crop``: paired frames and masks are cut to the region before training; the model folder
    records it; render and the wrapper, which replace whole frames, refuse such a model."""
    from embodied_gym.cli import main
    from embodied_gym.rendering import crop_box
    from embodied_gym.visaligner.paired import crop_paired
    from embodied_gym.wrappers import VisAlignerWrapper

    crop = (0.25, 0.2, 0.75, 0.8)
    t, l, b, r = crop_box(SIZE, crop)
    assert (b - t, r - l) == (16, 24)
    ep = build_paired_episodes(standin_dataset, "cam_high", episodes=[0], progress=False)[0]
    cut = crop_paired(ep, crop)
    np.testing.assert_array_equal(cut.real, ep.real[:, t:b, l:r])
    np.testing.assert_array_equal(cut.sim_mask, ep.sim_mask[:, t:b, l:r])
    out = tmp_path / "crop"
    assert (
        main(
            [
                "visaligner",
                "train",
                "--dataset",
                str(standin_dataset),
                "--out",
                str(out),
                "--image-size",
                "16",
                "24",
                "--crop",
                *map(str, crop),
                "--num-frames",
                "4",
                "--frame-stride",
                "2",
                "--vae-steps",
                "2",
                "--vae-batch-size",
                "4",
                "--steps",
                "2",
                "--batch-size",
                "1",
                "--sample-every",
                "2",
                "--sample-steps",
                "1",
            ]
        )
        == 0
    )
    pipe = VisAlignerPipeline.from_pretrained(out / "model")
    assert tuple(pipe.config.crop) == crop and pipe.reference_image.shape == (16, 24, 3)
    np.testing.assert_array_equal(pipe.reference_image, ep.real[0, t:b, l:r])
    assert tuple(json.loads((out / "model" / CONFIG_NAME).read_text())["crop"]) == crop
    assert (
        main(
            [
                "visaligner",
                "render",
                "--dataset",
                str(standin_dataset),
                "--model",
                str(out / "model"),
                "--out",
                str(tmp_path / "r"),
                "--episodes",
                "0",
                "--num-inference-steps",
                "1",
            ]
        )
        != 0
    )
    assert "region of the camera frame" in capsys.readouterr().err and not (tmp_path / "r").exists()
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="pixels_state", image_size=SIZE)
    with pytest.raises(ValueError, match="region of the camera frame"):
        VisAlignerWrapper(env, pipe)
    env.close()
    with pytest.raises(ValueError, match="crop must be"):
        preset("tiny", crop=(0.5, 0.2, 0.4, 0.8))
