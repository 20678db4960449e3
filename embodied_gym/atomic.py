"""Files written whole or not at all: write a temporary file beside the target, then rename it.

A crash (or Ctrl-C) mid-write leaves the old file, never a truncated one; ``os.replace`` is atomic on
POSIX and Windows when both paths are on the same filesystem, which a sibling temporary file is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text(path: str | os.PathLike, text: str) -> None:
    tmp = Path(f"{os.fspath(path)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: str | os.PathLike, obj, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, default=str))


def write_npz(path: str | os.PathLike, compressed: bool = True, **arrays) -> None:
    """A ``.npz`` of plain numpy arrays (read back with ``allow_pickle=False``), written whole or not at all.

    The temporary file ends in ``.npz.tmp`` and is flushed to disk before the rename, so a kill (even
    SIGKILL) or a power cut leaves either the old file or the complete new one.
    """
    import numpy as np

    for name, value in arrays.items():
        if np.asarray(value).dtype == object:
            raise TypeError(f"write_npz({os.fspath(path)!r}): {name!r} is an object array, which only loads "
                            f"with pickle; pass numeric or string arrays")
    tmp = Path(f"{os.fspath(path)}.tmp")
    with open(tmp, "wb") as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
