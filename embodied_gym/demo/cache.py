"""Stage outputs cached by a hash of their inputs and settings.

Each stage owns ``<run>/<stage>/``. When a stage starts, ``stage.started.json`` records its key; when it
finishes, ``stage.json`` is written last (atomically) with the key, wall time and outputs, and a rerun whose
key matches skips the stage. A stage killed half-way has no ``stage.json`` (or an old key): it reruns from a
clean folder, unless it is *resumable* (its work checkpoints: training, finished evaluations) and its
unfinished folder started with the same key, in which case it continues in that folder. So Ctrl-C loses
at most the stage in progress, and of a resumable stage only the work since its last checkpoint. Keys
chain: a stage's key hashes its settings *and* the keys of the stages it reads, so changing the
recording invalidates everything downstream.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_gym.atomic import write_json

STARTED = "stage.started.json"
"""Written when a stage starts (its key), removed once its ``stage.json`` is written."""


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
    """The finished stages of one run folder. ``forced``: stage names (the part after the last slash)
    that rerun even when a finished run with their key exists (the demo's ``--from``). ``reuse``: other
    run folders whose finished stages count as this run's when their key matches (read in place, never
    written): runs that differ only downstream, e.g. another training seed, share what is upstream."""

    def __init__(self, run_dir: str | os.PathLike, forced: Iterable[str] = (), reuse: Iterable[str | os.PathLike] = ()):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.forced = set(forced)
        self.reuse = [Path(r) for r in reuse]
        for other in self.reuse:
            if not other.is_dir():
                raise FileNotFoundError(f"--reuse {other}: no such run folder")
        self.records: dict[str, StageRecord] = {}

    def key(self, settings: Any, inputs: list[str]) -> str:
        """The key of a stage with these settings that reads the (already run) stages ``inputs``."""
        return stage_key(settings, [self.records[i].key for i in inputs])

    def lookup(self, name: str, key: str) -> StageRecord | None:
        """The finished run of stage ``name`` with ``key`` (registered as cached), in this run folder or
        else in a ``reuse`` one, or None: none, another key, or the stage is forced by ``--from``."""
        if name.split("/")[-1] in self.forced:
            return None
        for run_dir in (self.run_dir, *self.reuse):
            marker = run_dir / name / "stage.json"
            if not marker.exists():
                continue
            done = json.loads(marker.read_text())
            if done.get("key") == key:
                rec = StageRecord(name, key, run_dir / name, done["outputs"], done["wall_time_s"], cached=True)
                self.records[name] = rec
                return rec
        return None

    def unfinished(self, name: str, key: str) -> bool:
        """Whether ``<run>/<name>`` holds a run of the stage with ``key`` that started and did not finish."""
        started = self.run_dir / name / STARTED
        try:
            return json.loads(started.read_text()).get("key") == key
        except (OSError, ValueError):
            return False

    def execute(
        self,
        name: str,
        key: str,
        settings: Any,
        inputs: list[str],
        fn: Callable[[Path], dict],
        resumable: bool = False,
    ) -> StageRecord:
        """Run ``fn(folder) -> outputs`` and write its ``stage.json`` last. The folder starts clean, so no
        half-written file survives, unless ``resumable`` and it holds an unfinished run with the same key:
        then ``fn`` continues in it (``fn`` must resume from what it finds there)."""
        folder = self.run_dir / name
        if folder.exists() and not (resumable and self.unfinished(name, key)):  # stale, or not resumable
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / STARTED, {"key": key})
        t = time.perf_counter()
        outputs = fn(folder)
        wall = time.perf_counter() - t
        write_json(
            folder / "stage.json",
            {"key": key, "settings": settings, "inputs": inputs, "outputs": outputs, "wall_time_s": wall},
        )
        (folder / STARTED).unlink(missing_ok=True)
        rec = StageRecord(name, key, folder, outputs, wall, cached=False)
        self.records[name] = rec
        return rec

    def run(
        self, name: str, settings: Any, inputs: list[str], fn: Callable[[Path], dict], resumable: bool = False
    ) -> StageRecord:
        """Run ``fn(folder) -> outputs`` unless a finished run with the same key exists. ``name`` may carry a
        prefix (``task/stage``); ``--from`` matches the part after the last slash."""
        key = self.key(settings, inputs)
        return self.lookup(name, key) or self.execute(name, key, settings, inputs, fn, resumable)


def _logged(fn, log_name: str, folder: Path) -> dict:
    """``fn(folder)`` with everything it prints (progress bars included) going to ``folder/log_name``."""
    with open(folder / log_name, "w") as log, redirect_stdout(log), redirect_stderr(log):
        try:
            return fn(folder)
        except BaseException:
            traceback.print_exc()
            raise


def _execute_stage(
    run_dir: str,
    name: str,
    key: str,
    settings: dict,
    inputs: list[str],
    fn,
    torch_threads: int | None,
    resumable: bool,
) -> None:
    """A background stage's process: runs the stage through the cache, so its ``stage.json`` is its result."""
    import torch

    from embodied_gym.processes import exit_with_parent

    exit_with_parent()
    if torch_threads:
        torch.set_num_threads(torch_threads)
    StageCache(run_dir).execute(name, key, settings, inputs, fn, resumable)


class BackgroundStage:
    """One cached stage run in a separate (spawned) process while the caller runs other stages.

    The child writes the stage's folder and ``stage.json`` as :meth:`StageCache.execute` does, its output
    in ``<folder>/stage.log``; :meth:`result` waits for it and registers the record. A failure raises
    with the log's path; the child is terminated if the caller stops first (:meth:`stop`)."""

    LOG = "stage.log"

    def __init__(
        self,
        cache: StageCache,
        name: str,
        key: str,
        settings: dict,
        inputs: list[str],
        fn,
        torch_threads: int | None = None,
        resumable: bool = False,
    ):
        self.cache, self.name, self.key = cache, name, key
        self.log = cache.run_dir / name / self.LOG
        ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch / EGL state
        self.process = ctx.Process(
            target=_execute_stage,
            daemon=True,
            args=(
                str(cache.run_dir),
                name,
                key,
                settings,
                inputs,
                functools.partial(_logged, fn, self.LOG),
                torch_threads,
                resumable,
            ),
        )
        self.process.start()

    def result(self) -> StageRecord:
        self.process.join()
        rec = self.cache.lookup(self.name, self.key)
        if self.process.exitcode != 0 or rec is None:
            raise RuntimeError(
                f"stage {self.name} failed in its background process (exit code "
                f"{self.process.exitcode}); its output and traceback: {self.log}"
            )
        rec.cached = False
        return rec

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
