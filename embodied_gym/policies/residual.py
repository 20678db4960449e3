"""Residual RL over a frozen ACT policy with stable-baselines3: the library RL baseline beside TPO.

TPO (:mod:`embodied_gym.policies.tpo`, the paper's RL step) fine-tunes ACT's own weights from trajectory
preferences. This baseline leaves ACT frozen and learns a small correction on top of it with PPO or SAC
from stable-baselines3, in the same (calibrated) sim env, on the same observation, with a rollout budget
counted in env steps (residual policy learning, Silver et al. 2018, arXiv 1812.06298; Johannink et al.
2019, arXiv 1812.03201). Every step:

- ACT proposes ``base`` (14 absolute joint targets) from the observation, as it is deployed (its temporal
  ensembling included);
- the residual policy reads ``[joint_pos, (base - mean) / std, object_pose_estimate]`` (``mean``/``std``:
  ACT's action normaliser, the spread of the demonstrations' actions) and outputs ``r`` in [-1, 1]^14;
- the env executes ``base + scale * std * r``, so ``scale`` bounds the correction in units of the
  demonstrations' spread per joint (a zero residual is ACT itself).

The reward is the task env's own dense reward (reach, grasp, lift, success; see the env's docstring).

Outputs in ``out``: ``residual.zip`` (the SB3 model), ``residual.json`` (the base policy folder, ``scale``,
the algorithm, the greedy in-sim success of ACT alone and with the residual), ``checkpoint.zip`` with
``checkpoint.json`` (the last saved training state: a rerun resumes from it), ``monitor.csv`` (SB3's
episode log) and ``residual.png`` (episode return and success over training). ``embodied-gym eval
--policy OUT`` runs ACT with the residual (:class:`ResidualAgent`); models are loaded without unpickling
(:func:`~embodied_gym.policies.safe_loading.load_sb3_model`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from embodied_gym import atomic
from embodied_gym.configs import require, setting
from embodied_gym.perception.pose_entry import KEY
from embodied_gym.progress import on_terminal

#: the file in a residual policy folder that names its base policy (what :func:`load_residual` looks for)
RESIDUAL_META = "residual.json"
RESIDUAL_MODEL = "residual.zip"
ALGOS = ("PPO", "SAC")


@dataclass
class ResidualRLConfig:
    """One residual-RL run; also the ``embodied-gym train residual`` command line and its ``--config`` YAML."""

    policy: str | None = setting(None, required=True, help="ACT folder (the frozen base policy)")
    env_id: str | None = setting(None, required=True, flag="--env", help="sim env id, e.g. EmbodieDreamer-PickCup-v0")
    out: str | None = setting(None, required=True, help="output folder: residual.zip, residual.json, residual.png")
    algo: str = setting("PPO", choices=ALGOS, help="the stable-baselines3 algorithm")
    total_steps: int = setting(30_000, help="env steps of training (the rollout budget)")
    scale: float = setting(0.1, help="the largest correction, in units of the demonstrations' action std per joint")
    learning_rate: float = setting(3e-4, help="the algorithm's learning rate")
    n_steps: int = setting(1024, help="PPO: env steps per env between updates")
    batch_size: int = setting(128, help="minibatch size")
    gamma: float = setting(0.98, help="discount")
    log_std_init: float = setting(-0.5, help="PPO: initial log std of the residual's Gaussian (exploration)")
    n_envs: int = setting(1, help="envs stepped in parallel (one process each when > 1; changes the episodes drawn)")
    physics: str | None = setting(None, help="calibrated physics JSON (PhysAligner result)")
    pose_update: str | None = setting(
        None, choices=("every_frame", "at_reset"), help="when the pose estimate is refreshed (default: the policy's)"
    )
    pose_estimator: str | None = setting(
        None,
        metavar="DIR",
        help="a base policy on estimated object poses: the estimator its training and evaluation episodes read "
        "(default: the one the base policy was trained with), e.g. a sim-corrected copy (demo stage "
        "perception_sim_offset)",
    )
    max_episode_steps: int | None = setting(None, help="episode length (default: the env's time limit)")
    seed: int = setting(0, help="seed of the algorithm and of the training episodes' resets")
    save_every: int = setting(5_000, help="env steps between checkpoints (a rerun resumes from the last)")
    eval_episodes: int = setting(50, help="greedy in-sim episodes of ACT alone and with the residual; 0: none")
    eval_seed: int = setting(10_000, help="evaluation episode i is reset with eval_seed + i")
    eval_workers: int = setting(1, help="processes that run the evaluation episodes", cache_key=False)
    num_threads: int | None = setting(None, flag="--threads", help="torch CPU threads")
    progress: bool = setting(True, cli=False)


# ----------------------------------------------------------------------------- the residual's observation
def residual_observation(obs: dict, base_norm: np.ndarray) -> np.ndarray:
    """``[joint_pos, normalised base action, object_pose_estimate]`` (float32), what the residual reads."""
    parts = [np.asarray(obs["joint_pos"], np.float32), base_norm.astype(np.float32)]
    if KEY in obs:
        parts.append(np.asarray(obs[KEY], np.float32))
    return np.concatenate(parts)


class ResidualACTWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The env as the residual policy sees it: ACT (``base``, frozen) proposes, the action ``r`` in
    [-1, 1]^14 corrects by ``scale * std * r`` (see the module docstring). ``env``: made for the base
    policy (:func:`~embodied_gym.factory.make_env_for`), so it carries the pose estimate ACT reads."""

    def __init__(self, env: gym.Env, base, scale: float):
        gym.utils.RecordConstructorArgs.__init__(self, base=base, scale=scale)
        gym.Wrapper.__init__(self, env)
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.base, self.scale = base, float(scale)
        self.mean, self.std = base.action_stats()
        space = env.observation_space
        estimate = space.spaces.get(KEY) if isinstance(space, gym.spaces.Dict) else None
        size = 28 + (estimate.shape[0] if estimate is not None and estimate.shape else 0)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (14,), np.float32)
        self._proposal = np.zeros(14, np.float32)

    def _observe(self, obs: dict) -> np.ndarray:
        self._proposal = self.base(obs)
        return residual_observation(obs, (self._proposal - self.mean) / self.std)

    def reset(self, *, seed=None, options=None):
        self.base.reset()
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs), info

    def step(self, action):
        r = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        target = self._proposal + self.scale * self.std * r
        obs, reward, terminated, truncated, info = self.env.step(target)
        return self._observe(obs), reward, terminated, truncated, info


