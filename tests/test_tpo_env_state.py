"""TPO on an ACT policy that reads estimated object poses (``observation.environment_state``): rollouts in
the perception-wrapped sim, trajectories holding the estimate the policy saw, the loss on it, checkpoints
that evaluate on a Real id with the same estimator."""

import json
import math
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodied_gym.factory import make_env_for
from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
from embodied_gym.perception.pose_entry import KEY, estimator_source
from embodied_gym.policies.act import POLICY_META, ACTTrainConfig, latest_checkpoint, train_act
from embodied_gym.policies.agents import ACTAgent, load_agent
from embodied_gym.policies.evaluate import evaluate_policy
from embodied_gym.policies.tpo import ACTLikelihood, TPOConfig, rollout, train_tpo

SIM = "EmbodieDreamer-PickCup-v0"
TINY = dict(
    dim_model=32,
    n_heads=2,
    dim_feedforward=64,
    n_encoder_layers=1,
    n_decoder_layers=1,
    latent_dim=8,
    n_vae_encoder_layers=1,
)


def tiny_estimator_config() -> PoseEstimatorConfig:
    """As tests/test_perception.py: a 48x64 frame, its crop resized to 20x32."""
    return PoseEstimatorConfig(
        frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )


@pytest.fixture(scope="module")
def pose_policy(tmp_path_factory):
    """A tiny (untrained) pose estimator, two expert episodes recorded with it (estimate only, no video)
    and a tiny ACT trained on joint state + estimate, as tests/test_policies.py's end-to-end test does."""
    from embodied_gym.policies.agents import ExpertAgent
    from embodied_gym.recording.episodes import record

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tpo_pose")
    torch.manual_seed(0)
    est_dir = PoseEstimator(tiny_estimator_config()).save_pretrained(root / "estimator")
    expert = ExpertAgent()
    env = make_env_for(expert, SIM, pose_estimator=str(est_dir), max_episode_steps=30)
    record(env, expert, root / "ds", 2, env_id=SIM, progress=False, cameras=())
    env.close()
    out = root / "act"
    train_act(
        ACTTrainConfig(
            dataset=str(root / "ds"),
            out=str(out),
            steps=6,
            batch_size=4,
            chunk_size=5,
            n_action_steps=5,
            save_every=6,
            log_every=3,
            progress=False,
            overrides=TINY,
        )
    )
    return out, est_dir


class SeenEstimates(gym.Wrapper):
    """Keeps every observation's estimate and the simulator's true cup position as the env hands them out."""

    def __init__(self, env):
        super().__init__(env)
        self.estimates, self.truth = [], []

    def _keep(self, obs, info):
        self.estimates.append(np.array(obs[KEY], copy=True))
        self.truth.append(np.asarray(info["object_poses"]["cup"][:3], np.float32))

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self._keep(obs, info)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._keep(obs, info)
        return obs, reward, terminated, truncated, info


def test_rollout_stores_the_estimate_the_policy_saw_and_the_loss_uses_it(pose_policy):
    out, est_dir = pose_policy
    agent = ACTAgent(out)
    assert agent.env_state and agent.cameras == ()
    k = agent.policy.config.n_action_steps
    env = SeenEstimates(make_env_for(agent, SIM, max_episode_steps=12))
    traj = rollout(agent, env, "PickCup", 3, 0.1, np.random.default_rng(0))
    env.close()
    assert traj.length == 12 and traj.images == {}
    q = traj.states.shape[0]
    assert q == math.ceil(12 / k) and traj.env_state.shape == (q, 3) and traj.env_state.dtype == torch.float32
    # the policy is queried at steps 0, k, 2k, ...: what the wrapper handed out there, never the sim's state
    seen = np.stack(env.estimates[0:12:k])
    np.testing.assert_array_equal(traj.env_state.numpy(), seen)
    assert np.abs(traj.env_state.numpy() - np.stack(env.truth[0:12:k])).max() > 1e-3

    # The likelihood is computed on batches with the estimate: it is finite, has a gradient, and changes
    # when the estimate does.
    lik = ACTLikelihood(agent.policy, agent.pre, 0.1)
    logp = lik.log_prob(traj)
    agent.policy.zero_grad()
    logp.backward()
    proj = agent.policy.model.encoder_env_state_input_proj.weight.grad
    assert math.isfinite(logp.item()) and proj is not None and float(proj.abs().sum()) > 0
    shifted = type(traj)(**{**traj.__dict__, "env_state": traj.env_state + 0.05})
    with torch.no_grad():
        assert float(lik.log_prob(shifted)) != pytest.approx(float(logp), abs=1e-4)
    with pytest.raises(ValueError, match="PoseEstimateWrapper"):
        lik.log_prob(type(traj)(**{**traj.__dict__, "env_state": None}))


