"""Bring your own demonstrations: a LeRobotDataset recorded by LeRobot's own tools (``lerobot-record``
with a leader arm, a gamepad, a phone) on any ALOHA-like robot, turned into an embodied-gym recording
that every stage reads (calibrate, perception offset, VisAligner, generate, train).

A robot recorded through LeRobot stores its motors' readings under its own names
(``observation.state`` with names such as ``left_waist.pos`` ... ``right_gripper.vel``, ``action`` with
``<motor>.pos``), its cameras under their own names, at its own frame rate, and nothing embodied-gym
adds (the joint velocity as its own feature, the tool poses, the sidecar of seeds and layouts). The
import maps each of our 14 joints to a motor (``joint_map``), reads velocities where the robot gave them
(else differentiates the positions), computes both tool poses by forward kinematics of the measured
joints (:func:`embodied_gym.recording.episodes.tool_poses`, as recordings of robots that cannot report them have), resamples
to the 50 Hz control rate, maps the camera (``camera_map``) and, with a pose estimator, adds its
estimate of every frame as ``observation.environment_state``, as a recording on the robot would.

What a LeRobot dataset cannot tell is a setting with an error naming it when missing: the task, the
joint and camera maps. Nothing privileged is invented: the episodes have no seed and no start layout,
and every episode is taken to be a successful demonstration (drop failed ones with ``episodes``).
Joint positions must be in radians (grippers: the finger's travel in metres), as the sim's.

Resumable: episodes are written one by one, and a rerun with the same settings adds the missing ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from embodied_gym.configs import require, setting
from embodied_gym.data import features as F
from embodied_gym.data.reader import DatasetError, RecordedDataset, is_dataset, open_dataset
from embodied_gym.data.writer import DEFAULT_CRF, EpisodeWriter
from embodied_gym.recording.episodes import tool_poses
from embodied_gym.registration import env_id
from embodied_gym.sim import robot as layout

IMPORTED = "lerobot_import"  # the sidecar key that names an episode's source


@dataclass
class ImportConfig:
    """What to import and how to read it; also ``embodied-gym import``'s command line and its ``--config`` YAML."""

    source: str | None = setting(
        None, required=True, metavar="DIR", help="a LeRobotDataset folder recorded with LeRobot's tools"
    )
    out: str | None = setting(None, required=True, metavar="DIR", help="the embodied-gym dataset to write")
    task: str | None = setting(
        None, required=True, help="the task the demonstrations perform (PickCup, PenInCup, RemoteInBox, CupOnMat)"
    )
    joint_map: dict[str, str] = setting(
        default_factory=dict,
        metavar="JOINT=MOTOR",
        help="our joint (left_waist ... right_gripper) -> the robot's motor name in the dataset, for the "
        "joints named differently (default: the same name; '<motor>.pos' and '<motor>.vel' are looked up)",
    )
    camera: str = setting("cam_high", help="our camera the policies and the pose estimator read")
    camera_map: dict[str, str] = setting(
        default_factory=dict,
        metavar="CAMERA=DATASET_CAMERA",
        help="our camera -> the dataset's camera name (observation.images.<name>), when they differ",
    )
    image_size: tuple[int, int] | None = setting(
        None,
        metavar=("H", "W"),
        help="frame size stored and estimated on (default: the pose estimator's frame size, else the dataset's)",
    )
    store_video: bool = setting(True, help="store the camera's video (VisAligner needs it; ACT on poses does not)")
    pose_estimator: str | None = setting(
        None,
        metavar="DIR",
        help="a pose estimator folder: its estimate of each frame is stored as the environment state",
    )
    pose_update: str = setting(
        "every_frame",
        choices=("every_frame", "at_reset"),
        help="with --pose-estimator: estimate every frame, or hold the first frame's",
    )
    episodes: list[int] | None = setting(None, help="the source's episodes to import (default: all)")
    crf: int = setting(DEFAULT_CRF, help="video quality (lower keeps more; 0 lossless)")


@dataclass
class ImportSummary:
    root: str
    episodes: int  # in the output dataset
    imported: int  # by this call
    source_fps: int
    velocity: str  # "measured" or "differentiated"
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------- reading


