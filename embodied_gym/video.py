"""Write RGB frames to an MP4 file (H.264 through PyAV, which bundles FFmpeg), and keep FFmpeg's
informational lines off the terminal."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from embodied_gym.atomic import atomic_path


def quiet_libav() -> None:
    """Stop FFmpeg from printing its informational lines (libx264's ``264 - core ...`` banner, once
    per encoded file) to the terminal; its warnings and errors still print.

    PyAV discards FFmpeg's logs by default, but LeRobot hands logging back to FFmpeg's own printer
    after every video it encodes or probes, and that printer's threshold is INFO. Raising the
    threshold to WARNING leaves everything else as it was.
    """
    import av

    av.logging.set_libav_level(av.logging.WARNING)


def write_mp4(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: int = 50) -> None:
    """Write ``frames`` (each ``(H, W, 3)`` uint8) atomically to ``path``."""
    import av

    if not len(frames):
        raise ValueError("write_mp4 needs at least one frame")
    h, w = frames[0].shape[:2]
    quiet_libav()
    with atomic_path(path) as tmp, av.open(str(tmp), mode="w") as container:
        # x264's own statistics would print a dozen lines per file once LeRobot has restored FFmpeg's logger
        stream = container.add_stream("libx264", rate=fps, options={"x264-params": "log=-1"})
        stream.width, stream.height = w - w % 2, h - h % 2  # yuv420p needs even sizes
        stream.pix_fmt = "yuv420p"
        for f in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f[: stream.height, : stream.width]), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
