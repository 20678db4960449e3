"""The estimator's bias on the robot's camera, measured on the robot's own demonstrations
(:mod:`embodied_gym.perception.robot_offset`): the gripper events, the fit on every task, the corrected copy."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from embodied_gym.data import features as F
from embodied_gym.data.reader import read_sidecar
from embodied_gym.perception import PoseEstimator, PoseEstimatorConfig
from embodied_gym.perception.robot_offset import (
    GRIPPER_TOLERANCE,
    GripperEvents,
    TooFewDemonstrations,
    corrected_estimator,
    fit_estimator_offset,
    gripper_events,
)
from embodied_gym.recording.parallel import record_expert_demos
from embodied_gym.sim import robot
from embodied_gym.sim.tasks import TASKS, PickCup

# Episodes just past the expert's first grasp (its gripper starts closing at frame 88, PenInCup's at
# 102): long enough for the fit, too short for a release.
STEPS = {"PickCup": 96, "PenInCup": 110, "RemoteInBox": 96, "CupOnMat": 96}
EPISODES = 3


def tiny_estimator(task: str, folder: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)  # untrained: a large bias, which the fit must find
    config = PoseEstimatorConfig(
        task=task, frame_size=(48, 64), input_size=(20, 32), channels=(8, 8, 16, 16), keypoints=8, hidden=32
    )
    return PoseEstimator(config).save_pretrained(folder)


def record(env_id: str, estimator: Path, root: Path, steps: int, episodes: int = EPISODES, **kwargs) -> Path:
    record_expert_demos(
        env_id,
        {"pose_estimator": str(estimator), "max_episode_steps": steps, **kwargs},
        root,
        episodes,
        seed=0,
        workers=1,
        progress=False,
        cameras=(),
        after_success_steps=2,
    )
    return root


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Callable[[str], tuple[Path, Path, Path]]:
    """``recordings(task)``: (estimator, robot demos on the ``-Real-`` stand-in recorded with its
    estimate at the reset frame, sim demos labelled with the sim's true poses), recorded once per task."""
    done: dict[str, tuple[Path, Path, Path]] = {}

    def get(task: str) -> tuple[Path, Path, Path]:
        if task not in done:
            folder = tmp_path_factory.mktemp(task)
            estimator = tiny_estimator(task, folder / "est")
            robot_demos = record(
                f"EmbodieDreamer-{task}-Real-v0",
                estimator,
                folder / "robot",
                STEPS[task],
                obs_type="pixels_state",
                camera_fps=10,
                pose_update="at_reset",
            )
            sim_demos = record(
                f"EmbodieDreamer-{task}-v0",
                estimator,
                folder / "sim",
                STEPS[task],
                obs_type="state",
                pose_source="ground_truth",
            )
            done[task] = (estimator, robot_demos, sim_demos)
        return done[task]

    return get


def eased(start: float, end: float, steps: int) -> np.ndarray:
    """The scripted expert's eased move of the gripper command from ``start`` to ``end``."""
    s = 0.5 - 0.5 * np.cos(np.pi * (np.arange(steps) + 1) / steps)
    return start + s * (end - start)


def test_gripper_events_of_a_command_sequence():
    opened, closed = robot.GRIPPER_OPEN, 0.03
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-GRIPPER_TOLERANCE / 3, GRIPPER_TOLERANCE / 3, 200)  # a leader's noise: no event
    command = np.concatenate(
        [np.full(20, opened), eased(opened, closed, 15), np.full(30, closed), eased(closed, opened, 15), [opened] * 5]
    )
    events = gripper_events(command)
    # 1.8 mm of the 27 mm move is passed at its 3rd frame (closing and opening alike); the opening ends
    # within 0.45 mm of open at its 14th frame
    assert events == GripperEvents(grasp=22, release=67, opened=78)
    assert command[events.grasp] < opened - GRIPPER_TOLERANCE <= command[events.grasp - 1]
    assert gripper_events(opened - np.abs(jitter)) == GripperEvents(None, None, None)
    assert gripper_events(command[:60]) == GripperEvents(22, None, None)  # cut while holding: no release
    assert gripper_events(command[:79]).opened is None  # cut as it finishes opening: not read
    # a gripper that first opens wider, then closes: closing is measured from its widest
    wider = np.concatenate([eased(0.04, opened, 10), command])
    assert gripper_events(wider).grasp == 32


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_measures_its_grasped_objects_correction(task, recordings, tmp_path):
    estimator, robot_demos, sim_demos = recordings(task)
    fit = fit_estimator_offset(estimator, robot_demos, sim_demos)
    grasped, target = TASKS[task].grasped_object, TASKS[task].place_target
    assert fit.task == task and fit.object == grasped and list(fit.objects) == [grasped]
    assert fit.robot_episodes == EPISODES and fit.sim_episodes == EPISODES
    assert np.all(np.isfinite(fit.correction_xy)) and fit.objects[grasped].event == "grasp"
    assert len(fit.bias_per_episode) == EPISODES and "right" in fit.grasp_offset
    if target is not None:  # the episodes end before the release: the target is left as it was, saying why
        assert "release" in fit.uncorrected[target]
    fixed = PoseEstimator.from_pretrained(corrected_estimator(estimator, fit, tmp_path / "fixed")).config
    names = fixed.output_names
    correction = dict(zip(names, fixed.correction))
    assert (correction[f"{grasped}.x"], correction[f"{grasped}.y"]) == pytest.approx(fit.correction_xy)
    assert sum(map(abs, fixed.correction)) == pytest.approx(sum(map(abs, fit.correction_xy)))