def test_tpo_on_an_env_state_policy_runs_and_its_checkpoint_evaluates_on_real(pose_policy, tmp_path):
    out, est_dir = pose_policy
    cfg = TPOConfig(
        policy=str(out),
        env_id=SIM,
        out=str(tmp_path / "tpo"),
        iterations=1,
        rollouts=2,
        pairs=1,
        min_score_gap=0.0,
        epochs=1,
        max_episode_steps=15,
        eval_episodes=1,
        select="last",
        progress=False,
    )
    log = train_tpo(cfg)
    assert [r["iteration"] for r in log] == [0, 1] and log[1]["pairs"] == 1
    assert math.isfinite(log[1]["loss_first"]) and math.isfinite(log[1]["loss_last"])
    ckpt = latest_checkpoint(tmp_path / "tpo")
    assert ckpt.name == "000001"
    meta = json.loads((ckpt / "pretrained_model" / POLICY_META).read_text())
    src = json.loads((latest_checkpoint(out) / "pretrained_model" / POLICY_META).read_text())
    assert meta["env_state"] == src["env_state"] == ["cup.x", "cup.y", "cup.z"]
    assert meta["pose_estimator"] == src["pose_estimator"]  # the same estimator: nothing to change
    assert meta["pose_estimator"]["sha256"] == estimator_source(est_dir)["sha256"]
    tuned = load_agent(str(tmp_path / "tpo"))
    assert tuned.env_state and tuned.requirements.pose_estimator == str(est_dir.resolve())
    # TPO changed the weights (one step of AdamW)
    before = ACTAgent(out).policy.model.encoder_env_state_input_proj.weight
    assert not torch.equal(before, tuned.policy.model.encoder_env_state_input_proj.weight)
    r = evaluate_policy(
        str(tmp_path / "tpo"), "EmbodieDreamer-PickCup-Real-v0", 1, 0, max_episode_steps=10, progress=False
    )
    assert r.episodes == 1 and r.per_episode[0].length == 10
    assert len(train_tpo(cfg)) == 2  # resumes from its own checkpoint (same estimator check): nothing to do


