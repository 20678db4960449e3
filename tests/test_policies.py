"""Policies: LeRobot ACT training on a real recorded dataset, evaluation, TPO, loading (issue 6 §6)."""

import copy
import dataclasses
import itertools
import json
import math
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodied_gym.factory import make_env_for
from embodied_gym.policies.act import ACTTrainConfig, latest_checkpoint, train_act
from embodied_gym.policies.agents import ACTAgent, load_agent
from embodied_gym.policies.evaluate import evaluate, evaluate_policy, wilson_interval
from embodied_gym.policies.scoring import target_distance, trajectory_score
from embodied_gym.policies.tpo import (
    ACTLikelihood,
    TPOConfig,
    grouped_preference_pairs,
    preference_pairs,
    rollout,
    selected_iteration,
    tpo_loss,
    train_tpo,
)
from embodied_gym.processes import BACKENDS, worker_pool

TINY = dict(
    dim_model=32,
    n_heads=2,
    dim_feedforward=64,
    n_encoder_layers=1,
    n_decoder_layers=1,
    latent_dim=8,
    n_vae_encoder_layers=1,
)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """Two scripted-expert PickCup episodes, cam_high at 48x64, recorded with our recorder."""
    from embodied_gym.policies.agents import ExpertAgent
    from embodied_gym.recording.episodes import record

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("policies") / "ds"
    agent = ExpertAgent()
    env = make_env_for(
        agent, "EmbodieDreamer-PickCup-v0", obs_type="pixels_state", cameras=("cam_high",), image_size=(48, 64)
    )
    record(env, agent, root, 2, seed=0, env_id="EmbodieDreamer-PickCup-v0", progress=False)
    env.close()
    return root


@pytest.fixture(scope="session")
def tiny_act(tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("policies") / "act"
    cfg = ACTTrainConfig(
        dataset=str(tiny_dataset),
        out=str(out),
        steps=4,
        batch_size=2,
        chunk_size=5,
        n_action_steps=5,
        image_size=(48, 64),
        save_every=2,
        log_every=2,
        progress=False,
        overrides=TINY,
    )
    result = train_act(cfg)
    return out, cfg, result


def test_act_trains_offline_and_reloads(tiny_act):
    out, cfg, result = tiny_act
    assert result.steps == 4 and math.isfinite(result.final_loss)
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "000004"
    files = {p.name for p in (ckpt / "pretrained_model").iterdir()}
    assert {"config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"} <= files
    assert not any(p.suffix in (".pt", ".pth", ".bin") for p in ckpt.rglob("*"))  # safetensors only
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4] and (out / "loss.png").exists()

    # The checkpoint reloads with LeRobot's own loader and gives the trained weights back.
    from lerobot.policies.act.modeling_act import ACTPolicy

    reloaded = ACTPolicy.from_pretrained(str(ckpt / "pretrained_model"))
    assert reloaded.config.pretrained_backbone_weights is None and reloaded.config.chunk_size == 5
    agent = ACTAgent(out)
    assert agent.cameras == ("cam_high",) and agent.requirements.image_size == (48, 64)
    env = make_env_for(agent, "EmbodieDreamer-PickCup-v0")
    obs, info = env.reset(seed=3)
    action = agent(obs, info)
    env.close()
    assert action.shape == (14,) and np.all(np.isfinite(action))


def test_act_resume_continues_and_refuses_overwrite(tiny_act):
    out, cfg, _ = tiny_act
    with pytest.raises(FileExistsError, match="--resume"):
        train_act(cfg)
    import dataclasses

    r = train_act(dataclasses.replace(cfg, steps=6, resume=True))
    assert r.steps == 6 and latest_checkpoint(out).name == "000006"
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4, 6]
    assert log[-1]["lr"] == pytest.approx(_lr_of(cfg, 6, 5))  # the resumed run follows the schedule of --steps 6


def test_act_learning_rate_schedule():
    """The cpu preset warms up and decays to 0 at --steps; constant stays; a bad name is refused."""
    p = ACTTrainConfig(dataset="d", out="o", steps=1000).resolved_preset()
    assert p.lr_schedule == "cosine" and p.warmup_steps == 200
    lrs = [p.lr_at(s) for s in range(1000)]
    assert lrs[0] == pytest.approx(p.lr / 100) and lrs[99] == pytest.approx(p.lr)  # warm-up: a tenth of the run
    assert ACTTrainConfig(dataset="d", out="o", steps=8000).resolved_preset().lr_at(199) == pytest.approx(p.lr)
    assert all(a >= b for a, b in itertools.pairwise(lrs[99:])) and lrs[-1] < 1e-3 * p.lr  # then decays
    q = ACTTrainConfig(dataset="d", out="o", lr_schedule="constant", lr=2e-4).resolved_preset()
    assert {q.lr_at(s) for s in (0, 500, 999)} == {2e-4}
    assert ACTTrainConfig(dataset="d", out="o", preset="paper").resolved_preset().lr_schedule == "constant"
    with pytest.raises(ValueError, match="lr_schedule"):
        ACTTrainConfig(dataset="d", out="o", overrides={"lr_schedule": "step"}).resolved_preset()


def test_act_state_noise_perturbs_the_arm_joints_only():
    """The training state noise has the asked std on the 12 arm joints, leaves the grippers exact, and
    is off at 0; the same generator seed gives the same noise (a resumed run continues it)."""
    import torch

    from embodied_gym.policies.act.training import perturb_arm_state
    from embodied_gym.sim.robot import GRIPPER_INDICES

    state = torch.zeros(4000, 14)
    noisy = perturb_arm_state(state, 0.005, torch.Generator().manual_seed(1))
    arms = [i for i in range(14) if i not in GRIPPER_INDICES]
    assert torch.all(noisy[:, GRIPPER_INDICES] == 0)
    assert noisy[:, arms].std().item() == pytest.approx(0.005, rel=0.05)
    assert torch.equal(noisy, perturb_arm_state(state, 0.005, torch.Generator().manual_seed(1)))
    assert perturb_arm_state(state, 0.0, torch.Generator()) is state
    assert "--state-noise" in " ".join(_flags_of(ACTTrainConfig))


def _flags_of(cls) -> list[str]:
    import argparse

    from embodied_gym import configs

    p = argparse.ArgumentParser()
    configs.add_arguments(p, cls)
    return [a for action in p._actions for a in action.option_strings]


def _lr_of(cfg, steps: int, step: int) -> float:
    import dataclasses

    return dataclasses.replace(cfg, steps=steps).resolved_preset().lr_at(step)


