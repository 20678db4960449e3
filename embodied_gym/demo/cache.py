"""Stage outputs cached by a hash of their inputs and settings.

Each stage owns ``<run>/<stage>/``. When a stage finishes, ``stage.json`` is written last (atomically)
with the stage's key, wall time and outputs; a rerun whose key matches skips the stage. A stage
killed half-way has no ``stage.json`` (or an old key), so it reruns from scratch — Ctrl-C loses at
most the stage in progress. Keys chain: a stage's key hashes its settings *and* the keys of the
stages it reads, so changing the recording invalidates everything downstream.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_gym.atomic import write_json


def stage_key(settings: Any, inputs: list[str]) -> str:
    blob = json.dumps({"settings": settings, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class StageRecord:
    name: str
    key: str
    folder: Path
    outputs: dict
    wall_time_s: float
    cached: bool


class StageCache:
    def __init__(self, run_dir: str | os.PathLike, rerun_from: str | None = None, order: list[str] | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.order = order or []
        if rerun_from is not None and rerun_from not in self.order:
            raise ValueError(f"unknown stage {rerun_from!r} for --from; stages: {self.order}")
        self.forced = set(self.order[self.order.index(rerun_from) :]) if rerun_from else set()
        self.records: dict[str, StageRecord] = {}

    def key(self, settings: Any, inputs: list[str]) -> str:
        """The key of a stage with these settings that reads the (already run) stages ``inputs``."""
        return stage_key(settings, [self.records[i].key for i in inputs])

    def lookup(self, name: str, key: str) -> StageRecord | None:
        """The finished run of stage ``name`` with ``key`` (registered as cached), or None: none, another
        key, or the stage is forced by ``--from``."""
        marker = self.run_dir / name / "stage.json"
        if name.split("/")[-1] in self.forced or not marker.exists():
            return None
        done = json.loads(marker.read_text())
        if done.get("key") != key:
            return None
        rec = StageRecord(name, key, self.run_dir / name, done["outputs"], done["wall_time_s"], cached=True)
        self.records[name] = rec
        return rec

    def execute(self, name: str, key: str, settings: Any, inputs: list[str], fn: Callable[[Path], dict]) -> StageRecord:
        """Run ``fn(folder) -> outputs`` in a clean folder and write its ``stage.json`` last."""
        folder = self.run_dir / name
        if folder.exists():  # stale or unfinished: start clean so no half-written file survives
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        t = time.perf_counter()
        outputs = fn(folder)
        wall = time.perf_counter() - t
        write_json(
            folder / "stage.json",
            {"key": key, "settings": settings, "inputs": inputs, "outputs": outputs, "wall_time_s": wall},
        )
        rec = StageRecord(name, key, folder, outputs, wall, cached=False)
        self.records[name] = rec
        return rec

    def run(self, name: str, settings: Any, inputs: list[str], fn: Callable[[Path], dict]) -> StageRecord:
        """Run ``fn(folder) -> outputs`` unless a finished run with the same key exists. ``name`` may carry a
        prefix (``task/stage``); ``--from`` matches the part after the last slash."""
        key = self.key(settings, inputs)
        return self.lookup(name, key) or self.execute(name, key, settings, inputs, fn)
