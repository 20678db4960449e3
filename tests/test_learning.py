"""A policy that learns: ACT trained a minute or two on scripted-expert demos succeeds in the sim.

Every other ACT and TPO test runs a few optimisation steps of plumbing; this one checks that what the
loop trains can do the task. The policy reads joint state and the object-pose entry with the
simulator's true poses of the reset frame (``pose_source="ground_truth"``, ``pose_update="at_reset"``),
so the test measures imitation alone, not perception.
"""

import numpy as np
import pytest
import torch

from embodied_gym.factory import make_env
from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
from embodied_gym.policies.act import ACTTrainConfig, train_act
from embodied_gym.policies.agents import load_agent
from embodied_gym.policies.evaluate import evaluate
from embodied_gym.recording.parallel import record_expert_demos

SIM = "EmbodieDreamer-PickCup-v0"
DEMOS = 30
STEPS = 2000
EVAL_EPISODES = 20
EVAL_SEED = 10_000  # far from the training seeds 0..DEMOS-1


@pytest.fixture(scope="module")
def pose_entry(tmp_path_factory):
    """Env kwargs whose pose entry holds the true poses of the reset frame, in an estimator's layout
    (the estimator's weights are never run: ground truth replaces its output)."""
    folder = tmp_path_factory.mktemp("learning")
    cfg = PoseEstimatorConfig(frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32)
    est = PoseEstimator(cfg).save_pretrained(folder / "estimator")
    return dict(pose_estimator=str(est), pose_source="ground_truth", pose_update="at_reset", obs_type="state")


def _success(policy, kwargs, episodes: int = EVAL_EPISODES) -> float:
    env = make_env(SIM, **kwargs)
    try:
        return evaluate(policy, env, episodes=episodes, seed=EVAL_SEED, progress=False).success_rate
    finally:
        env.close()


def test_act_learns_pick_cup_from_expert_demos(pose_entry, tmp_path):
    torch.manual_seed(0)
    torch.set_num_threads(2)
    record_expert_demos(SIM, pose_entry, tmp_path / "demos", DEMOS, workers=2, progress=False, cameras=())
    # the demo's settings at a fraction of its steps: the cpu preset without ACT's VAE (its latent collapses
    # on scripted demos), temporal ensembling at deployment
    common = dict(
        dataset=str(tmp_path / "demos"),
        preset="cpu",
        batch_size=32,
        temporal_ensemble_coeff=0.01,
        log_every=100,
        progress=False,
        overrides=dict(use_vae=False),
    )
    untrained = train_act(ACTTrainConfig(out=str(tmp_path / "untrained"), steps=1, save_every=1, **common))
    trained = train_act(ACTTrainConfig(out=str(tmp_path / "trained"), steps=STEPS, save_every=STEPS, **common))
    assert np.isfinite(trained.final_loss) and trained.final_loss < untrained.final_loss / 5

    # a failing episode runs to the time limit: a few show the untrained policy's 0 %
    rate_untrained = _success(load_agent(str(tmp_path / "untrained")), pose_entry, episodes=4)
    rate_trained = _success(load_agent(str(tmp_path / "trained")), pose_entry)
    assert rate_untrained == 0.0
    # the scripted expert succeeds on every seed; the floor sits well below what these steps reach here and far
    # above the untrained policy's 0 %
    assert rate_trained >= 0.4, f"ACT after {STEPS} steps: {rate_trained:.0%} on {EVAL_EPISODES} sim episodes"