def test_act_bad_inputs_have_clear_errors(tiny_dataset, tmp_path):
    with pytest.raises(ValueError, match="cam_front"):
        train_act(
            ACTTrainConfig(
                dataset=str(tiny_dataset), out=str(tmp_path / "x"), cameras=("cam_front",), steps=1, progress=False
            )
        )
    with pytest.raises(FileNotFoundError, match="not a LeRobotDataset"):
        train_act(ACTTrainConfig(dataset=str(tmp_path), out=str(tmp_path / "y"), steps=1, progress=False))
    with pytest.raises(ValueError, match="preset"):
        ACTTrainConfig(dataset="d", out="o", preset="huge").resolved_preset()
    with pytest.raises(FileNotFoundError, match="ACT folder"):
        load_agent(str(tmp_path / "nothing"))


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(50, 50)[1] == pytest.approx(1.0) and wilson_interval(50, 50)[0] > 0.9
    # the interval always holds its own estimate (an error bar of zero, never a negative one)
    for n in range(1, 60):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            assert lo <= k / n <= hi


def test_eval_act_on_sim_id(tiny_act, tmp_path):
    out, _, _ = tiny_act
    r = evaluate_policy(
        str(out), "EmbodieDreamer-PickCup-v0", episodes=1, seed=5, out=str(tmp_path / "e.json"), progress=False
    )
    data = json.loads((tmp_path / "e.json").read_text())
    assert {"success_rate", "episodes", "ci95", "per_episode", "mean_return", "lengths"} <= set(data)
    assert data["episodes"] == 1 and len(data["per_episode"]) == 1 and data["per_episode"][0]["seed"] == 5
    assert data["lengths"][0] == r.per_episode[0].length > 0


