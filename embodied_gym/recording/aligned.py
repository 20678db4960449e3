"""Training data from the aligned simulator: expert demonstrations in the calibrated sim whose camera
frames VisAligner renders as the real camera would show them (the paper's data engine, arXiv 2507.05198).

Two steps, both resumable:

1. ``<out>/sim``: the scripted expert recorded in the sim with the calibrated physics (plain renders),
   its episodes rolled out by ``workers`` processes (:func:`~embodied_gym.data.parallel.record_expert_demos`);
2. ``<out>/aligned``: the same episodes with the camera's video replaced by VisAligner's frames
   (:func:`~embodied_gym.visaligner.render.render_dataset`), starting from a real reference image.

``<out>/aligned`` is what an aligned-sim policy trains on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_gym.configs import require, setting
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.reader import is_dataset, read_info, read_sidecar
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.visaligner.render import reference_image, render_dataset


@dataclass
class AlignedDemosConfig:
    """Which demonstrations to generate, and how VisAligner renders them; also the
    ``embodied-gym generate`` command line and its ``--config`` YAML."""

    task: str | None = setting(None, required=True, help="task name, e.g. PickCup")
    episodes: int | None = setting(None, required=True, help="expert demonstrations to generate")
    model: str | None = setting(None, required=True, help="VisAligner model folder (visaligner train's OUT/model)")
    reference: str | None = setting(
        None,
        required=True,
        help="a real camera frame every episode starts from: an image file, or a "
        "recorded dataset (its first frame of --camera)",
    )
    physics: str | None = setting(None, help="calibrated physics (a calibration result JSON); default nominal")
    camera: str = setting("cam_high", help="the camera VisAligner renders")
    image_size: tuple[int, int] = setting((64, 80), metavar=("H", "W"), help="recorded frame size")
    seed: int = setting(10_000, help="episode i is reset with seed + i (keep it apart from the real recording's)")
    max_episode_steps: int | None = setting(None, help="episode time limit (default: the task's)")
    num_inference_steps: int | None = setting(None, help="VisAligner denoising steps (default: the model's)")
    frame_stride: int | None = setting(None, help="generate every k-th frame and hold it (default: the model's)")
    batch_episodes: int = setting(8, help="episodes generated together")
    after_success_steps: int = setting(AFTER_SUCCESS_STEPS, help="control steps recorded after the first success")
    crf: int = setting(DEFAULT_CRF, help="video quality of both datasets (lower keeps more; 0 lossless)")
    device: str = setting("cpu", help="torch device VisAligner renders on: cpu or cuda")
    workers: int | None = setting(
        None,
        metavar="N",
        help="processes that roll out the sim episodes (step 1; the dataset is the same "
        "for any number; default: the CPU count)",
        cache_key=False,
    )
    backend: str = setting(
        "local",
        choices=("local", "ray"),
        help="where step 1's workers run: local processes, or Ray tasks on a local Ray "
        "instance (pip install 'embodied-gym[ray]')",
        cache_key=False,
    )


def generate_aligned_demos(cfg: AlignedDemosConfig, out: str | os.PathLike, progress: bool = True) -> dict:
    """Record ``cfg.episodes`` expert episodes in the calibrated sim, then render them through
    VisAligner; reruns continue where an interrupted run stopped.

    Args:
        cfg: what to generate (task, episodes, physics, VisAligner model, reference).
        out: the output folder (``sim/``, ``aligned/`` and ``reference.png``).

    Returns:
        ``dataset`` (the aligned-sim dataset to train on), ``sim_dataset``, ``reference``, the
        expert's success in the calibrated sim and the render summary.

    Raises:
        FileNotFoundError: the reference is neither an image nor a dataset.
    """
    import embodied_gym
    from embodied_gym.recording.parallel import record_expert_demos

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env_id = embodied_gym.env_id(require(cfg.task, "task"))
    reference = reference_image(require(cfg.reference, "reference"), cfg.camera, out / "reference.png")
    episodes = require(cfg.episodes, "episodes")
    sim_root, aligned_root = out / "sim", out / "aligned"
    done = _episodes(sim_root)
    if done < episodes:
        kwargs: dict[str, Any] = dict(obs_type="pixels_state", cameras=(cfg.camera,), image_size=tuple(cfg.image_size))
        if cfg.physics is not None:
            kwargs["physics"] = cfg.physics
        if cfg.max_episode_steps:
            kwargs["max_episode_steps"] = cfg.max_episode_steps
        # resume whenever the dataset exists: an interrupted first episode leaves it with 0 episodes
        record_expert_demos(
            env_id,
            kwargs,
            sim_root,
            episodes - done,
            seed=cfg.seed,
            workers=cfg.workers,
            backend=cfg.backend,
            resume=is_dataset(sim_root),
            progress=progress,
            after_success_steps=cfg.after_success_steps,
            crf=cfg.crf,
        )
    rendered = _episodes(aligned_root)
    render = {"episodes": rendered}
    if rendered < episodes:
        render = render_dataset(
            sim_root,
            require(cfg.model, "model"),
            aligned_root,
            camera=cfg.camera,
            reference=str(reference),
            physics=cfg.physics,
            num_inference_steps=cfg.num_inference_steps,
            frame_stride=cfg.frame_stride,
            batch_episodes=cfg.batch_episodes,
            resume=is_dataset(aligned_root),
            progress=progress,
            crf=cfg.crf,
            device=cfg.device,
        )
    return {
        "sim_dataset": str(sim_root),
        "dataset": str(aligned_root),
        "reference": str(reference),
        "sim_expert_success": _success_rate(sim_root),
        "render": render,
    }


def _episodes(root: Path) -> int:
    return int(read_info(root).get("total_episodes", 0)) if is_dataset(root) else 0


def _success_rate(root: Path) -> float:
    rows = read_sidecar(root)
    return sum(bool(r.get("success")) for r in rows) / max(len(rows), 1)