class ResidualAgent:
    """ACT with a trained residual (a folder written by :func:`train_residual`), as an agent
    (:mod:`embodied_gym.policies.agents`); the env is made for the base policy (``base_agent``)."""

    name = "residual"

    def __init__(self, path: str | os.PathLike, device: str = "cpu", *, trust_policy_file: bool = False):
        from embodied_gym.policies.agents import ACTAgent
        from embodied_gym.policies.safe_loading import load_sb3_model

        self.path = Path(path)
        self.meta = read_residual_meta(self.path)
        self.base_agent = ACTAgent(self.meta["base_policy"], device=device, trust_policy_file=trust_policy_file)
        self.model, _ = load_sb3_model(self.path / RESIDUAL_MODEL, device=device, trust_policy_file=trust_policy_file)
        self.scale = float(self.meta["scale"])
        self.mean, self.std = self.base_agent.action_stats()
        self.requirements = self.base_agent.requirements

    def reset(self) -> None:
        self.base_agent.reset()

    def __call__(self, obs, info=None) -> np.ndarray:
        base = self.base_agent(obs)
        r, _ = self.model.predict(residual_observation(obs, (base - self.mean) / self.std), deterministic=True)
        return (base + self.scale * self.std * np.clip(r, -1.0, 1.0)).astype(np.float32)


def read_residual_meta(folder: Path) -> dict:
    """``residual.json`` of a residual policy folder, checked."""
    path = Path(folder) / RESIDUAL_META
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{folder} has no {RESIDUAL_META}: not a residual policy folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({e}); rerun `embodied-gym train residual`") from None
    for key, typ in (("base_policy", str), ("scale", (int, float))):
        if not isinstance(meta.get(key), typ):
            raise ValueError(f"{path}: {key!r} missing or of the wrong type; rerun `embodied-gym train residual`")
    if not (Path(folder) / RESIDUAL_MODEL).is_file():
        raise FileNotFoundError(f"{folder} has no {RESIDUAL_MODEL}; rerun `embodied-gym train residual`")
    return meta


def is_residual_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / RESIDUAL_META).is_file()