def test_eval_expert_on_real_id_via_cli(tmp_path):
    from embodied_gym.cli import main

    path = tmp_path / "real.json"
    assert (
        main(
            [
                "eval",
                "--policy",
                "expert",
                "--env",
                "EmbodieDreamer-PickCup-Real-v0",
                "--episodes",
                "2",
                "--seed",
                "0",
                "--out",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(path.read_text())
    assert data["env_id"] == "EmbodieDreamer-PickCup-Real-v0" and data["episodes"] == 2
    lo, hi = data["ci95"]
    assert lo <= data["success_rate"] <= hi
    # Seeds make it reproducible on sim ids.
    a = evaluate_policy("expert", "EmbodieDreamer-PickCup-v0", episodes=1, seed=7, progress=False)
    b = evaluate_policy("expert", "EmbodieDreamer-PickCup-v0", episodes=1, seed=7, progress=False)
    assert a.per_episode[0].ret == b.per_episode[0].ret and a.success_rate == 1.0


def test_eval_cli_compare_runs_the_paired_test_against_another_output(tmp_path, capsys):
    """``eval --compare`` pairs this evaluation with another ``--out`` file seed by seed; a file that is
    missing or not an eval output is refused before any episode runs."""
    from embodied_gym.cli import main

    other = tmp_path / "other.json"
    # the expert succeeds on these seeds; the other file says seed 3 failed and seed 4 did not run
    other.write_text(json.dumps({"per_episode": [{"seed": 2, "success": True}, {"seed": 3, "success": False}]}))
    assert (
        main(
            [
                "eval",
                "--policy",
                "expert",
                "--env",
                "EmbodieDreamer-PickCup-v0",
                "--episodes",
                "3",
                "--seed",
                "2",
                "--compare",
                str(other),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "on 2 common seeds: 100% vs 50%, only this / only that 1 / 0, exact McNemar p = 1" in out
    assert (
        main(
            [
                "eval",
                "--policy",
                "expert",
                "--env",
                "EmbodieDreamer-PickCup-v0",
                "--compare",
                str(tmp_path / "missing.json"),
            ]
        )
        == 2
    )
    assert "missing.json: no such file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({"success_rate": 1.0}))
    assert (
        main(
            [
                "eval",
                "--policy",
                "expert",
                "--env",
                "EmbodieDreamer-PickCup-v0",
                "--compare",
                str(tmp_path / "bad.json"),
            ]
        )
        == 2
    )
    assert "bad.json: not an `embodied-gym eval --out` JSON" in capsys.readouterr().err


def test_eval_in_worker_processes_gives_the_episodes_of_one_process(tmp_path):
    """``evaluate_policy(workers=2)`` (``eval --workers 2``) runs the same episodes: each depends only on
    its seed, on the stand-in too (its noise restarts with the scene)."""
    kw = dict(episodes=3, seed=3, max_episode_steps=60, progress=False)
    one = evaluate_policy("expert", "EmbodieDreamer-PickCup-Real-v0", **kw)
    two = evaluate_policy("expert", "EmbodieDreamer-PickCup-Real-v0", workers=2, **kw)
    rows = lambda r: [(e.episode, e.seed, e.success, round(e.ret, 9), e.length) for e in r.per_episode]
    assert rows(two) == rows(one) and two.episodes == 3 and two.success_rate == one.success_rate
    # videos of the first three episodes, written by whichever worker ran them
    evaluate_policy(
        "expert",
        "EmbodieDreamer-PickCup-v0",
        episodes=3,
        seed=3,
        max_episode_steps=10,
        workers=2,
        videos=str(tmp_path / "v"),
        progress=False,
    )
    assert sorted(p.name[:11] for p in (tmp_path / "v").glob("*.mp4")) == ["episode_000", "episode_001", "episode_002"]
    with pytest.raises(ValueError, match="workers must be at least 1"):
        evaluate_policy("expert", "EmbodieDreamer-PickCup-v0", episodes=1, workers=0)


def test_visaligner_flag_names_what_is_wrong(tmp_path):
    agent = load_agent("expert")
    with pytest.raises(FileNotFoundError, match="is not a VisAligner model folder"):
        make_env_for(
            agent,
            "EmbodieDreamer-PickCup-v0",
            visaligner=str(tmp_path / "nope"),
            obs_type="pixels",
            cameras=("cam_high",),
        )
    with pytest.raises(ValueError, match="Real"):
        make_env_for(agent, "EmbodieDreamer-PickCup-Real-v0", visaligner="/nonexistent")


# ----------------------------------------------------------------------------- TPO
def test_preference_pairs_top_vs_bottom():
    scores = [0.1, 0.9, 0.5, 0.3, 0.7, 0.2]
    assert preference_pairs(scores, 2) == [(1, 0), (4, 5)]
    assert preference_pairs(scores, 25) == [(1, 0), (4, 5), (2, 3)]  # M capped at half
    assert preference_pairs([0.5, 0.5], 1) == []  # a tie carries no preference


def test_grouped_preference_pairs_compare_rollouts_of_one_start_state():
    scores = [1.9, 0.2, 0.3, 1.5, 0.9, 0.8, 0.5, 0.5]
    groups = [0, 0, 0, 0, 1, 1, 2, 2]
    # group 0: 1.9 vs 0.2 and 1.5 vs 0.3; group 1: 0.9 vs 0.8; group 2 ties; largest gaps first
    assert grouped_preference_pairs(scores, groups, 10) == [(0, 1), (3, 2), (4, 5)]
    assert grouped_preference_pairs(scores, groups, 1) == [(0, 1)]
    assert grouped_preference_pairs(scores, groups, 10, min_gap=0.5) == [(0, 1), (3, 2)]
    # across start states the top-vs-bottom ranking would pair the easy layout with the hard one
    assert preference_pairs([1.9, 0.2, 0.9, 0.8], 2) == [(0, 1), (2, 3)]


def test_tpo_rollout_plan_groups_start_states():
    cfg = TPOConfig(policy="p", env_id="e", out="o", rollouts=6, rollouts_per_seed=3, seed=5)
    plan = cfg.rollout_plan(2)
    assert [seed for seed, _ in plan] == [2005, 2005, 2005, 2006, 2006, 2006]
    assert len({sample for _, sample in plan}) == 6  # each rollout its own noise
    paper = TPOConfig(policy="p", env_id="e", out="o", rollouts=3, rollouts_per_seed=1)
    assert [seed for seed, _ in paper.rollout_plan(1)] == [1000, 1001, 1002]


def test_tpo_loss_sign():
    lw, ll = torch.tensor([0.0], requires_grad=True), torch.tensor([0.0], requires_grad=True)
    ref = torch.tensor([0.0])
    loss = tpo_loss(lw, ref, ll, ref, beta=0.1)
    assert loss.item() == pytest.approx(math.log(2))
    loss.backward()
    assert lw.grad.item() < 0 < ll.grad.item()  # raising log π(τ_w) and lowering log π(τ_l) lowers the loss
    better = tpo_loss(torch.tensor([1.0]), ref, torch.tensor([-1.0]), ref, beta=0.1)
    worse = tpo_loss(torch.tensor([-1.0]), ref, torch.tensor([1.0]), ref, beta=0.1)
    assert float(better) < math.log(2) < float(worse)


def test_tpo_zero_gradient_at_reference_and_right_sign_on_act(tiny_act):
    out, _, _ = tiny_act
    agent = ACTAgent(out)
    reference = copy.deepcopy(agent.policy).eval()
    env = make_env_for(agent, "EmbodieDreamer-PickCup-v0")
    rng = np.random.default_rng(0)
    t1 = rollout(agent, env, "PickCup", 11, 0.1, rng)
    t2 = rollout(agent, env, "PickCup", 12, 0.1, rng)
    env.close()
    assert t1.env_state is None and set(t1.images) == {"observation.images.cam_high"}  # no pose estimate
    lik, ref = ACTLikelihood(agent.policy, agent.pre, 0.1), ACTLikelihood(reference, agent.pre, 0.1)
    agent.policy.eval()

    # π_θ = π_ref and τ_w = τ_l: the loss is log 2 and every gradient is zero.
    lw, lr_ = lik.log_prob(t1), ref.log_prob(t1).detach()
    loss = tpo_loss(lw[None], lr_[None], lik.log_prob(t1)[None], lr_[None], beta=0.1)
    agent.policy.zero_grad()
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)
    grads = [p.grad for p in agent.policy.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().max()) < 1e-10 for g in grads)

    # One forward pass over both trajectories gives each its own likelihood and per-step NLL (the update's
    # batched path): ACT's query steps do not see each other in eval mode.
    with torch.no_grad():
        both, nll_both = lik.log_probs([t1, t2], with_nll=True)
        apart = [lik.log_prob(t, with_nll=True) for t in (t1, t2)]
    assert float(both[0]) != pytest.approx(float(both[1]), rel=1e-3)
    for i, (logp_i, nll_i) in enumerate(apart):
        assert float(both[i]) == pytest.approx(float(logp_i), rel=1e-5)
        assert float(nll_both[i]) == pytest.approx(float(nll_i), rel=1e-5)

    # Distinct trajectories: a gradient step on the loss raises the margin (right sign).
    opt = torch.optim.SGD(agent.policy.parameters(), lr=1e-4)
    r1, r2 = ref.log_prob(t1).detach(), ref.log_prob(t2).detach()

    def margin():
        return (lik.log_prob(t1) - r1) - (lik.log_prob(t2) - r2)

    assert float(margin()) == pytest.approx(0.0, abs=1e-3)
    opt.zero_grad()
    tpo_loss(lik.log_prob(t1)[None], r1[None], lik.log_prob(t2)[None], r2[None], beta=0.1).backward()
    opt.step()
    with torch.no_grad():
        assert float(margin()) > 0

    # The anchor (sft_weight): the per-step NLL that log_prob reports is the Laplace likelihood's, and a
    # step on it brings the policy closer to the preferred trajectory.
    logp, nll = lik.log_prob(t1, with_nll=True)
    n = float(t1.mask.sum())
    assert float(nll) == pytest.approx(-float(logp) / n, rel=1e-5)
    opt.zero_grad()
    nll.backward()
    opt.step()
    with torch.no_grad():
        assert float(lik.log_prob(t1, with_nll=True)[1]) < float(nll)


def test_trajectory_scoring_ranks_success_first():
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state")
    _, info = env.reset(seed=0)
    env.close()
    d = target_distance("PickCup", info, info)
    assert 0.05 < d < 1.0  # the grippers start far from the lifted-cup target
    assert trajectory_score(True, 0.5) > trajectory_score(False, 0.0) > trajectory_score(False, d)
    with pytest.raises(ValueError, match="no TPO target"):
        target_distance("Juggle", info, info)


def test_tpo_rollout_noise_scale(tiny_act):
    """TPO's rollouts sample around the policy with Laplace noise of scale b: b = 0 executes the
    policy's own chunks (two rollouts of a seed agree), b > 0 moves the executed actions off them."""
    out, _, _ = tiny_act
    agent = ACTAgent(out)
    env = make_env_for(agent, "EmbodieDreamer-PickCup-v0", max_episode_steps=12)
    runs = {}
    for name, b in (("greedy", 0.0), ("greedy2", 0.0), ("noisy", 0.1)):
        agent.reset()
        runs[name] = rollout(agent, env, "PickCup", 5, b, np.random.default_rng(1)).actions
    env.close()
    torch.testing.assert_close(runs["greedy"], runs["greedy2"])
    assert float((runs["noisy"] - runs["greedy"]).abs().max()) > 1e-3
    assert TPOConfig(policy="p", env_id="e", out="o").rollout_noise is None  # default: the likelihood's b


def test_temporal_ensemble_matches_lerobots_online_ensembler():
    """The likelihood's all-at-once ensemble is the average LeRobot's ACTTemporalEnsembler executes step by step."""
    from lerobot.policies.act.modeling_act import ACTTemporalEnsembler

    from embodied_gym.policies.tpo import temporal_ensemble

    chunks = torch.randn(9, 4, 3, generator=torch.Generator().manual_seed(0))
    online = ACTTemporalEnsembler(0.3, 4)
    executed = torch.stack([online.update(chunks[t : t + 1])[0] for t in range(9)])
    torch.testing.assert_close(temporal_ensemble(chunks, 0.3), executed)


def _ensembling_copy(policy_dir, out):
    """A copy of an ACT folder whose config runs temporal ensembling (coefficient 0.01, a query every step)."""
    import shutil

    shutil.copytree(policy_dir, out)
    config = json.loads((out / "config.json").read_text())
    config.update(temporal_ensemble_coeff=0.01, n_action_steps=1)
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_tpo_samples_and_scores_the_ensembled_policy(tiny_act, tmp_path):
    """rollout_action 'ensemble': a noiseless rollout executes what eval runs (the temporal ensemble), the
    likelihood is centred on it (each step at its maximum but for joint-limit clipping), and a TPO iteration
    runs; a policy without ensembling is refused."""
    out, _, _ = tiny_act
    policy = _ensembling_copy(latest_checkpoint(out) / "pretrained_model", tmp_path / "ens")
    agent = ACTAgent(policy)
    env = make_env_for(agent, "EmbodieDreamer-PickCup-v0", max_episode_steps=15)
    agent.reset()
    traj = rollout(agent, env, "PickCup", 3, 0.0, np.random.default_rng(0), "ensemble")
    agent.reset()
    chunk = rollout(agent, env, "PickCup", 3, 0.0, np.random.default_rng(0), "chunk")
    agent.reset()  # what eval executes: agent(obs) with the policy's own ensembling
    obs, deployed = env.reset(seed=3)[0], []
    for _ in range(15):
        deployed.append(agent(obs))
        obs = env.step(deployed[-1])[0]
    env.close()
    assert traj.actions.shape == (15, 1, 14) and float((traj.actions - chunk.actions).abs().max()) > 1e-4
    torch.testing.assert_close(traj.actions[:, 0], torch.as_tensor(np.stack(deployed)), atol=1e-5, rtol=0)
    lik = ACTLikelihood(agent.policy, agent.pre, 0.1, "mean", ensemble_coeff=0.01)
    with torch.no_grad():
        logp = lik.log_prob(traj)
        chunk_lik = ACTLikelihood(agent.policy, agent.pre, 0.1, "mean").log_prob(traj)
    assert float(logp) == pytest.approx(-14 * math.log(0.2), abs=0.5) and float(chunk_lik) < float(logp)
    cfg = TPOConfig(
        policy=str(policy),
        env_id="EmbodieDreamer-PickCup-v0",
        out=str(tmp_path / "tpo"),
        iterations=1,
        rollouts=2,
        pairs=1,
        min_score_gap=0.0,
        epochs=1,
        eval_episodes=0,
        max_episode_steps=10,
        rollout_action="ensemble",
        progress=False,
    )
    assert [r["iteration"] for r in train_tpo(cfg)] == [1]
    with pytest.raises(ValueError, match="runs without temporal ensembling"):
        train_tpo(dataclasses.replace(cfg, policy=str(out), out=str(tmp_path / "t2")))


def test_tpo_loop_runs_checkpoints_and_resumes(tiny_act, tmp_path):
    out, _, _ = tiny_act
    cfg = TPOConfig(
        policy=str(out),
        env_id="EmbodieDreamer-PickCup-v0",
        out=str(tmp_path / "tpo"),
        iterations=1,
        rollouts=2,
        pairs=1,
        min_score_gap=0.0,
        epochs=1,
        eval_episodes=2,
        max_episode_steps=20,
        contact_spread=0.3,
        progress=False,
    )
    log = train_tpo(cfg)
    # iteration 0: the reference's greedy evaluation in the sim; then one row per iteration
    assert [r["iteration"] for r in log] == [0, 1] and "scores" not in log[0]
    assert log[1]["rollouts"] == 2 and len(log[1]["scores"]) == 2
    assert all(len(r["eval_successes"]) == 2 and r["eval_seed"] == 10_000 and r["eval_time_s"] > 0 for r in log)
    assert (tmp_path / "tpo" / "tpo.png").exists() and latest_checkpoint(tmp_path / "tpo").name == "000001"
    again = train_tpo(cfg)  # already done: resumes past the last finished iteration, nothing to do
    assert [r["iteration"] for r in again] == [0, 1]
    agent = load_agent(str(tmp_path / "tpo"))  # OUT/pretrained_model: the iteration the run returns
    assert isinstance(agent, ACTAgent) and agent.path == tmp_path / "tpo" / "pretrained_model"
    chosen = selected_iteration(log, "best")
    assert agent.meta["tpo_selected"]["iteration"] == chosen and agent.meta["iteration"] == chosen
    weights = ACTAgent(out if chosen == 0 else latest_checkpoint(tmp_path / "tpo")).policy.state_dict()
    for k, v in agent.policy.state_dict().items():
        torch.testing.assert_close(v, weights[k])
    with pytest.raises(ValueError, match="sim id"):
        train_tpo(TPOConfig(policy=str(out), env_id="EmbodieDreamer-PickCup-Real-v0", out=str(tmp_path / "t2")))
    # the rollouts' grip is redrawn per start state (the simulator's nominal grip otherwise)
    from embodied_gym.policies.tpo import _make_rollout_env

    env = _make_rollout_env(ACTAgent(out), cfg, None)
    grips = {env.reset(seed=s)[1]["physics_scale"]["pad_friction"][0] for s in (0, 1)}
    env.close()
    assert len(grips) == 2
    with pytest.raises(ValueError, match=r"contact_spread must be in \[0, 1\]"):
        train_tpo(dataclasses.replace(cfg, contact_spread=2.0, out=str(tmp_path / "t5")))
    with pytest.raises(ValueError, match="backend must be one of 'local', 'ray', got 'dask'"):
        train_tpo(
            TPOConfig(policy=str(out), env_id="EmbodieDreamer-PickCup-v0", out=str(tmp_path / "t4"), backend="dask")
        )
    with pytest.raises(ValueError, match="does not read estimated object poses"):
        train_tpo(
            TPOConfig(
                policy=str(out),
                env_id="EmbodieDreamer-PickCup-v0",
                out=str(tmp_path / "t3"),
                pose_estimator=str(tmp_path),
            )
        )
    # benchmarks/rl.py's control: (c) moved as far as TPO moved each weight tensor, in a random direction
    import runpy

    from safetensors.torch import load_file

    from embodied_gym.policies.act.checkpoints import resolve_pretrained_dir

    rl = runpy.run_path("benchmarks/rl.py")
    folder = tmp_path / "tpo"
    assert rl["finished_iterations"](folder) == [1] and rl["returned_iteration"](folder) == chosen
    moved = rl["iteration_policy"](folder, 1)
    control = rl["random_direction_control"](out, moved, tmp_path / "control" / "pretrained_model")
    ref, new, ctl = (load_file(str(resolve_pretrained_dir(d) / "model.safetensors")) for d in (out, moved, control))
    stepped = [k for k in ref if ref[k].is_floating_point() and not torch.equal(ref[k], new[k])]
    assert stepped, "TPO's iteration moved no weight"
    for k in ref:
        step, rand = (new[k] - ref[k]).double().norm(), (ctl[k] - ref[k]).double().norm()
        assert math.isclose(rand, step, rel_tol=1e-2, abs_tol=1e-6), k
    big = max(stepped, key=lambda k: (new[k] - ref[k]).norm())
    cos = torch.nn.functional.cosine_similarity((new[big] - ref[big]).flatten(), (ctl[big] - ref[big]).flatten(), 0)
    assert abs(cos) < 0.5, f"{big}: the control's direction follows TPO's (cosine {cos:.2f})"
    assert isinstance(ACTAgent(control), ACTAgent)  # loads as the policy it perturbs
    # which iteration each selection rule returns, read against (made-up) stand-in rates
    rules = rl["selection_rules"](tmp_path, "tpo", {"c": {"stand_in": 0.5}, "tpo_it1": {"stand_in": 0.7}})
    assert rules["in-sim greedy (select best, the default)"]["iteration"] == chosen
    assert (
        rules["last (select last, the paper's)"]
        == rules["best on the stand-in (hindsight)"]
        == {
            "iteration": 1,
            "stand_in": 0.7,
        }
    )
    assert rules["sampled rollouts' success"]["iteration"] == 0  # iteration 1's rollouts are the reference's


def test_tpo_update_raises_preferred_and_lowers_rejected_likelihood(tiny_act, tmp_path):
    """One iteration (pairs within a start state's rollouts, per-step likelihood): against π_ref, the margin
    between preferred and rejected trajectories grows with the default anchor, and with the anchor at
    weight 1 the preferred trajectories gain log-likelihood while the rejected ones lose it. The rollouts
    run in two processes, or on Ray, and give the trajectories one process gives."""
    from embodied_gym.policies import tpo

    out, _, _ = tiny_act
    base = dict(policy=str(out), env_id="EmbodieDreamer-PickCup-v0", iterations=1, rollouts=4, rollouts_per_seed=2)
    base.update(pairs=4, min_score_gap=0.0, epochs=2, lr=1e-5, eval_episodes=0, max_episode_steps=12, progress=False)
    run = tpo._setup(TPOConfig(out=str(tmp_path / "one"), **base))
    trajs = tpo._collect_rollouts(run, 0)
    run.env.close()
    pairs = tpo._pairs(run.cfg, trajs)
    assert pairs and all(trajs[w].seed == trajs[l_].seed for w, l_ in pairs)

    for backend in BACKENDS:  # two local processes, then two Ray tasks at a time (--backend ray)
        two = TPOConfig(out=str(tmp_path / backend), rollout_workers=2, backend=backend, **base)
        run2 = tpo._setup(two)
        spec = (two, str(run2.reference_dir), None, "PickCup")
        with worker_pool(backend, 2, tpo._init_rollout_worker, spec, what="TPO rollout worker") as pool:
            parallel = tpo._collect_rollouts(run2, 0, pool)
        run2.env.close()
        assert [t.seed for t in parallel] == [t.seed for t in trajs], backend
        for a, b in zip(parallel, trajs):
            torch.testing.assert_close(a.actions, b.actions, atol=1e-5, rtol=0)

    def gains(sft_weight: float) -> tuple[float, float]:
        """Mean change of log π(τ_w) and log π(τ_l) over the pairs after one update from π_ref."""
        r = tpo._setup(TPOConfig(out=str(tmp_path / f"sft{sft_weight}"), sft_weight=sft_weight, **base))
        r.env.close()
        with torch.no_grad():
            before = [(r.likelihood.log_prob(trajs[w]), r.likelihood.log_prob(trajs[l_])) for w, l_ in pairs]
        tpo._update(r, 0, trajs, pairs)
        with torch.no_grad():
            after = [(r.likelihood.log_prob(trajs[w]), r.likelihood.log_prob(trajs[l_])) for w, l_ in pairs]
        return (
            float(np.mean([float(a[0] - b[0]) for a, b in zip(after, before)])),
            float(np.mean([float(a[1] - b[1]) for a, b in zip(after, before)])),
        )

    gain_w, gain_l = gains(TPOConfig.sft_weight)
    assert gain_w > gain_l, (gain_w, gain_l)
    gain_w, gain_l = gains(1.0)
    assert gain_w > 0 > gain_l, (gain_w, gain_l)

    # State noise as ACT's training adds it: one draw for the policy and the reference, so the first step
    # starts at the reference (loss log 2, margin 0) and still moves the policy.
    noisy = tpo._setup(TPOConfig(out=str(tmp_path / "noise"), state_noise=0.005, sft_weight=0.0, **base))
    noisy.env.close()
    assert noisy.state_noise == 0.005
    loss, margin = tpo._preference_step(noisy, trajs, None, pairs[:2])
    assert loss == pytest.approx(math.log(2), abs=1e-5) and margin == pytest.approx(0.0, abs=1e-4)
    with torch.no_grad():
        moved = [float(noisy.likelihood.log_prob(trajs[w]) - noisy.ref_likelihood.log_prob(trajs[w])) for w, _ in pairs]
    assert any(abs(m) > 1e-6 for m in moved)
    # by default the reference policy's own training setting (embodied_gym_policy.json), else 0
    from types import SimpleNamespace

    assert tpo._state_noise(TPOConfig(), SimpleNamespace(meta={"state_noise": 0.003})) == 0.003
    assert tpo._state_noise(TPOConfig(), SimpleNamespace(meta=None)) == 0.0
    assert tpo._state_noise(TPOConfig(state_noise=0.0), SimpleNamespace(meta={"state_noise": 0.003})) == 0.0


def test_tpo_returns_the_best_sim_evaluation_ties_to_the_earlier_iteration():
    log = [
        {"iteration": 0, "eval_success_rate": 0.8},
        {"iteration": 1, "eval_success_rate": 0.6},
        {"iteration": 2, "eval_success_rate": 0.9},
        {"iteration": 3, "eval_success_rate": 0.9},
    ]
    assert selected_iteration(log, "best") == 2
    assert selected_iteration(log[:2], "best") == 0  # the reference stays when TPO made it worse
    assert selected_iteration(log, "last") == 3
    assert selected_iteration([{"iteration": 1}, {"iteration": 2}], "best") == 2  # nothing evaluated: the last
    assert selected_iteration([], "best") is None
    with pytest.raises(ValueError, match="select"):
        selected_iteration(log, "first")


def test_sb3_model_loads_as_agent_and_evaluates(tmp_path):
    from stable_baselines3 import PPO

    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", control_mode="ee_delta")
    model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=64)
    env.close()
    path = tmp_path / "ppo.zip"
    model.save(str(path))
    agent = load_agent(str(path))
    assert agent.requirements.control_mode == "ee_delta" and agent.requirements.obs_type == "state"
    env = make_env_for(agent, "EmbodieDreamer-PickCup-v0")
    r = evaluate(agent, env, episodes=1, seed=0, progress=False)
    env.close()
    assert r.episodes == 1 and r.per_episode[0].length == 200


# ----------------------------------------------------------------------------- LeRobot's own tools
def test_lerobot_env_config_follows_lerobot_conventions(tiny_act):
    """What lerobot-eval does with our env config: vector env with same-step autoreset, LeRobot's
    observation preprocessing, the policy's processors, is_success and the task description."""
    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.utils import env_to_policy_features, preprocess_observation

    from embodied_gym.policies.lerobot_env import EmbodiedGymEnvConfig

    assert EnvConfig.get_choice_class("embodied_gym") is EmbodiedGymEnvConfig
    cfg = EmbodiedGymEnvConfig(task="PickCup", cameras=["cam_high"], image_height=48, image_width=64)
    feats = env_to_policy_features(cfg)
    assert feats["observation.images.cam_high"].shape == (3, 48, 64) and feats["observation.state"].shape == (14,)
    vec = cfg.create_envs(n_envs=1)["embodied_gym"][0]
    assert vec.metadata["autoreset_mode"].name == "SAME_STEP"
    assert list(vec.call("task_description")) == ["Grab the paper cup and lift it."]
    obs, _ = vec.reset(seed=0)
    batch = preprocess_observation(obs)
    assert set(batch) == {"observation.images.cam_high", "observation.state"}
    agent = ACTAgent(tiny_act[0])
    action = agent.post(agent.policy.select_action(agent.pre(batch))).numpy()
    obs, reward, terminated, truncated, info = vec.step(action)
    assert action.shape == (1, 14) and "is_success" in info
    vec.close()


def test_lerobot_training_pipeline_reads_our_dataset(tiny_dataset):
    """lerobot-train's data path: ACT's delta timestamps resolved against our dataset's metadata."""
    from lerobot.datasets import LeRobotDataset
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.policies.act.configuration_act import ACTConfig

    meta_ds = LeRobotDataset("embodied_gym/ds", root=tiny_dataset, video_backend="pyav")
    deltas = resolve_delta_timestamps(ACTConfig(chunk_size=5, n_action_steps=5), meta_ds.meta)
    ds = LeRobotDataset("embodied_gym/ds", root=tiny_dataset, video_backend="pyav", delta_timestamps=deltas)
    item = ds[len(ds) - 2]
    assert item["action"].shape == (5, 14) and item["action_is_pad"].tolist() == [False, False, True, True, True]
    assert item["observation.images.cam_high"].shape == (3, 48, 64)


def test_reach_stage_wrapper_observation_and_reward():
    from embodied_gym.policies.rl import make_reach_env

    env = make_reach_env("PickCup", max_episode_steps=40)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and obs["reach_vector"].shape == (6,)
    d0 = info["reach_distance"]
    arm = int(np.argmin(np.linalg.norm(obs["reach_vector"].reshape(2, 3), axis=1)))
    for _ in range(10):  # a proportional controller on the offered offset closes in: the signal is usable
        action = np.zeros(14, np.float32)
        action[7 * arm : 7 * arm + 3] = np.clip(obs["reach_vector"].reshape(2, 3)[arm] / 0.01, -1, 1)
        action[7 * arm + 6] = 1.0
        obs, reward, terminated, truncated, info = env.step(action)
    env.close()
    assert reward == pytest.approx(-info["reach_distance"]) and info["reach_distance"] < d0 - 0.05


def test_act_trains_on_a_dataset_with_an_idle_arm(tiny_dataset, tmp_path):
    """B1: one-arm demonstrations leave the other arm's joints exactly still (LeRobot's std 0); with the
    std floored, ACT's loss is finite and falls instead of sitting in the hundreds."""
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.policies.act import STD_FLOOR, normalisation_stats
    from embodied_gym.sim import robot

    ds = open_dataset(tiny_dataset)
    raw = np.asarray(ds.meta.stats["action"]["std"], dtype=np.float64)
    arms = {int(r["layout"]["cup"][0] >= 0) for r in ds.rows()}  # the expert takes the cup with the arm on its side
    assert len(arms) == 1, "the fixture's episodes should use one arm"
    idle = robot.ARM_INDICES[:6] if arms == {1} else robot.ARM_INDICES[6:]
    # the idle arm's targets barely move (some joints not at all): below the floor, some ~0
    assert np.all(raw[idle] < STD_FLOOR) and raw[idle].min() < 1e-6, raw[idle]
    floored = normalisation_stats(ds)
    assert np.all(np.asarray(floored["action"]["std"]) >= STD_FLOOR)
    assert np.all(np.asarray(floored["observation.state"]["std"]) >= STD_FLOOR)

    out = tmp_path / "act_idle"
    result = train_act(
        ACTTrainConfig(
            dataset=str(tiny_dataset),
            out=str(out),
            steps=24,
            batch_size=2,
            chunk_size=5,
            n_action_steps=5,
            lr=1e-3,
            save_every=24,
            log_every=4,
            progress=False,
            overrides=TINY,
        )
    )
    losses = [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert all(math.isfinite(v) for v in losses) and math.isfinite(result.final_loss)
    assert losses[0] < 50, f"first logged loss {losses[0]}: an idle joint is divided by a zero std"
    assert np.mean(losses[-2:]) < 0.7 * np.mean(losses[:2]), losses


def test_act_on_estimated_object_poses_end_to_end(tmp_path):
    """Record with a (tiny, untrained) pose estimator -> observation.environment_state; train ACT on it
    without images; evaluate on the Real id with the estimator rebuilt from the policy's meta."""
    from embodied_gym.data import features as F
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
    from embodied_gym.perception.pose_entry import KEY
    from embodied_gym.policies.act import POLICY_META
    from embodied_gym.policies.agents import ExpertAgent
    from embodied_gym.recording.episodes import record

    torch.manual_seed(0)
    est_cfg = PoseEstimatorConfig(
        frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )
    est_dir = PoseEstimator(est_cfg).save_pretrained(tmp_path / "estimator")
    sim = "EmbodieDreamer-PickCup-v0"
    agent = ExpertAgent()
    env = make_env_for(agent, sim, pose_estimator=str(est_dir), max_episode_steps=30)
    assert env.unwrapped.cameras == ("cam_high",) and env.unwrapped.image_size == (48, 64)
    summary = record(env, agent, tmp_path / "ds", 2, env_id=sim, progress=False, cameras=())
    env.close()
    assert summary.episodes == 2
    ds = open_dataset(tmp_path / "ds")
    assert ds.cameras == [] and ds.features[F.ENV_STATE]["names"] == ["cup.x", "cup.y", "cup.z"]
    env_state = np.stack(ds.table()[F.ENV_STATE])
    assert env_state.shape == (60, 3) and env_state.dtype == np.float32
    assert ds.rows()[0]["pose_estimator"]["path"] == str(est_dir.resolve())

    out = tmp_path / "act"
    # without ACT's VAE, as the quick demo trains it (its latent collapses on scripted demonstrations)
    cfg = ACTTrainConfig(
        dataset=str(tmp_path / "ds"),
        out=str(out),
        steps=10,
        batch_size=4,
        chunk_size=5,
        n_action_steps=5,
        save_every=10,
        log_every=5,
        progress=False,
        overrides={**TINY, "use_vae": False},
    )
    result = train_act(cfg)
    assert result.steps == 10 and math.isfinite(result.final_loss) and result.final_loss < 100
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert "l1_loss" in log[-1] and "kld_loss" not in log[-1]  # the loss is the L1 term alone
    meta = json.loads((latest_checkpoint(out) / "pretrained_model" / POLICY_META).read_text())
    assert meta["cameras"] == [] and meta["env_state"] == ["cup.x", "cup.y", "cup.z"]
    assert meta["pose_estimator"]["path"] == str(est_dir.resolve()) and len(meta["pose_estimator"]["sha256"]) == 64

    act = load_agent(str(out))
    assert act.env_state and act.cameras == ()
    assert not hasattr(act.policy.model, "backbone")  # no ResNet runs
    assert not act.policy.config.use_vae and not hasattr(act.policy.model, "vae_encoder")
    r = evaluate_policy(str(out), "EmbodieDreamer-PickCup-Real-v0", 1, 0, max_episode_steps=20, progress=False)
    assert r.episodes == 1 and r.per_episode[0].length == 20

    # The agent reads the observation alone (no info), and the estimate is one of its inputs.
    real = make_env_for(act, "EmbodieDreamer-PickCup-Real-v0")
    obs, _ = real.reset(seed=0)
    assert KEY in obs and "object_poses" not in obs and obs[KEY].shape == (3,)
    act.reset()
    a0 = act(obs, None)
    act.reset()
    a1 = act({**obs, KEY: obs[KEY] + np.float32(0.05)}, None)
    real.close()
    assert a0.shape == (14,) and not np.allclose(a0, a1)

    # The estimator is required: a missing folder, or an ENV policy fed without it, fails clearly.
    with pytest.raises(KeyError, match="PoseEstimateWrapper"):
        act({k: v for k, v in obs.items() if k != KEY}, None)
    with pytest.raises(FileNotFoundError, match="--pose-estimator"):
        make_env_for(load_agent(str(out), pose_estimator=str(tmp_path / "nowhere")), sim)


def test_act_trained_on_sim_ground_truth_runs_on_the_estimate(tmp_path):
    """Sim demos recorded with the true cup position (pose_source="ground_truth") train a policy that
    is deployed on the estimator's estimate: its meta names the estimator, evaluation wraps the env
    with PoseEstimateWrapper (never the ground truth), at the recording's camera rate."""
    from embodied_gym.data import features as F
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
    from embodied_gym.recording.parallel import record_expert_demos
    from embodied_gym.wrappers.pose import GroundTruthPoseWrapper, PoseEstimateWrapper

    torch.manual_seed(0)
    est_cfg = PoseEstimatorConfig(
        frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )
    est_dir = PoseEstimator(est_cfg).save_pretrained(tmp_path / "estimator")
    sim = "EmbodieDreamer-PickCup-v0"
    kwargs = dict(
        pose_estimator=str(est_dir), pose_source="ground_truth", obs_type="state", camera_fps=10, max_episode_steps=30
    )
    record_expert_demos(sim, kwargs, tmp_path / "ds", 2, workers=1, progress=False, cameras=())
    ds = open_dataset(tmp_path / "ds")
    rows = ds.rows()
    assert rows[0]["pose_estimator"]["values"] == "ground_truth" and rows[0]["camera_fps"] == 10
    env_state = np.stack(ds.table()[F.ENV_STATE])
    assert env_state.shape == (60, 3)
    np.testing.assert_allclose(env_state[0], rows[0]["layout"]["cup"][:3], atol=1e-5)  # the true start position

    out = tmp_path / "act"
    train_act(
        ACTTrainConfig(
            dataset=str(tmp_path / "ds"),
            out=str(out),
            steps=4,
            batch_size=4,
            chunk_size=5,
            n_action_steps=5,
            save_every=4,
            log_every=2,
            progress=False,
            overrides=TINY,
        )
    )
    act = load_agent(str(out))
    assert act.requirements.pose_estimator == str(est_dir.resolve()) and act.requirements.camera_fps == 10
    env = make_env_for(act, sim)
    wrappers = []
    e = env
    while isinstance(e, gym.Wrapper):
        wrappers.append(type(e))
        e = e.env
    assert PoseEstimateWrapper in wrappers and GroundTruthPoseWrapper not in wrappers
    assert env.unwrapped.camera_fps == 10
    env.close()

    # --successful-only: the 30-step episodes never succeed, so nothing is left to imitate; with one
    # marked successful, only it is trained on (the meta names it)
    assert not any(r["success"] for r in rows)
    only = dict(
        dataset=str(tmp_path / "ds"),
        steps=2,
        batch_size=4,
        chunk_size=5,
        n_action_steps=5,
        save_every=2,
        log_every=1,
        progress=False,
        overrides=TINY,
        successful_only=True,
    )
    with pytest.raises(ValueError, match="none of the 2 training episodes succeeded"):
        train_act(ACTTrainConfig(out=str(tmp_path / "none"), **only))
    from embodied_gym.data.features import SIDECAR

    sidecar = tmp_path / "ds" / SIDECAR
    lines = [json.loads(x) for x in sidecar.read_text().splitlines()]
    lines[1]["success"] = True
    sidecar.write_text("".join(json.dumps(x) + "\n" for x in lines))
    train_act(ACTTrainConfig(out=str(tmp_path / "one"), **only))
    meta = json.loads(
        (latest_checkpoint(tmp_path / "one") / "pretrained_model" / "embodied_gym_policy.json").read_text()
    )
    assert meta["episodes"] == [1]


# ----------------------------------------------------------------------------- paired comparison
def test_mcnemar_exact_on_known_tables():
    from embodied_gym.policies.evaluate import mcnemar_exact

    # 10 discordant seeds all one way: p = 2 * 0.5**10
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    # 8 vs 2 discordant: 2 * P(Bin(10, .5) <= 2) = 2 * 56 / 1024 (scipy.stats.binomtest(2, 10).pvalue)
    assert mcnemar_exact(8, 2) == pytest.approx(112 / 1024)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 4) == mcnemar_exact(4, 3)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_comparison_counts_only_shared_seeds():
    from scipy.stats import binomtest

    from embodied_gym.policies.evaluate import paired_comparison

    a = {s: s % 2 == 0 for s in range(100)}  # 50 %
    b = {s: s % 4 == 0 for s in range(100)}  # 25 %, a subset of a's successes
    b[1000] = True  # a seed a never ran: ignored
    c = paired_comparison(a, b)
    assert (c.n, c.both, c.only_a, c.only_b, c.neither) == (100, 25, 25, 0, 50)
    assert c.rate_a == 0.5 and c.rate_b == 0.25
    assert c.p_value == pytest.approx(binomtest(0, 25, 0.5).pvalue)
    assert c.p_value < 1e-6
    with pytest.raises(ValueError, match="share no seed"):
        paired_comparison({1: True}, {2: True})


def test_pairwise_comparisons_pair_every_row_with_every_later_one_on_the_same_episodes():
    from embodied_gym.policies.evaluate import pairwise_comparisons

    rows = {"x": [True, True, False, False], "y": [True, False, False, False], "z": [False, True, True, True]}
    found = pairwise_comparisons(rows)
    assert list(found) == [("x", "y"), ("x", "z"), ("y", "z")]
    assert (found["x", "y"].only_a, found["x", "y"].only_b, found["x", "y"].both) == (1, 0, 1)
    assert (found["y", "z"].only_a, found["y", "z"].only_b, found["y", "z"].rate_b) == (1, 3, 0.75)


def test_backbone_weights_file_initialises_acts_resnet(tiny_dataset, tmp_path):
    """A local torchvision ResNet-18 state dict (safetensors) lands in LeRobot ACT's backbone; one that
    does not fit is refused, naming the file."""
    import dataclasses

    import torchvision
    from safetensors.torch import save_file

    from embodied_gym.data.reader import open_dataset
    from embodied_gym.policies.act import PRESETS, make_act_policy
    from embodied_gym.policies.act.modeling import check_backbone_weights

    torch.manual_seed(1)
    state = torchvision.models.resnet18(weights=None).state_dict()
    path = tmp_path / "r18.safetensors"
    save_file(state, str(path))
    check_backbone_weights(str(path))
    preset = dataclasses.replace(PRESETS["cpu"], **TINY, chunk_size=5, n_action_steps=5)
    policy, _, _ = make_act_policy(open_dataset(tiny_dataset), ["cam_high"], preset, None, "cpu", str(path))
    backbone = policy.model.backbone.state_dict()
    assert torch.equal(backbone["conv1.weight"], state["conv1.weight"])
    assert torch.equal(backbone["layer4.1.bn2.running_var"], state["layer4.1.bn2.running_var"])
    bad = tmp_path / "bad.safetensors"
    save_file({k: v for k, v in state.items() if not k.startswith("layer4.")}, str(bad))
    with pytest.raises(ValueError, match="bad.safetensors does not fit ACT's resnet18 backbone; missing"):
        make_act_policy(open_dataset(tiny_dataset), ["cam_high"], preset, None, "cpu", str(bad))
    with pytest.raises(ValueError, match="bad.safetensors does not fit"):
        check_backbone_weights(str(bad))


def test_eval_cli_threads_setting(capsys):
    import torch

    from embodied_gym.cli import main

    before = torch.get_num_threads()
    try:
        assert (
            main(
                [
                    "eval",
                    "--policy",
                    "expert",
                    "--env",
                    "EmbodieDreamer-PickCup-v0",
                    "--episodes",
                    "1",
                    "--threads",
                    "1",
                ]
            )
            == 0
        )
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert main(["eval", "--policy", "expert", "--env", "EmbodieDreamer-PickCup-v0", "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
    assert main(["eval", "--policy", "expert", "--env", "EmbodieDreamer-PickCup-v0", "--workers", "0"]) == 2
    assert "workers must be at least 1" in capsys.readouterr().err


def test_progress_bars_only_on_a_terminal(monkeypatch):
    """Off a terminal (a stage.log, CI) no bar is drawn and each logged step is one plain line; on a
    terminal the bar is drawn and no extra lines are written."""
    import io

    from embodied_gym import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, bar_shown in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        bar = progress.progress_bar(range(3), progress=True, desc="steps", file=stream)
        for _ in bar:
            progress.report(True, "step done")
        bar.close()
        progress.report(False, "never written")
        text = stream.getvalue()
        assert ("steps" in text) == bar_shown and "never written" not in text
        assert text.count("step done\n") == (0 if bar_shown else 3)


# ----------------------------------------------------------------------------- residual RL (SB3)
def test_residual_wrapper_passes_check_env_and_a_zero_residual_is_act(tiny_act):
    from gymnasium.utils.env_checker import check_env

    from embodied_gym.policies.residual import ResidualACTWrapper

    out, _, _ = tiny_act
    base = ACTAgent(out)
    env = ResidualACTWrapper(make_env_for(base, "EmbodieDreamer-PickCup-v0", max_episode_steps=10), base, 0.1)
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (28,)  # joint_pos + ACT's normalised proposal (no pose estimate)
    twin_agent = ACTAgent(out)
    twin = make_env_for(twin_agent, "EmbodieDreamer-PickCup-v0", max_episode_steps=10)
    obs, _ = env.reset(seed=3)
    o, _ = twin.reset(seed=3)
    for _ in range(6):  # a zero residual executes ACT's own action
        obs, *_ = env.step(np.zeros(14, np.float32))
        o, *_ = twin.step(twin_agent(o))
        np.testing.assert_allclose(obs[:14], o["joint_pos"], atol=1e-6)
    env.close()
    twin.close()
    with pytest.raises(ValueError, match="scale"):
        ResidualACTWrapper(twin, base, 0.0)


def test_residual_rl_trains_resumes_and_evaluates_on_the_stand_in(tiny_act, tmp_path):
    from embodied_gym.policies.residual import ResidualAgent, ResidualRLConfig, train_residual

    out, _, _ = tiny_act
    folder = tmp_path / "residual"
    base = dict(policy=str(out), env_id="EmbodieDreamer-PickCup-v0", out=str(folder), n_steps=32, batch_size=16)
    base.update(save_every=32, eval_episodes=1, max_episode_steps=20, progress=False)
    meta = train_residual(ResidualRLConfig(total_steps=64, **base))
    assert json.loads((folder / "checkpoint.json").read_text())["steps"] == 64
    assert {"base", "residual"} == set(meta["eval"]) and (folder / "residual.png").exists()
    episodes = len((folder / "monitor.csv").read_text().splitlines()) - 2
    assert episodes == 3  # 64 steps of 20-step episodes
    train_residual(ResidualRLConfig(total_steps=128, **base))  # resumes from the checkpoint
    assert json.loads((folder / "checkpoint.json").read_text())["steps"] == 128
    assert len((folder / "monitor.csv").read_text().splitlines()) - 2 > episodes  # appended, header kept

    agent = load_agent(str(folder))
    assert isinstance(agent, ResidualAgent) and agent.base_agent.path == ACTAgent(out).path
    res = evaluate_policy(
        str(folder), "EmbodieDreamer-PickCup-Real-v0", 1, seed=7, max_episode_steps=10, progress=False
    )
    assert res.episodes == 1 and res.mean_length == 10

    with pytest.raises(ValueError, match="sim id"):
        train_residual(ResidualRLConfig(**{**base, "env_id": "EmbodieDreamer-PickCup-Real-v0"}))
    (folder / "residual.json").write_text(json.dumps({"scale": 0.1}))
    with pytest.raises(ValueError, match="base_policy"):
        load_agent(str(folder))
