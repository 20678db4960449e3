"""VisAligner's base model: one denoiser trained without a robot, fine-tuned on a robot's episodes.

Trained from scratch on a robot's recorded episodes, VisAligner needs its own VAE and hundreds of
denoiser steps. Much of what the denoiser learns is the same for every robot: carry the look of the
reference frame (the camera's first frame, arXiv 2507.05198 section 3.2) onto the geometry of the sim
render. The base model learns that from pairs that need no robot: one sim state rendered twice, in a
randomised look (:func:`embodied_gym.perception.data.randomized_look`: table and backdrop textures,
light, shadows, cameras moved by up to 1.5 cm; never the stand-in's photographs) as the "real" frame,
with its exact object masks, and in the sim's flat look as the condition. Each episode has its own
look, so the only way to predict the target is to read the reference. A robot's own episodes then
fine-tune it (``VisAlignerTrainConfig(init="base")``), its VAE kept.

:func:`randomized_paired_episodes` makes the pairs from scripted-expert episodes of every task;
:class:`BaseModelConfig` and :func:`train_base` train the model; ``scripts/make_visaligner_base.py``
writes the one that ships (:data:`~embodied_gym.visaligner.configuration.BASE_MODEL_DIR`, half
precision, :func:`export_base`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from embodied_gym import registration
from embodied_gym.configs import setting
from embodied_gym.perception.configuration import PoseEstimatorConfig
from embodied_gym.perception.data import randomized_look
from embodied_gym.progress import progress_bar
from embodied_gym.sim.tasks import TASKS
from embodied_gym.visaligner.configuration import BASE_MODEL_DIR
from embodied_gym.visaligner.paired import (
    PairedEpisode,
    SimCameraRenderer,
    crop_paired,
    load_paired,
    resize_paired,
    save_paired,
)

__all__ = [
    "BASE_SEED",
    "BaseModelConfig",
    "export_base",
    "randomized_paired_episode",
    "randomized_paired_episodes",
    "train_base",
]

#: First episode seed of the base model's episodes: far from recorded demos (0...) and the
#: evaluation seeds (100000...), so no layout of theirs is a base-model layout.
BASE_SEED = 500_000


def _copy_state(src, dst) -> None:
    """``dst``'s data set to ``src``'s state (same model but its look) and its derived quantities updated."""
    dst.data.qpos[:] = src.data.qpos
    dst.data.qvel[:] = src.data.qvel
    if src.model.nmocap:
        dst.data.mocap_pos[:] = src.data.mocap_pos
        dst.data.mocap_quat[:] = src.data.mocap_quat
    mujoco.mj_forward(dst.model, dst.data)


def randomized_paired_episode(
    index: int,
    task: str,
    seed: int,
    *,
    camera: str = "cam_high",
    frame_size: tuple[int, int] = (240, 320),
    crop: tuple[float, float, float, float] | None = None,
    image_size: tuple[int, int] | None = None,
    step_stride: int = 4,
    max_episode_steps: int | None = None,
    flat_env: gym.Env | None = None,
) -> PairedEpisode:
    """One scripted-expert episode of ``task`` (``reset(seed=seed)``, its whole time limit) rendered every
    ``step_stride`` steps in the look ``randomized_look(seed)`` (the "real" frames and masks) and in the
    sim's flat look (the condition and its masks), cut to ``crop`` and resized to ``image_size``.

    ``max_episode_steps``: a shorter time limit (default the task's); ``flat_env``: a sim env of ``task``
    (``obs_type="state"``, ``terminate_on_success=False``, that time limit) to reuse.
    """
    from embodied_gym.envs.experts import make_expert

    env_id = registration.env_id(task)
    kwargs: dict = dict(obs_type="state", terminate_on_success=False)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    own_flat = flat_env is None
    flat = gym.make(env_id, **kwargs) if flat_env is None else flat_env
    looked = gym.make(env_id, look=randomized_look(seed), **kwargs)
    fu: Any = flat.unwrapped  # the sim envs' MuJoCo model and data
    lu: Any = looked.unwrapped
    if fu.model.nq != lu.model.nq:
        raise RuntimeError(f"{task}: the looked scene's state ({lu.model.nq}) is not the sim's ({fu.model.nq})")
    flat_cam = SimCameraRenderer(flat, camera, frame_size)
    look_cam = SimCameraRenderer(looked, camera, frame_size)
    expert = make_expert(flat)
    sim: list[np.ndarray] = []
    sim_mask: list[np.ndarray] = []
    real: list[np.ndarray] = []
    real_mask: list[np.ndarray] = []
    try:
        obs, info = flat.reset(seed=seed)
        looked.reset(seed=seed)
        expert.reset()
        t = 0
        while True:
            if t % step_stride == 0:
                _copy_state(fu, lu)
                for cam, rgbs, masks in ((flat_cam, sim, sim_mask), (look_cam, real, real_mask)):
                    rgb, mask = cam()
                    rgbs.append(rgb)
                    masks.append(mask)
            obs, _, terminated, truncated, info = flat.step(expert(obs, info))
            t += 1
            if terminated or truncated or info.get("physics_error"):
                break
    finally:
        flat_cam.close()
        look_cam.close()
        looked.close()
        if own_flat:
            flat.close()
    episode = PairedEpisode(
        index, np.stack(real), np.stack(sim), np.stack(sim_mask), np.stack(real_mask), step_stride=step_stride
    )
    if crop is not None:
        episode = crop_paired(episode, crop)
    if image_size is not None:
        episode = resize_paired(episode, (int(image_size[0]), int(image_size[1])))
    return episode


def randomized_paired_episodes(
    tasks: Sequence[str],
    episodes_per_task: int,
    *,
    first_seed: int = BASE_SEED,
    progress: bool = True,
    **kwargs,
) -> list[PairedEpisode]:
    """:func:`randomized_paired_episode` for ``episodes_per_task`` seeds of each task (task k's episode i
    has seed ``first_seed + k * episodes_per_task + i``, its index); ``kwargs`` go to it."""
    out = []
    bar = progress_bar(total=len(tasks) * episodes_per_task, progress=progress, desc="base episodes", unit="ep")
    limit = {"max_episode_steps": kwargs["max_episode_steps"]} if kwargs.get("max_episode_steps") else {}
    for k, task in enumerate(tasks):
        flat = gym.make(registration.env_id(task), obs_type="state", terminate_on_success=False, **limit)
        try:
            for i in range(episodes_per_task):
                index = first_seed + k * episodes_per_task + i
                out.append(randomized_paired_episode(index, task, index, flat_env=flat, **kwargs))
                bar.update(1)
        finally:
            flat.close()
    bar.close()
    return out


@dataclass
class BaseModelConfig:
    """What :func:`train_base` does; also ``scripts/make_visaligner_base.py``'s command line.

    The model is the ``tiny`` preset on the pose estimator's default crop of ``cam_high`` (the region
    whose frames the estimator is trained on), at ``image_size``.
    """

    out: str = setting("runs/visaligner_base", help="output folder (paired.npz, checkpoints/, model/)")
    tasks: list[str] = setting(default_factory=lambda: list(TASKS), help="tasks whose scripted episodes it learns from")
    episodes_per_task: int = setting(40, help="randomised-look episodes per task (each its own look)")
    max_episode_steps: int | None = setting(None, help="a shorter time limit per episode (default the task's)")
    image_size: tuple[int, int] = setting((80, 128), metavar=("H", "W"), help="the model's frame size")
    step_stride: int = setting(4, help="control steps between kept frames (the model's frame_stride)")
    vae_steps: int = setting(300, help="VAE training steps")
    steps: int = setting(1000, help="denoiser training steps")
    batch_size: int = setting(4, help="clips per denoiser step")
    checkpoint_every: int = setting(50, help="steps between checkpoints (a rerun resumes)")
    seed: int = setting(0, help="training seed")
    num_threads: int | None = setting(None, flag="--threads", help="torch CPU threads")
    export: bool = setting(
        False, help="also write the model, in half precision, into the package (embodied_gym/visaligner/base_model)"
    )
    progress: bool = setting(True, cli=False)

    def model_overrides(self) -> dict:
        crop = PoseEstimatorConfig(task=self.tasks[0] if self.tasks else "PickCup").crop
        return dict(crop=tuple(crop), image_size=tuple(self.image_size), frame_stride=self.step_stride)


def _paired_cached(cfg: BaseModelConfig, model: dict) -> list[PairedEpisode]:
    """The randomised-look episodes, from ``out/paired.npz`` when it was made with the same settings."""
    path = Path(cfg.out) / "paired.npz"
    meta = {
        "tasks": list(cfg.tasks),
        "episodes_per_task": cfg.episodes_per_task,
        "first_seed": BASE_SEED,
        "crop": list(model["crop"]),
        "image_size": list(model["image_size"]),
        "step_stride": cfg.step_stride,
        "max_episode_steps": cfg.max_episode_steps,
    }
    if path.exists():
        episodes, old = load_paired(path)
        if old == meta:
            return episodes
    episodes = randomized_paired_episodes(
        cfg.tasks,
        cfg.episodes_per_task,
        crop=model["crop"],
        image_size=model["image_size"],
        step_stride=cfg.step_stride,
        max_episode_steps=cfg.max_episode_steps,
        progress=cfg.progress,
    )
    save_paired(path, episodes, meta)
    return episodes


def train_base(cfg: BaseModelConfig):
    """Train the base model in ``cfg.out`` (resumes from its checkpoint); with ``cfg.export``, write it to
    the package's :data:`BASE_MODEL_DIR`. Returns the pipeline."""
    from embodied_gym.visaligner.training import VisAlignerTrainConfig, train

    unknown = sorted(set(cfg.tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; choose from {list(TASKS)}")
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    model = cfg.model_overrides()
    episodes = _paired_cached(cfg, model)
    tc = VisAlignerTrainConfig(
        dataset=None,
        out=cfg.out,
        model=model,
        vae_steps=cfg.vae_steps,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        checkpoint_every=cfg.checkpoint_every,
        sample_every=max(cfg.checkpoint_every, cfg.steps // 4),
        seed=cfg.seed,
        num_threads=cfg.num_threads,
        device="cpu",
        progress=cfg.progress,
    )
    pipe = train(tc, episodes=episodes)
    if cfg.export:
        export_base(Path(cfg.out) / "model", BASE_MODEL_DIR)
    return pipe


def export_base(model_dir: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Write the model in ``model_dir`` to ``dest`` in half precision (what ships; loaded back in float32)."""
    import torch

    from embodied_gym.atomic import atomic_dir
    from embodied_gym.visaligner.configuration import VisAlignerConfig
    from embodied_gym.visaligner.pipeline import CONFIG_NAME, VisAlignerPipeline

    pipe = VisAlignerPipeline.from_pretrained(model_dir, dtype=torch.float16)
    cfg = VisAlignerConfig.load(Path(model_dir) / CONFIG_NAME)
    with atomic_dir(Path(dest)) as d:
        pipe.save_pretrained(d)
        cfg.save(d / CONFIG_NAME)