def _names(src: RecordedDataset, key: str) -> list[str]:
    feat = src.features.get(key)
    if feat is None:
        raise DatasetError(
            f"dataset {src.root} has no '{key}' feature; a LeRobot recording of a robot stores its "
            f"joint readings there (features: {sorted(src.features)})"
        )
    names = feat.get("names")
    if isinstance(names, dict):  # older LeRobot: {"motors": [...]}
        names = next(iter(names.values()), None)
    shape = int(np.prod(feat["shape"]))
    if not isinstance(names, list) or len(names) != shape:
        raise DatasetError(
            f"dataset {src.root}: '{key}' has no per-entry names (names: {names!r}), so its joints cannot be told apart"
        )
    return [str(n) for n in names]


def _columns(src: RecordedDataset, key: str, motors: dict[str, str], suffix: str, required: bool):
    """Indices of ``<motor><suffix>`` (or the bare motor name for ``.pos``) in ``key`` for our 14 joints."""
    names = _names(src, key)
    index, missing = [], []
    for joint in layout.JOINT_NAMES:
        motor = motors[joint]
        for candidate in (f"{motor}{suffix}", *((motor,) if suffix == ".pos" else ())):
            if candidate in names:
                index.append(names.index(candidate))
                break
        else:
            missing.append(f"{joint} -> {motor}{suffix}")
    if missing:
        if not required:
            return None
        raise DatasetError(
            f"dataset {src.root}: '{key}' has no entry for {missing}. Map our joints to the robot's motor "
            f"names with joint_map (--joint-map JOINT=MOTOR ...); the dataset's names: {names}"
        )
    return np.array(index)


def _source_camera(src: RecordedDataset, camera: str, camera_map: dict[str, str]) -> str:
    wanted = camera_map.get(camera, camera)
    if wanted not in src.cameras:
        hint = f" (e.g. --camera-map {camera}={src.cameras[0]})" if src.cameras else ""
        raise DatasetError(
            f"dataset {src.root} has no camera {wanted!r}; it has {src.cameras or 'no camera'}. Name the "
            f"one to use as our {camera!r} with camera_map{hint}"
        )
    return wanted


def _resample(values: np.ndarray, fps: int) -> np.ndarray:
    """``values`` (T, D) sampled at ``fps`` -> linearly interpolated at the 50 Hz control rate."""
    if fps == F.FPS:
        return values
    t_src = np.arange(len(values)) / fps
    t_out = np.arange(int(np.floor(t_src[-1] * F.FPS)) + 1) / F.FPS
    return np.stack([np.interp(t_out, t_src, values[:, d]) for d in range(values.shape[1])], axis=1)


def _frame_indices(n_src: int, fps: int, n_out: int) -> np.ndarray:
    """The source frame shown at each 50 Hz step: the latest one taken by then."""
    return np.minimum(np.floor(np.arange(n_out) * fps / F.FPS + 1e-9).astype(int), n_src - 1)


def _check_units(root, q: np.ndarray, episode: int) -> None:
    """Positions far outside the joint limits are in other units (degrees, LeRobot's -100..100 range)."""
    margin = np.where(np.isin(np.arange(14), layout.GRIPPER_INDICES), 0.02, 0.5)
    bad = (q < layout.JOINT_LOW - margin) | (q > layout.JOINT_HIGH + margin)
    if bad.any():
        j = int(np.argwhere(bad)[0][1])
        raise DatasetError(
            f"dataset {root}: episode {episode}'s {layout.JOINT_NAMES[j]} reads {q[bad.any(axis=1)][0, j]:.3g}, "
            f"outside its range [{layout.JOINT_LOW[j]:.3g}, {layout.JOINT_HIGH[j]:.3g}]; the import needs radians "
            f"(grippers: finger travel in m) and the sim's zero pose: convert the dataset's units first"
        )


@dataclass(frozen=True)
class _SourceLayout:
    """Where our joints and camera are in a source dataset (:func:`check_import`)."""

    dataset: RecordedDataset
    positions: np.ndarray
    velocities: np.ndarray | None
    actions: np.ndarray
    camera: str | None


def _check_aspect(src: RecordedDataset, camera: str, frame_size) -> None:
    sh, sw = src.image_size(camera)
    if abs(sh / sw - frame_size[0] / frame_size[1]) > 0.01:
        raise DatasetError(
            f"dataset {src.root}: camera {camera!r} records {sh}x{sw} frames, whose aspect ratio differs from the "
            f"pose estimator's {frame_size[0]}x{frame_size[1]} frames; record at that aspect ratio (with "
            f"lerobot-record on the stand-in: --robot.image_size=[{frame_size[0]},{frame_size[1]}])"
        )


