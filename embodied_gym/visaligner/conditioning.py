"""The condition video and foreground-object masks (EmbodieDreamer §2, "scene decomposition").

The condition video of a clip of N frames is the paper's construction:

- frame 0: the real reference image (it carries the static background and the robot's look);
- frames 1..N-1: the sim render of the robot with the foreground-object masks added pixel-wise,
  so objects appear as white silhouettes (``clip(render + 255 * mask)``).

Object masks come from MuJoCo's segmentation render in sim (exact: the geoms of the task's
objects). For real video they come from segment-anything when the user gives a checkpoint, or
else from :class:`ClassicalObjectMasker`, which suits a static camera.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


def object_mask_from_segmentation(segmentation: np.ndarray, object_geoms) -> np.ndarray:
    """Boolean ``(H, W)`` mask of the pixels showing any of ``object_geoms``.

    ``segmentation`` is a ``(H, W, 2)`` render of ``mujoco.Renderer`` with segmentation rendering
    on: channel 0 the object id, channel 1 its ``mjtObj`` type (geoms only count).
    """
    import mujoco

    seg = np.asarray(segmentation)
    if seg.ndim != 3 or seg.shape[-1] != 2:
        raise ValueError(f"segmentation must be (H, W, 2) from a segmentation render, got shape {seg.shape}")
    is_geom = seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM)
    return is_geom & np.isin(seg[..., 0], np.asarray(list(object_geoms), dtype=np.int64))


def condition_video(reference: np.ndarray, sim_frames: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
    """The condition video ``(N, H, W, 3)`` uint8 of one clip (see the module docstring).

    ``reference`` is ``(H, W, 3)``; ``sim_frames`` ``(N, H, W, 3)`` (its frame 0 is replaced by the
    reference); ``masks`` ``(N, H, W)`` boolean, or None for the no-mask ablation.
    """
    reference, sim_frames = np.asarray(reference), np.asarray(sim_frames)
    if sim_frames.ndim != 4 or sim_frames.shape[-1] != 3:
        raise ValueError(f"sim_frames must be (N, H, W, 3), got {sim_frames.shape}")
    if reference.shape != sim_frames.shape[1:]:
        raise ValueError(
            f"reference image {reference.shape} must match the sim frames' size {sim_frames.shape[1:]}; "
            f"resize it to the camera's image size first"
        )
    out = sim_frames.astype(np.int16)
    if masks is not None:
        masks = np.asarray(masks, dtype=bool)
        if masks.shape != sim_frames.shape[:3]:
            raise ValueError(f"masks {masks.shape} must be (N, H, W) = {sim_frames.shape[:3]}")
        out = out + 255 * masks[..., None].astype(np.int16)
    out = np.clip(out, 0, 255).astype(np.uint8)
    out[0] = reference
    return out


@dataclass
class ClassicalObjectMasker:
    """Object masks for real video without a learned segmenter, for a static camera.

    The sim's mask of the same frame (from replaying the recorded joints) gives where the object
    should be; real and sim cameras and object poses differ a little, so that region is grown by
    ``search_radius`` pixels. Inside it, a pixel is "object" when its colour is nearer the object's
    colour than the local background's (two-class nearest-mean in RGB). The object colour is the
    mean of the real frame over the sim mask's core; the background colour is the median of the
    static camera's background model (the per-pixel median over the episode) in a ring around the
    region. When the colour split finds nothing the sim mask is used as is.
    """

    search_radius: int = 2
    ring: int = 3

    name = "classical (static-camera background median + colour, sim-guided)"

    def __call__(self, real_frames: np.ndarray, sim_masks: np.ndarray) -> np.ndarray:
        import cv2

        real = np.asarray(real_frames, dtype=np.float32)
        sim_masks = np.asarray(sim_masks, dtype=bool)
        if real.shape[:3] != sim_masks.shape:
            raise ValueError(f"real frames {real.shape} and sim masks {sim_masks.shape} must cover the same frames")
        background = np.median(real, axis=0)  # static camera: moving parts average out
        r = 2 * self.search_radius + 1
        grow = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (r, r))
        ring_k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (r + 2 * self.ring, r + 2 * self.ring))
        out = np.zeros_like(sim_masks)
        for t, (frame, sm) in enumerate(zip(real, sim_masks)):
            if not sm.any():
                continue
            m8 = sm.astype(np.uint8)
            region = cv2.dilate(m8, grow).astype(bool)
            ring = cv2.dilate(m8, ring_k).astype(bool) & ~region
            obj_c = frame[sm].mean(axis=0)
            bg_c = np.median(background[ring] if ring.any() else background[region], axis=0)
            d_obj = np.linalg.norm(frame - obj_c, axis=-1)
            d_bg = np.linalg.norm(frame - bg_c, axis=-1)
            found = region & (d_obj < d_bg)
            out[t] = found if found.any() else sm
        return out


class SamObjectMasker:
    """Object masks for real video from segment-anything, prompted with the box around the sim mask.

    ``checkpoint`` is a SAM weights file the user supplies (nothing is downloaded); the model type
    (``vit_h``, ``vit_l``, ``vit_b``) is read from the file name unless given.
    """

    def __init__(
        self, checkpoint: str | os.PathLike, model_type: str | None = None, device: str = "cpu", box_margin: int = 4
    ):
        from segment_anything import SamPredictor, sam_model_registry

        path = os.fspath(checkpoint)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"SAM checkpoint {path!r} does not exist; pass the path of a downloaded "
                f"segment-anything .pth file (e.g. sam_vit_b_01ec64.pth), or omit "
                f"--sam-checkpoint to use the classical masks"
            )
        if model_type is None:
            model_type = next((k for k in ("vit_h", "vit_l", "vit_b") if k in os.path.basename(path)), None)
            if model_type is None:
                raise ValueError(
                    f"cannot tell the SAM model type from {path!r}; pass model_type ('vit_h', 'vit_l' or 'vit_b')"
                )
        # segment-anything loads with torch.load; build the model empty and load weights_only ourselves.
        import torch

        sam = sam_model_registry[model_type](checkpoint=None)
        sam.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        self.predictor = SamPredictor(sam.to(device).eval())
        self.box_margin = box_margin
        self.name = f"segment-anything ({model_type}, {os.path.basename(path)})"

    def __call__(self, real_frames: np.ndarray, sim_masks: np.ndarray) -> np.ndarray:
        out = np.zeros(np.asarray(sim_masks).shape, dtype=bool)
        for t, (frame, sm) in enumerate(zip(real_frames, sim_masks)):
            if not sm.any():
                continue
            ys, xs = np.nonzero(sm)
            m = self.box_margin
            box = np.array([xs.min() - m, ys.min() - m, xs.max() + m, ys.max() + m], dtype=np.float32)
            self.predictor.set_image(np.ascontiguousarray(frame))
            masks, scores, _ = self.predictor.predict(box=box, multimask_output=False)
            out[t] = masks[0]
        return out


def make_object_masker(sam_checkpoint: str | os.PathLike | None = None):
    """SAM when a checkpoint path is given, else the classical masker; logs which one is used."""
    masker = SamObjectMasker(sam_checkpoint) if sam_checkpoint else ClassicalObjectMasker()
    log.info("real-video object masks: %s", masker.name)
    return masker