# ----------------------------------------------------------------------------- training
def make_residual_env(cfg: ResidualRLConfig, rank: int = 0) -> gym.Env:
    """One training env: the sim env made for the base policy (calibrated physics, pose estimate), wrapped
    with SB3's ``Monitor`` (rank 0 writes ``monitor.csv``) and :class:`ResidualACTWrapper`."""
    import torch
    from stable_baselines3.common.monitor import Monitor

    from embodied_gym.factory import make_env_for
    from embodied_gym.policies.agents import ACTAgent

    if cfg.num_threads or cfg.n_envs > 1:
        torch.set_num_threads(cfg.num_threads or 1)
    base = ACTAgent(require(cfg.policy, "policy"))
    extra: dict[str, Any] = {"max_episode_steps": cfg.max_episode_steps} if cfg.max_episode_steps else {}
    env = make_env_for(
        base,
        require(cfg.env_id, "env_id"),
        physics=cfg.physics,
        pose_update=cfg.pose_update,
        pose_estimator=cfg.pose_estimator,
        **extra,
    )
    monitor = Path(require(cfg.out, "out")) / "monitor.csv" if rank == 0 else None
    # a new log gets SB3's header lines; a resumed run appends to its log
    fresh = monitor is None or not monitor.exists()
    logged = Monitor(env, str(monitor) if monitor else None, info_keywords=("is_success",), override_existing=fresh)
    return ResidualACTWrapper(logged, base, cfg.scale)


