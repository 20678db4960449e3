"""The visual-gap experiment: train pose estimators on sim frames, measure them on sim and stand-in frames.

The experiment layer over :mod:`~embodied_gym.perception.training` (how a model learns) and
:mod:`~embodied_gym.perception.evaluate` (how its error is measured): ``benchmarks/perception.py`` runs it.
A model trained on simulator frames and measured on a stand-in's camera shows the visual gap that
VisAligner (arXiv 2507.05198, section 3.2) is meant to close.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import embodied_gym
from embodied_gym.perception.data import generate_frames, load_frames
from embodied_gym.perception.evaluate import errors_from_estimates, pose_errors, time_per_frame
from embodied_gym.perception.training import PoseTrainConfig, train_pose_estimator


def measure_visual_gap(
    out: str | os.PathLike,
    config,
    train_sets: dict[str, Sequence[str | os.PathLike]] | None = None,
    sim_episodes: int = 60,
    val_episodes: int = 8,
    standin_episodes: int = 6,
    frame_stride: int = 4,
    train: dict | None = None,
    standin_kwargs: dict | None = None,
    layouts_per_episode: int = 0,
    progress: bool = True,
) -> dict:
    """Train pose estimators on sim frames and report their pose errors on held-out sim and stand-in frames.

    Frames (``<out>/frames/``): ``sim_train`` (seeds ``0..sim_episodes-1``), ``sim_val`` (seeds from
    10000) in the task's nominal sim (``sim_train`` with ``layouts_per_episode`` extra layouts per
    episode), and ``standin`` (seeds from 20000) on the ``-Real-`` env, whose
    ground truth is the stand-in's ``info["object_poses"]`` (evaluation only). ``train_sets`` names
    the training data of each model (default ``{"raw": [<out>/frames/sim_train]}``, generated here;
    folders given in ``train_sets`` must exist already: add VisAligner
    frame folders written by :func:`~embodied_gym.perception.data.write_episode` to compare). Each
    model is trained into ``<out>/models/<name>`` with ``train`` (:class:`PoseTrainConfig` fields).
    Everything is resumable (frames and checkpoints).

    Returns ``{"frames": {...counts}, "models": {name: {"sim": errors, "standin": errors,
    "ms_per_frame": ..}}}``.
    """
    out = Path(out)
    fr = out / "frames"
    if train_sets is None:
        generate_frames(
            fr / "sim_train",
            config,
            range(sim_episodes),
            frame_stride=frame_stride,
            layouts_per_episode=layouts_per_episode,
            progress=progress,
        )
    generate_frames(
        fr / "sim_val", config, range(10000, 10000 + val_episodes), frame_stride=frame_stride, progress=progress
    )
    generate_frames(
        fr / "standin",
        config,
        range(20000, 20000 + standin_episodes),
        env_id=embodied_gym.env_id(config.task, real=True),
        frame_stride=frame_stride,
        env_kwargs=standin_kwargs,
        progress=progress,
    )
    sim_val, standin = load_frames(fr / "sim_val", config), load_frames(fr / "standin", config)
    train_sets = train_sets or {"raw": [fr / "sim_train"]}
    result: dict[str, Any] = {"frames": {"sim_val": len(sim_val), "standin": len(standin)}, "models": {}}
    # What knowing nothing scores: always the centre of the start range (z = 0, yaw = 0).
    centre = np.tile(config.denormalise(np.zeros(config.output_dim)), (len(standin), 1))
    result["centre_baseline"] = {
        "standin": {"frames": len(standin), **errors_from_estimates(config, centre, standin.poses)}
    }
    for name, folders in train_sets.items():
        tc = PoseTrainConfig(
            **{
                **(train or {}),
                "data": [str(f) for f in folders],
                "out": str(out / "models" / name),
                "resume": True,
                "progress": progress,
            }
        )
        model = train_pose_estimator(tc, config).model
        result["models"][name] = {
            "train_frames": len(load_frames(folders, config)),
            "sim": pose_errors(model, sim_val),
            "standin": pose_errors(model, standin),
            "ms_per_frame": time_per_frame(model),
        }
    return result


__all__ = ["measure_visual_gap"]
