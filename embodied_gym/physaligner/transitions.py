"""Stage 1 of PhysAligner: the simulated one-step dataset.

For K parameter vectors θ (a scrambled Sobol sample of the normalised box) and every recorded
transition (s_{t-1}, a_{t-1}) of the training episodes, the simulator is put in state s_{t-1}
(joint positions and velocities), given the joint targets a_{t-1}, and stepped one 20 ms control
step; the result s_t is stored. s = 14 joint positions + 14 joint velocities (the paper's
one-step form). Task objects sit at the episode's recorded start layout: recordings hold no
per-frame object poses, and the arm's one-step dynamics barely depend on them.

Commands reach the actuators through θ's actuation delay and backlash: the target applied at
step t depends on the episode's earlier commands, so it is computed along each episode
(:func:`applied_actions`, the same logic the simulator core applies step by step).
:func:`simulate_dense` is the dense variant PhysAligner's trust region uses: one θ per transition.

The work runs in parallel over processes (one scene per worker, or Ray tasks) with a progress bar,
and the result is cached as a compressed ``.npz`` keyed by the inputs' hash, so a rerun or a resumed
calibration skips it. While it runs, every finished block of θ samples (a chunk) is written
atomically into ``transitions-<key>.chunks/``; a killed run resumes from the finished chunks (each
checked against the run's key and θ samples), so a kill loses at most the chunks in progress, and
the assembled result is the same array whether the run was interrupted or not.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from embodied_gym.atomic import is_temporary, write_npz
from embodied_gym.data.reader import Episode
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.sim.core import SimCore
from embodied_gym.sim.tasks import layout_from_poses, make_task

STATE_DIM = 28
CHUNK_SAMPLES = 8  # θ samples per stage-1 chunk (at least the worker count)

logger = logging.getLogger(__name__)


@dataclass
class Transitions:
    """Inputs shared by every θ, and one simulated next state per (θ, transition)."""

    theta: np.ndarray  # (K, dim) normalised parameters
    state: np.ndarray  # (N, 28) s_{t-1}
    action: np.ndarray  # (N, 14) a_{t-1}
    next_state: np.ndarray  # (K, N, 28) simulated s_t
    episode: np.ndarray  # (N,) episode index of each transition

    def save(self, path: str | os.PathLike) -> None:
        write_npz(
            path,
            theta=self.theta,
            state=self.state,
            action=self.action,
            next_state=self.next_state,
            episode=self.episode,
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> Transitions:
        with np.load(path, allow_pickle=False) as f:
            return cls(**{k: f[k] for k in ("theta", "state", "action", "next_state", "episode")})


def episode_transitions(episodes: list[Episode]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(s_{t-1}, a_{t-1}, recorded s_t, episode index) over all episodes."""
    s, a, s_next, ep = [], [], [], []
    for e in episodes:
        full = np.concatenate([e.state, e.velocity], axis=1)
        s.append(full[:-1])
        a.append(e.action[:-1])
        s_next.append(full[1:])
        ep.append(np.full(len(e.action) - 1, e.index))
    return np.concatenate(s), np.concatenate(a), np.concatenate(s_next), np.concatenate(ep)


def episode_starts(episode: np.ndarray) -> np.ndarray:
    """Row index where each transition's episode begins (rows in episode order)."""
    episode = np.asarray(episode)
    first = np.r_[True, episode[1:] != episode[:-1]]
    return np.maximum.accumulate(np.where(first, np.arange(len(episode)), 0))