def _check_config(cfg: ResidualRLConfig) -> None:
    import embodied_gym

    if not (cfg.policy and cfg.env_id and cfg.out):
        raise ValueError(
            "residual RL needs a base ACT policy, a sim env id and an output folder (--policy --env --out)"
        )
    if cfg.algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {cfg.algo!r}")
    for name in ("total_steps", "n_envs", "save_every", "n_steps", "batch_size"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.scale <= 0:
        raise ValueError(f"scale must be > 0, got {cfg.scale}")
    if embodied_gym.parse_env_id(cfg.env_id).real:
        raise ValueError(f"--env {cfg.env_id}: residual RL trains in the simulator; give a sim id (without -Real-)")
    if not Path(cfg.policy).exists():
        raise FileNotFoundError(f"--policy {cfg.policy}: no such ACT folder")


def train_residual(cfg: ResidualRLConfig) -> dict:
    """Train (or resume) the residual, evaluate ACT alone and with it greedily in the sim, write ``out``;
    returns ``residual.json``'s content.

    Raises:
        ValueError: a missing or bad setting, or a -Real- env id.
        FileNotFoundError: the base policy folder is missing.
    """
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from embodied_gym.policies.act import resolve_pretrained_dir
    from embodied_gym.policies.safe_loading import load_sb3_model

    _check_config(cfg)
    out = Path(require(cfg.out, "out"))
    out.mkdir(parents=True, exist_ok=True)
    finished = _finished(out, cfg)
    if finished is not None:  # a rerun of a finished run: nothing to do
        return finished
    base_dir = resolve_pretrained_dir(require(cfg.policy, "policy"))
    cfg = ResidualRLConfig(**{**asdict(cfg), "policy": str(base_dir)})
    factories = [_EnvFactory(cfg, rank) for rank in range(cfg.n_envs)]
    venv = SubprocVecEnv(factories, start_method="spawn") if cfg.n_envs > 1 else DummyVecEnv(factories)
    venv.seed(cfg.seed)
    state_path, ckpt = out / "checkpoint.json", out / "checkpoint.zip"
    algo = getattr(sb3, cfg.algo)
    t0 = time.time()
    try:
        if state_path.exists() and ckpt.exists():
            model, _ = load_sb3_model(ckpt)
            model.set_env(venv)
            done = int(json.loads(state_path.read_text())["steps"])
        else:
            model = algo("MlpPolicy", venv, seed=cfg.seed, verbose=0, **_algo_kwargs(cfg))
            done = 0

        class Checkpoint(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps - getattr(self, "last", done) >= cfg.save_every:
                    self.last = self.num_timesteps
                    _save_checkpoint(self.model, out, self.num_timesteps)
                return True

        if done < cfg.total_steps:
            model.learn(
                cfg.total_steps - done,
                callback=Checkpoint(),
                reset_num_timesteps=done == 0,
                progress_bar=cfg.progress and on_terminal(),
            )
            _save_checkpoint(model, out, cfg.total_steps)
    finally:
        venv.close()
    with atomic.atomic_path(out / RESIDUAL_MODEL) as tmp:
        model.save(tmp)
    meta: dict[str, Any] = {
        "base_policy": str(base_dir),
        "scale": cfg.scale,
        "algo": cfg.algo,
        "env_id": cfg.env_id,
        "config": asdict(cfg),
        "train_time_s": time.time() - t0,
    }
    atomic.write_json(out / RESIDUAL_META, meta)
    if cfg.eval_episodes:
        meta["eval"] = {"base": _evaluate(cfg, str(base_dir)), "residual": _evaluate(cfg, str(out))}
        atomic.write_json(out / RESIDUAL_META, meta)
    plot_training(out / "monitor.csv", out / "residual.png")
    return meta


def _finished(out: Path, cfg: ResidualRLConfig) -> dict | None:
    """``residual.json`` of a run in ``out`` that trained ``cfg.total_steps`` and evaluated as asked, else None."""
    meta_path, state = out / RESIDUAL_META, out / "checkpoint.json"
    if not (meta_path.exists() and state.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    if int(json.loads(state.read_text())["steps"]) < cfg.total_steps or bool(cfg.eval_episodes) != ("eval" in meta):
        return None
    return meta


class _EnvFactory:
    """A picklable env constructor for SB3's vector envs (spawned processes rebuild it)."""

    def __init__(self, cfg: ResidualRLConfig, rank: int):
        self.cfg, self.rank = cfg, rank

    def __call__(self) -> gym.Env:
        return make_residual_env(self.cfg, self.rank)


def _algo_kwargs(cfg: ResidualRLConfig) -> dict:
    common = dict(learning_rate=cfg.learning_rate, batch_size=cfg.batch_size, gamma=cfg.gamma, device="cpu")
    if cfg.algo == "PPO":
        return dict(common, n_steps=cfg.n_steps, policy_kwargs=dict(log_std_init=cfg.log_std_init))
    return dict(common, learning_starts=min(1000, cfg.total_steps // 4))


def _save_checkpoint(model, out: Path, steps: int) -> None:
    """``checkpoint.zip`` and then ``checkpoint.json`` (its step count), each written atomically."""
    with atomic.atomic_path(out / "checkpoint.zip") as tmp:
        model.save(tmp)
    atomic.write_json(out / "checkpoint.json", {"steps": int(steps)})


def _evaluate(cfg: ResidualRLConfig, policy: str) -> dict:
    from embodied_gym.policies.evaluate import evaluate_policy

    r = evaluate_policy(
        policy,
        require(cfg.env_id, "env_id"),
        cfg.eval_episodes,
        seed=cfg.eval_seed,
        physics=cfg.physics,
        pose_update=cfg.pose_update,
        pose_estimator=cfg.pose_estimator,
        max_episode_steps=cfg.max_episode_steps,
        workers=cfg.eval_workers,
        progress=cfg.progress,
    )
    return {"success_rate": r.success_rate, "ci95": list(r.ci95), "successes": [bool(e.success) for e in r.per_episode]}


def plot_training(monitor_csv: Path, png: Path, window: int = 20) -> None:
    """Episode return and success (running mean over ``window`` episodes) against env steps."""
    if not monitor_csv.exists():
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [line.split(",") for line in monitor_csv.read_text().splitlines()[2:] if line.strip()]
    if not rows:
        return
    ret = np.array([float(r[0]) for r in rows])
    length = np.array([float(r[1]) for r in rows])
    success = np.array([r[3].strip() == "True" for r in rows], float)
    steps = np.cumsum(length)
    kernel = np.ones(min(window, len(rows))) / min(window, len(rows))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.plot(steps, ret, ".", ms=2, alpha=0.4)
    a1.plot(steps[len(kernel) - 1 :], np.convolve(ret, kernel, "valid"))
    a1.set(xlabel="env steps", ylabel="episode return", title="return")
    a2.plot(steps[len(kernel) - 1 :], np.convolve(success, kernel, "valid"))
    a2.set(xlabel="env steps", ylabel=f"success (mean of {len(kernel)} episodes)", ylim=(-0.02, 1.02), title="success")
    fig.tight_layout()
    atomic.save_figure(fig, png)
