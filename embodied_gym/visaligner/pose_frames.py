"""Pose-estimator frames as VisAligner shows them: the aligned simulator's frames (arXiv 2507.05198,
section 3.2), the training data of a pose estimator that runs on the real camera.

:func:`generate_visaligner_frames` rolls scripted-expert episodes in a sim env, renders them with
their object masks, has VisAligner generate the video from a real reference frame, and stores the
generated frames with the sim's poses in a pose-estimator frame folder (the format of
:mod:`embodied_gym.perception.data`). :func:`make_frames` makes the frame folder a
:class:`~embodied_gym.perception.data.PoseFramesConfig` describes, of any look (``embodied-gym
perception frames``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np
import torch

from embodied_gym import registration
from embodied_gym.configs import require
from embodied_gym.envs.base import aloha_env
from embodied_gym.envs.experts import make_expert
from embodied_gym.perception.configuration import PoseEstimatorConfig
from embodied_gym.perception.data import (
    PoseFramesConfig,
    check_manifest,
    episode_path,
    expert_episode,
    generate_frames,
    randomized_look,
    write_episode,
)
from embodied_gym.progress import progress_bar, report
from embodied_gym.rendering import crop_frames
from embodied_gym.visaligner.paired import SimCameraRenderer
from embodied_gym.visaligner.pipeline import VisAlignerPipeline
from embodied_gym.visaligner.render import load_image, reference_image


def generate_visaligner_frames(
    out: str | os.PathLike,
    config: PoseEstimatorConfig,
    seeds: Sequence[int],
    model: str | os.PathLike,
    reference: np.ndarray | str | os.PathLike,
    env_id: str | None = None,
    env_kwargs: dict | None = None,
    num_inference_steps: int | None = None,
    batch_episodes: int = 8,
    device: str = "cpu",
    progress: bool = True,
) -> list[Path]:
    """Frames of scripted-expert episodes in a sim env as VisAligner shows them: the training data of
    a pose estimator for the real camera (arXiv 2507.05198, section 3.2: the aligned simulator's frames).

    Each episode (one per seed, the whole time limit, ``terminate_on_success=False``) is rendered with
    its object masks every ``frame_stride`` steps of the VisAligner model (the frame rate it was
    trained at), and VisAligner generates the video chunk by chunk from ``reference``; the stored
    frames are the generated ones, with the sim's poses. Stored steps are those of the render, so
    frame ``k`` is step ``k * frame_stride``.

    Args:
        out: the frame folder (resumes: episodes already there are kept).
        config: the estimator's camera, frame size, crop and objects. A model trained on a crop
            (``visaligner train --crop``) must have this config's crop; its output is that region.
        seeds: one episode per seed.
        model: a VisAligner model folder (``visaligner train``'s ``OUT/model``).
        reference: a real camera frame (an image file or ``(H, W, 3)`` uint8, the whole frame): the
            look every episode starts from. It is frame 0 of each generated video and is not stored
            (its layout is another episode's).
        env_id: a sim id (default the task's); ``env_kwargs`` more ``gym.make`` arguments (``physics=``).
        batch_episodes: episodes denoised together (one batch per chunk); the frames do not depend
            on it (one generator per episode, seeded by its seed).
        device: the torch device VisAligner runs on.

    Raises:
        ValueError: a ``-Real-`` env id, or a crop model whose crop is not the estimator's.
    """
    if batch_episodes < 1:
        raise ValueError(f"batch_episodes must be >= 1, got {batch_episodes}")
    out = Path(out)
    env_id = env_id or registration.env_id(config.task)
    if registration.parse_env_id(env_id).real:
        raise ValueError(f"generate_visaligner_frames renders a simulator; {env_id} is a robot (use a sim id)")
    pipe = _model_for(model, config, device)
    crop = pipe.config.crop
    cut = (lambda x, **k: crop_frames(x, crop, **k)) if crop is not None else (lambda x, **k: np.asarray(x))
    ref = cut(_whole_reference(reference, config))
    source = f"{env_id}:visaligner:{os.path.abspath(model)}"
    check_manifest(out, {**config.input_fields(), "source": source})
    todo = [int(s) for s in seeds if not episode_path(out, s).exists()]
    written = [episode_path(out, s) for s in seeds if episode_path(out, s).exists()]
    if not todo:
        return written
    env = gym.make(env_id, obs_type="state", terminate_on_success=False, **(env_kwargs or {}))
    task = aloha_env(env).task.name
    if task != config.task:
        env.close()
        raise ValueError(f"env {env_id} runs task {task}, but the estimator config is for {config.task}")
    camera = SimCameraRenderer(env, config.camera, config.frame_size)
    expert = make_expert(env)
    bar = progress_bar(total=len(todo), progress=progress, desc="visaligner frames", unit="ep")
    try:
        for g0 in range(0, len(todo), batch_episodes):
            group = todo[g0 : g0 + batch_episodes]
            renders = [
                _render_episode(env, expert, camera, seed, pipe.config.frame_stride, cut, config) for seed in group
            ]
            sims, masks, poses, steps = zip(*renders)
            gens = [torch.Generator(pipe.device).manual_seed(s) for s in group]
            videos = pipe.generate_videos([ref] * len(group), list(sims), list(masks), num_inference_steps, gens)
            for seed, video, pose, step in zip(group, videos, poses, steps):
                cropped = crop is not None
                written.append(
                    write_episode(out, config, seed, list(video[1:]), pose, step, source=source, cropped=cropped)
                )
                bar.update(1)
                report(progress, f"visaligner frames: episode {seed} written ({len(written)} in {out})")
    finally:
        bar.close()
        camera.close()
        env.close()
    return written


def _model_for(model: str | os.PathLike, config: PoseEstimatorConfig, device: str) -> VisAlignerPipeline:
    """The VisAligner pipeline of ``model`` on ``device``; a crop model must crop as the estimator does."""
    pipe = VisAlignerPipeline.from_pretrained(model).to(device)
    crop = pipe.config.crop
    if crop is not None and tuple(crop) != tuple(config.crop):
        raise ValueError(
            f"VisAligner model {model} was trained on the crop {tuple(crop)} but the estimator crops "
            f"{tuple(config.crop)}: train VisAligner with --crop {' '.join(map(str, config.crop))}"
        )
    return pipe


def _whole_reference(reference: np.ndarray | str | os.PathLike, config: PoseEstimatorConfig) -> np.ndarray:
    """The reference frame (an image file or an array) as uint8 at the estimator's frame size."""
    if isinstance(reference, (str, os.PathLike)):
        reference = load_image(reference, config.frame_size)
    reference = np.asarray(reference, dtype=np.uint8)
    if reference.shape[:2] != tuple(config.frame_size):
        fh, fw = config.frame_size
        reference = cv2.resize(np.ascontiguousarray(reference), (fw, fh), interpolation=cv2.INTER_AREA)
    return reference


def _render_episode(env, expert, camera, seed: int, stride: int, cut, config: PoseEstimatorConfig):
    """The expert episode of ``seed`` rendered every ``stride`` steps: (frames, masks) cut to the model's
    region, each with its first frame repeated in front (the reference's place: every stored frame is
    generated), and the poses and steps of the stored frames."""
    views, pose, step = expert_episode(env, expert, seed, stride, lambda obs: camera(), config.objects)
    rgb = [cut(frame) for frame, _ in views]
    msk = [cut(mask, channels=False) for _, mask in views]
    return np.stack([rgb[0]] + rgb), np.stack([msk[0]] + msk), np.stack(pose), step


def make_frames(cfg: PoseFramesConfig) -> list[Path]:
    """The frame folder ``cfg`` describes (``embodied-gym perception frames``): its ``look`` ``raw`` or
    ``randomized`` by :func:`~embodied_gym.perception.data.generate_frames`, ``visaligner`` by
    :func:`generate_visaligner_frames`; returns its episode files. Resumes: episodes already in ``cfg.out`` are kept.

    Raises:
        ValueError: a setting that does not fit the look or the env (named with its flag and the fix).
    """
    estimator = cfg.estimator_config()
    env_id = cfg.env or registration.env_id(cfg.task)
    real = registration.parse_env_id(env_id).real
    if cfg.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {cfg.episodes}")
    if real and cfg.physics:
        raise ValueError(f"--physics calibrates a sim; {env_id} is a -Real- id (drop --physics, or pass a sim --env)")
    if cfg.robot_config and not real:
        raise ValueError(
            f"--robot-config configures a stand-in robot; {env_id} is a sim id (pass its -Real- id as "
            f"--env, e.g. {registration.env_id(cfg.task, real=True)})"
        )
    env_kwargs = {k: v for k, v in (("physics", cfg.physics), ("robot_config", cfg.robot_config)) if v}
    seeds = range(cfg.seed, cfg.seed + cfg.episodes)
    if cfg.look == "visaligner":
        if not cfg.visaligner_model or not cfg.reference:
            raise ValueError(
                "--look visaligner needs --visaligner-model (visaligner train's OUT/model) and "
                "--reference (a real camera frame, or the dataset recorded on the robot)"
            )
        if real:
            raise ValueError(
                f"--look visaligner renders sim episodes; {env_id} is a -Real- id (the robot's camera "
                f"needs no VisAligner: use --look raw)"
            )
        out = Path(require(cfg.out, "out"))
        out.mkdir(parents=True, exist_ok=True)
        reference = reference_image(cfg.reference, estimator.camera, out / "reference.png")
        return generate_visaligner_frames(
            out,
            estimator,
            seeds,
            cfg.visaligner_model,
            str(reference),
            env_id=env_id,
            env_kwargs=env_kwargs or None,
            num_inference_steps=cfg.visaligner_steps,
            device=cfg.device,
            progress=cfg.progress,
        )
    if cfg.visaligner_model or cfg.reference:
        raise ValueError(f"--visaligner-model and --reference are for --look visaligner (got --look {cfg.look})")
    if cfg.look == "randomized" and real:
        raise ValueError(f"--look randomized changes the sim's scene; {env_id} is a -Real- id (use --look raw)")
    return generate_frames(
        require(cfg.out, "out"),
        estimator,
        seeds,
        env_id=env_id,
        frame_stride=cfg.frame_stride,
        env_kwargs=env_kwargs or None,
        look=randomized_look if cfg.look == "randomized" else None,
        layouts_per_episode=cfg.layouts_per_episode,
        progress=cfg.progress,
        workers=cfg.workers,
    )


__all__ = ["generate_visaligner_frames", "make_frames"]
