"""Files and folders written whole or not at all: write beside the target, then rename it into place.

A crash (or Ctrl-C) mid-write leaves the old file, never a truncated one; ``os.replace`` is atomic on
POSIX and Windows when both paths are on the same filesystem, which a sibling temporary path is.
Every write of a result, cache, checkpoint or figure in the package goes through this module.

- :func:`write_text`, :func:`write_bytes`, :func:`write_json`: whole contents at once.
- :func:`atomic_path`: for writers that take a path (``np.savez``, ``savefig``, ``save_file``):
  they write to the yielded temporary path, which replaces ``path`` when the block succeeds.
- :func:`atomic_dir`: the same for a folder (a checkpoint, a ``save_pretrained`` model).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def _sibling(path: Path, tag: str) -> Path:
    # Same folder (same filesystem, so the rename is atomic); same suffix, because some writers pick
    # the format from it (savefig) or append one when it is missing (np.savez); per process, so
    # two writers never share a temporary.
    return path.with_name(f".{path.stem}.{tag}-{os.getpid()}{path.suffix}")


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a temporary this module writes (left behind only by a killed process)."""
    name = Path(path).name
    return name.startswith(".") and (".tmp-" in name or ".old-" in name)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces the folder ``path``
    (the old one, if any, is moved aside first and deleted after), on error it is removed."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _sibling(path, "old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def save_figure(fig, path: str | os.PathLike, dpi: int = 100) -> None:
    """Save a matplotlib figure whole or not at all (its format from ``path``'s suffix), then close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    plt.close(fig)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, default=str))


def write_npz(path: str | os.PathLike, compressed: bool = True, **arrays) -> None:
    """A ``.npz`` of plain numpy arrays (read back with ``allow_pickle=False``), written whole or not at all.

    The temporary file is flushed to disk before the rename, so a kill (even SIGKILL) or a power cut
    leaves either the old file or the complete new one.
    """
    import numpy as np

    for name, value in arrays.items():
        if np.asarray(value).dtype == object:
            raise TypeError(
                f"write_npz({os.fspath(path)!r}): {name!r} is an object array, which only loads "
                f"with pickle; pass numeric or string arrays"
            )
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


__all__ = [
    "atomic_dir",
    "atomic_path",
    "is_temporary",
    "save_figure",
    "write_bytes",
    "write_json",
    "write_npz",
    "write_text",
]
