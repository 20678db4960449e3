"""Pose error of an estimator on stored frames: the measure of how well it sees, and of the visual gap.

:func:`pose_errors` compares the estimate with the ground truth of a frame folder (or loaded
:class:`~embodied_gym.perception.data.Frames`): per object the horizontal position error (cm), the
height error (cm, when the model predicts z) and the yaw error (deg, modulo the object's symmetry).
On frames of the stand-in robot (ground truth from its ``info["object_poses"]``, which it reports for
evaluation as a motion-capture system would), the error of a model trained on simulator frames is the
cheapest honest measure of the sim-to-real visual gap that VisAligner (arXiv 2507.05198, section 3.2)
is meant to close.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from embodied_gym.perception.configuration import yaw_error_deg
from embodied_gym.perception.data import Frames, load_frames
from embodied_gym.perception.modeling import PoseEstimator


@torch.inference_mode()
def predict_inputs(model: PoseEstimator, inputs: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Physical estimates (N, output_dim) from preprocessed network inputs (N, h, w, 3) uint8."""
    was_training = model.training
    model.eval()
    try:
        outs = [model(model.to_tensor(inputs[i:i + batch_size]).to(model._device())).cpu().double().numpy()
                for i in range(0, len(inputs), batch_size)]
    finally:
        model.train(was_training)
    return model.config.denormalise(np.concatenate(outs) if outs else np.zeros((0, model.config.output_dim)))


def errors_from_estimates(config, estimate: np.ndarray, poses: np.ndarray) -> dict[str, dict[str, float]]:
    """Per object ``{"xy_cm": mean, "xy_cm_median": .., "xy_cm_p90": .., "z_cm": mean, "yaw_deg": mean}``."""
    truth = config.targets(poses)
    names = config.output_names
    col = {n: j for j, n in enumerate(names)}
    result = {}
    for o in config.objects:
        dxy = np.hypot(estimate[:, col[f"{o}.x"]] - truth[:, col[f"{o}.x"]],
                       estimate[:, col[f"{o}.y"]] - truth[:, col[f"{o}.y"]]) * 100
        r = {"xy_cm": float(dxy.mean()), "xy_cm_median": float(np.median(dxy)), "xy_cm_p90": float(np.quantile(dxy, 0.9))}
        if f"{o}.z" in col:
            r["z_cm"] = float(np.abs(estimate[:, col[f"{o}.z"]] - truth[:, col[f"{o}.z"]]).mean() * 100)
        if f"{o}.cos_yaw" in col:
            c, s = col[f"{o}.cos_yaw"], col[f"{o}.sin_yaw"]
            r["yaw_deg"] = float(yaw_error_deg(estimate[:, c], estimate[:, s], truth[:, c], truth[:, s],
                                               config.yaw_symmetry[o]).mean())
        result[o] = r
    return result


def pose_errors(model: PoseEstimator, frames: Frames | str | os.PathLike | Sequence[str | os.PathLike]) -> dict:
    """Pose errors of ``model`` on ``frames`` (a :class:`Frames` or frame folders); adds ``"frames"``: N."""
    if not isinstance(frames, Frames):
        frames = load_frames(frames, model.config)
    est = predict_inputs(model, frames.inputs)
    return {"frames": len(frames), **errors_from_estimates(model.config, est, frames.poses)}





def time_per_frame(model: PoseEstimator, frames: int = 50, threads: int = 1) -> float:
    """Milliseconds per :meth:`PoseEstimator.estimate` call on one full camera frame (batch 1)."""
    import time

    frame = np.random.default_rng(0).integers(0, 255, (*model.config.frame_size, 3), dtype=np.uint8)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model.estimate(frame)
        t = time.perf_counter()
        for _ in range(frames):
            model.estimate(frame)
        return (time.perf_counter() - t) / frames * 1e3
    finally:
        torch.set_num_threads(old)


def measure_visual_gap(out: str | os.PathLike, config, train_sets: dict[str, Sequence[str | os.PathLike]] | None = None,
                       sim_episodes: int = 60, val_episodes: int = 8, standin_episodes: int = 6, frame_stride: int = 4,
                       train: dict | None = None, standin_kwargs: dict | None = None, layouts_per_episode: int = 0,
                       progress: bool = True) -> dict:
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
    from pathlib import Path

    import embodied_gym
    from embodied_gym.perception.data import generate_frames
    from embodied_gym.perception.train import PoseTrainConfig, train_pose_estimator

    out = Path(out)
    fr = out / "frames"
    if train_sets is None:
        generate_frames(fr / "sim_train", config, range(sim_episodes), frame_stride=frame_stride,
                        layouts_per_episode=layouts_per_episode, progress=progress)
    generate_frames(fr / "sim_val", config, range(10000, 10000 + val_episodes), frame_stride=frame_stride,
                    progress=progress)
    generate_frames(fr / "standin", config, range(20000, 20000 + standin_episodes),
                    env_id=embodied_gym.env_id(config.task, real=True), frame_stride=frame_stride,
                    env_kwargs=standin_kwargs, progress=progress)
    sim_val, standin = load_frames(fr / "sim_val", config), load_frames(fr / "standin", config)
    train_sets = train_sets or {"raw": [fr / "sim_train"]}
    result = {"frames": {"sim_val": len(sim_val), "standin": len(standin)}, "models": {}}
    # What knowing nothing scores: always the centre of the start range (z = 0, yaw = 0).
    centre = np.tile(config.denormalise(np.zeros(config.output_dim)), (len(standin), 1))
    result["centre_baseline"] = {"standin": {"frames": len(standin), **errors_from_estimates(config, centre, standin.poses)}}
    for name, folders in train_sets.items():
        tc = PoseTrainConfig(**{**(train or {}), "data": [str(f) for f in folders], "out": str(out / "models" / name),
                                "resume": True, "progress": progress})
        model = train_pose_estimator(tc, config).model
        result["models"][name] = {"train_frames": len(load_frames(folders, config)), "sim": pose_errors(model, sim_val),
                                  "standin": pose_errors(model, standin), "ms_per_frame": time_per_frame(model)}
    return result

__all__ = ["pose_errors", "predict_inputs", "errors_from_estimates", "measure_visual_gap", "time_per_frame"]
