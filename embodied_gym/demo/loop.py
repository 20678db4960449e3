"""The Real2Sim2Real loop, top to bottom: every stage of :data:`~embodied_gym.demo.stages.STAGES`
for every task, each through the stage cache, then the report.

A stage's key hashes its settings (:meth:`~embodied_gym.demo.stages.Stage.cache_settings`) and the
keys of the stages it reads, so a rerun skips what is finished and a changed setting reruns its
stage and everything downstream. A stage with a ``background`` flag set runs in a second process
(its output in ``<run>/<stage>/stage.log``) while the stages after it run; the first stage that
reads it waits for it. The summary (``summary.json``) and the HTML report are rebuilt at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodied_gym.atomic import write_json
from embodied_gym.demo.cache import BackgroundStage, StageCache, StageRecord
from embodied_gym.demo.configuration import DemoConfig
from embodied_gym.demo.report import write_report
from embodied_gym.demo.stages import STAGE_NAMES, STAGES, LoopSettings, Stage, StageContext, downstream, say


def run_demo(
    cfg: DemoConfig, run_dir: str | os.PathLike, rerun_from: str | None = None, reuse: tuple[str, ...] = ()
) -> dict:
    """Run (or resume) every stage for every task, then write ``report.html`` and ``summary.json``.

    ``rerun_from``: a stage name; it and every stage that reads it rerun even when cached. ``reuse``:
    other run folders whose finished stages with the same key are used in place (not rerun, not copied)."""
    import torch

    if rerun_from is not None and rerun_from not in STAGE_NAMES:
        raise ValueError(f"unknown stage {rerun_from!r} for --from; stages: {list(STAGE_NAMES)}")
    for warning in cfg.check():  # before any stage: a missing weights file, cuda without a GPU
        say(f"warning: {warning}")
    run_dir = Path(run_dir)
    cache = StageCache(run_dir, forced=downstream(rerun_from) if rerun_from else (), reuse=reuse)
    threads = torch.get_num_threads()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    loop = _Loop(cfg, cache)
    try:
        per_task = {task: loop.run_task(task) for task in cfg.tasks}
    finally:
        loop.stop_background()  # a failed stage (or Ctrl-C) leaves no training process behind
        torch.set_num_threads(threads)
    summary = {"config": cfg.to_dict(), "tasks": per_task, "wall_time_s": time.time() - loop.t_start}
    write_json(run_dir / "summary.json", summary)
    write_report(summary, run_dir / "report.html")
    return summary


class _Loop:
    """Walks the stage table for one task after another; holds the background processes it started."""

    def __init__(self, cfg: DemoConfig, cache: StageCache):
        self.cfg, self.cache = cfg, cache
        self.t_start = time.time()
        self.jobs: list[BackgroundStage] = []
        self.done, self.total = 0, len(STAGES) * len(cfg.tasks)

    def run_task(self, task: str) -> dict:
        loop = LoopSettings.of(self.cfg, task)
        records: dict[str, StageRecord] = {}
        pending: dict[str, BackgroundStage] = {}
        for stage in STAGES:
            for name in stage.inputs:
                if name in pending:
                    records[name] = self._wait(task, name, pending.pop(name))
            job_or_record = self._run_stage(stage, loop, records)
            if isinstance(job_or_record, BackgroundStage):
                pending[stage.name] = job_or_record
            else:
                records[stage.name] = job_or_record
        for name, job in pending.items():  # read by no later stage: wait before the summary
            records[name] = self._wait(task, name, job)
        background = {s.name for s in STAGES if s.background and getattr(self.cfg, s.background)}
        evaluation = dict(records["evaluate"].outputs)
        paired = evaluation.pop("_paired", [])
        return {
            "stages": {
                name: {
                    "folder": str(r.folder),
                    "wall_time_s": r.wall_time_s,
                    "cached": r.cached,
                    "background": name in background and not r.cached,
                    "outputs": r.outputs,
                }
                for name, r in sorted(records.items(), key=lambda kv: STAGE_NAMES.index(kv[0]))
            },
            "evaluation": evaluation,
            "paired": paired,
        }

    def _run_stage(self, stage: Stage, loop: LoopSettings, records: dict[str, StageRecord]):
        """The stage's record (cached or run now), or the :class:`BackgroundStage` running it."""
        cfg, task = self.cfg, loop.task
        self.done += 1
        say(f"stage {self.done}/{self.total} {task}/{stage.name} (elapsed {self._minutes():.1f} min)")
        cache_name = stage.name if len(cfg.tasks) == 1 else f"{task}/{stage.name}"
        settings = stage.cache_settings(cfg, task)
        inputs = [records[i].name for i in stage.inputs]
        key = self.cache.key(settings, inputs)
        rec = self.cache.lookup(cache_name, key)
        if rec is not None:
            say(f"  {task}/{stage.name}: cached")
            return rec
        skipped = stage.skip(cfg)
        if skipped:
            return self.cache.execute(cache_name, key, settings, inputs, lambda folder: {"skipped": skipped})
        context = {i: records[i].outputs for i in stage.inputs}
        run = _StageCall(stage.run, stage.section(cfg), loop, context)
        if stage.resumable and self.cache.unfinished(cache_name, key):
            say(f"  {task}/{stage.name}: resuming the run a stop left unfinished")
        if stage.background and getattr(cfg, stage.background):
            job = BackgroundStage(
                self.cache, cache_name, key, settings, inputs, run, cfg.torch_threads, stage.resumable
            )
            self.jobs.append(job)
            say(f"  {task}/{stage.name}: started in a background process (output: {job.log})")
            return job
        rec = self.cache.execute(cache_name, key, settings, inputs, run, stage.resumable)
        say(f"  {task}/{stage.name}: done in {rec.wall_time_s:.0f} s")
        return rec

    def _wait(self, task: str, name: str, job: BackgroundStage) -> StageRecord:
        say(f"  {task}/{name}: waiting for its background process (elapsed {self._minutes():.1f} min)")
        rec = job.result()
        say(f"  {task}/{name}: done in {rec.wall_time_s:.0f} s (in the background)")
        return rec

    def _minutes(self) -> float:
        return (time.time() - self.t_start) / 60

    def stop_background(self) -> None:
        for job in self.jobs:
            job.stop()


class _StageCall:
    """``run(section, ctx)`` of a stage as ``fn(folder) -> outputs``, the cache's calling shape. A class
    (not a closure) so a background stage's spawned process can unpickle it; the run functions are
    module-level functions of :mod:`embodied_gym.demo.stages`."""

    def __init__(self, run: Callable[[Any, StageContext], dict], section, loop: LoopSettings, inputs: dict[str, dict]):
        self.run, self.section, self.loop, self.inputs = run, section, loop, inputs

    def __call__(self, folder: Path) -> dict:
        return self.run(self.section, StageContext(self.loop, Path(folder), self.inputs))