def test_tpo_estimator_checks_and_override(pose_policy, tmp_path):
    """Weights that differ from the policy's metadata are refused unless named with pose_estimator;
    the override's checkpoint names the estimator its rollouts read."""
    out, est_dir = pose_policy
    # the policy's estimator folder now holds other weights: a copy of the policy naming a copied folder
    other = tmp_path / "estimator_retrained"
    torch.manual_seed(1)
    PoseEstimator(tiny_estimator_config()).save_pretrained(other)
    policy = tmp_path / "policy"
    shutil.copytree(latest_checkpoint(out) / "pretrained_model", policy)
    meta = json.loads((policy / POLICY_META).read_text())
    meta["pose_estimator"]["path"] = str(other.resolve())
    (policy / POLICY_META).write_text(json.dumps(meta))
    base = dict(
        env_id=SIM,
        iterations=1,
        rollouts=2,
        pairs=1,
        min_score_gap=0.0,
        epochs=1,
        max_episode_steps=10,
        eval_episodes=0,
        progress=False,
    )
    with pytest.raises(ValueError, match=r"other weights.*--pose-estimator"):
        train_tpo(TPOConfig(policy=str(policy), out=str(tmp_path / "t1"), **base))
    assert not (tmp_path / "t1" / "checkpoints").exists()

    log = train_tpo(TPOConfig(policy=str(policy), out=str(tmp_path / "t2"), pose_estimator=str(other), **base))
    assert [r["iteration"] for r in log] == [1]  # nothing evaluated: no iteration 0, the last one returned
    written = json.loads((latest_checkpoint(tmp_path / "t2") / "pretrained_model" / POLICY_META).read_text())
    assert written["pose_estimator"]["path"] == str(other.resolve())
    assert written["pose_estimator"]["sha256"] == estimator_source(other)["sha256"] != meta["pose_estimator"]["sha256"]
    assert written["pose_estimator"]["image_size"] == [48, 64] and written["env_state"] == meta["env_state"]
    make_env_for(load_agent(str(tmp_path / "t2")), SIM).close()  # eval accepts it without a flag

    meta["pose_estimator"]["path"] = str(tmp_path / "gone")
    (policy / POLICY_META).write_text(json.dumps(meta))
    with pytest.raises(FileNotFoundError, match=r"gone.*--pose-estimator"):
        train_tpo(TPOConfig(policy=str(policy), out=str(tmp_path / "t3"), **base))


