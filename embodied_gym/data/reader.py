"""The one reader of embodied-gym datasets: open and validate a recording, read its episodes, the
frames of a camera, the per-episode sidecar rows, its task and whether it came from a real robot.

A dataset is a local LeRobotDataset v3.0 folder (``meta/info.json``, parquet data, one MP4 stream
per camera) plus embodied-gym's sidecar ``meta/embodied_gym_episodes.jsonl``: one JSON row per
episode with its reset seed, success, start layout and the env id it was recorded on (see
:mod:`embodied_gym.data.recording`). Datasets recorded by LeRobot's own tools, without the
sidecar, load too: their episodes then have no seed and no layout, and the task must be given.

Every file is checked before LeRobot reads it, so a broken or mismatched dataset fails with a
:class:`DatasetError` that names the dataset, the file or episode, and what would be valid,
instead of a library traceback.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from embodied_gym.data.features import (
    ACTION,
    EE_POSE,
    FPS,
    INFO,
    SIDECAR,
    STATE,
    TRAJECTORY,
    VELOCITY,
    camera_of,
    image_key,
)
from embodied_gym.registration import EnvId, parse_env_id

_DECODE_BATCH = 64  # frames per seek-and-decode call


class DatasetError(ValueError):
    """A dataset that cannot be read as asked; the message names the dataset, file or episode."""


@dataclass
class Episode:
    """One recorded episode's arrays (T frames)."""

    index: int
    state: np.ndarray  # (T, 14)
    velocity: np.ndarray  # (T, 14)
    ee_pose: np.ndarray  # (T, 14)
    action: np.ndarray  # (T, 14)
    task: str
    seed: int | None = None
    layout: dict = field(default_factory=dict)


def dataset_repo_id(root: str | os.PathLike) -> str:
    """The LeRobot ``repo_id`` embodied-gym gives a local dataset folder (never fetched from the Hub)."""
    return f"embodied_gym/{Path(root).name}"


def is_dataset(root: str | os.PathLike) -> bool:
    """Whether ``root`` holds a LeRobotDataset (its ``meta/info.json`` exists)."""
    return (Path(root) / INFO).is_file()


def read_info(root: str | os.PathLike) -> dict:
    """``meta/info.json`` of the dataset at ``root``, checked to be a JSON object.

    Raises:
        FileNotFoundError: ``root`` holds no dataset.
        DatasetError: the file is not valid JSON.
    """
    path = Path(root) / INFO
    if not path.is_file():
        raise FileNotFoundError(
            f"{root} is not a LeRobotDataset (no {INFO}); record one with `embodied-gym record --out {root} ...`"
        )
    try:
        info = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"dataset {root}: {path} is not valid JSON ({e}); the dataset is damaged") from None
    if not isinstance(info, dict):
        raise DatasetError(f"dataset {root}: {path} holds {type(info).__name__}, not a JSON object")
    return info


def read_sidecar(root: str | os.PathLike) -> list[dict]:
    """The sidecar rows of the dataset at ``root`` (``[]`` when it has no sidecar).

    Raises:
        DatasetError: a line is not a JSON object with an integer ``episode_index``; the message
            names the file and line.
    """
    path = Path(root) / SIDECAR
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"dataset {root}: {path} line {n} is not valid JSON ({e})") from None
        if not isinstance(row, dict) or not isinstance(row.get("episode_index"), int):
            raise DatasetError(f"dataset {root}: {path} line {n} is not a JSON object with an integer 'episode_index'")
        rows.append(row)
    return rows


def _check_parquet_files(root: Path) -> None:
    """Read every parquet footer (cheap): a truncated or foreign file is named before LeRobot
    turns it into a generic ``DatasetGenerationError``."""
    import pyarrow.parquet as pq

    files = sorted((root / "data").rglob("*.parquet")) + sorted((root / "meta").rglob("*.parquet"))
    for path in files:
        try:
            pq.read_metadata(path)
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError for damaged files
            raise DatasetError(
                f"dataset {root}: {path.relative_to(root)} is damaged or truncated "
                f"({type(e).__name__}: {e}); re-record the dataset, or restore that file"
            ) from None


