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

import json
import logging
import os
from pathlib import Path

import numpy as np

from embodied_gym.data.features import SIDECAR
from embodied_gym.data.replay import dataset_repo_id, load_episodes
from embodied_gym.visaligner.pipeline import REFERENCE_NAME

log = logging.getLogger(__name__)
_AUTO_FEATURES = ("index", "timestamp", "frame_index", "episode_index", "task_index")


def load_image(path: str | os.PathLike, size: tuple[int, int] | None = None) -> np.ndarray:
    import cv2

    img = cv2.imread(os.fspath(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"cannot read reference image {path!r} (PNG/JPEG expected)")
    img = img[..., ::-1]
    if size is not None and img.shape[:2] != tuple(size):
        img = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img)


def render_dataset(dataset: str | os.PathLike, model: str | os.PathLike, out: str | os.PathLike, *,
                   camera: str = "cam_high", reference: str | os.PathLike | None = None,
                   episodes: list[int] | None = None, physics=None, num_inference_steps: int | None = None,
                   seed: int = 0, frame_stride: int | None = None, batch_episodes: int = 8, resume: bool = False,
                   progress: bool = True) -> dict:
    """Write ``out`` (see the module docstring); returns a summary dict.

    VisAligner generates every ``frame_stride``-th frame (default: the model's own stride, the frame
    rate it was trained at) and each generated frame is held until the next one, with the keyframe
    timing of :class:`~embodied_gym.wrappers.VisAlignerWrapper` in the aligned sim; ``1``
    generates every frame (``frame_stride`` times slower, and at a frame rate the model never saw).

    ``batch_episodes`` episodes are generated together (one denoiser batch per chunk index), then
    written one by one, so an interrupted run resumes at the first episode not yet written.
    """
    if batch_episodes < 1:
        raise ValueError(f"batch_episodes must be >= 1, got {batch_episodes}")
    import gymnasium as gym
    import torch
    from lerobot.datasets import LeRobotDataset
    from tqdm import tqdm

    import embodied_gym
    from embodied_gym.data.recording import video_encoder
    from embodied_gym.visaligner.paired import dataset_task, read_episode_frames, replay_render
    from embodied_gym.visaligner.pipeline import VisAlignerPipeline

    encoder = video_encoder("h264")  # as `record`: several times faster than AV1 on a CPU
    src_root, out = Path(dataset), Path(out)
    pipe = VisAlignerPipeline.from_pretrained(model)
    stride = pipe.config.frame_stride if frame_stride is None else frame_stride
    if stride < 1:
        raise ValueError(f"frame_stride must be >= 1, got {frame_stride}")
    src = LeRobotDataset(dataset_repo_id(src_root), root=src_root, video_backend="pyav")
    key = f"observation.images.{camera}"
    if key not in src.meta.video_keys:
        raise ValueError(f"dataset {src_root} has no camera {camera!r} (it has {src.meta.video_keys}); the sim "
                         f"replay renders that camera at the dataset's image size")
    rows = [json.loads(x) for x in (src_root / SIDECAR).read_text().splitlines() if x.strip()] \
        if (src_root / SIDECAR).exists() else []
    sidecar = {r["episode_index"]: r for r in rows}
    is_real = any("-Real-" in (r.get("env_id") or "") for r in rows)
    size = tuple(src.meta.features[key]["shape"][:2])
    if reference is not None:
        fixed_ref, ref_source = load_image(reference, size), f"image {os.fspath(reference)}"
    elif is_real:
        fixed_ref, ref_source = None, "each episode's own first recorded frame"
    elif (Path(model) / REFERENCE_NAME).exists():
        fixed_ref, ref_source = load_image(Path(model) / REFERENCE_NAME, size), f"{Path(model) / REFERENCE_NAME}"
    else:
        raise ValueError(f"{src_root} is a sim recording and the model folder has no {REFERENCE_NAME}: pass "
                         f"--reference IMAGE (a real camera frame)")
    log.info("visaligner render: reference = %s", ref_source)

    features = {k: v for k, v in src.meta.features.items() if k not in _AUTO_FEATURES}
    wanted = episodes if episodes is not None else list(range(src.meta.total_episodes))
    repo_id = dataset_repo_id(out)
    if (out / "meta" / "info.json").exists():
        if not resume:
            raise FileExistsError(f"{out} already holds a dataset; pass resume=True (--resume) or another folder")
        dst = LeRobotDataset.resume(repo_id, root=out, video_backend="pyav")
        done = dst.meta.total_episodes
        dst.finalize()
    else:
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} exists and is not a LeRobotDataset; choose an empty or new folder")
        done, dst = 0, None
    out_rows = [json.loads(x) for x in (out / SIDECAR).read_text().splitlines() if x.strip()][:done] \
        if (out / SIDECAR).exists() else []
    task = dataset_task(src_root)
    env = gym.make(embodied_gym.env_id(task), obs_type="state", physics=physics, terminate_on_success=False)
    hf = src.hf_dataset.with_format("numpy")
    ep_col = np.asarray(hf["episode_index"])
    try:
        todo = wanted[done:]
        bar = tqdm(total=len(todo), desc="visaligner render", unit="ep", disable=not progress)
        for g0 in range(0, len(todo), batch_episodes):
            group = todo[g0:g0 + batch_episodes]
            eps = load_episodes(src_root, group)
            sims, masks = zip(*(replay_render(ep, env, camera, size) for ep in eps))
            refs = [fixed_ref if fixed_ref is not None else read_episode_frames(src_root, camera, [e])[e][0]
                    for e in group]
            keys = [np.arange(0, len(v), stride) for v in sims]
            seeds = [torch.Generator(pipe.device).manual_seed(seed + e) for e in group]  # batching-independent
            gens = pipe.generate_videos(refs, [v[k] for v, k in zip(sims, keys)], [m[k] for m, k in zip(masks, keys)],
                                        num_inference_steps, seeds)
            gens = [g[np.arange(len(v)) // stride] for g, v in zip(gens, sims)]  # hold each keyframe
            for e, ep, gen in zip(group, eps, gens):
                rows_e = hf.select(np.flatnonzero(ep_col == e).tolist())
                if dst is None or dst._is_finalized:
                    dst = (LeRobotDataset.create(repo_id, fps=src.meta.fps, features=features, root=out,
                                                 robot_type=src.meta.robot_type, use_videos=True, video_backend="pyav",
                                                 rgb_encoder=encoder)
                           if not (out / "meta" / "info.json").exists()
                           else LeRobotDataset.resume(repo_id, root=out, video_backend="pyav", rgb_encoder=encoder))
                for t in range(len(rows_e)):
                    r = rows_e[t]
                    frame = {k: np.asarray(r[k], dtype=features[k]["dtype"]).reshape(features[k]["shape"])
                             for k in features if k not in src.meta.video_keys}
                    for vk in src.meta.video_keys:
                        frame[vk] = gen[t] if vk == key else None
                    frame = {k: v for k, v in frame.items() if v is not None}
                    if any(vk not in frame for vk in src.meta.video_keys):
                        raise ValueError(f"render handles datasets with one camera; {src_root} has "
                                         f"{src.meta.video_keys}")
                    frame["task"] = ep.task
                    dst.add_frame(frame)
                dst.save_episode()
                dst.finalize()
                row = dict(sidecar.get(e, {"episode_index": e}), episode_index=len(out_rows), source_episode=e,
                           visaligner={"model": os.path.abspath(model), "reference": ref_source, "camera": camera,
                                       "frame_stride": stride})
                out_rows.append(row)
                tmp = out / (SIDECAR + ".tmp")
                tmp.write_text("".join(json.dumps(x) + "\n" for x in out_rows))
                os.replace(tmp, out / SIDECAR)
                bar.update(1)
        bar.close()
    finally:
        env.close()
    return {"out": str(out), "episodes": len(out_rows), "reference": ref_source}
