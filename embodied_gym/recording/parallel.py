"""Scripted-expert demonstrations rolled out in parallel and written as one dataset, in seed order.

:func:`record_expert_demos` is :func:`~embodied_gym.recording.episodes.record` for the scripted expert
(:func:`embodied_gym.make_expert`), with the episodes rolled out by worker processes: local
processes (``backend="local"``, :class:`~embodied_gym.processes.WorkerPool`: started with ``spawn``, so MuJoCo's
OpenGL state and torch's threads start clean) or Ray tasks (``backend="ray"``,
:class:`~embodied_gym.processes.RayWorkerPool`). Every worker builds its own env and expert from a picklable
spec (the env id and :func:`~embodied_gym.factory.make_env`'s kwargs), with one torch thread.

One :class:`~embodied_gym.data.writer.EpisodeWriter` in the calling process writes the episodes as
they come back, in order: episode ``i`` of the dataset is reset with seed ``seed + i`` exactly as in
the serial path, and an episode rolls out the same frames in any process, so the dataset, its
sidecar rows and a resumed run are those :func:`record` would have written. At most
``2 x workers`` episodes are in flight past the next one to write (that bounds the frames held in
memory); each is saved as soon as every earlier one is, so an interrupted run keeps all the
episodes before the first unfinished one and a rerun with ``resume=True`` continues from there.

The writer runs in the calling process, so it bounds the speed-up: saving an episode (LeRobot's
parquet files, video encoding) costs about as much as rolling out a state-only PickCup episode;
rendered cameras and a pose estimator make the rollout the larger part.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.writer import DEFAULT_CRF, EpisodeWriter
from embodied_gym.envs.experts import FROM_PLAN, make_expert
from embodied_gym.errors import UserInputError
from embodied_gym.factory import make_env
from embodied_gym.processes import BACKENDS, RayWorkerPool, WorkerPool, cpu_count, import_ray, worker_pool
from embodied_gym.recording.episodes import (
    RecordingPlan,
    RecordingSummary,
    RolledEpisode,
    plan_recording,
    record,
    rollout_episode,
    write_episode,
)

__all__ = ["BACKENDS", "record_expert_demos"]

_WORKER: dict = {}  # this worker process's env and expert, built from one spec


def _check_spec(env_kwargs: dict) -> None:
    for key, value in env_kwargs.items():
        try:
            pickle.dumps(value)
        except Exception as e:
            raise UserInputError(
                f"env_kwargs[{key!r}] = {value!r} cannot be sent to a worker process "
                f"({type(e).__name__}: {e}); give files as paths (physics: a JSON path or "
                f"dict, pose_estimator: its folder)"
            ) from None


def _worker_env(spec: tuple[str, dict, Any]):
    """This process's (env, expert) for ``spec``, built on first use (Ray reuses its worker processes
    across calls: rebuilt when the spec differs)."""
    if _WORKER.get("spec") != spec:
        import torch  # the pose estimator's threads

        torch.set_num_threads(1)  # one core per worker; the pose estimator runs here
        if "env" in _WORKER:
            _WORKER.pop("env").close()
        env = make_env(spec[0], **spec[1])
        _WORKER.update(spec=spec, env=env, expert=make_expert(env, integral_below=spec[2]))
    return _WORKER["env"], _WORKER["expert"]


def _rollout(
    spec: tuple[str, dict, Any], seed: int, after_success_steps: int, cameras: tuple[str, ...], estimate_key: str | None
) -> RolledEpisode:
    env, expert = _worker_env(spec)
    return rollout_episode(
        env, expert, seed, after_success_steps=after_success_steps, cameras=cameras, estimate_key=estimate_key
    )


def _close_worker_env() -> None:
    env = _WORKER.pop("env", None)
    _WORKER.clear()
    if env is not None:
        env.close()


def _init_worker() -> None:
    from multiprocessing import util

    util.Finalize(None, _close_worker_env, exitpriority=10)


def _checked_arguments(
    env_kwargs: dict[str, Any] | None, backend: str, workers: int | None, episodes: int
) -> tuple[dict[str, Any], int]:
    """:func:`record_expert_demos`'s arguments checked before anything is written -> (the env kwargs,
    copied and each picklable; the worker count, at most ``episodes``)."""
    if backend not in BACKENDS:
        raise UserInputError(f"unknown recording backend {backend!r}; valid: {', '.join(map(repr, BACKENDS))}")
    if workers is not None and workers < 1:
        raise UserInputError(f"workers must be at least 1 (1 rolls the episodes in this process), got {workers}")
    if episodes < 0:
        raise UserInputError(f"episodes must be >= 0, got {episodes}")
    env_kwargs = dict(env_kwargs or {})
    _check_spec(env_kwargs)
    if backend == "ray":
        import_ray()  # before anything is written
    return env_kwargs, min(workers or cpu_count(), max(episodes, 1))


@dataclass
class _Flight:
    """The episodes :func:`_record_in_workers` has in flight: the first ``submitted`` dataset indices
    were handed to ``pool`` (``pending``: those not yet written); ``results``: the successes written."""

    pool: WorkerPool | RayWorkerPool
    spec: tuple[str, dict, Any]
    job: tuple[int, tuple[str, ...], str | None]  # after_success_steps, cameras, estimate_key
    seed: int  # dataset index i is reset with seed + i
    stop: int  # one past the last dataset index to record
    window: int  # episodes in flight past the next one to write
    submitted: int
    pending: dict[int, Any] = field(default_factory=dict)
    results: list[bool] = field(default_factory=list)

    def refill(self, index: int) -> None:
        """Submit episodes until ``window`` are in flight past ``index`` (the next one to write)."""
        while self.submitted < self.stop and self.submitted - index < self.window:
            self.pending[self.submitted] = self.pool.submit(_rollout, self.spec, self.seed + self.submitted, *self.job)
            self.submitted += 1

    def take(self, index: int) -> RolledEpisode:
        """Episode ``index``, once rolled out."""
        return self.pool.result(self.pending.pop(index))


def _record_in_workers(
    writer: EpisodeWriter,
    plan: RecordingPlan,
    spec: tuple[str, dict, Any],
    episodes: int,
    seed: int,
    after_success_steps: int,
    workers: int,
    backend: str,
    progress: bool,
) -> RecordingSummary:
    """Roll ``episodes`` (> 0) episodes out in ``workers`` processes (or Ray tasks) and write them
    with ``writer`` as they come back, in order."""
    have = writer.episodes
    bar = tqdm(
        total=episodes,
        desc=f"recording ({workers} {'Ray tasks' if backend == 'ray' else 'workers'})",
        unit="ep",
        disable=None if progress else True,
    )
    pool = worker_pool(backend, workers, _init_worker, what="recording worker")
    job = (after_success_steps, plan.cameras, plan.estimate_key)
    flight = _Flight(pool, spec, job, seed, stop=have + episodes, window=2 * workers, submitted=have)
    finished = False
    try:
        for index in range(have, flight.stop):
            flight.refill(index)
            episode = flight.take(index)
            write_episode(writer, episode, plan.row(episode, spec[0]))
            flight.results.append(episode.success)
            bar.update()
            bar.set_postfix(success=f"{sum(flight.results) / len(flight.results):.0%}")
        finished = True
    finally:
        bar.close()
        pool.close(finished)
    return RecordingSummary(str(writer.root), flight.stop, episodes, sum(flight.results) / len(flight.results))


def record_expert_demos(
    env_id: str,
    env_kwargs: dict[str, Any] | None,
    root: str | os.PathLike,
    episodes: int,
    *,
    seed: int = 0,
    workers: int | None = None,
    backend: str = "local",
    resume: bool = False,
    repo_id: str | None = None,
    progress: bool = True,
    vcodec: str = "h264",
    after_success_steps: int = AFTER_SUCCESS_STEPS,
    crf: int | None = DEFAULT_CRF,
    cameras: tuple[str, ...] | None = None,
    expert_integral_below: float | str | None = FROM_PLAN,
) -> RecordingSummary:
    """Record ``episodes`` episodes of the scripted expert in ``make_env(env_id, **env_kwargs)``,
    rolled out by ``workers`` processes (see the module docstring); the dataset is the one
    :func:`~embodied_gym.data.recording.record` writes with the same arguments.

    Args:
        env_id: a registered ``EmbodieDreamer-...`` id (sim or ``-Real-``).
        env_kwargs: :func:`~embodied_gym.factory.make_env`'s kwargs, each picklable: ``physics`` (a
            calibration result JSON path or a dict), ``pose_estimator`` (its folder), ``robot_config``,
            ``obs_type``, ``cameras``, ``image_size``, ``max_episode_steps``, ...
        root: dataset folder (new, empty, or an existing dataset with ``resume``).
        episodes: episodes to add in this run; episode ``i`` of the dataset is reset with ``seed + i``.
        workers: worker processes (default: the CPU count; never more than ``episodes``). With
            ``backend="local"`` and one worker the episodes are rolled out in this process.
        backend: ``"local"`` (processes on this machine) or ``"ray"`` (Ray tasks on a local Ray
            instance started for the call, with ``workers`` CPUs; an already running one is used as is).
        resume, repo_id, progress, vcodec, after_success_steps, crf, cameras: as :func:`record`.
        expert_integral_below: :func:`~embodied_gym.make_expert`'s ``integral_below`` (``"plan"``, the
            default: each task's plan decides; a number or ``None`` overrides it, for ablations).

    Raises:
        ValueError: ``workers`` < 1, an unknown ``backend``, an env kwarg that cannot be pickled, or
            (from the env) what :func:`record` rejects; also when Ray is asked for but not importable
            (the message says what to install).
        FileExistsError: ``root`` holds a dataset and ``resume`` is false.
    """
    env_kwargs, workers = _checked_arguments(env_kwargs, backend, workers, episodes)
    env = make_env(env_id, **env_kwargs)  # checked here, before any worker starts
    try:
        if workers == 1 and backend == "local":
            expert = make_expert(env, integral_below=expert_integral_below)
            return record(
                env,
                expert,
                root,
                episodes,
                seed=seed,
                resume=resume,
                repo_id=repo_id,
                env_id=env_id,
                progress=progress,
                vcodec=vcodec,
                after_success_steps=after_success_steps,
                crf=crf,
                cameras=cameras,
            )
        plan = plan_recording(env, cameras, after_success_steps)
    finally:
        env.close()
    writer = EpisodeWriter(root, plan.features, repo_id=repo_id, vcodec=vcodec, resume=resume, crf=crf)
    if episodes == 0:
        return RecordingSummary(str(writer.root), writer.episodes, 0, 0.0)
    spec = (env_id, env_kwargs, expert_integral_below)
    return _record_in_workers(writer, plan, spec, episodes, seed, after_success_steps, workers, backend, progress)
