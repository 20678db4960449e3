"""Offline rendering: recorded episodes -> a new LeRobotDataset whose camera shows generated frames.

Each episode is replayed in the sim (as for paired data) to get the sim render and the object
masks of the chosen camera; VisAligner generates the episode chunk by chunk from a reference
image, and the new dataset holds every other feature of the source unchanged with the camera's
video replaced. This is the paper's imitation-learning use: swap the reference image (a new
background or foreground object) and the same recorded actions come out as new demonstrations.

Reference image, in order: ``reference`` (an image file, resized to the camera's size); else, for a
real-robot recording, each episode's own first frame; else the ``reference.png`` that training
stored beside the model (the first real frame it trained on).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from embodied_gym.atomic import atomic_path
from embodied_gym.data.features import AUTO_FEATURES, TASK
from embodied_gym.data.reader import is_dataset, open_dataset
from embodied_gym.data.writer import DEFAULT_CRF, EpisodeWriter
from embodied_gym.progress import progress_bar, report
from embodied_gym.visaligner.paired import replay_render
from embodied_gym.visaligner.pipeline import REFERENCE_NAME

log = logging.getLogger(__name__)


def load_image(path: str | os.PathLike, size: tuple[int, int] | None = None) -> np.ndarray:
    import cv2

    img = cv2.imread(os.fspath(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"cannot read reference image {path!r} (PNG/JPEG expected)")
    img = img[..., ::-1]
    if size is not None and img.shape[:2] != tuple(size):
        img = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img)


def render_dataset(
    dataset: str | os.PathLike,
    model: str | os.PathLike,
    out: str | os.PathLike,
    *,
    camera: str = "cam_high",
    reference: str | os.PathLike | None = None,
    episodes: list[int] | None = None,
    physics=None,
    num_inference_steps: int | None = None,
    seed: int = 0,
    frame_stride: int | None = None,
    batch_episodes: int = 8,
    resume: bool = False,
    progress: bool = True,
    crf: int | None = DEFAULT_CRF,
    device: str = "cpu",
) -> dict:
    """Write ``out`` (see the module docstring); returns a summary dict (episodes rendered, frames
    generated, timings).

    Args:
        dataset: the recorded episodes to re-render (sim or real).
        model: a VisAligner model folder (``visaligner train``'s ``OUT/model``).
        out: the new dataset folder.
        reference: an image every episode starts from (default: the model's ``reference.png``).
        resume: continue an interrupted render in ``out``.
        crf: the video quality of ``out`` (:data:`~embodied_gym.data.writer.DEFAULT_CRF`; lower keeps
            small objects; 0 is lossless).
        device: the torch device VisAligner runs on (``cpu``, ``cuda``).

    Raises:
        FileExistsError: ``out`` exists and ``resume`` is off.
        FileNotFoundError / ValueError: the dataset, model or reference cannot be read (the
            message names it).

    VisAligner generates every ``frame_stride``-th frame (default: the model's own stride, the frame
    rate it was trained at) and each generated frame is held until the next one, with the keyframe
    timing of :class:`~embodied_gym.wrappers.VisAlignerWrapper` in the aligned sim; ``1``
    generates every frame (``frame_stride`` times slower, and at a frame rate the model never saw).

    ``batch_episodes`` episodes are generated together (one denoiser batch per chunk index), then
    written one by one, so an interrupted run resumes at the first episode not yet written.
    """
    if batch_episodes < 1:
        raise ValueError(f"batch_episodes must be >= 1, got {batch_episodes}")
    src_root, out = Path(dataset), Path(out)
    src, key, wanted, task = _open_source(src_root, camera, episodes)
    pipe = _whole_frame_model(model, device)
    stride = pipe.config.frame_stride if frame_stride is None else frame_stride
    if stride < 1:
        raise ValueError(f"frame_stride must be >= 1, got {frame_stride}")
    size = src.image_size(camera)
    fixed_ref, ref_source = _reference(src, src_root, model, reference, size)
    log.info("visaligner render: reference = %s", ref_source)
    about = {"model": os.path.abspath(model), "reference": ref_source, "camera": camera, "frame_stride": stride}

    features = {k: v for k, v in src.features.items() if k not in AUTO_FEATURES}
    # as `record`: H.264, several times faster than AV1 on a CPU
    writer = EpisodeWriter(out, features, fps=src.fps, robot_type=src.meta.robot_type, resume=resume, crf=crf)
    env = _replay_env(task, physics)
    hf = src.table().with_format("numpy")
    ep_col = np.asarray(hf["episode_index"])
    try:
        todo = wanted[writer.episodes :]
        bar = progress_bar(total=len(todo), progress=progress, desc="visaligner render", unit="ep")
        for g0 in range(0, len(todo), batch_episodes):
            group = todo[g0 : g0 + batch_episodes]
            eps = src.episodes(group)
            sims, masks = zip(*(replay_render(ep, env, camera, size) for ep in eps))
            refs = [fixed_ref if fixed_ref is not None else src.frames(camera, e)[0] for e in group]
            gens = _generate(pipe, refs, sims, masks, stride, num_inference_steps, [seed + e for e in group])
            for e, ep, gen in zip(group, eps, gens):
                rows = hf.select(np.flatnonzero(ep_col == e).tolist())
                _write_episode(writer, rows, features, key, gen, ep.task)
                writer.save_episode(dict(src.row(e), source_episode=e, visaligner=about))
                bar.update(1)
                report(progress, f"visaligner render: episode {e} written ({writer.episodes} in {out})")
        bar.close()
    finally:
        env.close()
    return {"out": str(out), "episodes": writer.episodes, "reference": ref_source}


def _open_source(src_root: Path, camera: str, episodes: list[int] | None):
    """The dataset to render, checked to have one camera -> (it, the camera's feature key, the
    episodes to render, its task)."""
    src = open_dataset(src_root)
    key = src.camera_key(camera)  # the sim replay renders that camera at the dataset's image size
    if len(src.video_keys) != 1:
        raise ValueError(f"render handles datasets with one camera; {src_root} has {src.cameras}")
    return src, key, src.check_episodes(episodes), src.require_task()


def _replay_env(task: str, physics):
    """The sim env of ``task`` that replays the episodes (the whole recorded length)."""
    import gymnasium as gym

    import embodied_gym

    return gym.make(embodied_gym.env_id(task), obs_type="state", physics=physics, terminate_on_success=False)


def _whole_frame_model(model: str | os.PathLike, device: str):
    """The VisAligner pipeline of ``model`` on ``device``, refused when it was trained on a crop."""
    from embodied_gym.visaligner.pipeline import VisAlignerPipeline

    pipe = VisAlignerPipeline.from_pretrained(model).to(device)
    if pipe.config.crop is not None:
        raise ValueError(
            f"{model} was trained on a region of the camera frame (crop {pipe.config.crop}); render "
            f"writes whole camera frames: train a model without --crop to render datasets (a crop "
            f"model makes pose-estimator frames: embodied_gym.perception.generate_visaligner_frames)"
        )
    return pipe


def _reference(src, src_root: Path, model, reference, size) -> tuple[np.ndarray | None, str]:
    """The reference image every episode starts from (None: each episode's own first frame) and where
    it comes from (see the module docstring)."""
    if reference is not None:
        return load_image(reference, size), f"image {os.fspath(reference)}"
    if src.is_real:
        return None, "each episode's own first recorded frame"
    if (Path(model) / REFERENCE_NAME).exists():
        return load_image(Path(model) / REFERENCE_NAME, size), f"{Path(model) / REFERENCE_NAME}"
    raise ValueError(
        f"{src_root} is a sim recording and the model folder has no {REFERENCE_NAME}: pass "
        f"--reference IMAGE (a real camera frame)"
    )


def _generate(pipe, refs, sims, masks, stride: int, num_inference_steps, seeds: list[int]) -> list[np.ndarray]:
    """Every episode's frames: VisAligner generates every ``stride``-th frame (the episodes batched, one
    seed each, so the result does not depend on the batching) and each keyframe is held until the next."""
    import torch

    keys = [np.arange(0, len(v), stride) for v in sims]
    generators = [torch.Generator(pipe.device).manual_seed(s) for s in seeds]
    gens = pipe.generate_videos(
        refs, [v[k] for v, k in zip(sims, keys)], [m[k] for m, k in zip(masks, keys)], num_inference_steps, generators
    )
    return [g[np.arange(len(v)) // stride] for g, v in zip(gens, sims)]  # hold each keyframe


def _write_episode(writer: EpisodeWriter, rows, features: dict, key: str, gen: np.ndarray, task: str) -> None:
    """Add an episode's frames: the source's features with the camera ``key`` replaced by ``gen``
    (the episode is discarded when this fails)."""
    try:
        for t in range(len(rows)):
            r = rows[t]
            frame: dict[str, np.ndarray | str] = {
                k: np.asarray(r[k], dtype=features[k]["dtype"]).reshape(features[k]["shape"])
                for k in features
                if k != key
            }
            frame[key] = gen[t]
            frame[TASK] = task
            writer.add_frame(frame)
    except BaseException:
        writer.discard_episode()
        raise


def reference_image(reference: str | os.PathLike, camera: str, png: Path) -> Path:
    """``reference`` itself when it is an image file; for a recorded dataset, frame 0 of its episode 0
    of ``camera``, written to ``png``.

    Raises:
        FileNotFoundError: ``reference`` is neither.
    """
    ref = Path(reference)
    if ref.is_file():
        return ref
    if is_dataset(ref):
        from PIL import Image

        with atomic_path(png) as tmp:
            Image.fromarray(open_dataset(ref).frames(camera, 0)[0]).save(tmp, format="PNG")
        return png
    raise FileNotFoundError(
        f"reference {reference}: neither an image file nor a recorded dataset; give a real "
        f"camera frame (PNG/JPEG) or the dataset recorded on the robot"
    )