def test_train_tpo_cli_takes_pose_estimator(pose_policy, tmp_path):
    from embodied_gym.cli import main

    out, est_dir = pose_policy
    assert (
        main(
            [
                "train",
                "tpo",
                "--policy",
                str(out),
                "--env",
                SIM,
                "--out",
                str(tmp_path / "cli"),
                "--iterations",
                "1",
                "--rollouts",
                "2",
                "--pairs",
                "1",
                "--epochs",
                "1",
                "--max-episode-steps",
                "5",
                "--pose-estimator",
                str(est_dir),
                "--eval-episodes",
                "2",
                "--select",
                "last",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "cli" / "tpo_log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and rows[1]["rollouts"] == 2
    assert len(rows[0]["eval_successes"]) == len(rows[1]["eval_successes"]) == 2
    meta = json.loads((tmp_path / "cli" / "pretrained_model" / POLICY_META).read_text())
    assert meta["tpo_selected"]["iteration"] == 1 and meta["tpo_selected"]["rule"] == "last"
    with pytest.raises(SystemExit):
        main(["train", "tpo", "--policy", str(out), "--env", SIM, "--out", str(tmp_path / "bad"), "--select", "first"])


def test_a_policy_recorded_at_reset_is_evaluated_at_reset_unless_overridden(pose_policy, tmp_path):
    """``pose_update`` travels with the data: demos recorded with the reset frame's estimate held make a
    policy that make_env_for (so eval) wraps the same way; ``pose_update=`` overrides it."""
    from embodied_gym.policies.agents import ExpertAgent
    from embodied_gym.recording.episodes import record

    _, est_dir = pose_policy
    expert = ExpertAgent()
    env = make_env_for(expert, SIM, pose_estimator=str(est_dir), pose_update="at_reset", max_episode_steps=12)
    record(env, expert, tmp_path / "ds", 1, env_id=SIM, progress=False, cameras=())
    env.close()
    train_act(
        ACTTrainConfig(
            dataset=str(tmp_path / "ds"),
            out=str(tmp_path / "act"),
            steps=2,
            batch_size=2,
            chunk_size=5,
            n_action_steps=5,
            save_every=2,
            log_every=1,
            progress=False,
            overrides=TINY,
        )
    )
    agent = load_agent(str(tmp_path / "act"))
    assert agent.estimator_source["update"] == "at_reset"
    for override, want in ((None, "at_reset"), ("every_frame", "every_frame")):
        env = make_env_for(agent, SIM, pose_update=override, max_episode_steps=5)
        assert env.get_wrapper_attr("update") == want
        env.close()
    env = make_env_for(load_agent(str(pose_policy[0])), SIM, max_episode_steps=5)  # recorded before: every frame
    assert env.get_wrapper_attr("update") == "every_frame"
    env.close()


def test_tpo_rolls_out_with_the_deployed_pose_update_and_its_checkpoint_says_so(pose_policy, tmp_path):
    """``TPOConfig(pose_update="at_reset")``: the rollouts read the reset frame's estimate held (the
    estimate in a trajectory never changes), and the checkpoint names the rule, so eval uses it too."""
    out, _ = pose_policy
    cfg = TPOConfig(
        policy=str(out),
        env_id=SIM,
        out=str(tmp_path / "tpo"),
        iterations=1,
        rollouts=2,
        pairs=1,
        min_score_gap=0.0,
        epochs=1,
        max_episode_steps=15,
        progress=False,
        pose_update="at_reset",
        eval_episodes=2,
    )
    train_tpo(cfg)
    meta = json.loads((latest_checkpoint(tmp_path / "tpo") / "pretrained_model" / POLICY_META).read_text())
    assert meta["pose_estimator"]["update"] == "at_reset"
    # the policy the run returns (the reference or iteration 1) is evaluated as it was selected: at reset
    returned = json.loads((tmp_path / "tpo" / "pretrained_model" / POLICY_META).read_text())
    assert returned["pose_estimator"]["update"] == "at_reset" and "tpo_selected" in returned
    tuned = load_agent(str(tmp_path / "tpo"))
    env = make_env_for(tuned, SIM, max_episode_steps=15)
    assert env.get_wrapper_attr("update") == "at_reset"
    traj = rollout(tuned, env, "PickCup", 0, 0.0, np.random.default_rng(0))
    env.close()
    assert np.allclose(traj.env_state, traj.env_state[:1])  # held for the episode
    from embodied_gym.cli import main

    with pytest.raises(SystemExit) as bad:  # argparse names the valid choices
        main(
            [
                "train",
                "tpo",
                "--policy",
                str(out),
                "--env",
                SIM,
                "--out",
                str(tmp_path / "x"),
                "--pose-update",
                "sometimes",
            ]
        )
    assert bad.value.code == 2


def test_tpo_rollouts_on_true_poses_keep_the_estimator_for_deployment(pose_policy, tmp_path):
    """``rollout_poses="ground_truth"``: the rollouts read the sim's true poses in the estimate's layout (no
    camera rendered), and the checkpoint still names the estimator the policy reads when deployed."""
    from embodied_gym.perception.pose_entry import true_pose_entry
    from embodied_gym.policies import tpo

    out, est_dir = pose_policy
    cfg = TPOConfig(
        policy=str(out),
        env_id=SIM,
        out=str(tmp_path / "tpo"),
        rollout_poses="ground_truth",
        pose_update="at_reset",
        rollouts=1,
        max_episode_steps=8,
        eval_episodes=0,
        progress=False,
    )
    run = tpo._setup(cfg)
    traj = tpo._collect_rollouts(run, 0)[0]
    run.env.close()
    _, info = gym.make(SIM, obs_type="state").reset(seed=traj.seed)
    expected = true_pose_entry(PoseEstimator.from_pretrained(est_dir).config, info["object_poses"])
    np.testing.assert_allclose(traj.env_state[0].numpy(), expected, atol=1e-5)  # the truth, held from reset
    np.testing.assert_allclose(traj.env_state[-1].numpy(), expected, atol=1e-5)
    about = run.meta["pose_estimator"]
    assert about["sha256"] == estimator_source(est_dir)["sha256"] and about["image_size"] == [48, 64]
