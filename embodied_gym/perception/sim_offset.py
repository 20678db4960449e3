"""A pose estimator's constant bias on the sim's own camera, measured against the sim's true poses.

The estimator learns the task's objects from sim frames in domain-randomised looks, and reads the sim's
plain render (the look every sim env shows) with a bias of its own, nearly constant over the table, as it
reads the robot's camera with another (:mod:`~embodied_gym.perception.robot_offset`). The sim-trained
policies learn from the sim's true poses (the generate stage's labels) and read, on the robot, the estimate
with the robot's bias removed. In the sim they read the sim's estimate: TPO's rollouts and its in-sim
selection, the residual's training, every in-sim evaluation. Left in, the sim's bias makes the sim a harder
place than the robot for the very policies trained in it, and rates in the sim that rank policies unlike the
robot (BENCHMARKS.md, "The sim's own camera bias").

In the sim the truth is known, so the bias is measured directly: reset the sim env on ``episodes`` seeds,
read the estimate of each reset frame (the frame every ``at_reset`` policy reads), and per object take the
median of estimate minus true position (horizontal only; the height is the table's, yaw is not corrected).
:func:`~embodied_gym.perception.robot_offset.corrected_estimator` then writes a copy of the estimator whose config adds minus that median to
every estimate: the estimator the sim-trained policies read in the sim.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from embodied_gym.perception.configuration import CONFIG_NAME, PoseEstimatorConfig

#: Reset frames measured by default: the bias's spread over the table is a few millimetres, so its median
#: over this many frames is known to well under a millimetre, in seconds of rendering.
DEFAULT_EPISODES = 50
#: Seeds from here on: away from the seeds the loop records (0+, 50000+) and evaluates (100000+) on.
DEFAULT_SEED = 200_000


@dataclass
class SimObjectOffset:
    """One object's measured correction in the sim (metres)."""

    correction_xy: tuple[float, float]  # added to the estimate: minus the median bias
    bias_per_episode: list[list[float]]  # (dx, dy) of estimate minus truth at each reset frame
    spread_xy: tuple[float, float]  # standard deviation of the bias over the frames: what no constant removes


@dataclass
class SimOffset:
    """What :func:`fit_sim_offset` measured: a correction per object the estimator estimates."""

    task: str
    env_id: str
    seed: int
    episodes: int
    objects: dict[str, SimObjectOffset] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def fit_sim_offset(
    estimator: str | os.PathLike,
    env_id: str,
    *,
    episodes: int = DEFAULT_EPISODES,
    seed: int = DEFAULT_SEED,
    physics=None,
) -> SimOffset:
    """``estimator``'s bias on the reset frames of the sim env ``env_id`` (see the module docstring).

    Args:
        estimator: a pose estimator folder.
        env_id: a sim id of the estimator's task (``EmbodieDreamer-<Task>-v0``).
        episodes: reset frames measured (seeds ``seed`` to ``seed + episodes - 1``).
        physics: the sim's physics (calibration result JSON, dict, ``PhysicsParams``); the reset frame
            depends on it little (the arms start at rest), default nominal.

    Raises:
        ValueError: a robot (``-Real-``) id, which has no true poses to measure against; an id of another
            task than the estimator's; ``episodes`` < 3.
    """
    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY, true_pose_entry
    from embodied_gym.registration import parse_env_id

    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    parsed = parse_env_id(env_id)
    if parsed.real:
        raise ValueError(
            f"{env_id} is a robot: it has no true poses to measure the estimator's bias against; the robot's "
            f"bias is measured on its demonstrations (embodied_gym.perception.robot_offset)"
        )
    if parsed.task != config.task:
        raise ValueError(f"the estimator {estimator} is for {config.task}, the env {env_id} for {parsed.task}")
    if episodes < 3:
        raise ValueError(f"episodes must be at least 3 to take a median over, got {episodes}")
    env = make_env(env_id, physics=physics, pose_estimator=str(estimator), pose_update="at_reset")
    names = config.output_names
    columns = [(names.index(f"{o}.x"), names.index(f"{o}.y")) for o in config.objects]
    rows = []
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed + i)
            err = np.asarray(obs[KEY], np.float64) - true_pose_entry(config, info["object_poses"])
            rows.append([[err[ix], err[iy]] for ix, iy in columns])
    finally:
        env.close()
    bias = np.asarray(rows)  # (episodes, objects, 2)
    offset = SimOffset(task=config.task, env_id=env_id, seed=seed, episodes=episodes)
    for k, obj in enumerate(config.objects):
        median = np.median(bias[:, k], axis=0)
        offset.objects[obj] = SimObjectOffset(
            correction_xy=(float(-median[0]), float(-median[1])),
            bias_per_episode=bias[:, k].tolist(),
            spread_xy=(float(bias[:, k, 0].std()), float(bias[:, k, 1].std())),
        )
    return offset


@dataclass
class _Correction:
    correction_xy: tuple[float, float]


@dataclass
class RobotBias:
    """The robot's bias put back on a sim-corrected estimator: corrections (metres) and where they come from."""

    source: str  # the robot-corrected estimator folder whose offset.json they negate
    objects: dict[str, _Correction] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def with_robot_bias(
    sim_corrected: str | os.PathLike, robot_corrected: str | os.PathLike, out: str | os.PathLike
) -> Path:
    """A copy of ``sim_corrected`` (this module's estimator) at ``out`` that adds back the robot's bias that
    ``robot_corrected`` (:func:`~embodied_gym.perception.robot_offset.corrected_estimator`'s copy, with its
    ``offset.json``) removes: in the sim, the estimate a policy trained on the robot's uncorrected estimate
    reads there (ACT on the robot's own demonstrations), so that the sim shows it the bias it learnt with."""
    import json

    from embodied_gym.perception.robot_offset import corrected_estimator

    record = json.loads((Path(robot_corrected) / "offset.json").read_text())
    bias = RobotBias(source=str(robot_corrected))
    for obj, fit in record["objects"].items():
        cx, cy = fit["correction_xy"]
        bias.objects[obj] = _Correction((-float(cx), -float(cy)))
    return corrected_estimator(sim_corrected, bias, out)


__all__ = [
    "DEFAULT_EPISODES",
    "DEFAULT_SEED",
    "RobotBias",
    "SimObjectOffset",
    "SimOffset",
    "fit_sim_offset",
    "with_robot_bias",
]
