"""What a pose estimator sees and predicts: :class:`PoseEstimatorConfig` (the ``config.json`` of a model).

A pose estimator reads one camera frame, crops the table region out of it, resizes the crop to a
small input and predicts, for each task object, its position (and its yaw where the object's
orientation is visible and varies). The crop is chosen so that the task objects stay at least about
8 px across at the input size: at the default ``cam_high`` 240x320 frame, the crop rows 30-80 % and
columns 20-80 % (120x192 px) resized to 100x160 keep the 5 cm PickCup cup about 10-12 px wide
(13-14 px in the 240x320 frame), while a 64x80 frame makes it about 3 px.

The estimate is the observation a policy gets instead of the privileged object poses, as in the
paper's Real2Sim2Real loop (arXiv 2507.05198, section 3): the perception model is trained in the
simulator, where the poses are known, and runs on the real (stand-in) robot's camera.

Output layout (:attr:`PoseEstimatorConfig.output_names`), per object in ``objects`` order:
``<obj>.x``, ``<obj>.y`` (m, world frame), ``<obj>.z`` (m above the table, when ``predict_z``), and
for objects with a yaw output ``<obj>.cos_yaw``, ``<obj>.sin_yaw``: cosine and sine of ``k * yaw``
where ``k`` is the object's visual symmetry order (2 for the pen, the remote and the box, which look
the same turned by 180 degrees; 4 for the square mat). Rotationally symmetric objects (the cups) have
no yaw output.

The network itself predicts normalised targets: ``(x - centre) / scale`` with the centre and
half-width of the task's start range (the scale floored at :data:`MIN_XY_SCALE`), ``z / Z_SCALE``,
and the two yaw components unchanged; :meth:`PoseEstimatorConfig.normalise` and
:meth:`~PoseEstimatorConfig.denormalise` convert.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from embodied_gym.rendering import crop_box
from embodied_gym.sim.scene import CAMERAS
from embodied_gym.sim.tasks import make_task, quat_yaw

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MIN_XY_SCALE = 0.05  # m: a start range narrower than ±5 cm still normalises by ±5 cm
Z_SCALE = 0.1  # m
#: Visual symmetry order of each object's yaw (0: rotationally symmetric, no yaw output).
YAW_SYMMETRY = {"cup": 0, "pencup": 0, "pen": 2, "remote": 2, "box": 2, "mat": 4}
#: Bounds of the estimate's observation Box, by component (physical units).
OUTPUT_BOUNDS = {"x": (-1.0, 1.0), "y": (-0.5, 1.5), "z": (-0.5, 1.0), "cos_yaw": (-1.0, 1.0), "sin_yaw": (-1.0, 1.0)}


@dataclass
class PoseEstimatorConfig:
    """Input and output of a :class:`~embodied_gym.perception.modeling.PoseEstimator`.

    Args:
        task: the task name (``PickCup`` ...); its objects and start ranges define the outputs.
        camera: the camera whose frame is read (an observation key of the env).
        frame_size: ``(H, W)`` of the camera frames the model was trained on (the env's
            ``image_size``). Frames of another size with the same aspect ratio are accepted as long
            as the crop is not smaller than ``input_size`` (no upsampling).
        crop: ``(top, left, bottom, right)`` of the table region, as fractions of the frame.
        input_size: ``(H, W)`` the crop is resized to (the network's input).
        objects: the objects estimated (default: all of the task's, in the task's order).
        yaw_symmetry: per object, the symmetry order ``k`` of its yaw output (0 = none); default
            :data:`YAW_SYMMETRY`, or 1 for an unknown object whose start range has yaw.
        predict_z: also predict the height (a lifted cup).
        channels: conv channels of the four conv layers.
        keypoints: number of spatial-softmax keypoints.
        hidden: width of the MLP head.
        centre, scale: per output, the normalisation (filled from the task's start ranges).
        correction: per output, a constant added to every estimate (physical units; empty: none): a
            camera's bias fitted on the robot's own demonstrations
            (:func:`~embodied_gym.perception.robot_offset.fit_estimator_offset`).
    """

    task: str = "PickCup"
    camera: str = "cam_high"
    frame_size: tuple[int, int] = (240, 320)
    crop: tuple[float, float, float, float] = (0.30, 0.20, 0.80, 0.80)
    input_size: tuple[int, int] = (100, 160)
    objects: tuple[str, ...] = ()
    yaw_symmetry: dict[str, int] = field(default_factory=dict)
    predict_z: bool = True
    channels: tuple[int, int, int, int] = (16, 32, 48, 64)
    keypoints: int = 32
    hidden: int = 128
    centre: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    correction: tuple[float, ...] = ()

    def __post_init__(self):
        task = make_task(self.task)  # validates the name
        if self.camera not in CAMERAS:
            raise ValueError(f"PoseEstimatorConfig.camera {self.camera!r} is not a camera; valid: {list(CAMERAS)}")
        self.frame_size = _pair("frame_size", self.frame_size)
        self.input_size = _pair("input_size", self.input_size)
        self.crop = tuple(float(v) for v in self.crop)
        top, left, bottom, right = self.crop if len(self.crop) == 4 else (None,) * 4
        if top is None or not (0 <= top < bottom <= 1 and 0 <= left < right <= 1):
            raise ValueError(
                f"PoseEstimatorConfig.crop must be (top, left, bottom, right) fractions with "
                f"0 <= top < bottom <= 1 and 0 <= left < right <= 1, got {self.crop}"
            )
        self.objects = tuple(self.objects) or task.object_names
        unknown = [o for o in self.objects if o not in task.ranges]
        if unknown:
            raise ValueError(
                f"PoseEstimatorConfig.objects {unknown} are not objects of {self.task}; "
                f"valid: {list(task.object_names)}"
            )
        sym = {o: YAW_SYMMETRY.get(o, 1 if task.ranges[o].yaw != (0.0, 0.0) else 0) for o in self.objects}
        sym.update({k: int(v) for k, v in dict(self.yaw_symmetry).items()})
        self.yaw_symmetry = {o: sym[o] for o in self.objects}
        self.channels = tuple(int(c) for c in self.channels)
        if len(self.channels) != 4:
            raise ValueError(f"PoseEstimatorConfig.channels needs 4 values, got {self.channels}")
        if not self.centre or not self.scale:
            centre, scale = [], []
            for o in self.objects:
                r = task.ranges[o]
                for lo_hi in (r.x, r.y):
                    centre.append((lo_hi[0] + lo_hi[1]) / 2)
                    scale.append(max((lo_hi[1] - lo_hi[0]) / 2, MIN_XY_SCALE))
                if self.predict_z:
                    centre.append(0.0), scale.append(Z_SCALE)
                if self.yaw_symmetry[o]:
                    centre += [0.0, 0.0]
                    scale += [1.0, 1.0]
            self.centre, self.scale = tuple(centre), tuple(scale)
        self.centre = tuple(float(v) for v in self.centre)
        self.scale = tuple(float(v) for v in self.scale)
        if len(self.centre) != self.output_dim or len(self.scale) != self.output_dim:
            raise ValueError(
                f"PoseEstimatorConfig.centre/scale need {self.output_dim} values "
                f"({self.output_names}), got {len(self.centre)}/{len(self.scale)}"
            )
        self.correction = tuple(float(v) for v in self.correction)
        if self.correction and len(self.correction) != self.output_dim:
            raise ValueError(
                f"PoseEstimatorConfig.correction needs {self.output_dim} values ({self.output_names}) "
                f"or none, got {len(self.correction)}"
            )

    # ------------------------------------------------------------------ outputs
    @property
    def output_names(self) -> list[str]:
        """Names of the estimate's entries, in order (see the module docstring)."""
        names = []
        for o in self.objects:
            names += [f"{o}.x", f"{o}.y"] + ([f"{o}.z"] if self.predict_z else [])
            if self.yaw_symmetry[o]:
                names += [f"{o}.cos_yaw", f"{o}.sin_yaw"]
        return names

    @property
    def output_dim(self) -> int:
        return len(self.output_names)

    def output_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the estimate's observation Box, float32."""
        b = [OUTPUT_BOUNDS[n.split(".", 1)[1]] for n in self.output_names]
        return np.array([v[0] for v in b], np.float32), np.array([v[1] for v in b], np.float32)

    def targets(self, poses: np.ndarray) -> np.ndarray:
        """Physical targets (N, output_dim) from object poses (N, len(objects), 7) ``[x, y, z, qw, qx, qy, qz]``."""
        poses = np.asarray(poses, dtype=np.float64)
        cols = []
        for i, o in enumerate(self.objects):
            p = poses[:, i]
            cols += [p[:, 0], p[:, 1]] + ([p[:, 2]] if self.predict_z else [])
            k = self.yaw_symmetry[o]
            if k:
                yaw = np.array([quat_yaw(q) for q in p[:, 3:7]])
                cols += [np.cos(k * yaw), np.sin(k * yaw)]
        return np.stack(cols, axis=1)

    def normalise(self, values: np.ndarray) -> np.ndarray:
        return (np.asarray(values) - np.asarray(self.centre)) / np.asarray(self.scale)

    def denormalise(self, values: np.ndarray) -> np.ndarray:
        """Physical estimate from network outputs; each (cos, sin) pair is put back on the unit circle."""
        out = np.asarray(values, dtype=np.float64) * np.asarray(self.scale) + np.asarray(self.centre)
        if self.correction:  # the camera's fitted bias (zero on the yaw components)
            out = out + np.asarray(self.correction)
        names = self.output_names
        for j, n in enumerate(names):
            if n.endswith(".cos_yaw"):
                norm = np.maximum(np.hypot(out[..., j], out[..., j + 1]), 1e-6)
                out[..., j] /= norm
                out[..., j + 1] /= norm
        return out

    # ------------------------------------------------------------------ the input
    def crop_box(self, frame_shape) -> tuple[int, int, int, int]:
        """Pixel ``(top, left, bottom, right)`` of the crop in a frame of ``frame_shape`` (H, W, ...).

        Raises:
            ValueError: the frame's aspect ratio differs from ``frame_size``'s, or its crop would be
                smaller than ``input_size`` (the objects would be too small to see).
        """
        h, w = int(frame_shape[0]), int(frame_shape[1])
        fh, fw = self.frame_size
        if abs(h / w - fh / fw) > 0.02 * fh / fw:
            raise ValueError(
                f"camera frame {h}x{w} has another aspect ratio than the estimator's frames "
                f"{fh}x{fw}: make the env with image_size=({fh}, {fw})"
            )
        box = crop_box((h, w), self.crop)
        ih, iw = self.input_size
        if box[2] - box[0] < ih * 0.98 or box[3] - box[1] < iw * 0.98:
            raise ValueError(
                f"camera frame {h}x{w} is too small for this estimator: its crop would be "
                f"{box[2] - box[0]}x{box[3] - box[1]} px, less than the input {ih}x{iw} (the task "
                f"objects would be under 8 px across); make the env with image_size=({fh}, {fw})"
            )
        return box

    def preprocess(self, frame: np.ndarray) -> np.ndarray:
        """The network input ``input_size + (3,)`` uint8 from a camera frame (H, W, 3) uint8."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"expected an (H, W, 3) camera frame, got shape {frame.shape}")
        t, l, b, r = self.crop_box(frame.shape)
        return self._resize(frame[t:b, l:r])

    def preprocess_crop(self, crop: np.ndarray) -> np.ndarray:
        """The network input from an image of the crop region alone (a generator that renders only the
        table region, at any size with the crop's aspect ratio and at least ``input_size``)."""
        crop = np.asarray(crop)
        if crop.ndim != 3 or crop.shape[2] != 3:
            raise ValueError(f"expected an (H, W, 3) crop image, got shape {crop.shape}")
        fh, fw = self.frame_size
        t, l, b, r = self.crop
        want = (b - t) * fh / ((r - l) * fw)
        h, w = crop.shape[:2]
        ih, iw = self.input_size
        if abs(h / w - want) > 0.03 * want or h < ih * 0.98 or w < iw * 0.98:
            raise ValueError(
                f"crop image {h}x{w} does not fit the estimator: it needs the crop's aspect ratio "
                f"{want:.3f} (height/width) and at least {ih}x{iw} px"
            )
        return self._resize(crop)

    def _resize(self, crop: np.ndarray) -> np.ndarray:
        ih, iw = self.input_size
        if crop.shape[:2] == (ih, iw):
            return np.ascontiguousarray(crop, dtype=np.uint8)
        return cv2.resize(np.ascontiguousarray(crop, dtype=np.uint8), (iw, ih), interpolation=cv2.INTER_AREA)

    def input_fields(self) -> dict:
        """The fields that decide what a training frame looks like (data and model must agree)."""
        return {
            "task": self.task,
            "camera": self.camera,
            "frame_size": list(self.frame_size),
            "crop": list(self.crop),
            "input_size": list(self.input_size),
            "objects": list(self.objects),
        }

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict, where: str = "config") -> PoseEstimatorConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; valid: {sorted(known)}")
        kw: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> PoseEstimatorConfig:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the pose estimator config {path}: {e}") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path} must hold a JSON object of PoseEstimatorConfig fields")
        return cls.from_dict(d, where=str(path))


def yaw_error_deg(est_cos, est_sin, true_cos, true_sin, k: int) -> np.ndarray:
    """Yaw error (deg) from (cos, sin) of ``k * yaw``: the angle between them, divided by ``k``."""
    diff = np.arctan2(est_sin * true_cos - est_cos * true_sin, est_cos * true_cos + est_sin * true_sin)
    return np.degrees(np.abs(diff)) / k


def _pair(name: str, v) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in v)
    except (TypeError, ValueError):
        raise ValueError(f"PoseEstimatorConfig.{name} must be (height, width), got {v!r}") from None
    if h < 8 or w < 8:
        raise ValueError(f"PoseEstimatorConfig.{name} {(h, w)} is too small (each side >= 8)")
    return h, w


__all__ = ["CONFIG_NAME", "WEIGHTS_NAME", "YAW_SYMMETRY", "PoseEstimatorConfig", "yaw_error_deg"]