def applied_actions(
    state: np.ndarray,
    action: np.ndarray,
    episode: np.ndarray,
    latency_steps: int,
    backlash: np.ndarray,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """The targets the actuators track at each transition, through the actuator effects.

    ``state``/``action``/``episode``: transitions in episode order (:func:`episode_transitions`);
    each episode starts holding its first recorded joint state, as open-loop replay does. The
    applied target of transition t depends on the episode's earlier commands (backlash band, delay),
    so it is computed along the whole episode with :func:`~embodied_gym.sim.core.applied_targets`,
    the logic the simulator core applies step by step. ``backlash``: (14,) for all rows, or one
    (14,) row per entry of ``rows`` (the transitions wanted; default all). Returns (len(rows), 14).
    """
    from embodied_gym.sim.core import applied_targets

    rows = np.arange(len(action)) if rows is None else np.asarray(rows)
    backlash = np.asarray(backlash, dtype=np.float64)
    per_row = backlash.ndim == 2
    if latency_steps == 0 and not backlash.any():
        return np.asarray(action, dtype=np.float64)[rows].copy()
    starts = episode_starts(episode)
    out = np.empty((len(rows), action.shape[1]))
    row_start = starts[rows]
    for s0 in np.unique(row_start):
        pick = np.flatnonzero(row_start == s0)
        end = int(rows[pick].max()) + 1
        b = backlash[pick] if per_row else backlash
        applied = applied_targets(action[s0:end], state[s0, : action.shape[1]], latency_steps, b)
        t = rows[pick] - s0
        out[pick] = applied[t, np.arange(len(pick))] if per_row else applied[t]
    return out


class OneStepSimulator:
    """The task's simulator core, put in a recorded state and stepped one control step, fast.

    Each step starts from the recorded joint state with the objects where the episode placed
    them, so a transition depends only on (state, action, physics).
    """

    def __init__(self, task: str, space: ParameterSpace):
        self.space = space
        self.core = SimCore(make_task(task), space.base)
        self.model, self.data, self.idx = self.core.model, self.core.data, self.core.idx

    def set_theta(self, theta_u: np.ndarray) -> None:
        self.core.set_physics(self.space.to_physics(self.space.denormalise(theta_u)))

    def physics_of(self, theta_u: np.ndarray):
        return self.space.to_physics(self.space.denormalise(theta_u))

    def applied(self, theta_u: np.ndarray, state: np.ndarray, action: np.ndarray, episode: np.ndarray) -> np.ndarray:
        """The recorded commands ``action`` through θ's latency and backlash (:func:`applied_actions`):
        what :meth:`step` must be given so a one-step transition matches open-loop replay."""
        from embodied_gym.sim.core import effects_from_physics

        eff = effects_from_physics(self.physics_of(theta_u))
        return applied_actions(state, action, episode, eff.latency_steps, eff.backlash)

    def place(self, layout_poses: dict) -> None:
        mujoco.mj_resetData(self.model, self.data)
        if layout_poses:
            self.core.task.place(self.model, self.data, layout_from_poses(layout_poses))
        self._object_qpos = self.data.qpos.copy()

    def step(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Next state (28) from state ``s`` (28) with the actuators tracking joint targets ``a`` (14)
        (already through the actuator effects: :meth:`applied`)."""
        d, core = self.data, self.core
        d.qpos[:] = self._object_qpos
        d.qvel[:] = 0.0
        core.write_joint_state(s[:14], s[14:])
        core.write_ctrl(a)
        d.qacc_warmstart[:] = 0.0
        core.step()
        return np.concatenate([core.joint_positions(), core.joint_velocities()])


_WORKER: dict = {}


def _init_worker(task, space_dict, episodes_meta, data=None):
    _WORKER["sim"] = OneStepSimulator(task, ParameterSpace.from_dict(space_dict))
    _WORKER["meta"] = episodes_meta
    _WORKER["data"] = data  # (state, action, episode), shared by every θ


def _init_pool_worker(task, space_dict, episodes_meta, data):
    # Ctrl-C reaches the whole process group: the parent stops the pool, the workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init_worker(task, space_dict, episodes_meta, data)


def _simulate_theta(args):
    theta_u, state, action, episode = args
    sim = _WORKER["sim"]
    sim.set_theta(theta_u)
    action = sim.applied(theta_u, state, action, episode)  # through θ's latency and backlash
    out = np.empty_like(state)
    current = None
    for i in range(len(state)):
        if episode[i] != current:
            current = episode[i]
            sim.place(_WORKER["meta"].get(int(current), {}))
        out[i] = sim.step(state[i], action[i])
    return out


def _simulate_index(job):
    i, theta_u = job
    return i, _simulate_theta((theta_u, *_WORKER["data"]))


def dataset_hash(episodes: list[Episode]) -> str:
    h = hashlib.sha256()
    for e in episodes:
        for arr in (e.state, e.velocity, e.action):
            h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
    return h.hexdigest()


def _ray_simulate_theta(init_args, theta_u, state, action, episode):
    # One simulator per Ray worker process, built on first use (Ray reuses worker processes, also across
    # calibrations: rebuilt when the task, space or episode layouts differ).
    if _WORKER.get("init") != init_args:
        _init_worker(*init_args)
        _WORKER["init"] = init_args
    return _simulate_theta((theta_u, state, action, episode))


def _run_on_ray(jobs, theta, data, init_args, workers: int, address: str | None, on_result) -> None:
    try:
        import ray
    except ImportError:
        raise ImportError("backend='ray' needs Ray: pip install 'embodied-gym[ray]'") from None
    started = not ray.is_initialized()
    if started:
        # Local by default (no dashboard, no network beyond localhost); a cluster when an address is given.
        kwargs = {"address": address} if address else {"num_cpus": workers, "include_dashboard": False}
        ray.init(log_to_driver=False, **kwargs)
    try:
        remote = ray.remote(_ray_simulate_theta)
        init_ref = ray.put(init_args)
        shared = [ray.put(x) for x in data]
        # Ray resolves object refs only when they are top-level arguments.
        pending = {remote.remote(init_ref, theta[i], *shared): i for i in jobs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    on_result(pending.pop(ref), ray.get(ref))
        finally:
            for ref in pending:  # interrupted: drop the queued work
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()


def _run_key(episodes, task, space, samples, seed) -> str:
    return hashlib.sha256(
        f"{dataset_hash(episodes)}|{task}|{space.fingerprint()}|{samples}|{seed}|v2".encode()
    ).hexdigest()


_CHUNK_FILE = re.compile(r"chunk-(\d+)-(\d+)\.npz")


def _chunk_path(folder: Path, start: int, stop: int) -> Path:
    return folder / f"chunk-{start:06d}-{stop:06d}.npz"


def _write_chunk(folder: Path, key: str, start: int, stop: int, theta: np.ndarray, next_state: np.ndarray) -> Path:
    """One finished block of θ samples ``start:stop``: the run's key, its θ rows and their next states."""
    path = _chunk_path(folder, start, stop)
    write_npz(path, key=np.array(key), start=np.array(start), stop=np.array(stop), theta=theta, next_state=next_state)
    return path


def _finished_chunks(folder: Path, key: str, theta: np.ndarray, n: int, dtype) -> tuple[dict[int, np.ndarray], int]:
    """(θ index -> simulated next states (n, 28), number of chunk files used), from the chunk files in
    ``folder`` that belong to this run.

    A chunk counts only if its key (dataset hash, task, parameter space, samples, seed) and its θ rows
    equal this run's and its array has the expected shape and dtype; any other file is removed (its
    samples are simulated again), as are temporary files left by a write that a kill cut short.
    """
    rows: dict[int, np.ndarray] = {}
    kept = 0
    if not folder.is_dir():
        return rows, kept
    for path in sorted(folder.iterdir()):
        m = _CHUNK_FILE.fullmatch(path.name)
        if m is None:
            if path.name.endswith(".npz.tmp") or is_temporary(path):
                path.unlink(missing_ok=True)
            continue
        start, stop = int(m[1]), int(m[2])
        problem = None
        try:
            with np.load(path, allow_pickle=False) as f:
                got_key, got_theta, next_state = str(f["key"]), f["theta"], f["next_state"]
        except Exception as e:  # unreadable or missing arrays: simulate it again
            problem = f"unreadable ({type(e).__name__}: {e})"
        else:
            if got_key != key:
                problem = "it belongs to another dataset, parameter space or sample set"
            elif not (0 <= start < stop <= len(theta)) or not np.array_equal(got_theta, theta[start:stop]):
                problem = f"its θ samples are not this run's samples {start}:{stop}"
            elif next_state.shape != (stop - start, n, STATE_DIM) or next_state.dtype != dtype:
                problem = (
                    f"its array is {next_state.dtype}{list(next_state.shape)}, not {np.dtype(dtype)}"
                    f"{[stop - start, n, STATE_DIM]}"
                )
        if problem:
            logger.warning("stage 1: discarding %s: %s; its θ samples are simulated again", path, problem)
            path.unlink(missing_ok=True)
            continue
        kept += 1
        for k in range(start, stop):
            rows.setdefault(k, next_state[k - start])
    return rows, kept


def _plan_chunks(todo: list[int], size: int) -> list[tuple[int, int]]:
    """Contiguous runs of the θ indices still to simulate, cut on the grid of ``size``-sample blocks."""
    chunks: list[tuple[int, int]] = []
    for i in todo:
        if chunks and chunks[-1][1] == i and i % size != 0:
            chunks[-1] = (chunks[-1][0], i + 1)
        else:
            chunks.append((i, i + 1))
    return chunks


def simulate_transitions(
    episodes: list[Episode],
    task: str,
    space: ParameterSpace,
    samples: int,
    *,
    seed: int = 0,
    workers: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    backend: str = "processes",
    ray_address: str | None = None,
    chunk_samples: int | None = None,
) -> Transitions:
    """Stage 1 (see module docstring). ``workers`` defaults to the CPU count. ``backend='ray'`` runs the
    same jobs as Ray tasks: on a local Ray instance by default, on a cluster when ``ray_address`` is given
    (the cluster's workers need embodied-gym installed). With ``cache_dir``, finished chunks of
    ``chunk_samples`` θ samples (default: the larger of 8 and the worker count) are written as they
    complete and a rerun resumes from them; the chunks are removed once the cache file is written."""
    if backend not in ("processes", "ray"):
        raise ValueError(f"unknown stage-1 backend {backend!r}; valid: 'processes', 'ray'")
    if chunk_samples is not None and chunk_samples < 1:
        raise ValueError(f"chunk_samples must be at least 1, got {chunk_samples}")
    from tqdm import tqdm

    full_key = _run_key(episodes, task, space, samples, seed)
    key = full_key[:20]
    cache = Path(cache_dir) / f"transitions-{key}.npz" if cache_dir else None
    if cache is not None and cache.exists():
        return Transitions.load(cache)
    state, action, _, episode = episode_transitions(episodes)
    theta = space.sample(samples, seed=seed)
    meta = {e.index: e.layout for e in episodes}
    workers = max(1, min(workers or os.cpu_count() or 1, samples))
    size = chunk_samples or max(CHUNK_SAMPLES, workers)

    folder = cache.with_suffix(".chunks") if cache is not None else None
    rows, resumed = _finished_chunks(folder, full_key, theta, len(state), state.dtype) if folder else ({}, 0)
    todo = [i for i in range(samples) if i not in rows]
    plan = _plan_chunks(todo, size)
    n_chunks = resumed + len(plan)
    if rows:
        logger.info(
            "stage 1: resuming from %s: %d of %d θ samples already simulated (%d chunks)",
            folder,
            len(rows),
            samples,
            resumed,
        )
    if folder is not None and plan:
        folder.mkdir(parents=True, exist_ok=True)
    chunk_of = {i: c for c, (a, b) in enumerate(plan) for i in range(a, b)}
    missing = [b - a for a, b in plan]
    written = 0

    bar = tqdm(total=samples, initial=len(rows), desc="stage 1: simulating θ samples", unit="θ", disable=not progress)
    bar.set_postfix_str(f"chunks {resumed}/{n_chunks}" + (f" ({resumed} resumed)" if resumed else ""))

    def on_result(i: int, next_state: np.ndarray) -> None:
        nonlocal written
        rows[i] = next_state
        bar.update()
        c = chunk_of[i]
        missing[c] -= 1
        if missing[c] == 0 and folder is not None:
            a, b = plan[c]
            path = _write_chunk(folder, full_key, a, b, theta[a:b], np.stack([rows[k] for k in range(a, b)]))
            written += 1
            logger.debug("stage 1: wrote %s", path)
            bar.set_postfix_str(f"chunks {resumed + written}/{n_chunks}" + (f" ({resumed} resumed)" if resumed else ""))

    data = (state, action, episode)
    try:
        if not todo:
            pass
        elif backend == "ray":
            _run_on_ray(todo, theta, data, (task, space.to_dict(), meta), workers, ray_address, on_result)
        elif workers == 1:
            _init_worker(task, space.to_dict(), meta, data)
            for i in todo:
                on_result(*_simulate_index((i, theta[i])))
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")  # MuJoCo and torch state do not survive fork safely
            with ctx.Pool(
                min(workers, len(todo)), initializer=_init_pool_worker, initargs=(task, space.to_dict(), meta, data)
            ) as pool:
                for i, r in pool.imap_unordered(_simulate_index, [(i, theta[i]) for i in todo]):
                    on_result(i, r)
    finally:
        bar.close()
    out = Transitions(
        theta=theta, state=state, action=action, next_state=np.stack([rows[i] for i in range(samples)]), episode=episode
    )
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        out.save(cache)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)  # the cache holds it all now
    return out


def simulate_dense(
    sim: OneStepSimulator,
    theta_u: np.ndarray,
    state: np.ndarray,
    action: np.ndarray,
    episode: np.ndarray,
    rows: np.ndarray,
    layouts: dict,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 with dense θ (one parameter vector per transition): row ``rows[i]`` of the episode-ordered
    transitions is simulated under ``theta_u[i]``. Returns (next states (n, 28), applied targets (n, 14)).

    One θ per transition covers the box with as many distinct parameter vectors as there are
    transitions, at the cost of one simulation each; the applied targets follow each θ's own
    latency and backlash along the episode (:func:`applied_actions`).
    """
    from tqdm import tqdm

    from embodied_gym.sim.core import effects_from_physics

    theta_u = np.atleast_2d(theta_u)
    if len(theta_u) == 1:
        theta_u = np.repeat(theta_u, len(rows), axis=0)
    physics = [sim.physics_of(t) for t in theta_u]
    effects = [effects_from_physics(p) for p in physics]
    latencies = {e.latency_steps for e in effects}
    if len(latencies) != 1:
        raise ValueError("simulate_dense: every θ must share one latency_steps (profile the delay outside)")
    applied = applied_actions(state, action, episode, latencies.pop(), np.stack([e.backlash for e in effects]), rows)
    out = np.empty((len(rows), STATE_DIM))
    current = None
    for i in tqdm(range(len(rows)), desc="stage 1: dense one-step rollouts", disable=not progress, unit="step"):
        r = int(rows[i])
        if episode[r] != current:
            current = episode[r]
            sim.place(layouts.get(int(current), {}))
        sim.core.set_physics(physics[i])
        out[i] = sim.step(state[r], applied[i])
    return out, applied