def check_import(
    source: str | os.PathLike,
    joint_map: dict[str, str],
    camera: str,
    camera_map: dict[str, str],
    need_frames: bool,
    frame_size: tuple[int, int] | None = None,
) -> _SourceLayout:
    """Open ``source`` and find our 14 joints (``joint_map``) and ``camera`` (``camera_map``) in it, reading
    no frames: what :func:`import_lerobot_dataset` checks first, and the demo before its first stage.
    ``frame_size``: a pose estimator's frame size, whose aspect ratio the camera's frames must have.

    Raises:
        FileNotFoundError: ``source`` holds no dataset.
        DatasetError / ValueError: a joint or the camera is missing (the message names the setting and
            lists the dataset's names), or ``joint_map`` names a joint we do not have.
    """
    unknown = sorted(set(joint_map) - set(layout.JOINT_NAMES))
    if unknown:
        raise ValueError(f"joint_map names unknown joints {unknown}; ours: {list(layout.JOINT_NAMES)}")
    src = open_dataset(source)
    motors = {j: joint_map.get(j, j) for j in layout.JOINT_NAMES}
    found = _SourceLayout(
        dataset=src,
        positions=_columns(src, F.STATE, motors, ".pos", required=True),
        velocities=_columns(src, F.STATE, motors, ".vel", required=False),
        actions=_columns(src, F.ACTION, motors, ".pos", required=True),
        camera=_source_camera(src, camera, camera_map) if need_frames else None,
    )
    if found.camera and frame_size:
        _check_aspect(src, found.camera, frame_size)
    return found


# ---------------------------------------------------------------------------------- writing


