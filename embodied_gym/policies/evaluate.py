"""Evaluate an agent on an env id: success rate with a Wilson 95 % interval, returns, lengths.

Episode ``i`` is reset with seed ``seed + i``, so two evaluations with the same seed see the same
start states (on sim ids; a Real id's robot adds its own noise). For a policy that reads a pose
estimate, each episode also reports how far the reset frame's estimate was from the env's
``info["object_poses"]`` (``reset_pose_error_cm``): the stand-in's motion-capture truth, read for the
report only, never by the policy.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from embodied_gym import atomic


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95 % by default); (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at p = 0 or 1 one bound equals p exactly; rounding must not put p outside its own interval
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))


@dataclass
class PairedComparison:
    """Two policies evaluated on the same seeds: the 2x2 table of per-seed outcomes and the exact
    McNemar test (a two-sided binomial test on the discordant seeds)."""

    n: int  # seeds both policies ran
    both: int  # seeds both succeeded on
    only_a: int  # seeds only policy a succeeded on
    only_b: int  # seeds only policy b succeeded on
    neither: int
    rate_a: float
    rate_b: float
    p_value: float  # two-sided exact McNemar: P(a split at least this uneven | no difference)

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self, a: str = "a", b: str = "b") -> str:
        return (
            f"{a} {self.rate_a:.0%} vs {b} {self.rate_b:.0%} on {self.n} paired seeds: {self.only_a} seeds only "
            f"{a}, {self.only_b} only {b}; exact McNemar p = {self.p_value:.3g}"
        )


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts: under "no difference" each of the
    ``only_a + only_b`` discordant seeds goes either way with probability 1/2, so
    ``p = min(1, 2 * P(Binomial(n, 1/2) <= min(only_a, only_b)))``; 1 when there is no discordant seed."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def paired_comparison[K: Hashable](a: Mapping[K, bool], b: Mapping[K, bool]) -> PairedComparison:
    """Compare two evaluations seed by seed (``{seed: success}`` each, e.g. from
    :func:`successes_by_seed`; any hashable key, e.g. ``(training seed, episode seed)`` to pool several
    policies' evaluations): only seeds both ran count.

    Raises:
        ValueError: the evaluations share no seed (they were not run on the same seeds).
    """
    seeds = [s for s in a if s in b]
    if not seeds:
        raise ValueError("the two evaluations share no seed: evaluate both with the same --seed and episodes")
    both = sum(a[s] and b[s] for s in seeds)
    only_a = sum(a[s] and not b[s] for s in seeds)
    only_b = sum(b[s] and not a[s] for s in seeds)
    n = len(seeds)
    return PairedComparison(
        n=n,
        both=both,
        only_a=only_a,
        only_b=only_b,
        neither=n - both - only_a - only_b,
        rate_a=sum(a[s] for s in seeds) / n,
        rate_b=sum(b[s] for s in seeds) / n,
        p_value=mcnemar_exact(only_a, only_b),
    )


def pairwise_comparisons(rows: Mapping[str, Sequence[bool]]) -> dict[tuple[str, str], PairedComparison]:
    """Every pair of ``rows`` (name -> success per episode, episode ``i`` on the same seed in every row), in the
    rows' order: ``{(first, second): comparison}``."""
    names = list(rows)
    return {
        (a, b): paired_comparison(dict(enumerate(rows[a])), dict(enumerate(rows[b])))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }


def successes_by_seed(result: EvalResult | dict) -> dict[int, bool]:
    """``{seed: success}`` of an :class:`EvalResult` or its JSON (``evaluate_policy(out=...)``)."""
    rows = result.per_episode if isinstance(result, EvalResult) else result["per_episode"]
    return {
        int(r.seed if isinstance(r, EpisodeResult) else r["seed"]): bool(
            r.success if isinstance(r, EpisodeResult) else r["success"]
        )
        for r in rows
    }


@dataclass
class EpisodeResult:
    episode: int
    seed: int
    success: bool
    ret: float
    length: int
    final_reward: float
    physics_error: str | None = None
    video: str | None = None
    #: horizontal error (cm, mean over the estimator's objects) of the pose estimate in the reset
    #: observation against ``info["object_poses"]``; None when the policy reads no estimate
    reset_pose_error_cm: float | None = None
    #: whether the task's ``grasp`` reward term reached 1 at some step (the object held, the paper's
    #: intermediate step); None when the env reports no such term
    grasped: bool | None = None


@dataclass
class EvalResult:
    env_id: str
    policy: str
    episodes: int
    seed: int
    success_rate: float
    ci95: tuple[float, float]
    mean_return: float
    mean_length: float
    wall_time_s: float
    per_episode: list[EpisodeResult] = field(default_factory=list)
    visaligner: str | None = None
    physics: str | None = None

    @property
    def grasp_rate(self) -> float | None:
        """The fraction of episodes whose object was grasped at some step; None when the env reports no
        ``grasp`` reward term."""
        grasped = [e.grasped for e in self.per_episode if e.grasped is not None]
        return float(np.mean(grasped)) if grasped else None

    @property
    def mean_reset_pose_error_cm(self) -> float | None:
        """Mean of the episodes' ``reset_pose_error_cm``; None when the policy read no estimate."""
        errors = [e.reset_pose_error_cm for e in self.per_episode if e.reset_pose_error_cm is not None]
        return float(np.mean(errors)) if errors else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        d["lengths"] = [e.length for e in self.per_episode]
        d["mean_reset_pose_error_cm"] = self.mean_reset_pose_error_cm
        d["grasp_rate"] = self.grasp_rate
        return d

    def summary(self) -> str:
        lo, hi = self.ci95
        text = (
            f"{self.env_id}: success {self.success_rate:.1%} (95 % CI {lo:.1%}-{hi:.1%}) over {self.episodes} "
            f"episodes; mean return {self.mean_return:.2f}, mean length {self.mean_length:.0f} steps"
        )
        if self.grasp_rate is not None:
            text += f"; grasped in {self.grasp_rate:.1%}"
        if self.mean_reset_pose_error_cm is not None:
            text += (
                f"; the reset frame's pose estimate off by {self.mean_reset_pose_error_cm:.2f} cm (mean, horizontal)"
            )
        return text


def reset_pose_error_cm(env, obs, info: dict) -> float | None:
    """Horizontal error (cm, mean over objects) of ``obs["object_pose_estimate"]`` against
    ``info["object_poses"]``, for the env's :class:`~embodied_gym.perception.PoseEstimateWrapper`; None
    when the observation holds no estimate, the env reports no poses, or the entry is the ground truth."""
    from embodied_gym.perception.pose_entry import KEY, true_pose_entry

    if not isinstance(obs, dict) or KEY not in obs or "object_poses" not in info:
        return None
    try:
        config = env.get_wrapper_attr("estimator").config
    except AttributeError:  # GroundTruthPoseWrapper: the entry is the truth itself
        return None
    est, true, names = (
        np.asarray(obs[KEY], np.float64),
        true_pose_entry(config, info["object_poses"]),
        config.output_names,
    )
    errs = [
        math.hypot(
            est[names.index(f"{o}.x")] - true[names.index(f"{o}.x")],
            est[names.index(f"{o}.y")] - true[names.index(f"{o}.y")],
        )
        for o in config.objects
    ]
    return 100.0 * float(np.mean(errs))


def run_episode(env, agent, seed: int, frames: list | None = None, camera: str | None = None):
    """One episode; returns (success, return, length, final reward, physics error, reset pose error cm,
    grasped: whether the ``grasp`` reward term reached 1, None without one)."""
    agent.reset()
    obs, info = env.reset(seed=seed)
    pose_error = reset_pose_error_cm(env, obs, info)
    if frames is not None:
        frames.append(_frame(env, obs, camera))
    ret, length, reward = 0.0, 0, 0.0
    grasped: bool | None = None
    while True:
        obs, reward, terminated, truncated, info = env.step(agent(obs, info))
        ret += float(reward)
        length += 1
        grasp = info.get("reward_terms", {}).get("grasp")
        if grasp is not None:
            grasped = bool(grasped) or grasp >= 1.0
        if frames is not None and length % 2 == 0:
            frames.append(_frame(env, obs, camera))
        if terminated or truncated:
            break
    return bool(info.get("is_success")), ret, length, float(reward), info.get("physics_error"), pose_error, grasped


def _frame(env, obs, camera):
    if camera and camera in obs:
        return obs[camera]
    return env.render()


def evaluate(
    agent,
    env,
    episodes: int = 50,
    seed: int = 0,
    *,
    env_id: str = "",
    policy_name: str = "",
    videos: str | os.PathLike | None = None,
    video_episodes: int = 3,
    progress: bool = True,
    visaligner: str | None = None,
    physics: str | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes of ``agent`` in ``env``; videos of the first ``video_episodes``."""
    from tqdm import tqdm

    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    rows: list[EpisodeResult] = []
    t0 = time.time()
    bar = tqdm(range(episodes), desc=f"eval {env_id or 'env'}", unit="ep", disable=None if progress else True)
    for i in bar:
        rows.append(_episode(env, agent, i, seed, videos, video_episodes))
        bar.set_postfix(success=f"{np.mean([r.success for r in rows]):.0%}")
    return _result(rows, env_id, policy_name, seed, time.time() - t0, visaligner, physics)


def _episode(env, agent, i: int, seed: int, videos, video_episodes: int) -> EpisodeResult:
    """Episode ``i`` (reset with ``seed + i``), its video written when ``i < video_episodes``."""
    from embodied_gym.video import write_mp4

    record = bool(videos) and i < video_episodes
    camera = None
    if record:
        Path(videos).mkdir(parents=True, exist_ok=True)
        cams = getattr(env.unwrapped, "cameras", ())
        camera = cams[0] if cams else None
    frames: list[np.ndarray] | None = [] if record else None
    success, ret, length, last_r, err, pose_error, grasped = run_episode(env, agent, seed + i, frames, camera)
    video = None
    if frames:
        video = str(Path(videos) / f"episode_{i:03d}_{'success' if success else 'failure'}.mp4")
        write_mp4(video, frames, fps=25)
    return EpisodeResult(i, seed + i, success, ret, length, last_r, err, video, pose_error, grasped)


def _result(
    rows: list[EpisodeResult],
    env_id: str,
    policy_name: str,
    seed: int,
    wall_time_s: float,
    visaligner: str | None,
    physics: str | None,
) -> EvalResult:
    rows = sorted(rows, key=lambda r: r.episode)
    k = sum(r.success for r in rows)
    n = len(rows)
    return EvalResult(
        env_id=env_id,
        policy=policy_name,
        episodes=n,
        seed=seed,
        success_rate=k / n,
        ci95=wilson_interval(k, n),
        mean_return=float(np.mean([r.ret for r in rows])),
        mean_length=float(np.mean([r.length for r in rows])),
        wall_time_s=wall_time_s,
        per_episode=rows,
        visaligner=visaligner,
        physics=physics,
    )


# One evaluation worker process's agent and env (see evaluate_policy(workers=...)).
_WORKER: dict = {}


def _agent_and_env(spec: dict):
    from embodied_gym.factory import make_env_for
    from embodied_gym.policies.agents import load_agent

    agent = load_agent(spec["policy"], **spec["agent"])
    return agent, make_env_for(agent, spec["env_id"], **spec["env"])


def _init_worker(spec: dict) -> None:
    from multiprocessing import util

    import torch

    torch.set_num_threads(1)  # one core per worker
    _WORKER["agent"], _WORKER["env"] = _agent_and_env(spec)
    util.Finalize(None, _WORKER["env"].close, exitpriority=10)


def _worker_episode(i: int, seed: int, videos, video_episodes: int) -> EpisodeResult:
    return _episode(_WORKER["env"], _WORKER["agent"], i, seed, videos, video_episodes)


def evaluate_policy(
    policy: str,
    env_id: str,
    episodes: int = 50,
    seed: int = 0,
    *,
    visaligner: str | None = None,
    physics: str | None = None,
    robot_config: str | None = None,
    out: str | None = None,
    videos: str | None = None,
    temporal_ensemble_coeff: float | None = None,
    control_mode: str | None = None,
    progress: bool = True,
    max_episode_steps: int | None = None,
    cameras: tuple[str, ...] | None = None,
    image_size: tuple[int, int] | None = None,
    trust_policy_file: bool = False,
    pose_estimator: str | None = None,
    pose_update: str | None = None,
    workers: int = 1,
    env_kwargs: dict | None = None,
) -> EvalResult:
    """Load ``policy`` (see :func:`~embodied_gym.policies.agents.load_agent`: ``control_mode``,
    ``cameras``, ``image_size`` and ``pose_estimator`` override the settings it was trained with; ``trust_policy_file``),
    make ``env_id`` for it, evaluate, and write ``out`` (JSON) when given.

    Args:
        policy: ``"expert"``, an ACT folder or an SB3 ``.zip``.
        env_id: a sim or ``-Real-`` id; episode ``i`` is reset with ``seed + i``.
        visaligner / physics / robot_config: the env's options (see :func:`embodied_gym.factory.make_env`).
        videos: a folder for videos of the first episodes.
        pose_update: when a policy that reads estimated object poses gets a new estimate
            (``"every_frame"`` / ``"at_reset"``; default: as its data was recorded; see
            :func:`~embodied_gym.factory.make_env_for`).
        workers: processes that run the episodes (:class:`~embodied_gym.processes.WorkerPool`, one torch
            thread each), each with its own copy of the policy and env. An episode depends only on its
            seed, so the per-episode results are those of one process (``workers=1``, this process).
        env_kwargs: more of the env's own kwargs (a ``-Real-`` id's ``joint_map``, ``camera_map``,
            ``reset_fn``, ``realtime``).

    Returns:
        The success rate with its Wilson 95 % interval, returns, lengths and per-episode rows.

    Raises:
        ValueError: an unknown id, a policy file that is refused (see docs/policies.md), an option
            that does not apply to the id, or ``workers`` < 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1 (1 runs the episodes in this process), got {workers}")
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    agent_options = dict(
        temporal_ensemble_coeff=temporal_ensemble_coeff,
        control_mode=control_mode,
        cameras=cameras,
        image_size=image_size,
        trust_policy_file=trust_policy_file,
        pose_estimator=pose_estimator,
    )
    extra = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    env_options = dict(
        physics=physics,
        visaligner=visaligner,
        robot_config=robot_config,
        **extra,
        render_mode="rgb_array" if videos else None,
        pose_update=pose_update,
        **(env_kwargs or {}),
    )
    spec = {"policy": policy, "env_id": env_id, "agent": agent_options, "env": env_options}
    result = _evaluate_spec(spec, min(workers, episodes), episodes, seed, videos, progress)
    result.visaligner, result.physics = visaligner, physics
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(out, result.to_json())
    return result


def _evaluate_spec(spec: dict, workers: int, episodes: int, seed: int, videos, progress: bool) -> EvalResult:
    """Evaluate the policy and env that ``spec`` names, in this process or in ``workers`` processes."""
    agent, env = _agent_and_env(spec)  # here first: a bad policy or option fails before any worker starts
    try:
        if workers == 1:
            return evaluate(
                agent,
                env,
                episodes,
                seed,
                env_id=spec["env_id"],
                policy_name=str(spec["policy"]),
                videos=videos,
                progress=progress,
            )
    finally:
        env.close()
    return _evaluate_in_workers(spec, workers, episodes, seed, videos, progress)


def _evaluate_in_workers(
    spec: dict, workers: int, episodes: int, seed: int, videos, progress: bool, video_episodes: int = 3
) -> EvalResult:
    from concurrent.futures import as_completed

    from tqdm import tqdm

    from embodied_gym.processes import WorkerPool

    t0 = time.time()
    rows: list[EpisodeResult] = []
    with (
        tqdm(
            total=episodes,
            desc=f"eval {spec['env_id']} ({workers} workers)",
            unit="ep",
            disable=None if progress else True,
        ) as bar,
        WorkerPool(workers, _init_worker, (spec,), what="evaluation worker") as pool,
    ):
        futures = [pool.submit(_worker_episode, i, seed, videos, video_episodes) for i in range(episodes)]
        for future in as_completed(futures):
            rows.append(pool.result(future))
            bar.update()
            bar.set_postfix(success=f"{np.mean([r.success for r in rows]):.0%}")
    return _result(rows, spec["env_id"], str(spec["policy"]), seed, time.time() - t0, None, None)


def evaluate_experts(
    tasks: list[str] | None,
    episodes: int,
    seed: int,
    out: str | os.PathLike,
    camera: str = "cam_high",
    progress: bool = True,
) -> dict[str, EvalResult]:
    """Every task's scripted expert in the sim, evaluated like any policy: ``out/<task>/`` holds the
    videos of its first episodes, ``out/summary.json`` every task's success rate.

    Raises:
        ValueError: an unknown task.
    """
    import embodied_gym
    from embodied_gym.sim.tasks import TASKS

    tasks = list(tasks or TASKS)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; valid: {sorted(TASKS)}")
    results = {}
    for task in tasks:
        results[task] = evaluate_policy(
            "expert",
            embodied_gym.env_id(task),
            episodes,
            seed,
            videos=str(Path(out) / task),
            cameras=(camera,),
            progress=progress,
        )
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic.write_json(
        Path(out) / "summary.json",
        {
            t: {
                "success_rate": r.success_rate,
                "ci95": list(r.ci95),
                "episodes": r.episodes,
                "videos": str(Path(out) / t),
            }
            for t, r in results.items()
        },
    )
    return results
