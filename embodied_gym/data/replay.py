"""Open-loop replay of a recorded episode in the simulator, and how far the two trajectories part.

The replay starts the sim from the episode's first recorded joint state (and the recorded
object layout when the recording has it), then applies the recorded joint targets one control
step at a time, without feedback. Errors compare the sim's state after each step with the
recording's next state: joint RMSE, TCP translation error (m) and TCP rotation error
arcsin(‖R_sim − R_real‖_F / (2√2)) (rad), per step and averaged.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from embodied_gym import atomic
from embodied_gym.data.reader import Episode, dataset_repo_id, load_episodes  # noqa: F401 (older imports)
from embodied_gym.metrics import ee_errors
from embodied_gym.sim import robot as layout
from embodied_gym.sim.tasks import layout_from_poses


@dataclass
class ReplayResult:
    episode: int
    real_state: np.ndarray  # (T-1, 14) recorded states s_1..s_{T-1}
    sim_state: np.ndarray  # (T-1, 14) replayed states
    real_ee: np.ndarray  # (T-1, 14)
    sim_ee: np.ndarray  # (T-1, 14)
    joint_rmse: np.ndarray  # (T-1,) over the 12 arm joints (rad)
    translation_error: np.ndarray  # (T-1,) m, mean over both TCPs
    rotation_error: np.ndarray  # (T-1,) rad

    def summary(self) -> dict[str, float]:
        return {
            "episode": self.episode,
            "steps": len(self.joint_rmse),
            "joint_rmse_rad": float(np.sqrt(np.mean(self.joint_rmse**2))),
            "translation_error_m": float(self.translation_error.mean()),
            "rotation_error_rad": float(self.rotation_error.mean()),
        }


def replay_episode(episode: Episode, task: str, physics=None, env: gym.Env | None = None) -> ReplayResult:
    """Replay ``episode`` open-loop in the sim of ``task`` under ``physics`` (see module docstring)."""
    import embodied_gym
    from embodied_gym.envs.aloha_env import AlohaTaskEnv

    own = env is None
    if env is None:
        env = gym.make(embodied_gym.env_id(task), obs_type="state", physics=physics, terminate_on_success=False)
    u = env.unwrapped
    if not isinstance(u, AlohaTaskEnv):
        raise TypeError(f"replay needs a sim env (AlohaTaskEnv), got {type(u).__name__}")
    if u.control_mode != "joint_pos":
        raise ValueError("replay needs an env with control_mode='joint_pos' (recorded actions are joint targets)")
    if physics is not None and not own:
        u.set_physics(physics)
    options = {"layout": layout_from_poses(episode.layout)} if episode.layout else None
    u.reset(seed=episode.seed if episode.seed is not None else 0, options=options)
    u.set_joint_state(episode.state[0], episode.velocity[0])
    T = len(episode.action)
    sim_q, sim_ee = np.zeros((T - 1, 14)), np.zeros((T - 1, 14))
    for t in range(T - 1):
        u.step(episode.action[t])
        sim_q[t] = u.joint_positions()
        sim_ee[t] = u.task_info()["tcp_poses"].reshape(14)
    if own:
        env.close()
    real_q, real_ee = episode.state[1:], episode.ee_pose[1:]
    arm = layout.ARM_INDICES
    rmse = np.sqrt(np.mean((sim_q[:, arm] - real_q[:, arm]) ** 2, axis=1))
    trans, rot = ee_errors(sim_ee, real_ee)
    return ReplayResult(episode.index, real_q, sim_q, real_ee, sim_ee, rmse, trans, rot)


def plot_replay(results: list[ReplayResult], path: str | os.PathLike, labels: list[str] | None = None) -> None:
    """Top and side views of the recorded vs replayed TCP paths of both arms, one row per result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 4 * len(results)), squeeze=False)
    for row, r in enumerate(results):
        name = labels[row] if labels else f"episode {r.episode}"
        for arm, colour in ((0, "tab:blue"), (1, "tab:orange")):
            real, sim = r.real_ee[:, arm * 7 : arm * 7 + 3], r.sim_ee[:, arm * 7 : arm * 7 + 3]
            for ax, (i, j), view in ((axes[row, 0], (0, 1), "top (x, y)"), (axes[row, 1], (0, 2), "side (x, z)")):
                ax.plot(real[:, i], real[:, j], "-", color=colour, label=f"{layout.ARMS[arm]} recorded")
                ax.plot(sim[:, i], sim[:, j], "--", color=colour, label=f"{layout.ARMS[arm]} replayed")
                ax.set_title(f"{name}: {view}")
                ax.set_aspect("equal", adjustable="datalim")
        s = r.summary()
        axes[row, 1].text(
            0.02,
            0.02,
            f"trans {s['translation_error_m'] * 100:.1f} cm, rot {s['rotation_error_rad']:.3f} rad,"
            f" joint RMSE {s['joint_rmse_rad']:.3f} rad",
            transform=axes[row, 1].transAxes,
            fontsize=8,
        )
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=110)