def import_lerobot_dataset(cfg: ImportConfig, progress: bool = True) -> ImportSummary:
    """Write ``cfg.out``: the episodes of the LeRobot recording ``cfg.source`` in embodied-gym's format
    (see the module docstring). A rerun adds the episodes not imported yet.

    Raises:
        DatasetError: the source lacks what the import needs (the message names the setting to pass:
            the joint map, the camera map) or reads in other units; ``out`` holds another import.
        ValueError: an unknown task or joint in the settings.
    """
    import cv2

    from embodied_gym.sim.kinematics import ArmKinematics
    from embodied_gym.sim.physics import resolve_physics
    from embodied_gym.sim.scene import compile_scene
    from embodied_gym.sim.tasks import TASKS, make_task

    source, out, task = require(cfg.source, "source"), require(cfg.out, "out"), require(cfg.task, "task")
    if task not in TASKS:
        raise ValueError(f"task {task!r} is not one of {sorted(TASKS)}")
    if Path(source).resolve() == Path(out).resolve():
        raise ValueError(f"source and out are both {source}; write the import to another folder")
    need_frames = cfg.store_video or cfg.pose_estimator is not None
    found = check_import(source, cfg.joint_map, cfg.camera, cfg.camera_map, need_frames)
    src, pos_cols, vel_cols, act_cols, src_cam = (
        found.dataset,
        found.positions,
        found.velocities,
        found.actions,
        found.camera,
    )
    estimator, estimate_names, estimator_about = None, None, None
    if cfg.pose_estimator is not None:
        from embodied_gym.perception.modeling import PoseEstimator
        from embodied_gym.perception.pose_entry import check_pose_update, estimator_source

        check_pose_update(cfg.pose_update)
        estimator = PoseEstimator.from_pretrained(cfg.pose_estimator).eval()
    if cfg.image_size:
        image_size = tuple(cfg.image_size)
    elif estimator is not None:  # the frames the estimator was trained on
        image_size = tuple(estimator.config.frame_size)
    else:
        image_size = src.image_size(src_cam) if src_cam else (0, 0)
    if src_cam and estimator is not None:
        _check_aspect(src, src_cam, image_size)
    if estimator is not None:
        if estimator.config.task != task:
            raise ValueError(f"the pose estimator {cfg.pose_estimator} is for {estimator.config.task}, not {task}")
        if estimator.config.camera != cfg.camera:
            raise ValueError(
                f"the pose estimator reads {estimator.config.camera!r}; set camera: {estimator.config.camera}"
            )
        estimator.config.crop_box((*image_size, 3))  # raises with the image_size that fits
        estimate_names = list(estimator.config.output_names)
        estimator_about = estimator_source(str(cfg.pose_estimator))
        if cfg.pose_update != "every_frame":
            estimator_about["update"] = cfg.pose_update
        low, high = estimator.config.output_bounds()

    wanted = src.check_episodes(cfg.episodes)
    cameras = (cfg.camera,) if cfg.store_video else ()
    feats = F.dataset_features(cameras, image_size, estimate_names, outcomes=False)
    writer = EpisodeWriter(out, feats, robot_type=src.meta.robot_type, crf=cfg.crf, resume=is_dataset(out))
    done = {r.get(IMPORTED, {}).get("episode") for r in writer.rows}
    if any(r.get(IMPORTED, {}).get("dataset") != str(Path(source).resolve()) for r in writer.rows):
        raise DatasetError(f"{out} holds episodes imported from another dataset; choose another output folder")
    todo = [e for e in wanted if e not in done]

    task_model = make_task(task)
    model, idx, _ = compile_scene(task_model, resolve_physics(None))
    kinematics = ArmKinematics(model, idx)
    ep_index: np.ndarray = np.zeros(0)
    state: np.ndarray = np.zeros((0, 0))
    action: np.ndarray = np.zeros((0, 0))
    if todo:
        table = src.table(todo)
        ep_index = np.asarray(table["episode_index"])
        state = np.stack(table[F.STATE]).astype(np.float64)
        action = np.stack(table[F.ACTION]).astype(np.float64)
    fps = src.fps
    id_ = env_id(task, real=True)
    imported = 0
    with writer:
        for e in tqdm(todo, desc=f"import {Path(source).name}", unit="episode", disable=not progress):
            sel = ep_index == e
            if sel.sum() < 2:
                raise DatasetError(
                    f"episode {e} of {source} has {int(sel.sum())} frame(s); the import needs at least 2"
                )
            q_src = state[sel][:, pos_cols]
            if not np.isfinite(q_src).all() or not np.isfinite(action[sel][:, act_cols]).all():
                raise DatasetError(f"episode {e} of {source} has NaN/inf joint readings or actions")
            _check_units(source, q_src, e)
            q = _resample(q_src, fps)
            a = _resample(action[sel][:, act_cols], fps)
            if vel_cols is not None:
                v = _resample(state[sel][:, vel_cols], fps)
            else:
                v = np.gradient(q, 1.0 / F.FPS, axis=0)
            ee = np.stack([tool_poses(kinematics, qt) for qt in q])
            frames = np.zeros((len(q), 0, 0, 3), np.uint8)
            if src_cam is not None:
                raw = src.frames(src_cam, e)
                frames = raw[_frame_indices(len(raw), fps, len(q))]
                if frames.shape[1:3] != image_size:
                    frames = np.stack([cv2.resize(f, image_size[::-1], interpolation=cv2.INTER_AREA) for f in frames])
            estimates = None
            if estimator is not None:
                est = estimator.estimate(frames[:1] if cfg.pose_update == "at_reset" else frames)
                estimates = np.clip(np.broadcast_to(est, (len(q), est.shape[-1])), low, high).astype(np.float32)
            for t in range(len(q)):
                frame = {
                    F.STATE: q[t].astype(np.float32),
                    F.VELOCITY: v[t].astype(np.float32),
                    F.EE_POSE: ee[t].astype(np.float32),
                    F.ACTION: a[t].astype(np.float32),
                    F.TASK: task_model.description,
                }
                if cfg.store_video:
                    frame[F.image_key(cfg.camera)] = frames[t]
                if estimates is not None:
                    frame[F.ENV_STATE] = estimates[t]
                writer.add_frame(frame)
            row = {
                "seed": None,
                "success": True,  # a demonstration the operator kept (LeRobot stores no outcome)
                "length": len(q),
                "env_id": id_,
                "control_mode": "joint_pos",
                "layout": {},
                IMPORTED: {"dataset": str(Path(source).resolve()), "episode": int(e), "fps": fps},
            }
            if estimator_about is not None:
                row["pose_estimator"] = estimator_about
            writer.save_episode(row)
            imported += 1
    notes = []
    if fps != F.FPS:
        notes.append(f"resampled from {fps} fps to the {F.FPS} Hz control rate")
    return ImportSummary(
        root=str(out),
        episodes=writer.episodes,
        imported=imported,
        source_fps=fps,
        velocity="measured" if vel_cols is not None else "differentiated",
        notes=notes,
    )


__all__ = ["ImportConfig", "ImportSummary", "check_import", "import_lerobot_dataset"]