def _range_text(indices) -> str:
    indices = sorted(indices)
    if not indices:
        return "no episodes"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"episodes {indices[0]}-{indices[-1]}" if len(indices) > 1 else f"episode {indices[0]}"
    return f"episodes {indices}"


class RecordedDataset:
    """A validated dataset folder (see the module docstring); open with :func:`open_dataset`."""

    def __init__(self, root: str | os.PathLike):
        from lerobot.datasets import LeRobotDatasetMetadata

        self.root = Path(root)
        self.info = read_info(self.root)
        _check_parquet_files(self.root)
        try:
            self.meta = LeRobotDatasetMetadata(dataset_repo_id(self.root), root=self.root)
        except Exception as e:
            raise DatasetError(
                f"dataset {self.root}: cannot read its metadata ({type(e).__name__}: {e}); re-record the dataset"
            ) from None

    # ------------------------------------------------------------------ description
    def __repr__(self) -> str:
        return f"RecordedDataset({str(self.root)!r}, episodes={self.total_episodes}, cameras={self.cameras})"

    @property
    def total_episodes(self) -> int:
        return int(self.meta.total_episodes)

    @property
    def fps(self) -> int:
        return int(self.meta.fps)

    @property
    def features(self) -> dict[str, dict]:
        return self.meta.features

    @property
    def video_keys(self) -> list[str]:
        return list(self.meta.video_keys)

    @property
    def cameras(self) -> list[str]:
        """Camera names of the dataset's videos (``cam_high``, ...)."""
        return [camera_of(k) for k in self.meta.video_keys]

    def camera_key(self, camera: str) -> str:
        """The video feature key of ``camera``; raises :class:`DatasetError` listing the cameras."""
        key = image_key(camera)
        if key not in self.meta.video_keys:
            raise DatasetError(
                f"dataset {self.root} has no video for camera {camera!r}; it has "
                f"{self.cameras or 'no camera'}. Record one with `embodied-gym record ... "
                f"--cameras {camera}`"
            )
        return key

    def image_size(self, camera: str) -> tuple[int, int]:
        """``(height, width)`` of ``camera``'s frames."""
        h, w = (int(x) for x in self.features[self.camera_key(camera)]["shape"][:2])
        return h, w

    def require(self, keys, purpose: str) -> None:
        """Raise :class:`DatasetError` naming the missing ones of feature ``keys`` and ``purpose``."""
        missing = [k for k in keys if k not in self.features]
        if missing:
            if not self.rows() and STATE in self.features and ACTION in self.features:
                # recorded with LeRobot's tools (no sidecar, its own feature names): the import maps it
                fix = (
                    f"it looks recorded with LeRobot's tools: import it first with `embodied-gym import "
                    f"--source {self.root} --out DIR --task T` (docs/your_robot.md) and pass DIR"
                )
            else:
                fix = "record it with `embodied-gym record`"
            raise DatasetError(f"dataset {self.root} lacks the feature(s) {missing} that {purpose} needs; {fix}")

    def check_episodes(self, episodes: list[int] | None) -> list[int]:
        """``episodes`` (all by default) checked against the dataset, as a list of ints.

        Raises:
            DatasetError: an index is not an integer or not in the dataset; the message gives the
                valid range.
        """
        n = self.total_episodes
        if episodes is None:
            return list(range(n))
        episodes = list(episodes)
        bad = [e for e in episodes if isinstance(e, bool) or not isinstance(e, (int, np.integer))]
        if bad:
            raise DatasetError(f"episode indices must be integers; got {bad}")
        out = [e for e in episodes if not 0 <= e < n]
        if out:
            raise DatasetError(
                f"dataset {self.root} has {_range_text(range(n))}; episode(s) {[int(e) for e in out]} out of range"
            )
        return [int(e) for e in episodes]

    # ------------------------------------------------------------------ sidecar
    @cached_property
    def _rows(self) -> dict[int, dict]:
        return {r["episode_index"]: r for r in read_sidecar(self.root)}

    def rows(self) -> list[dict]:
        """The sidecar rows, in episode order (``[]`` for a dataset without a sidecar)."""
        return [self._rows[k] for k in sorted(self._rows)]

    def row(self, episode: int) -> dict:
        """Episode ``episode``'s sidecar row (``{}`` when it has none)."""
        return dict(self._rows.get(int(episode), {}))

    @cached_property
    def env_id(self) -> EnvId | None:
        """The env the dataset was recorded on, from the sidecar (``None`` when it names none)."""
        for row in self.rows():
            value = row.get("env_id")
            if value:
                try:
                    return parse_env_id(value)
                except ValueError as e:
                    raise DatasetError(
                        f"dataset {self.root}: {SIDECAR} row of episode {row['episode_index']} "
                        f"has env_id {value!r}: {e}"
                    ) from None
        return None

    @property
    def task(self) -> str | None:
        """The task name (``PickCup``, ...) the dataset was recorded for, or ``None`` if unknown."""
        return self.env_id.task if self.env_id else None

    def require_task(self) -> str:
        """:attr:`task`, or a :class:`DatasetError` saying to pass the task."""
        if self.task is None:
            raise DatasetError(
                f"cannot tell the task of dataset {self.root} (no env_id in {SIDECAR}); pass the task (--task)"
            )
        return self.task

    @property
    def is_real(self) -> bool:
        """Whether the dataset was recorded on a ``-Real-`` env (a real or stand-in robot)."""
        return bool(self.env_id and self.env_id.real)

    # ------------------------------------------------------------------ frames
    def lerobot(self, episodes: list[int] | None = None, **kwargs):
        """The dataset as a ``LeRobotDataset`` (PyAV decoding) of ``episodes`` (checked; all by
        default); ``kwargs`` go to its constructor (e.g. ``delta_timestamps``)."""
        from lerobot.datasets import LeRobotDataset

        if episodes is not None:
            episodes = self.check_episodes(episodes)
        kwargs.setdefault("video_backend", "pyav")
        try:
            return LeRobotDataset(dataset_repo_id(self.root), root=self.root, episodes=episodes, **kwargs)
        except Exception as e:
            cause = e.__cause__ or e
            raise DatasetError(
                f"dataset {self.root}: LeRobot cannot read its data ({type(cause).__name__}: "
                f"{cause}); re-record the dataset"
            ) from e

    def table(self, episodes: list[int] | None = None):
        """The frame table (a ``datasets.Dataset``: one row per frame, every non-video feature plus
        ``episode_index``, ``timestamp``, ...) of ``episodes`` (all by default)."""
        return self.lerobot(episodes).hf_dataset

    def task_names(self) -> dict[int, str]:
        """``task_index`` -> task description."""
        tasks = self.meta.tasks
        if tasks is None:
            return {}
        return {int(i): str(t) for t, i in zip(tasks.index, tasks["task_index"])}

    def episodes(self, episodes: list[int] | None = None, *, min_length: int = 2) -> list[Episode]:
        """The trajectory arrays of ``episodes`` (all by default), without decoding any video.

        Raises:
            DatasetError: a trajectory feature is missing, an episode is out of range, shorter than
                ``min_length`` frames, or holds NaN/inf.
        """
        self.require(TRAJECTORY, "replay and calibration")
        wanted = self.check_episodes(episodes)
        if not wanted:  # e.g. a dataset whose first recording was interrupted
            return []
        hf = self.table(wanted if episodes is not None else None)
        ep_index = np.asarray(hf["episode_index"])
        cols = {k: np.stack(hf[k]).astype(np.float64) for k in TRAJECTORY}
        task_index = np.asarray(hf["task_index"])
        names = self.task_names()
        out = []
        for e in wanted:
            sel = ep_index == e
            n = int(sel.sum())
            if n < min_length:
                raise DatasetError(
                    f"episode {e} of {self.root} has {n} frame{'s' if n != 1 else ''}; replay needs "
                    f"at least {min_length}"
                )
            arrays = {k: v[sel] for k, v in cols.items()}
            for k, v in arrays.items():
                if not np.isfinite(v).all():
                    raise DatasetError(f"episode {e} of {self.root} has NaN/inf in '{k}'")
            row = self.row(e)
            out.append(
                Episode(
                    index=e,
                    state=arrays[STATE],
                    velocity=arrays[VELOCITY],
                    ee_pose=arrays[EE_POSE],
                    action=arrays[ACTION],
                    task=names.get(int(task_index[sel][0]), ""),
                    seed=row.get("seed"),
                    layout=row.get("layout", {}),
                )
            )
        return out

    def episode_length(self, episode: int) -> int:
        return int(self.meta.episodes[self.check_episodes([episode])[0]]["length"])

    def frames(self, camera: str, episode: int) -> np.ndarray:
        """Episode ``episode``'s frames of ``camera`` as ``(T, H, W, 3)`` uint8 (PyAV, LeRobot's decoder
        and timestamp tolerance; frame ``t`` is the one at ``t / fps`` into the episode).

        Raises:
            DatasetError: no such camera or episode, or the video does not hold the episode's frames
                (the message names the file).
        """
        from lerobot.datasets.video_utils import decode_video_frames

        key = self.camera_key(camera)
        e = self.check_episodes([episode])[0]
        meta = self.meta.episodes[e]
        path = self.root / self.meta.get_video_file_path(e, key)
        if not path.is_file():
            raise DatasetError(f"dataset {self.root}: episode {e}'s video {path.relative_to(self.root)} is missing")
        start, n = float(meta[f"videos/{key}/from_timestamp"]), int(meta["length"])
        ts = [start + t / self.fps for t in range(n)]
        chunks = []
        try:
            for i in range(0, n, _DECODE_BATCH):
                chunk = decode_video_frames(path, ts[i : i + _DECODE_BATCH], 1e-4, "pyav", return_uint8=True)
                chunks.append(chunk.permute(0, 2, 3, 1).numpy())
        except Exception as e2:
            raise DatasetError(
                f"dataset {self.root}: cannot decode episode {e} of camera {camera!r} from "
                f"{path.relative_to(self.root)} ({type(e2).__name__}: {str(e2).splitlines()[0]})"
            ) from None
        return np.ascontiguousarray(np.concatenate(chunks)) if chunks else np.zeros((0, 0, 0, 3), np.uint8)

    def frames_of(self, camera: str, episodes: list[int] | None = None) -> dict[int, np.ndarray]:
        """:meth:`frames` of each of ``episodes`` (all by default), keyed by episode index."""
        return {e: self.frames(camera, e) for e in self.check_episodes(episodes)}


def open_dataset(root: str | os.PathLike) -> RecordedDataset:
    """Open and validate the dataset at ``root``.

    Raises:
        FileNotFoundError: ``root`` holds no dataset.
        DatasetError: a file of it is damaged (named in the message).
    """
    return RecordedDataset(root)


def load_episodes(root: str | os.PathLike, episodes: list[int] | None = None) -> list[Episode]:
    """Read episodes (all by default) without decoding any video; see :meth:`RecordedDataset.episodes`."""
    return open_dataset(root).episodes(episodes)


__all__ = [
    "FPS",
    "DatasetError",
    "Episode",
    "RecordedDataset",
    "dataset_repo_id",
    "is_dataset",
    "load_episodes",
    "open_dataset",
    "read_info",
    "read_sidecar",
]