def replay_dataset(
    dataset: str | os.PathLike,
    out: str | os.PathLike,
    episodes: list[int] | None = None,
    task: str | None = None,
    physics=None,
    plot_episodes: int = 3,
) -> dict:
    """Replay ``episodes`` (all by default) of a recorded dataset open-loop and write
    ``out/replay.json`` (per-episode and mean errors) and ``out/replay.png``.

    Args:
        task: the task (default: the recording's).
        physics: the simulator's physics (default: nominal).
        plot_episodes: how many episodes ``replay.png`` draws.

    Returns:
        What ``replay.json`` holds: the dataset, physics, task, ``mean`` and per-episode rows.

    Raises:
        DatasetError: the dataset cannot be read, or its task is unknown and ``task`` not given.
    """
    from embodied_gym.data.reader import open_dataset

    ds = open_dataset(dataset)
    chosen = ds.episodes(episodes)
    task = task or ds.require_task()
    results = [replay_episode(ep, task, physics=physics) for ep in chosen]
    rows = [r.summary() for r in results]
    mean = {
        k: float(sum(r[k] for r in rows) / len(rows))
        for k in ("joint_rmse_rad", "translation_error_m", "rotation_error_rad")
    }
    os.makedirs(out, exist_ok=True)
    summary = {
        "dataset": str(dataset),
        "physics": None if physics is None else str(physics),
        "task": task,
        "mean": mean,
        "episodes": rows,
    }
    atomic.write_json(os.path.join(out, "replay.json"), summary)
    plot_replay(results[:plot_episodes], os.path.join(out, "replay.png"))
    return summary


def replay_on_robot(env, actions: np.ndarray, speed: float = 0.25, seed: int | None = None) -> int:
    """Play recorded joint targets ``actions`` (T, 14) on a ``-Real-`` env's robot at ``speed`` of the recorded
    rate: each recorded step is spread over ``round(1 / speed)`` control steps, moving linearly between the
    targets, through the env's clipping and rate limit. A first run on hardware: it shows that the joint
    map, the units and the limits are right before a policy moves the arms. Returns the control steps sent.

    Raises:
        ValueError: ``speed`` outside (0, 1], or ``actions`` not (T >= 2, 14), or an env not in
            ``joint_pos`` control.
    """
    if not 0 < speed <= 1:
        raise ValueError(f"speed must be in (0, 1] (a fraction of the recorded rate), got {speed}")
    actions = np.asarray(actions, dtype=np.float64)
    if actions.ndim != 2 or actions.shape[1] != 14 or len(actions) < 2:
        raise ValueError(f"actions must be (T >= 2, 14) joint targets, got shape {actions.shape}")
    if getattr(env.unwrapped, "control_mode", "joint_pos") != "joint_pos":
        raise ValueError("replay_on_robot sends joint targets: make the env with control_mode='joint_pos'")
    hold = max(1, round(1 / speed))
    env.reset(seed=seed)
    sent = 0
    for a0, a1 in itertools.pairwise(actions):
        for k in range(hold):
            env.step((a0 + (a1 - a0) * k / hold).astype(np.float32))
            sent += 1
    return sent
