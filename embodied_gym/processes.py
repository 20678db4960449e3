"""Local worker processes, started one way everywhere.

Recording (:mod:`embodied_gym.data.parallel`), evaluation (:func:`embodied_gym.policies.evaluate.evaluate_policy`),
the pose estimator's training frames (:func:`embodied_gym.perception.data.generate_frames`) and the demo's
background stage run work in other processes. Each process is started with ``spawn`` (MuJoCo's OpenGL
context and torch's threads do not survive ``fork``; ``MUJOCO_GL`` is inherited), ignores Ctrl-C (it reaches
the whole process group: the parent stops its workers) and exits once its parent is gone (a parent killed
by SIGTERM or SIGKILL runs no clean-up).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["WorkerPool", "cpu_count", "exit_with_parent"]


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
