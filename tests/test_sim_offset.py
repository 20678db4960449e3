"""The estimator's bias on the sim's own renders (embodied_gym.perception.sim_offset): measured against the
sim's true poses, removed by a corrected copy, and what the demo's in-sim evaluations read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
from embodied_gym.perception.robot_offset import corrected_estimator
from embodied_gym.perception.sim_offset import fit_sim_offset, with_robot_bias


def tiny_estimator(task: str, folder: Path) -> Path:
    import torch

    torch.manual_seed(0)  # untrained: a large bias, which the fit must find
    config = PoseEstimatorConfig(
        task=task, frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )
    return PoseEstimator(config).save_pretrained(folder)


@pytest.mark.parametrize("task", ["PickCup", "PenInCup"])
def test_the_corrected_copy_reads_the_sims_reset_frames_without_a_constant_bias(task, tmp_path):
    """An untrained estimator reads the sim far off; after the fit its copy's median error on the same reset
    frames is zero per object and coordinate, and a second fit on the copy finds nothing left to correct."""
    estimator = tiny_estimator(task, tmp_path / "est")
    env_id = f"EmbodieDreamer-{task}-v0"
    fit = fit_sim_offset(estimator, env_id, episodes=4, seed=7)
    assert set(fit.objects) == set(PoseEstimator.from_pretrained(estimator).config.objects)
    assert max(np.hypot(*o.correction_xy) for o in fit.objects.values()) > 0.005  # untrained: far off
    fixed = corrected_estimator(estimator, fit, tmp_path / "fixed")
    again = fit_sim_offset(fixed, env_id, episodes=4, seed=7)
    for obj, o in again.objects.items():
        np.testing.assert_allclose(o.correction_xy, 0.0, atol=1e-5, err_msg=obj)
        np.testing.assert_allclose(o.spread_xy, fit.objects[obj].spread_xy, atol=1e-5)
    written = json.loads((fixed / "offset.json").read_text())
    assert written["env_id"] == env_id and written["episodes"] == 4 and written["from"] == str(estimator)


def test_what_the_sim_fit_refuses(tmp_path):
    estimator = tiny_estimator("PickCup", tmp_path / "est")
    with pytest.raises(ValueError, match="robot: it has no true poses"):
        fit_sim_offset(estimator, "EmbodieDreamer-PickCup-Real-v0")
    with pytest.raises(ValueError, match="is for PickCup"):
        fit_sim_offset(estimator, "EmbodieDreamer-PenInCup-v0")
    with pytest.raises(ValueError, match="at least 3"):
        fit_sim_offset(estimator, "EmbodieDreamer-PickCup-v0", episodes=2)


def corrected_copy(estimator: Path, out: Path, corrections: dict[str, tuple[float, float]]) -> Path:
    """A copy with the given corrections, as ``corrected_estimator`` writes one (``offset.json`` included)."""
    from embodied_gym.perception.sim_offset import RobotBias, _Correction

    fit = RobotBias(source="test", objects={o: _Correction(xy) for o, xy in corrections.items()})
    return corrected_estimator(estimator, fit, out)


def test_the_stand_in_demo_policy_reads_the_robots_bias_in_the_sim(tmp_path):
    """The copy for ACT on the robot's demonstrations is the sim-corrected estimator minus the robot's
    correction; the demo's in-sim evaluations hand it to that policy and the sim-corrected one to the others."""
    from embodied_gym.demo.configuration import EvaluateStageConfig, load_config
    from embodied_gym.demo.stages import CALIBRATED_SIM, NOMINAL_SIM, ROBOT, LoopSettings, StageContext, evaluation_runs

    estimator = tiny_estimator("PenInCup", tmp_path / "est")
    sim = corrected_copy(estimator, tmp_path / "sim", {"pen": (0.01, -0.02), "pencup": (0.003, 0.0)})
    robot = corrected_copy(estimator, tmp_path / "robot", {"pen": (0.004, 0.005)})
    both = PoseEstimator.from_pretrained(with_robot_bias(sim, robot, tmp_path / "both")).config
    names = both.output_names
    want = dict(zip(names, [0.0] * len(names)))
    want.update({"pen.x": 0.006, "pen.y": -0.025, "pencup.x": 0.003, "pencup.y": 0.0})
    assert dict(zip(names, both.correction)) == pytest.approx(want)

    loop = LoopSettings.of(load_config("smoke"), "PenInCup")
    e = EvaluateStageConfig(
        policies=["act_stand_in", "act_aligned"], in_sim=["act_stand_in", "act_aligned"], in_nominal_sim=["act_aligned"]
    )
    inputs = {
        "act_stand_in": {"policy": "S"},
        "act_aligned": {"policy": "A"},
        "perception_offset": {"model": str(robot)},
        "perception_aligned": {"skipped": "sources"},
        "perception_sim_offset": {"model": str(sim)},
    }
    runs = {(name, where): est for name, _, where, est in evaluation_runs(e, StageContext(loop, tmp_path, inputs))}
    assert runs[("act_aligned", ROBOT)] == str(robot) and runs[("act_stand_in", ROBOT)] is None
    assert runs[("act_aligned_in_sim", CALIBRATED_SIM)] == runs[("act_aligned_in_nominal_sim", NOMINAL_SIM)] == str(sim)
    stand_in = PoseEstimator.from_pretrained(runs[("act_stand_in_in_sim", CALIBRATED_SIM)]).config
    assert stand_in.correction == pytest.approx(both.correction)
    # without the sim's correction every policy reads the estimator it was recorded with in a sim
    inputs["perception_sim_offset"] = {"skipped": "perception.sim_offset: false"}
    runs = {(name, where): est for name, _, where, est in evaluation_runs(e, StageContext(loop, tmp_path, inputs))}
    assert (
        runs[("act_aligned_in_sim", CALIBRATED_SIM)] is None and runs[("act_stand_in_in_sim", CALIBRATED_SIM)] is None
    )


def test_the_cli_writes_the_sim_corrected_copy(tmp_path, capsys):
    from embodied_gym.cli import main

    estimator = tiny_estimator("PickCup", tmp_path / "est")
    args = ["perception", "offset", "--model", str(estimator), "--sim", "EmbodieDreamer-PickCup-v0"]
    assert main([*args, "--episodes", "3", "--out", str(tmp_path / "fixed")]) == 0
    assert "cup: correction (" in capsys.readouterr().out
    fit = fit_sim_offset(estimator, "EmbodieDreamer-PickCup-v0", episodes=3)
    config = PoseEstimator.from_pretrained(tmp_path / "fixed").config
    assert config.correction[:2] == pytest.approx(fit.objects["cup"].correction_xy)
    with pytest.raises(SystemExit, match="drop --robot-dataset"):
        main([*args, "--robot-dataset", "x", "--out", str(tmp_path / "no")])
