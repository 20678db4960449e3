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
        outs = [
            model(model.to_tensor(inputs[i : i + batch_size]).to(model._device())).cpu().double().numpy()
            for i in range(0, len(inputs), batch_size)
        ]
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
        dxy = (
            np.hypot(
                estimate[:, col[f"{o}.x"]] - truth[:, col[f"{o}.x"]],
                estimate[:, col[f"{o}.y"]] - truth[:, col[f"{o}.y"]],
            )
            * 100
        )
        r = {
            "xy_cm": float(dxy.mean()),
            "xy_cm_median": float(np.median(dxy)),
            "xy_cm_p90": float(np.quantile(dxy, 0.9)),
        }
        if f"{o}.z" in col:
            r["z_cm"] = float(np.abs(estimate[:, col[f"{o}.z"]] - truth[:, col[f"{o}.z"]]).mean() * 100)
        if f"{o}.cos_yaw" in col:
            c, s = col[f"{o}.cos_yaw"], col[f"{o}.sin_yaw"]
            r["yaw_deg"] = float(
                yaw_error_deg(estimate[:, c], estimate[:, s], truth[:, c], truth[:, s], config.yaw_symmetry[o]).mean()
            )
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


__all__ = ["errors_from_estimates", "pose_errors", "predict_inputs", "time_per_frame"]