def estimate_replaced(src: Path, dst: Path, shift_xy) -> Path:
    """A copy of the recorded dataset ``src`` whose estimate is every object's true start position (its
    sidecar layout) shifted by ``shift_xy``: an estimator with a known constant bias."""
    shutil.copytree(src, dst)
    layouts = {r["episode_index"]: r["layout"] for r in read_sidecar(dst)}
    names = read_sidecar(dst)[0]["pose_estimator"]["names"]
    for path in sorted((dst / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        state = np.stack(table[F.ENV_STATE].to_numpy(zero_copy_only=False)).astype(np.float32)
        for i, episode in enumerate(table["episode_index"].to_numpy()):
            for j, name in enumerate(names):
                obj, component = name.split(".")
                if component in ("x", "y"):
                    k = "xy".index(component)
                    state[i, j] = layouts[int(episode)][obj][k] + shift_xy[k]
        column = pa.FixedSizeListArray.from_arrays(pa.array(state.ravel(), pa.float32()), state.shape[1])
        at = table.schema.get_field_index(F.ENV_STATE)
        pq.write_table(table.set_column(at, table.schema.field(F.ENV_STATE), column), path)
    return dst


def test_the_correction_recovers_a_known_bias_and_the_copy_adds_it(recordings, tmp_path):
    """The stand-in's true start poses shifted by a known constant as the "estimate": the correction is
    minus that constant, through the stand-in's grasps against the sim's grasp offset; the corrected
    copy adds exactly the correction; the CLI writes the same copy."""
    estimator, robot_demos, sim_demos = recordings("PickCup")
    shift = (0.012, -0.008)
    biased = estimate_replaced(robot_demos, tmp_path / "biased", shift)
    fit = fit_estimator_offset(estimator, biased, sim_demos)
    np.testing.assert_allclose(fit.correction_xy, -np.asarray(shift), atol=0.003)
    assert fit.outliers == []

    fixed = corrected_estimator(estimator, fit, tmp_path / "fixed")
    frames = np.random.default_rng(0).integers(0, 255, (2, 48, 64, 3), dtype=np.uint8)
    difference = PoseEstimator.from_pretrained(fixed).estimate(frames) - PoseEstimator.from_pretrained(
        estimator
    ).estimate(frames)
    np.testing.assert_allclose(difference, np.tile([*fit.correction_xy, 0.0], (2, 1)), atol=1e-6)
    written = json.loads((fixed / "offset.json").read_text())
    assert written["robot_episodes"] == EPISODES and written["objects"]["cup"]["event"] == "grasp"

    from embodied_gym.cli import main

    args = ["perception", "offset", "--model", str(estimator), "--robot-dataset", str(biased)]
    assert main([*args, "--sim-dataset", str(sim_demos), "--out", str(tmp_path / "fixed_cli")]) == 0
    cli_config = PoseEstimator.from_pretrained(tmp_path / "fixed_cli").config
    assert cli_config.correction == PoseEstimator.from_pretrained(fixed).config.correction


def test_what_the_fit_refuses(recordings, tmp_path, monkeypatch):
    estimator, robot_demos, sim_demos = recordings("PickCup")
    other = tiny_estimator("PickCup", tmp_path / "other", seed=1)  # other weights
    with pytest.raises(ValueError, match="not recorded with the estimate of"):
        fit_estimator_offset(other, robot_demos, sim_demos)
    with pytest.raises(ValueError, match="not recorded with the estimate of"):  # the sim's true poses
        fit_estimator_offset(estimator, sim_demos, sim_demos)
    # episodes cut before the expert's grasp (as in the demo's smoke profile): nothing to fit on
    cut = record(
        "EmbodieDreamer-PickCup-v0",
        estimator,
        tmp_path / "cut",
        30,
        episodes=1,
        obs_type="state",
        pose_source="ground_truth",
    )
    with pytest.raises(TooFewDemonstrations, match="successful demonstrations"):
        fit_estimator_offset(estimator, robot_demos, cut)
    monkeypatch.setattr(PickCup, "grasped_object", None)
    with pytest.raises(ValueError, match="names no grasped_object"):
        fit_estimator_offset(estimator, robot_demos, sim_demos)


def test_the_registry_checks_the_grasped_and_placed_objects():
    from embodied_gym.sim.tasks import _registry

    class Misnamed(PickCup):
        grasped_object = "mug"

    with pytest.raises(ValueError, match="grasped_object 'mug' is not one of its objects"):
        _registry(Misnamed)

    class PlacedOnly(PickCup):
        grasped_object = None
        place_target = "cup"

    with pytest.raises(ValueError, match="needs a grasped_object"):
        _registry(PlacedOnly)
