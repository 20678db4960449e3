"""TPO: trajectory-wise preference optimisation of an ACT policy in the (aligned) simulator
(EmbodieDreamer, arXiv 2507.05198, policy training; the loss of GRAPE, arXiv 2411.19309).

One iteration:

1. Roll the current policy out ``rollouts`` times (episode ``i`` of iteration ``k`` reset with seed
   ``seed + 1000 k + i``) in the sim env, with calibrated physics (``physics``) and VisAligner
   observations (``visaligner``) when given.
2. Score each trajectory (:mod:`embodied_gym.policies.scoring`: success plus the end-effector's
   closeness to the task target) and pair the i-th best with the i-th worst: top ``M`` as
   preferred, bottom ``M`` as rejected (``M`` = ``pairs``, 25 by default).
3. For ``epochs`` epochs minimise, over the pairs,
   ``L = -log σ(β·[(log π_θ(τ_w) - log π_ref(τ_w)) - (log π_θ(τ_l) - log π_ref(τ_l))])``
   with π_ref a frozen copy of the starting (SFT) policy.

**ACT's likelihood.** ACT is deterministic and trained with L1, so we treat it as the Laplace
policy ``π(a | o) = Π_d Laplace(a_d; â_d(o), b)`` in LeRobot's *normalised* action units
(mean/std of the dataset), with ``b`` = ``laplace_scale`` (0.1 by default: a tenth of a joint's
standard deviation over the demonstrations), so
``log π(a | o) = -‖a - â(o)‖₁ / b - 14·log(2b)``.
With action chunking the policy is queried every ``n_action_steps`` steps; the action executed
at step ``s + j`` is element ``j`` of the chunk predicted at ``o_s``, and that element is the
``â`` its likelihood uses (with temporal ensembling, ``n_action_steps`` = 1: element 0 at every step).
With ``rollout_action`` = "ensemble" (a policy trained with temporal ensembling) ``â`` is instead the
action the ensemble executes, as ``eval`` deploys the policy: the weighted mean of element ``t - s`` of
every chunk predicted at the last ``chunk_size`` steps ``s`` (:func:`temporal_ensemble`), so the
likelihood's gradient reaches each of those chunks; element 0 alone carries about 1/``chunk_size``
of a deployed action.
``log π(τ)`` sums over every executed step. Rollouts *sample* this policy (Laplace noise of scale
``b`` added to each executed action in normalised units): a deterministic rollout would make every
executed action equal to ``â`` and the L1 likelihood's gradient zero. ``â`` is computed with ACT's
inference path (latent zero, dropout off) and gradients on, in one forward pass over every query step of
a gradient step's trajectories (:meth:`ACTLikelihood.log_probs`).

**Policies on estimated object poses.** An ACT policy with the ``observation.environment_state``
input (trained on a dataset recorded with ``--pose-estimator``) rolls out in the sim env wrapped with
:class:`~embodied_gym.perception.PoseEstimateWrapper` and the estimator its
``embodied_gym_policy.json`` names (``pose_estimator``: folder and sha256 of its weights; a folder
whose weights changed is refused) or ``TPOConfig.pose_estimator``'s, as ``eval`` does. Each trajectory
stores the estimate the policy saw at every query step (``obs["object_pose_estimate"]``, computed from
the camera frame, never the simulator's state), and the likelihoods are computed on batches that
include it. The checkpoints keep ``env_state`` and name the estimator the rollouts used, so ``eval``
rebuilds the observation TPO trained on.

**Optional anchor (not in the paper).** Minimising the preference loss alone can push both
likelihoods down as long as the rejected one falls faster, which drifts a weak policy away from
anything it did well. ``sft_weight`` > 0 adds ``sft_weight`` × ACT's L1 loss on the preferred
trajectories (normalised units), the negative-log-likelihood anchor of RPO (Pang et al. 2024,
"Iterative Reasoning Preference Optimization"). The default, 0, is the paper's loss.

**Which iteration it returns (not in the paper, whose loop repeats "until it converges").** The
preference loss saturates within a few epochs (a trajectory's log-likelihood sums 14 action
dimensions over every step, so the margins grow far past where the sigmoid flattens) and the
remaining updates can move the policy far from π_ref, for better or worse (BENCHMARKS.md, "The demo",
its TPO rows). With ``select = "best"`` (the default) and
``eval_episodes`` > 0, π_ref and every iteration's checkpoint are evaluated greedily in the same sim
env (calibrated physics, VisAligner, pose estimate; exactly what ``embodied-gym eval`` runs on that
checkpoint, with ``eval_temporal_ensemble`` as deployed, on the seeds ``eval_seed``, ``eval_seed`` + 1,
...: never the rollouts' seeds), and the policy the run returns is the one with the highest success
rate, ties going to the earlier iteration (π_ref counts as iteration 0, so TPO never returns a
policy worse in the sim than the one it started from, up to the evaluation's noise). The sampled
rollouts' success is not used for this: it measures the noisy policy. ``select = "last"`` returns
the last iteration, as the paper's loop does.

Outputs in ``out``: ``pretrained_model/`` (the policy the run returns, which ``eval --policy OUT``
loads; its ``embodied_gym_policy.json`` says which iteration it is under ``tpo_selected``),
``checkpoints/<iteration>/`` (every iteration, loadable, with the state to resume),
``tpo_log.jsonl`` (per iteration: scores, rollout success, loss, the greedy evaluation with each
episode's success; iteration 0 is π_ref's evaluation) and ``tpo.png``. A rerun with the same ``out``
resumes after the last finished iteration.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_gym import atomic
from embodied_gym.checkpoints import CheckpointStore
from embodied_gym.configs import require, setting
from embodied_gym.data import features as F
from embodied_gym.policies.act import POLICY_META, make_optimizer, save_checkpoint
from embodied_gym.policies.act.checkpoints import MODEL_DIR
from embodied_gym.policies.act.training import perturb_arm_state
from embodied_gym.policies.scoring import target_distance, trajectory_score
from embodied_gym.processes import BACKENDS, import_ray, worker_pool
from embodied_gym.progress import progress_bar, report


@dataclass
class TPOConfig:
    """One TPO run (defaults: the paper's TPO settings where it gives them, GRAPE's β = 0.1); also
    the ``embodied-gym train tpo`` command line and its ``--config`` YAML."""

    policy: str | None = setting(None, required=True, help="ACT folder (the reference policy)")
    env_id: str | None = setting(None, required=True, flag="--env", help="sim env id, e.g. EmbodieDreamer-PickCup-v0")
    out: str | None = setting(None, required=True, help="output folder: checkpoints/, tpo_log.jsonl, tpo.png")
    iterations: int = setting(3, help="rollout-and-update iterations")
    rollouts: int | None = setting(None, help="rollouts per iteration (default 2 x pairs)")
    pairs: int = setting(25, help="M: at most M (preferred, rejected) pairs per iteration (default 25)")
    rollouts_per_seed: int = setting(
        4,
        help="K: rollouts from each start state (the same reset seed); pairs are made within those groups, "
        "so a pair differs by the actions, not by the layout. 1: the paper's ranking of all rollouts",
    )
    min_score_gap: float = setting(
        0.05, help="a pair needs the preferred trajectory's score above the rejected one's by more than this"
    )
    likelihood: str = setting(
        "mean",
        choices=("mean", "sum"),
        help="log π(τ) in the loss: the mean over executed steps (margins comparable across lengths) or the "
        "sum (the paper's; margins grow with length and the loss saturates in the first epochs)",
    )
    beta: float = setting(1.0, help="β of the preference loss (the paper's 0.1 goes with --likelihood sum)")
    epochs: int = setting(80, help="passes over the preference pairs per iteration")
    lr: float = setting(1e-5, help="learning rate")
    batch_size: int = setting(8, help="preference pairs per gradient step")
    laplace_scale: float = setting(0.1, help="b of the Laplace likelihood, in normalised action units")
    rollout_action: str = setting(
        "chunk",
        choices=("chunk", "ensemble"),
        help="what the rollouts' noise is added to and each executed action's likelihood is centred on: 'chunk', "
        "the element of the newest predicted chunk that step runs; 'ensemble', the action ACT's temporal "
        "ensembling deploys (the weighted mean over every chunk predicted in the last chunk_size steps; a policy "
        "trained with --temporal-ensemble), so TPO samples and scores the policy as eval runs it",
    )
    rollout_noise: float | None = setting(
        None,
        help="b of the Laplace noise the rollouts sample with (default: "
        "laplace_scale, sampling the policy's own likelihood); "
        "smaller keeps rollouts near the deployed policy",
    )
    sft_weight: float = setting(
        0.01,
        help="add this times the preferred trajectories' negative log-likelihood per step (RPO's anchor; 0: the "
        "paper's loss)",
    )
    rollout_poses: str = setting(
        "estimate",
        choices=("estimate", "ground_truth"),
        help="a policy on estimated object poses: what its rollouts read, the estimator's estimate from the sim's "
        "frames or the sim's true poses in the estimate's layout (the evaluation that picks the returned policy "
        "reads the estimate, as deployed)",
    )
    physics: str | None = setting(None, help="calibrated physics JSON (PhysAligner result)")
    state_noise: float | None = setting(
        None,
        metavar="RAD",
        help="std of Gaussian noise on the 12 arm joints of the state in every preference step, the same draw for "
        "the policy and the reference, as ACT's training adds it (act --state-noise: without it a policy "
        "trained on the sim's noiseless states can read the time off the idle arm); default: the reference "
        "policy's own training setting (0 if it records none)",
    )
    contact_spread: float = setting(
        0.0,
        help="redraw the grip's physics (finger gain, pad and object friction, object mass), which calibration "
        "does not see, in every rollout and in-sim evaluation episode: each scaled by exp(U(-s, s)), drawn from "
        "the episode's seed (0: the simulator's nominal grip)",
    )
    visaligner: str | None = setting(None, help="VisAligner model folder (observations rendered photoreal)")
    visaligner_steps: int | None = setting(None, help="denoising steps per generated frame (default: the model's)")
    seed: int = setting(0, help="seed of the rollouts and the pair sampler")
    eval_episodes: int = setting(
        50,
        help="greedy evaluation episodes in the sim env (as `eval` runs a checkpoint) of "
        "the reference policy and of every iteration; 0: none (and select is "
        "then 'last')",
    )
    eval_seed: int = setting(
        10_000, help="evaluation episode i is reset with eval_seed + i (the rollouts use seed + 1000 k + i)"
    )
    eval_temporal_ensemble: float | None = setting(
        None,
        metavar="COEFF",
        help="ACT temporal ensembling in the evaluation, as the policy is "
        "deployed (`eval --temporal-ensemble`; default: the "
        "policy's own setting)",
    )
    eval_workers: int = setting(
        1, help="processes that run the evaluation episodes (results do not change)", cache_key=False
    )
    rollout_workers: int = setting(
        1, help="processes that run the rollouts, one torch thread each (results do not change)", cache_key=False
    )
    backend: str = setting(
        "local",
        choices=BACKENDS,
        help="where the rollouts run: local processes (rollout_workers > 1), or Ray tasks of one CPU "
        "each, on a local Ray instance of rollout_workers CPUs or the one the caller started (whose "
        "workers must see the run folder; pip install 'embodied-gym[ray]'); results do not change",
        cache_key=False,
    )
    select: str = setting(
        "best",
        choices=("best", "last"),
        help="the policy the run returns (OUT/pretrained_model): the best greedy evaluation in the "
        "sim, the reference included, ties to the earlier iteration; or the last iteration",
    )
    num_threads: int | None = setting(None, flag="--threads", help="torch CPU threads")
    device: str = setting(
        "cpu", help="torch device of the policy (rollouts and updates) and of VisAligner's frames: cpu or cuda"
    )
    max_episode_steps: int | None = setting(None, help="rollout length (default: the env's time limit)")
    pose_estimator: str | None = setting(
        None,
        help="pose estimator folder for a policy on estimated object poses "
        "(observation.environment_state); default: the one its "
        "embodied_gym_policy.json names",
    )
    pose_update: str | None = setting(
        None,
        choices=("every_frame", "at_reset"),
        help="a policy on estimated object poses: estimate every camera frame, or the "
        "reset frame only and hold it (default: as its data was recorded); "
        "roll out with the observation the policy is deployed with",
    )
    progress: bool = setting(True, cli=False)

    def n_rollouts(self) -> int:
        return self.rollouts if self.rollouts is not None else 2 * self.pairs

    def rollout_plan(self, iteration: int) -> list[tuple[int, int]]:
        """Iteration ``iteration``'s rollouts as ``(reset seed, sample seed)``: ``rollouts_per_seed``
        consecutive rollouts share a reset seed (``seed + 1000 * iteration + group``); every rollout draws
        its noise from its own generator, so the rollouts do not depend on where they run."""
        k = max(1, self.rollouts_per_seed)
        return [
            (self.seed + 1000 * iteration + i // k, self.seed * 1_000_003 + 7919 * iteration + i)
            for i in range(self.n_rollouts())
        ]


@dataclass
class Trajectory:
    """What TPO needs of one rollout: the observations where the policy was queried and the
    actions executed from each of those queries. ``env_state`` is the pose estimate the policy read
    at each query step (``obs["object_pose_estimate"]``), None for a policy without that input."""

    seed: int
    states: torch.Tensor  # (Q, 14) at each query step
    images: dict[str, torch.Tensor]  # key -> (Q, 3, h, w) uint8
    actions: torch.Tensor  # (Q, k, 14) executed actions (joint targets), padded
    mask: torch.Tensor  # (Q, k) bool, True where an action was executed
    success: bool
    distance: float
    score: float
    ret: float
    length: int
    env_state: torch.Tensor | None = None  # (Q, E) float32 at each query step: the estimate the policy saw


# ----------------------------------------------------------------------------- the loss
def tpo_loss(
    logp_w: torch.Tensor, ref_logp_w: torch.Tensor, logp_l: torch.Tensor, ref_logp_l: torch.Tensor, beta: float
) -> torch.Tensor:
    """Mean over pairs of ``-log σ(β·[(log π_θ(τ_w) - log π_ref(τ_w)) - (log π_θ(τ_l) - log π_ref(τ_l))])``."""
    margin = (logp_w - ref_logp_w) - (logp_l - ref_logp_l)
    return -torch.nn.functional.logsigmoid(beta * margin).mean()


def preference_pairs(scores, m: int, min_gap: float = 0.0) -> list[tuple[int, int]]:
    """Indices ``(preferred, rejected)``: the i-th best trajectory with the i-th worst, top ``m`` vs
    bottom ``m`` (``m`` is capped at half the trajectories), where the preferred one scores more than
    ``min_gap`` higher. Ties keep rollout order."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties in rollout order
    m = min(m, len(scores) // 2)
    top, bottom = order[:m], order[::-1][:m]
    return [(w, l) for w, l in zip(top, bottom) if scores[w] > scores[l] + min_gap]


def grouped_preference_pairs(scores, groups, m: int, min_gap: float = 0.0) -> list[tuple[int, int]]:
    """Pairs within groups of rollouts from the same start state (``groups[i]``: rollout i's reset seed):
    in each group the i-th best with the i-th worst, as :func:`preference_pairs`; of all of them the
    ``m`` with the largest score gaps (ties in rollout order). Comparing rollouts of one start state
    credits the actions: across start states the easy layouts would be preferred whatever was done."""
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    pairs = []
    for idx in members.values():
        local = preference_pairs([scores[i] for i in idx], len(idx), min_gap)
        pairs += [(idx[w], idx[l_]) for w, l_ in local]
    pairs.sort(key=lambda p: -(scores[p[0]] - scores[p[1]]))  # stable
    return pairs[: max(0, m)]


def laplace_log_prob(
    actions_norm: torch.Tensor, predicted_norm: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Sum of ``log Laplace(a; â, b)`` over masked steps and all action dims: (B, k, D) -> (B,)."""
    d = actions_norm.shape[-1]
    per_step = -(actions_norm - predicted_norm).abs().sum(-1) / scale - d * math.log(2 * scale)
    return (per_step * mask).sum(-1)


def temporal_ensemble(chunks: torch.Tensor, coeff: float) -> torch.Tensor:
    """The actions ACT's temporal ensembling executes for one episode's chunks, all at once and differentiable:
    ``chunks`` (T, C, D), the chunk predicted at every step, -> (T, D). The action at step t averages element
    t - s of every chunk s in (t - C, t], with weights exp(-coeff * i), i = 0 for the oldest chunk (LeRobot's
    ``ACTTemporalEnsembler``, which computes the same average online)."""
    steps, size = chunks.shape[:2]
    t = torch.arange(steps, device=chunks.device)[:, None]
    j = torch.arange(size, device=chunks.device)[None, :]
    source = t - j  # the chunk whose element j is due at step t
    in_window = (source >= 0).to(chunks.dtype)
    age = (torch.clamp(t + 1, max=size) - 1 - j).clamp(min=0)  # 0: the oldest chunk in the window
    weights = torch.exp(-coeff * age.to(chunks.dtype)) * in_window
    values = chunks[source.clamp(min=0), j.expand(steps, size)]  # (T, C, D)
    return (weights[..., None] * values).sum(1) / weights.sum(1, keepdim=True)


class ACTLikelihood:
    """``log π(τ)`` of an ACT policy for stored trajectories (see the module docstring)."""

    def __init__(self, policy, preprocessor, scale: float, reduction: str = "sum", ensemble_coeff: float | None = None):
        if reduction not in ("sum", "mean"):
            raise ValueError(f"likelihood must be 'sum' or 'mean', got {reduction!r}")
        self.policy, self.pre, self.scale, self.reduction = policy, preprocessor, scale, reduction
        self.ensemble_coeff = ensemble_coeff  # not None: centre each step on the temporal ensemble

    def chunk_predictions(self, states, images: dict, actions, env_state=None):
        """Normalised (executed actions, predicted chunk) for a batch of query steps; grad flows.
        ``env_state`` (Q, E): the pose estimates, for a policy with the environment-state input."""
        batch = {F.STATE: states, F.ACTION: actions}
        batch.update({k: v.float() / 255.0 for k, v in images.items()})
        if F.ENV_STATE in self.policy.config.input_features:
            if env_state is None:
                raise ValueError(
                    f"the policy takes {F.ENV_STATE} (estimated object poses) but the trajectory has "
                    f"none; roll it out in an env wrapped with PoseEstimateWrapper (train_tpo does)"
                )
            batch[F.ENV_STATE] = env_state
        batch = self.pre(batch)
        actions_norm = batch.pop(F.ACTION)
        if self.policy.config.image_features:  # ACT takes its batch size from the first image when present
            batch[F.IMAGES] = [batch[k] for k in self.policy.config.image_features]
        predicted = self.policy.model(batch)[0]  # inference path: no "action" key -> latent 0
        if self.ensemble_coeff is not None:  # every chunk whole: log_probs ensembles them per trajectory
            return actions_norm, predicted
        k = actions_norm.shape[1]
        return actions_norm, predicted[:, :k]

    def log_prob(self, traj: Trajectory, with_nll: bool = False):
        """``log π(τ)`` (``reduction`` "mean": divided by the executed steps); with ``with_nll`` also the
        negative log-likelihood per executed step (the anchor's term, whatever the reduction)."""
        out = self.log_probs([traj], with_nll)
        return (out[0][0], out[1][0]) if with_nll else out[0]

    def log_probs(self, trajs: list[Trajectory], with_nll: bool = False):
        """:meth:`log_prob` of several trajectories from one forward pass over all their query steps: (N,)
        (and the (N,) NLLs per step with ``with_nll``). ACT's query steps are independent samples in
        eval mode, so this equals one pass per trajectory and spends the time in a few large matrix
        products instead of many small ones."""
        if not trajs:
            raise ValueError("log_probs needs at least one trajectory")
        has_state = [t.env_state is not None for t in trajs]
        if any(has_state) and not all(has_state):
            raise ValueError("some trajectories carry a pose estimate (env_state) and some do not")
        images = {k: torch.cat([t.images[k] for t in trajs]) for k in trajs[0].images}
        env_state = torch.cat([t.env_state for t in trajs]) if all(has_state) else None  # type: ignore[misc]
        actions = torch.cat([t.actions for t in trajs])
        a, pred = self.chunk_predictions(torch.cat([t.states for t in trajs]), images, actions, env_state)
        if self.ensemble_coeff is not None:  # a query every step, one action each: centre it on the ensemble
            if a.shape[1] != 1:
                raise ValueError("an ensembled likelihood needs one executed action per query step (n_action_steps 1)")
            chunks = pred.split([len(t.states) for t in trajs])
            pred = torch.cat([temporal_ensemble(c, self.ensemble_coeff) for c in chunks])[:, None]
        mask = torch.cat([t.mask for t in trajs]).to(a.device, torch.float32)
        owner = torch.repeat_interleave(
            torch.arange(len(trajs), device=a.device), torch.tensor([len(t.states) for t in trajs], device=a.device)
        )
        per_query = laplace_log_prob(a, pred, mask, self.scale)
        total = torch.zeros(len(trajs), dtype=per_query.dtype, device=a.device).index_add(0, owner, per_query)
        steps = torch.zeros_like(total).index_add(0, owner, mask.sum(-1)).clamp(min=1.0)
        logp = total / steps if self.reduction == "mean" else total
        return (logp, -total / steps) if with_nll else logp


# ----------------------------------------------------------------------------- rollouts
def rollout(
    agent, env, task: str, seed: int, scale: float, rng: np.random.Generator, around: str = "chunk"
) -> Trajectory:
    """One episode of ``agent`` (an :class:`~embodied_gym.policies.agents.ACTAgent`) sampling
    its Laplace policy around the newest chunk's actions (``around`` 'chunk') or around the temporal
    ensemble's action as ``eval`` deploys it ('ensemble'); stores the query observations (with the pose
    estimate, for a policy that reads it) and the executed actions."""
    policy, k = agent.policy, agent.policy.config.n_action_steps
    if around == "ensemble" and policy.config.temporal_ensemble_coeff is None:
        raise ValueError(f"{agent.path}: sampling around the temporal ensemble needs a policy with ensembling")
    std = agent.action_stats()[1]
    obs, info = env.reset(seed=seed)
    start_info = info
    states: list[torch.Tensor] = []
    images: dict[str, list[torch.Tensor]] = {F.image_key(c): [] for c in agent.cameras}
    chunks: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    env_states: list[torch.Tensor] | None = [] if agent.env_state else None
    ret, length, done = 0.0, 0, False
    while not done:
        raw = agent.observation_batch(obs)
        with torch.no_grad():
            if around == "ensemble":  # the ensembler keeps the episode's chunks (agent.reset() clears them)
                pred = agent.post(policy.select_action(agent.pre(raw))).cpu().numpy()
            else:
                pred = agent.post(policy.predict_action_chunk(agent.pre(raw)))[0, :k].cpu().numpy()
        states.append(raw[F.STATE][0])
        if env_states is not None:
            env_states.append(raw[F.ENV_STATE][0].clone())
        for key in images:
            images[key].append((raw[key][0] * 255.0).round().to(torch.uint8))
        executed = np.zeros((k, 14), np.float32)
        mask = np.zeros(k, bool)
        for j in range(k):
            noise = rng.laplace(0.0, scale, size=14) * std
            action = (pred[j] + noise).astype(np.float32)
            obs, reward, terminated, truncated, info = env.step(action)
            executed[j] = env.unwrapped.commanded_targets  # after clipping to the joint limits
            mask[j] = True
            ret += float(reward)
            length += 1
            if terminated or truncated:
                done = True
                break
        chunks.append(torch.as_tensor(executed))
        masks.append(torch.as_tensor(mask))
    success = bool(info.get("is_success"))
    dist = target_distance(task, start_info, info)
    return Trajectory(
        seed=seed,
        states=torch.stack(states),
        images={k_: torch.stack(v) for k_, v in images.items()},
        actions=torch.stack(chunks),
        mask=torch.stack(masks),
        success=success,
        distance=dist,
        score=trajectory_score(success, dist),
        ret=ret,
        length=length,
        env_state=torch.stack(env_states) if env_states is not None else None,
    )


def _estimator_for_tpo(agent, cfg: TPOConfig) -> str | None:
    """The pose estimator folder the rollouts of ``agent`` read (None for a policy without the
    environment-state input), checked as ``eval`` checks it (see
    :func:`embodied_gym.factory.make_env_for`): it must exist and, unless
    ``cfg.pose_estimator`` names it, hold the weights the policy's metadata names."""
    from embodied_gym.perception.pose_entry import estimator_source

    if not agent.env_state:
        if cfg.pose_estimator:
            raise ValueError(
                f"--pose-estimator {cfg.pose_estimator}: policy {agent.path} does not read estimated "
                f"object poses (it has no {F.ENV_STATE} input); drop the flag"
            )
        return None
    where = agent.path / POLICY_META
    folder = cfg.pose_estimator or agent.requirements.pose_estimator
    if not folder:
        raise ValueError(
            f"policy {agent.path} reads estimated object poses ({F.ENV_STATE}) but {where} names no pose "
            f"estimator; pass the estimator folder with `train tpo --pose-estimator DIR`"
        )
    try:
        have = estimator_source(folder)
    except FileNotFoundError:
        named = "--pose-estimator" if cfg.pose_estimator else f"{where}: pose_estimator.path"
        raise FileNotFoundError(
            f"the pose estimator {folder} ({named}) that policy {agent.path} reads is not "
            f"there; restore it or pass another with `train tpo --pose-estimator DIR`"
        ) from None
    want = (agent.estimator_source or {}).get("sha256")
    if want and have["sha256"] != want and not cfg.pose_estimator:
        raise ValueError(
            f"the pose estimator {folder} now holds other weights (sha256 {have['sha256'][:12]}...) than "
            f"the ones policy {agent.path} was trained with ({want[:12]}..., {where}); pass "
            f"`train tpo --pose-estimator {folder}` to use them anyway, or restore the original"
        )
    return str(folder)


def _estimator_description(env, previous: dict | None) -> dict:
    """What a checkpoint records about the estimator its rollouts read, in the fields recording writes
    (folder, sha256, camera, frame size, output names)."""
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper, PoseEstimateWrapper

    wrapper = env
    while not isinstance(wrapper, (PoseEstimateWrapper, GroundTruthPoseWrapper)):
        wrapper = wrapper.env
    about = {k: v for k, v in (previous or {}).items() if k != "update"}  # the rollouts' own update rule
    about.update(wrapper.source or {})
    if isinstance(wrapper, GroundTruthPoseWrapper):  # no camera rendered: the estimator's own frame size
        est = wrapper.config
        about.update(camera=est.camera, image_size=list(est.frame_size), names=list(est.output_names))
        return about
    est = wrapper.estimator.config
    about.update(camera=est.camera, image_size=list(env.unwrapped.image_size), names=list(est.output_names))
    return about


# ----------------------------------------------------------------------------- the loop
@dataclass
class TPORun:
    """What the TPO loop carries from one iteration to the next (built by :func:`_setup`)."""

    cfg: TPOConfig
    out: Path
    store: CheckpointStore
    log: list[dict]  # tpo_log.jsonl's rows, those after the checkpoint it resumes from dropped
    start_iter: int  # the iterations already done (the checkpoint it resumes from)
    agent: Any  # the ACTAgent TPO trains (π_θ)
    reference_dir: Path  # π_ref's folder
    estimator: str | None  # the pose estimator folder the rollouts and evaluations read
    env: Any  # the sim env of the rollouts
    optimizer: torch.optim.Optimizer
    generator: torch.Generator  # the pair sampler's
    meta: dict  # embodied_gym_policy.json of every checkpoint
    likelihood: ACTLikelihood  # log π_θ
    ref_likelihood: ACTLikelihood  # log π_ref
    noise: float  # b of the rollouts' Laplace noise
    task: str  # the env's task (the trajectory score's target)
    state_noise: float = 0.0  # std (rad) of the arm-joint noise of every preference step's states

    @property
    def log_path(self) -> Path:
        return self.out / "tpo_log.jsonl"


@dataclass
class Update:
    """One iteration's preference updates: the loss and the mean margin of every gradient step."""

    losses: list[float] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)


def train_tpo(cfg: TPOConfig) -> list[dict]:
    """Run (or resume) the TPO loop; returns the per-iteration log.

    Raises:
        ValueError: a missing policy, env id or output folder, or a -Real- env id; for a policy on
            estimated object poses, a ``pose_estimator`` folder whose weights differ from the ones
            the policy's ``embodied_gym_policy.json`` names (without ``cfg.pose_estimator``), or one
            with other outputs; ``cfg.pose_estimator`` for a policy that reads no estimate.
        FileNotFoundError: the policy's pose estimator folder is missing.
    """
    run = _setup(cfg)
    pool = None
    try:
        if cfg.eval_episodes and not any(row["iteration"] == 0 for row in run.log):
            reference = {"iteration": 0, "reference": str(run.reference_dir)}
            run.log.insert(0, {**reference, **_evaluate_in_sim(cfg, run.estimator, run.reference_dir)})
            _write_log(run.log_path, run.log)
        if (cfg.rollout_workers > 1 or cfg.backend == "ray") and run.start_iter < cfg.iterations:
            spec = (cfg, str(run.reference_dir), run.estimator, run.task)
            pool = worker_pool(cfg.backend, cfg.rollout_workers, _init_rollout_worker, spec, what="TPO rollout worker")
        for it in range(run.start_iter, cfg.iterations):
            t0 = time.time()
            trajs = _collect_rollouts(run, it, pool)
            pairs = _pairs(cfg, trajs)
            t_roll = time.time() - t0
            update = _update(run, it, trajs, pairs)
            row = _iteration_row(it, trajs, pairs, update, t_roll, time.time() - t0 - t_roll)
            _checkpoint(run, it, row)
    except BaseException:
        if pool is not None:
            pool.close(finished=False)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.close(finished=True)
        run.env.close()
    _write_selected(run.out, run.store, run.log, cfg, run.reference_dir, run.meta)
    return run.log


def _check_config(cfg: TPOConfig):
    """Refuse a run that cannot start; returns the parsed env id."""
    import embodied_gym

    if not (cfg.policy and cfg.env_id and cfg.out):
        raise ValueError(
            "TPO needs a reference policy, a sim env id and an output folder (--policy DIR --env ID --out DIR)"
        )
    if cfg.eval_episodes < 0 or cfg.eval_workers < 1:
        raise ValueError(
            f"eval_episodes must be >= 0 and eval_workers >= 1, got {cfg.eval_episodes} and {cfg.eval_workers}"
        )
    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {cfg.backend!r}")
    if cfg.backend == "ray":
        import_ray()  # says how to install it, before anything runs
    if cfg.rollout_workers < 1 or cfg.rollouts_per_seed < 1:
        raise ValueError(
            f"rollout_workers and rollouts_per_seed must be >= 1, got {cfg.rollout_workers} and {cfg.rollouts_per_seed}"
        )
    if cfg.rollout_action not in ("chunk", "ensemble"):
        raise ValueError(f"rollout_action must be 'chunk' or 'ensemble', got {cfg.rollout_action!r}")
    if cfg.likelihood not in ("mean", "sum"):
        raise ValueError(f"likelihood must be 'mean' or 'sum', got {cfg.likelihood!r}")
    if not 0.0 <= cfg.contact_spread <= 1.0:
        raise ValueError(
            f"contact_spread must be in [0, 1] (a log-scale half-width: 0.3 is about ±30 %), got {cfg.contact_spread}"
        )
    env_id = embodied_gym.parse_env_id(cfg.env_id)
    if env_id.real:
        raise ValueError(
            "TPO rolls out in the simulator (it scores trajectories from sim state); use a sim id, e.g. "
            + embodied_gym.env_id(env_id.task)
        )
    return env_id


def _setup(cfg: TPOConfig) -> TPORun:
    """Check ``cfg``, load the policies (π_θ from the last checkpoint when resuming), make the env and
    the optimizer."""
    from lerobot.optim.optimizers import load_optimizer_state

    from embodied_gym.policies.agents import ACTAgent

    task = _check_config(cfg).task
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out = Path(require(cfg.out, "out"))
    out.mkdir(parents=True, exist_ok=True)
    log = read_log(out)
    store = CheckpointStore(out, unit="iteration", keep=max(2, cfg.iterations))  # every iteration stays loadable
    latest = store.latest()
    last, start_iter = (latest.path, latest.counter) if latest else (None, 0)
    log = [row for row in log if row["iteration"] <= start_iter]

    policy = require(cfg.policy, "policy")
    agent = ACTAgent(last if last else policy, device=cfg.device)
    estimator = _estimator_for_tpo(agent, cfg)
    reference_agent = ACTAgent(policy, device=cfg.device)  # π_ref: the starting policy, frozen
    reference = reference_agent.policy
    reference.eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    ensemble = _ensemble_coeff(cfg, reference_agent)
    env = _make_rollout_env(agent, cfg, estimator)
    optimizer = make_optimizer([p for p in agent.policy.parameters() if p.requires_grad], cfg.lr, 0.0, cfg.device)
    generator = torch.Generator().manual_seed(cfg.seed)
    if last:
        optimizer = load_optimizer_state(optimizer, last / "training_state")
    meta = json.loads((agent.path / POLICY_META).read_text()) if (agent.path / POLICY_META).exists() else {}
    meta.update({"tpo": asdict(cfg)})
    if agent.env_state:  # name the estimator the rollouts read, so eval rebuilds the same observation
        meta["pose_estimator"] = _estimator_description(env, meta.get("pose_estimator"))
    return TPORun(
        cfg=cfg,
        out=out,
        store=store,
        log=log,
        start_iter=start_iter,
        agent=agent,
        reference_dir=reference_agent.path,
        estimator=estimator,
        env=env,
        optimizer=optimizer,
        generator=generator,
        meta=meta,
        likelihood=ACTLikelihood(agent.policy, agent.pre, cfg.laplace_scale, cfg.likelihood, ensemble),
        ref_likelihood=ACTLikelihood(reference, agent.pre, cfg.laplace_scale, cfg.likelihood, ensemble),
        noise=cfg.laplace_scale if cfg.rollout_noise is None else cfg.rollout_noise,
        task=task,
        state_noise=_state_noise(cfg, reference_agent),
    )


def _ensemble_coeff(cfg: TPOConfig, reference_agent) -> float | None:
    """The temporal-ensembling coefficient the likelihoods average chunks with (``rollout_action`` 'ensemble'),
    the reference policy's own; None for 'chunk'."""
    if cfg.rollout_action != "ensemble":
        return None
    coeff = reference_agent.policy.config.temporal_ensemble_coeff
    if coeff is None:
        raise ValueError(
            f"rollout_action 'ensemble': policy {cfg.policy} runs without temporal ensembling (its config's "
            "temporal_ensemble_coeff is null); train it with --temporal-ensemble COEFF, or use --rollout-action chunk"
        )
    return float(coeff)


def _state_noise(cfg: TPOConfig, reference_agent) -> float:
    """``cfg.state_noise``, else the reference policy's training state noise (0 where it records none)."""
    if cfg.state_noise is not None:
        return float(cfg.state_noise)
    return float((reference_agent.meta or {}).get("state_noise") or 0.0)


def _make_rollout_env(agent, cfg: TPOConfig, estimator: str | None):
    """The sim env the rollouts run in: calibrated physics, VisAligner frames, the pose estimate."""
    from embodied_gym.factory import make_env_for

    extra: dict[str, Any] = {"max_episode_steps": cfg.max_episode_steps} if cfg.max_episode_steps else {}
    visaligner = cfg.visaligner
    if visaligner and cfg.device != "cpu":  # VisAligner's frames on the same device as the policy
        from embodied_gym.visaligner.pipeline import VisAlignerPipeline

        visaligner = VisAlignerPipeline.from_pretrained(visaligner).to(cfg.device)
    if estimator is not None and cfg.rollout_poses == "ground_truth":
        extra["pose_source"] = "ground_truth"
    if cfg.contact_spread:
        extra["contact_spread"] = cfg.contact_spread
    return make_env_for(
        agent,
        require(cfg.env_id, "env_id"),
        physics=cfg.physics,
        visaligner=visaligner,
        visaligner_steps=cfg.visaligner_steps,
        pose_estimator=estimator,
        pose_update=cfg.pose_update,
        **extra,
    )


def _evaluate_in_sim(cfg: TPOConfig, estimator: str | None, policy_dir: Path) -> dict:
    """The greedy evaluation of one policy folder, as `eval` runs it in TPO's sim env."""
    from embodied_gym.policies.evaluate import evaluate_policy

    t_eval = time.time()
    r = evaluate_policy(
        str(policy_dir),
        require(cfg.env_id, "env_id"),
        cfg.eval_episodes,
        seed=cfg.eval_seed,
        physics=cfg.physics,
        visaligner=cfg.visaligner,
        temporal_ensemble_coeff=cfg.eval_temporal_ensemble,
        pose_estimator=estimator,
        pose_update=cfg.pose_update,
        max_episode_steps=cfg.max_episode_steps,
        workers=cfg.eval_workers,
        progress=cfg.progress,
        env_kwargs={"contact_spread": cfg.contact_spread} if cfg.contact_spread else None,
    )
    return {
        "eval_success_rate": r.success_rate,
        "eval_ci95": list(r.ci95),
        "eval_seed": cfg.eval_seed,
        "eval_successes": [bool(e.success) for e in r.per_episode],
        "eval_time_s": time.time() - t_eval,
    }


def _collect_rollouts(run: TPORun, it: int, pool=None) -> list[Trajectory]:
    """Iteration ``it``'s rollouts of the current policy, sampling its Laplace policy (step 1): here, or
    in ``pool``'s processes, which load the current policy from its checkpoint (π_ref's folder before
    the first update)."""
    cfg = run.cfg
    plan = cfg.rollout_plan(it)
    desc = f"tpo {it + 1}/{cfg.iterations} rollouts"
    bar = progress_bar(range(len(plan)), progress=cfg.progress, desc=desc, unit="ep")
    if pool is not None:
        latest = run.store.latest()
        policy_dir = str(latest.path / MODEL_DIR) if latest else str(run.reference_dir)
        futures = [pool.submit(_worker_rollout, policy_dir, seed, run.noise, sample) for seed, sample in plan]
        trajs = []
        for future in futures:
            trajs.append(pool.result(future))
            bar.update()
        bar.close()
        return trajs
    run.agent.policy.eval()
    trajs = []
    for i in bar:
        seed, sample = plan[i]
        run.agent.reset()
        rng = np.random.default_rng(sample)
        trajs.append(rollout(run.agent, run.env, run.task, seed, run.noise, rng, cfg.rollout_action))
    return trajs


# One rollout worker process's env and current policy (see TPOConfig.rollout_workers).
_ROLLOUT_WORKER: dict = {}


def _init_rollout_worker(cfg: TPOConfig, reference_dir: str, estimator: str | None, task: str) -> None:
    from multiprocessing import util

    from embodied_gym.policies.agents import ACTAgent

    torch.set_num_threads(1)  # one core per worker
    agent = ACTAgent(reference_dir, device=cfg.device)
    env = _make_rollout_env(agent, cfg, estimator)
    _ROLLOUT_WORKER.update(
        agent=agent, env=env, policy_dir=reference_dir, task=task, device=cfg.device, around=cfg.rollout_action
    )
    util.Finalize(None, env.close, exitpriority=10)


def _worker_rollout(policy_dir: str, seed: int, noise: float, sample_seed: int) -> Trajectory:
    from embodied_gym.policies.agents import ACTAgent

    w = _ROLLOUT_WORKER
    if w["policy_dir"] != policy_dir:  # a new iteration: its policy
        w["agent"], w["policy_dir"] = ACTAgent(policy_dir, device=w["device"]), policy_dir
    w["agent"].reset()
    return rollout(w["agent"], w["env"], w["task"], seed, noise, np.random.default_rng(sample_seed), w["around"])


def _pairs(cfg: TPOConfig, trajs: list[Trajectory]) -> list[tuple[int, int]]:
    """The iteration's (preferred, rejected) pairs (step 2): within each start state's rollouts, or
    with ``rollouts_per_seed`` = 1 the paper's top-M vs bottom-M of all rollouts."""
    scores = [t.score for t in trajs]
    if cfg.rollouts_per_seed > 1:
        return grouped_preference_pairs(scores, [t.seed for t in trajs], cfg.pairs, cfg.min_score_gap)
    return preference_pairs(scores, cfg.pairs, cfg.min_score_gap)


def _update(run: TPORun, it: int, trajs: list[Trajectory], pairs: list[tuple[int, int]]) -> Update:
    """``cfg.epochs`` passes of the preference loss over ``pairs`` (step 3)."""
    cfg = run.cfg
    ref_logp = None  # with state noise, each step's reference likelihoods are of its own noisy states
    if not run.state_noise:
        with torch.no_grad():  # in slices of a gradient step's trajectories: bounded memory with camera images
            size = 2 * cfg.batch_size
            ref_logp = torch.cat(
                [run.ref_likelihood.log_probs(trajs[s : s + size]) for s in range(0, len(trajs), size)]
            )
    update = Update()
    # dropout off: the likelihood is that of the policy as it acts (eval mode), gradients on
    run.agent.policy.eval()
    desc = f"tpo {it + 1}/{cfg.iterations} epochs"
    bar = progress_bar(range(cfg.epochs), progress=cfg.progress and bool(pairs), desc=desc, unit="epoch")
    for _ in bar if pairs else []:
        perm = torch.randperm(len(pairs), generator=run.generator).tolist()
        for s in range(0, len(perm), cfg.batch_size):
            loss, margin = _preference_step(run, trajs, ref_logp, [pairs[j] for j in perm[s : s + cfg.batch_size]])
            update.losses.append(loss)
            update.margins.append(margin)
        bar.set_postfix(loss=f"{np.mean(update.losses[-max(1, len(pairs) // cfg.batch_size) :]):.4f}")
    return update


def _preference_step(
    run: TPORun, trajs: list[Trajectory], ref_logp: torch.Tensor | None, chosen: list[tuple[int, int]]
):
    """One gradient step on a batch of (preferred, rejected) pairs; returns its loss and mean margin.
    ``ref_logp``: every trajectory's reference likelihood, or None to compute the batch's on its noisy
    states (``run.state_noise``: one draw for both policies, so the margin is 0 at the reference)."""
    cfg = run.cfg
    won, lost = [w for w, _ in chosen], [l_ for _, l_ in chosen]
    batch = [trajs[i] for i in won + lost]
    if ref_logp is None:
        batch = [replace(t, states=perturb_arm_state(t.states, run.state_noise, run.generator)) for t in batch]
        with torch.no_grad():
            ref = run.ref_likelihood.log_probs(batch)
        rw, rl = ref[: len(won)], ref[len(won) :]
    else:
        rw, rl = ref_logp[won], ref_logp[lost]
    logp, nll = run.likelihood.log_probs(batch, with_nll=True)  # one forward pass
    lw, ll = logp[: len(won)], logp[len(won) :]
    loss = tpo_loss(lw, rw, ll, rl, cfg.beta)
    if cfg.sft_weight:  # imitate the preferred trajectories too (RPO's anchor: their NLL per step)
        loss = loss + cfg.sft_weight * nll[: len(won)].mean()
    run.optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.agent.policy.parameters(), 10.0)
    run.optimizer.step()
    return loss.item(), float(((lw - rw) - (ll - rl)).mean().detach())


def _iteration_row(it: int, trajs: list[Trajectory], pairs: list, update: Update, t_roll: float, t_train: float):
    """Iteration ``it``'s row of ``tpo_log.jsonl`` (before its evaluation)."""
    scores = [t.score for t in trajs]
    return {
        "iteration": it + 1,
        "rollouts": len(trajs),
        "pairs": len(pairs),
        "pairs_success_vs_failure": sum(trajs[w].success and not trajs[l_].success for w, l_ in pairs),
        "rollout_success_rate": float(np.mean([t.success for t in trajs])),
        "scores": scores,
        "score_mean": float(np.mean(scores)),
        "score_quantiles": [float(q) for q in np.quantile(scores, [0.0, 0.25, 0.5, 0.75, 1.0])],
        "distance_mean_m": float(np.mean([t.distance for t in trajs])),
        "loss_first": update.losses[0] if update.losses else None,
        "loss_last": update.losses[-1] if update.losses else None,
        "margin_last": update.margins[-1] if update.margins else None,
        "rollout_time_s": t_roll,
        "train_time_s": t_train,
    }


def _checkpoint(run: TPORun, it: int, row: dict) -> None:
    """Save iteration ``it``'s checkpoint, evaluate it in the sim, log the row and plot the log."""
    cfg, agent = run.cfg, run.agent
    saved = save_checkpoint(
        run.store, it + 1, agent.policy, agent.pre, agent.post, run.optimizer, run.generator, run.meta
    )
    if cfg.eval_episodes:
        row.update(_evaluate_in_sim(cfg, run.estimator, saved / MODEL_DIR))
    run.log.append(row)
    _write_log(run.log_path, run.log)
    plot_tpo_log(run.log, run.out / "tpo.png", cfg.select)
    evaluated = f", sim success {row['eval_success_rate']:.2f}" if "eval_success_rate" in row else ""
    loss = "no pairs" if row["loss_last"] is None else f"loss {row['loss_first']:.4f} -> {row['loss_last']:.4f}"
    report(
        cfg.progress,
        f"tpo iteration {it + 1}/{cfg.iterations}: {row['rollouts']} rollouts (success "
        f"{row['rollout_success_rate']:.2f}), {row['pairs']} pairs, {loss}{evaluated}",
    )


def read_log(out: str | Path) -> list[dict]:
    """The rows of a TPO run's ``out/tpo_log.jsonl`` (none before its first evaluation)."""
    path = Path(out) / "tpo_log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _write_log(path: Path, log: list[dict]) -> None:
    """``tpo_log.jsonl``: one JSON row per line, written atomically."""
    atomic.write_text(path, "".join(json.dumps(row) + "\n" for row in log))


def selected_iteration(log: list[dict], rule: str = "best") -> int | None:
    """The iteration a TPO run returns: with ``rule`` "best", the highest greedy success rate among the
    rows that have one (iteration 0: the reference policy), ties to the earlier iteration; with
    "last", or when no row was evaluated, the last iteration (None when there is none)."""
    if rule not in ("best", "last"):
        raise ValueError(f"select must be 'best' or 'last', got {rule!r}")
    evaluated = [r for r in log if "eval_success_rate" in r]
    if rule == "best" and evaluated:
        return max(evaluated, key=lambda r: (r["eval_success_rate"], -r["iteration"]))["iteration"]
    done = [r["iteration"] for r in log if r["iteration"] > 0]
    return max(done) if done else None


def _write_selected(
    out: Path, store: CheckpointStore, log: list[dict], cfg: TPOConfig, reference_dir: Path, meta: dict
) -> None:
    """Write ``out/pretrained_model``: the policy :func:`selected_iteration` picks (π_ref's weights
    with TPO's metadata for iteration 0), atomically."""
    it = selected_iteration(log, cfg.select)
    if it is None:
        return
    source = reference_dir if it == 0 else store.root / f"{it:06d}" / MODEL_DIR
    row = next(r for r in log if r["iteration"] == it)
    about = {
        "iteration": it,
        "rule": cfg.select if "eval_success_rate" in row else "last",
        "eval_success_rate": row.get("eval_success_rate"),
        "eval_episodes": cfg.eval_episodes,
        "candidates": {str(r["iteration"]): r["eval_success_rate"] for r in log if "eval_success_rate" in r},
    }
    written = json.loads((source / POLICY_META).read_text()) if it else dict(meta, iteration=0)
    with atomic.atomic_dir(out / MODEL_DIR) as tmp:
        for f in source.iterdir():
            if f.is_file() and f.name != POLICY_META:
                shutil.copy2(f, tmp / f.name)
        (tmp / POLICY_META).write_text(json.dumps(dict(written, tpo_selected=about), indent=2))


def plot_tpo_log(log: list[dict], png: Path, select: str = "best") -> None:
    """Score distribution (box per iteration) and success rate per iteration: the sampled rollouts and
    the greedy evaluation (iteration 0: the reference policy), the returned iteration marked."""
    trained = [r for r in log if r["iteration"] > 0]
    if not trained:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    its = [r["iteration"] for r in trained]
    a1.boxplot([r["scores"] for r in trained], positions=its)
    a1.set_xlabel("iteration (rollouts of the policy before its update)")
    a1.set_ylabel("trajectory score (success + exp(-d/5cm))")
    a1.set_title("rollout scores")
    a2.plot(its, [r["rollout_success_rate"] for r in trained], "o-", label="rollouts (sampled, before the update)")
    ev = [(r["iteration"], r["eval_success_rate"]) for r in log if "eval_success_rate" in r]
    if ev:
        a2.plot(*zip(*ev), "s-", label="greedy evaluation (after the update; 0: reference)")
        chosen = selected_iteration(log, select)
        rate = dict(ev).get(chosen)
        if rate is not None:
            a2.plot([chosen], [rate], "*", ms=16, color="tab:red", label=f"returned: iteration {chosen}")
    a2.set_ylim(-0.02, 1.02)
    a2.set_xlabel("iteration")
    a2.set_ylabel("success rate in the sim")
    a2.legend(fontsize=8)
    a2.set_title("success")
    fig.tight_layout()
    atomic.save_figure(fig, png)
