"""Stage 1 of PhysAligner: one-step transitions simulated from recorded states.

Every recorded transition (s_{t-1}, a_{t-1}) of the fit episodes can be replayed in the simulator:
put in state s_{t-1} (joint positions and velocities), given the joint targets a_{t-1}, and stepped
one 20 ms control step (:class:`OneStepSimulator`). s = 14 joint positions + 14 joint velocities
(the paper's one-step form). Task objects sit at the episode's recorded start layout: recordings
hold no per-frame object poses, and the arm's one-step dynamics barely depend on them.

Commands reach the actuators through θ's actuation delay and backlash: the target applied at
step t depends on the episode's earlier commands, so it is computed along each episode
(:func:`applied_actions`, the same logic the simulator core applies step by step).
:func:`simulate_dense` is what PhysAligner's trust region (:func:`.refine.trust_region`) runs each
iteration: one θ per transition.
"""

from __future__ import annotations

import hashlib

import mujoco
import numpy as np

from embodied_gym.data.reader import Episode
from embodied_gym.physaligner.space import ParameterSpace
from embodied_gym.sim.core import SimCore
from embodied_gym.sim.tasks import layout_from_poses, make_task

STATE_DIM = 28


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

    def place(self, layout_poses: dict) -> None:
        mujoco.mj_resetData(self.model, self.data)
        if layout_poses:
            self.core.task.place(self.model, self.data, layout_from_poses(layout_poses))
        self._object_qpos = self.data.qpos.copy()

    def step(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Next state (28) from state ``s`` (28) with the actuators tracking joint targets ``a`` (14)
        (already through the actuator effects: :func:`applied_actions`)."""
        d, core = self.data, self.core
        d.qpos[:] = self._object_qpos
        d.qvel[:] = 0.0
        core.write_joint_state(s[:14], s[14:])
        core.write_ctrl(a)
        d.qacc_warmstart[:] = 0.0
        core.step()
        return np.concatenate([core.joint_positions(), core.joint_velocities()])


def dataset_hash(episodes: list[Episode]) -> str:
    h = hashlib.sha256()
    for e in episodes:
        for arr in (e.state, e.velocity, e.action):
            h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
    return h.hexdigest()


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
    for i in tqdm(
        range(len(rows)), desc="stage 1: dense one-step rollouts", disable=None if progress else True, unit="step"
    ):
        r = int(rows[i])
        if episode[r] != current:
            current = episode[r]
            sim.place(layouts.get(int(current), {}))
        sim.core.set_physics(physics[i])
        out[i] = sim.step(state[r], applied[i])
    return out, applied
