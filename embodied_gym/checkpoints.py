"""Training checkpoints: one layout, one atomic save, one meaning of the counter, for every trainer.

    <out>/checkpoints/<counter:06d>/   one checkpoint, a folder the trainer fills
    <out>/checkpoints/last.json        {"path": "000800", "unit": "step", "step": 800}

``unit`` says what the counter counts: ``"step"`` (optimisation steps: ACT, VisAligner) or
``"iteration"`` (TPO's rollout-and-update iterations). A checkpoint appears whole or not at all
(:func:`embodied_gym.atomic.atomic_dir`) and ``last.json`` is rewritten after it, so a crash at any
moment leaves the previous checkpoint usable; older checkpoints beyond ``keep`` are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from embodied_gym.atomic import atomic_dir, write_json

LAST = "last.json"
Unit = Literal["step", "iteration"]


@dataclass(frozen=True)
class Checkpoint:
    """A saved checkpoint: its folder and its counter (``unit``: step or iteration)."""

    path: Path
    counter: int
    unit: Unit


class CheckpointStore:
    """The ``checkpoints/`` folder of one training output folder ``out``.

    Args:
        out: the trainer's output folder.
        unit: what the counter counts (``"step"`` or ``"iteration"``).
        keep: how many checkpoints to keep (the newest).
    """

    def __init__(self, out: str | os.PathLike, unit: Unit, keep: int = 2):
        if unit not in ("step", "iteration"):
            raise ValueError(f"unit must be 'step' or 'iteration', got {unit!r}")
        self.root = Path(out) / "checkpoints"
        self.unit = unit
        self.keep = max(1, keep)

    def save(self, counter: int, write: Callable[[Path], None]) -> Checkpoint:
        """Fill ``checkpoints/<counter>`` with ``write(folder)`` atomically, then point ``last.json`` at it."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"{counter:06d}"
        with atomic_dir(final) as tmp:
            write(tmp)
        write_json(self.root / LAST, {"path": final.name, "unit": self.unit, self.unit: counter})
        for old in sorted(d for d in self.root.iterdir() if d.is_dir() and d.name.isdigit())[: -self.keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
        return Checkpoint(final, counter, self.unit)

    def latest(self) -> Checkpoint | None:
        """The checkpoint ``last.json`` names, or None when there is none.

        Reads the files written before the counter had a unit (``{"step": n, "path": ...}``, which
        TPO used for its iteration): the counter is then taken in this store's unit.

        Raises:
            ValueError: ``last.json`` is unreadable or names a folder that does not exist.
        """
        last = self.root / LAST
        if not last.exists():
            return None
        try:
            info = json.loads(last.read_text())
            counter = int(info.get(info.get("unit", self.unit), info.get("step")))
            path = self.root / info["path"]
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{last} is not a checkpoint index ({e}); delete it to start over") from None
        if not path.is_dir():
            raise ValueError(f"{last} names {path.name}, which does not exist; delete {last} to start over")
        unit = info.get("unit", self.unit)
        if unit != self.unit:
            raise ValueError(
                f"{self.root} holds checkpoints counted in {unit}s, not {self.unit}s: it belongs to "
                f"another trainer; choose another output folder"
            )
        return Checkpoint(path, counter, self.unit)


def latest(out: str | os.PathLike) -> Checkpoint | None:
    """The latest checkpoint of any trainer's output folder ``out`` (whatever its unit), or None."""
    last = Path(out) / "checkpoints" / LAST
    if not last.exists():
        return None
    try:
        unit = json.loads(last.read_text()).get("unit", "step")
    except (ValueError, AttributeError):
        unit = "step"  # CheckpointStore.latest names the problem
    return CheckpointStore(out, unit if unit in ("step", "iteration") else "step").latest()


__all__ = ["LAST", "Checkpoint", "CheckpointStore", "latest"]
