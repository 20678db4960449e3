"""The one writer of embodied-gym datasets: create a LeRobotDataset v3.0, or resume one, and add
episodes with their sidecar rows (used by ``record`` and by VisAligner's offline renderer).

Each episode is saved and the dataset finalised before the next begins, so a crash loses at most
the episode in progress; its sidecar row (``meta/embodied_gym_episodes.jsonl``) is written
atomically right after the episode, so the sidecar never names an episode the data lacks. On
resume, rows past the dataset's last episode (none, unless a file was edited) are dropped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from embodied_gym import atomic
from embodied_gym.data.features import AUTO_FEATURES, FPS, SIDECAR
from embodied_gym.data.reader import DatasetError, dataset_repo_id, is_dataset, read_info, read_sidecar

DEFAULT_CRF = 10
"""Default video quality (constant rate factor; lower keeps more, 0 is lossless). LeRobot's default
(30) is tuned for 480x640 frames; at the small sizes trained on CPUs a task object is a few pixels
wide and its edges are what a policy needs: crf 30 blurs a small cup's contrast against the
table more than crf 10 does, and crf 0 (lossless, 4:4:4) keeps it all but the RGB/YUV rounding. Files at crf 10 are larger than at crf 30 but small beside the frames decoded for
training; pass 0 for exact frames, or a higher value for large images."""


def video_encoder(vcodec: str = "h264", crf: int | None = DEFAULT_CRF):
    """LeRobot's RGB encoder config for ``vcodec`` at quality ``crf`` (None: the codec's default);
    ``crf=0`` is lossless, so it also keeps full chroma (4:4:4: libx264 is lossless only there).
    libx264's statistics (a dozen log lines per saved episode) are switched off.

    Raises:
        ValueError: a negative ``crf``.
    """
    from lerobot.configs.video import RGBEncoderConfig

    from embodied_gym.video import quiet_libav

    if crf is not None and crf < 0:
        raise ValueError(f"crf must be >= 0 (0 lossless, {DEFAULT_CRF} the default, LeRobot's 30), got {crf}")
    quiet_libav()  # and libavcodec's banner line, printed once per episode after LeRobot restores FFmpeg's logger
    extra = {"x264-params": "log=-1"} if vcodec in ("h264", "libx264") else {}
    pix_fmt = "yuv444p" if crf == 0 and vcodec in ("h264", "libx264") else "yuv420p"
    return RGBEncoderConfig(vcodec=vcodec, crf=crf, pix_fmt=pix_fmt, extra_options=extra)


def _schema(features: dict) -> dict:
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in features.items() if k not in AUTO_FEATURES}


class EpisodeWriter:
    """Adds episodes to the dataset at ``root``, creating it on the first frame.

    Args:
        root: dataset folder; new, empty, or (with ``resume``) an existing dataset.
        features: LeRobot feature dict of the frames (see :func:`~embodied_gym.data.features.dataset_features`).
        fps: frame rate.
        robot_type: LeRobot's ``robot_type`` of a new dataset.
        repo_id: LeRobot ``repo_id`` (default ``embodied_gym/<folder name>``).
        vcodec: video codec (``h264``; ``libsvtav1`` as on the Hub).
        crf: video quality (:data:`DEFAULT_CRF`; 0 lossless; see :func:`video_encoder`).
        resume: add to an existing dataset at ``root``.

    Raises:
        FileExistsError: ``root`` holds a dataset and ``resume`` is false, or holds other files.
        DatasetError: resuming a dataset recorded at another frame rate or with other features (the
            message lists the differences).

    Use ``add_frame`` for each frame, then ``save_episode(row)``; on an error mid-episode call
    ``discard_episode()`` (or use the writer as a context manager, which does).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        features: dict,
        *,
        fps: int = FPS,
        robot_type: str | None = "aloha",
        repo_id: str | None = None,
        vcodec: str = "h264",
        resume: bool = False,
        crf: int | None = DEFAULT_CRF,
    ):
        self.root = Path(root)
        self.features, self.fps, self.robot_type = features, fps, robot_type
        self.repo_id = repo_id or dataset_repo_id(self.root)
        self.encoder = video_encoder(vcodec, crf)
        if is_dataset(self.root):
            if not resume:
                raise FileExistsError(
                    f"{self.root} already holds a dataset; pass resume=True (--resume) to add "
                    f"episodes, or choose another output folder"
                )
            info = read_info(self.root)
            self._check_compatible(info)
            self.episodes = int(info.get("total_episodes", 0))
            # an episode may have been saved without its sidecar row, never the reverse
            self.rows = [r for r in read_sidecar(self.root) if r["episode_index"] < self.episodes]
        else:
            if self.root.exists():
                if not self.root.is_dir() or any(self.root.iterdir()):
                    raise FileExistsError(
                        f"{self.root} exists and is not a LeRobotDataset; choose an empty or new folder"
                    )
                self.root.rmdir()  # LeRobot creates the folder itself
            self.episodes, self.rows = 0, []
        self._ds: Any = None  # the LeRobot writer of the episode in progress (a LeRobotDataset)

    def _check_compatible(self, info: dict) -> None:
        have, want = _schema(info.get("features", {})), _schema(self.features)
        diffs = []
        if info.get("fps") != self.fps:
            diffs.append(f"fps {info.get('fps')} (now {self.fps})")
        for k in sorted(set(have) | set(want)):
            if have.get(k) != want.get(k):
                diffs.append(f"{k}: {have.get(k, 'absent')} (now {want.get(k, 'absent')})")
        if diffs:
            raise DatasetError(
                f"{self.root} was recorded with other settings: {'; '.join(diffs)}; resume with the "
                f"same cameras and image size, or choose another output folder"
            )

    def _open(self):
        from lerobot.datasets import LeRobotDataset

        if is_dataset(self.root):
            return LeRobotDataset.resume(self.repo_id, root=self.root, video_backend="pyav", rgb_encoder=self.encoder)
        return LeRobotDataset.create(
            self.repo_id,
            fps=self.fps,
            features=self.features,
            root=self.root,
            robot_type=self.robot_type,
            use_videos=True,
            video_backend="pyav",
            rgb_encoder=self.encoder,
        )

    def add_frame(self, frame: dict) -> None:
        """Add one frame (every feature, plus ``task``) to the episode in progress."""
        if self._ds is None:
            self._ds = self._open()
        self._ds.add_frame(frame)

    def save_episode(self, row: dict | None = None) -> int:
        """Save the episode in progress and append its sidecar ``row`` (its ``episode_index`` is set
        here); returns the episode's index."""
        if self._ds is None or not self._ds.has_pending_frames():
            raise ValueError(f"{self.root}: save_episode() called with no frames added")
        index = self.episodes
        self._ds.save_episode()
        self._close()
        self.episodes += 1
        self.rows.append({"episode_index": index, **{k: v for k, v in (row or {}).items() if k != "episode_index"}})
        atomic.write_text(self.root / SIDECAR, "".join(json.dumps(r) + "\n" for r in self.rows))
        return index

    def discard_episode(self) -> None:
        """Drop the frames of the episode in progress; the saved episodes stay valid."""
        if self._ds is not None:
            if self._ds.has_pending_frames():
                self._ds.clear_episode_buffer()
            self._close()

    def _close(self) -> None:
        ds, self._ds = self._ds, None
        ds.finalize()  # parquet footers written: the dataset is readable as it stands

    close = discard_episode

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.discard_episode()
