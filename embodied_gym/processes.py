"""Worker processes, started one way everywhere.

Recording (:mod:`embodied_gym.recording.parallel`), evaluation (:func:`embodied_gym.policies.evaluate.evaluate_policy`),
TPO's rollouts (:mod:`embodied_gym.policies.tpo`), the pose estimator's training frames
(:func:`embodied_gym.perception.data.generate_frames`) and the demo's background stage run work in other
processes. :class:`WorkerPool` starts local processes with ``spawn`` (MuJoCo's OpenGL context and torch's
threads do not survive ``fork``; ``MUJOCO_GL`` is inherited); each ignores Ctrl-C (it reaches the whole
process group: the parent stops its workers) and exits once its parent is gone (a parent killed by SIGTERM
or SIGKILL runs no clean-up). :class:`RayWorkerPool` runs the same jobs as Ray tasks (``backend="ray"``:
``pip install 'embodied-gym[ray]'``), on a local Ray instance it starts, or on the one the caller
started with ``ray.init`` (a cluster's, say); :func:`worker_pool` picks one by name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["BACKENDS", "RayWorkerPool", "WorkerPool", "cpu_count", "exit_with_parent", "import_ray", "worker_pool"]

BACKENDS = ("local", "ray")
"""Where :func:`worker_pool` runs the jobs: local processes, or Ray tasks."""


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def exit_with_parent(poll_s: float = 1.0) -> None:
    """Make this (child) process exit once its parent is gone: an orphaned worker would otherwise finish
    its job and wait for work forever (holding the parent's output pipes open). A daemon thread polls
    the parent's pid."""
    import threading
    import time

    def watch(parent: int) -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, args=(os.getppid(),), daemon=True, name="exit-with-parent").start()


def _init_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    if initializer is not None:
        initializer(*initargs)


class WorkerPool:
    """``workers`` spawned processes (a ``ProcessPoolExecutor``), each set up by ``initializer(*initargs)``.

    :meth:`result` turns a dead worker into an error that says what to check; :meth:`close` waits for
    the workers when the work finished, and otherwise drops the queued jobs and stops the running ones.
    As a context manager it closes with ``finished`` = no exception."""

    def __init__(
        self, workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = (), what: str = "worker"
    ):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self.what = what
        self.pool = ProcessPoolExecutor(
            workers, mp_context=mp.get_context("spawn"), initializer=_init_worker, initargs=(initializer, initargs)
        )

    def submit(self, fn: Callable, *args: Any):
        return self.pool.submit(fn, *args)

    def result(self, future) -> Any:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return future.result()
        except BrokenProcessPool as e:
            raise RuntimeError(
                f"a {self.what} process died ({e}). Workers are started with 'spawn' and import the "
                f"main module: a script that starts them must guard its entry point with "
                f"if __name__ == '__main__':"
            ) from e

    def close(self, finished: bool) -> None:
        if finished:
            self.pool.shutdown(wait=True)
            return
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.terminate()
        for p in processes:
            p.join(timeout=10)
        # A worker stopped while it wrote a result leaves half a message in the result pipe, and the
        # executor's manager thread would wait for the rest forever (and the interpreter for it at exit).
        # With the workers gone, closing our copy of the pipe's write end turns that wait into EOF, which
        # the manager thread handles as a broken pool.
        writer = getattr(getattr(self.pool, "_result_queue", None), "_writer", None)
        if writer is not None:
            writer.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(finished=exc_type is None)


def import_ray():
    """Ray, or an error that says how to install it (``pip install 'embodied-gym[ray]'``)."""
    from embodied_gym.errors import UserInputError

    try:
        import ray
    except ImportError as e:
        raise UserInputError(
            f"backend='ray' (--backend ray) needs Ray, which cannot be imported here "
            f"({type(e).__name__}: {e}); install it with pip install 'embodied-gym[ray]', or "
            f"use backend='local' (--backend local)"
        ) from None
    return ray


# This Ray worker process's set-up: the (initializer, initargs) it last ran. Ray reuses its worker
# processes across tasks, so a process runs an initializer once, not once per job.
_RAY_SETUP: dict = {}


def _ray_job(initializer: Callable[..., None] | None, initargs: tuple, fn: Callable, *args: Any) -> Any:
    if initializer is not None and _RAY_SETUP.get("key") != (initializer, initargs):
        initializer(*initargs)
        _RAY_SETUP["key"] = (initializer, initargs)
    return fn(*args)


class RayWorkerPool:
    """:class:`WorkerPool`'s interface on Ray tasks of one CPU each: each worker process runs
    ``initializer(*initargs)`` before its first job (again if another pool's differ). Starts a local Ray
    instance of ``workers`` CPUs (no dashboard, nothing beyond localhost) unless the caller started one,
    and shuts down only the one it started; the caller's signal handlers (Ray installs its own) come
    back at :meth:`close`."""

    def __init__(
        self, workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = (), what: str = "worker"
    ):
        import signal

        ray = self.ray = import_ray()
        self.what = what
        self.started = not ray.is_initialized()
        self._handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if self.started:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        self.remote = ray.remote(num_cpus=1)(_ray_job)
        self.setup = (initializer, initargs)
        self.pending: set = set()

    def submit(self, fn: Callable, *args: Any):
        ref = self.remote.remote(*self.setup, fn, *args)
        self.pending.add(ref)
        return ref

    def result(self, ref) -> Any:
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, Exception):  # the job's own error, as WorkerPool raises it
                raise cause from None
            raise RuntimeError(f"a {self.what} Ray task failed: {e}") from e
        self.pending.discard(ref)
        return out

    def close(self, finished: bool) -> None:
        try:
            for ref in self.pending:  # interrupted: drop the queued work
                self.ray.cancel(ref, force=True)
        finally:
            if self.started:
                self.ray.shutdown()
            import signal
            import threading

            if threading.current_thread() is threading.main_thread():
                for sig, handler in self._handlers.items():
                    if handler is not None:
                        signal.signal(sig, handler)

    def __enter__(self) -> RayWorkerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(finished=exc_type is None)


def worker_pool(
    backend: str,
    workers: int,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    what: str = "worker",
) -> WorkerPool | RayWorkerPool:
    """A :class:`WorkerPool` (``backend`` "local") or a :class:`RayWorkerPool` ("ray") of ``workers``."""
    from embodied_gym.errors import UserInputError

    if backend == "local":
        return WorkerPool(workers, initializer, initargs, what)
    if backend == "ray":
        return RayWorkerPool(workers, initializer, initargs, what)
    raise UserInputError(f"unknown backend {backend!r}; valid: {', '.join(map(repr, BACKENDS))}")
