"""The object-pose entry of a policy's observation, ``obs["object_pose_estimate"]`` (:data:`KEY`):
its key, where its values come from (:data:`POSE_SOURCES`), when it is refreshed
(:data:`POSE_UPDATES`), the identity of the estimator that fills it (:func:`estimator_source`) and
the simulator's true poses in its layout (:func:`true_pose_entry`). The wrappers that add it are
:mod:`embodied_gym.wrappers.pose`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from embodied_gym.perception.configuration import WEIGHTS_NAME

KEY = "object_pose_estimate"
#: What a recording stores as the pose entry: the estimator's estimate, or the simulator's true poses
#: in the estimator's layout (sim ids only).
POSE_SOURCES = ("estimate", "ground_truth")
#: When the pose entry is refreshed. ``every_frame``: at every camera frame. ``at_reset``: the poses
#: of the reset frame, held for the whole episode (the objects' start poses, seen before any arm
#: moves over them: the estimate is most accurate before a gripper hangs over the object, and policies
#: on PickCup succeed more often so; BENCHMARKS.md, Ablations section). For tasks whose policy needs an object's pose after the robot has moved it, keep
#: ``every_frame``.
POSE_UPDATES = ("every_frame", "at_reset")


def check_pose_update(update: str) -> str:
    if update not in POSE_UPDATES:
        raise ValueError(f"pose_update must be one of {list(POSE_UPDATES)}, got {update!r}")
    return update


def estimator_source(folder: str | os.PathLike) -> dict:
    """``{"path": <absolute folder>, "sha256": <hash of its weights file>}``: what a dataset and a
    policy record about the estimator their observations came from, so evaluation can rebuild the
    same observation (and notice when the folder now holds other weights).

    Raises:
        FileNotFoundError: ``folder`` has no weights file.
    """
    weights = Path(folder) / WEIGHTS_NAME
    if not weights.is_file():
        raise FileNotFoundError(
            f"no pose estimator at {folder}: {WEIGHTS_NAME} is missing (pass the folder "
            f"save_pretrained() or `train_pose_estimator` wrote)"
        )
    h = hashlib.sha256()
    with open(weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"path": str(Path(folder).resolve()), "sha256": h.hexdigest()}


def true_pose_entry(config, poses: dict) -> np.ndarray:
    """The true object ``poses`` (``info["object_poses"]``) in an estimator's layout: what ``config``'s
    estimator is trained to output, clipped into its estimate's Box."""
    row = np.stack([np.asarray(poses[o], dtype=np.float64) for o in config.objects])[None]
    low, high = config.output_bounds()
    return np.clip(config.targets(row)[0], low, high).astype(np.float32)


__all__ = ["KEY", "POSE_SOURCES", "POSE_UPDATES", "check_pose_update", "estimator_source", "true_pose_entry"]
