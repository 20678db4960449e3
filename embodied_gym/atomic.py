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
