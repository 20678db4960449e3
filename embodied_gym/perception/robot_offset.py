"""A pose estimator's constant bias on the robot's camera, measured from the robot's own demonstrations.

An estimator trained in the sim reads the robot's camera with a bias that is nearly constant over the
table (the camera's pose and lens differ a little from the sim's): on the stand-in as large as the
grasp's tolerance (BENCHMARKS.md, "A camera bias the robot's demonstrations measure"). The
demonstrations recorded on the robot already say where the object was, without any sensor the robot
lacks: at the first successful frame of a PickCup demonstration the cup is in the gripper, so its
position is the tool centre point's (``observation.ee_pose``, forward kinematics of the joint encoders)
plus a grasp offset, the same in every demonstration of the same expert and arm. The sim, where the
true poses are known, measures that grasp offset (median over its demonstrations, per arm). Per robot
demonstration the bias is then

    estimate at the reset frame - (TCP at the first success + the arm's grasp offset)

and the correction is minus the median bias over the demonstrations (horizontal only; the height is
the table's). :func:`corrected_estimator` writes a copy of the estimator folder whose config adds the
correction to every estimate (:attr:`PoseEstimatorConfig.correction`), for the robot's camera only:
the sim's renders keep the uncorrected estimator.

Assumptions, checked where they can be: the object is not moved before it is grasped (a push shows up
as an outlier; the median ignores a few), the robot's demonstrations were recorded with this
estimator's estimate (the sidecar names its weights), and the sim's demonstrations were made by the
same expert (or operator) with the sim's true poses as labels.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from embodied_gym.atomic import atomic_dir, write_json
from embodied_gym.perception.configuration import CONFIG_NAME, WEIGHTS_NAME, PoseEstimatorConfig

#: The object each task's demonstrations hold in the gripper at their first successful frame.
HELD_AT_SUCCESS = {"PickCup": "cup"}
#: A robot demonstration whose bias is this far (m) from the median is reported as an outlier
#: (the object was probably pushed before the grasp).
OUTLIER_M = 0.02


class TooFewDemonstrations(ValueError):
    """Fewer than 3 usable successful demonstrations in a dataset: nothing to fit the offset on."""


@dataclass
class EstimatorOffset:
    """What :func:`fit_estimator_offset` measured (lengths in metres)."""

    task: str
    object: str
    correction_xy: tuple[float, float]  # added to the estimate: minus the median bias
    bias_per_episode: list[list[float]]  # robot demonstrations: (dx, dy) of estimate minus position
    grasp_offset: dict[str, list[float]]  # per arm: object position minus TCP at the first success (sim)
    robot_episodes: int
    sim_episodes: int
    outliers: list[int] = field(default_factory=list)  # robot episode indices beyond OUTLIER_M

    def to_json(self) -> dict:
        return asdict(self)


def _episodes_at_success(root: str | os.PathLike, env_state: bool) -> list[dict]:
    """Per successful episode of a recorded dataset: its sidecar row, the TCP xy of both arms at the
    first successful frame and (``env_state``) the environment state of the first frame."""
    from embodied_gym.data.features import EE_POSE, ENV_STATE, SUCCESS
    from embodied_gym.data.reader import open_dataset, read_sidecar

    ds = open_dataset(root)
    table = ds.table()
    if env_state and ENV_STATE not in table.column_names:
        raise ValueError(f"dataset {root} has no {ENV_STATE}: record it with --pose-estimator DIR")
    episode = np.asarray(table["episode_index"])
    ee = np.stack(table[EE_POSE]).astype(np.float64)
    success = np.asarray(table[SUCCESS]).reshape(-1).astype(bool)
    state = np.stack(table[ENV_STATE]).astype(np.float64) if env_state else None
    rows = {r["episode_index"]: r for r in read_sidecar(root)}
    out = []
    for e in np.unique(episode):
        sel = np.flatnonzero(episode == e)
        if not success[sel].any():
            continue
        k = sel[np.argmax(success[sel])]
        tcp = ee[k][[0, 1, 2, 7, 8, 9]].reshape(2, 3)
        moved = np.linalg.norm(tcp - ee[sel[0]][[0, 1, 2, 7, 8, 9]].reshape(2, 3), axis=1)
        out.append(
            {
                "episode": int(e),
                "row": rows.get(int(e), {}),
                "tcp_xy": tcp[:, :2],
                "arm": int(np.argmax(moved)),  # the arm that went to the object; the other stays at rest
                "first_state": state[sel[0]] if state is not None else None,
            }
        )
    return out


def fit_estimator_offset(
    estimator: str | os.PathLike, robot_dataset: str | os.PathLike, sim_dataset: str | os.PathLike
) -> EstimatorOffset:
    """The correction that removes ``estimator``'s bias on the robot's camera (see the module docstring).

    Args:
        estimator: the pose estimator folder the robot demonstrations were recorded with.
        robot_dataset: demonstrations recorded on the robot with ``record --pose-estimator`` (its
            estimate as ``observation.environment_state``).
        sim_dataset: demonstrations of the same expert in the sim (any physics), whose sidecar rows hold
            their layouts (the sim's true start poses).

    Raises:
        ValueError: a task other than those of :data:`HELD_AT_SUCCESS`, or a robot dataset recorded with
            another estimator (or without one).
        TooFewDemonstrations: fewer than 3 successful demonstrations in either dataset.
    """
    from embodied_gym.data.reader import open_dataset

    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    task = config.task
    if task not in HELD_AT_SUCCESS:
        raise ValueError(
            f"fit_estimator_offset knows which object the demonstrations hold at success only for "
            f"{sorted(HELD_AT_SUCCESS)}; {task} is not one of them"
        )
    obj = HELD_AT_SUCCESS[task]
    names = config.output_names
    ix, iy = names.index(f"{obj}.x"), names.index(f"{obj}.y")
    for root in (robot_dataset, sim_dataset):
        found = open_dataset(root).task
        if found is not None and found != task:
            raise ValueError(f"dataset {root} holds {found} demonstrations; the estimator {estimator} is for {task}")
    robot = _episodes_at_success(robot_dataset, env_state=True)
    sim = _episodes_at_success(sim_dataset, env_state=False)
    _check_recorded_with(robot, robot_dataset, estimator)
    if len(robot) < 3 or len(sim) < 3:
        raise TooFewDemonstrations(
            f"need at least 3 successful demonstrations in each dataset to fit the offset; "
            f"{robot_dataset}: {len(robot)}, {sim_dataset}: {len(sim)}"
        )

    offsets = _grasp_offsets(sim, obj, sim_dataset)
    bias, used = [], []
    for ep in robot:
        est_xy, arm = ep["first_state"][[ix, iy]], ep["arm"]
        if arm not in offsets:  # this arm never grasped in the sim: its grasp offset is unknown
            continue
        bias.append(est_xy - (ep["tcp_xy"][arm] + offsets[arm]))
        used.append(ep["episode"])
    if len(bias) < 3:
        raise TooFewDemonstrations(
            f"only {len(bias)} robot demonstrations grasped with an arm the sim demonstrations used"
        )
    biases = np.asarray(bias)
    median = np.median(biases, axis=0)
    outliers = [e for e, b in zip(used, biases) if np.linalg.norm(b - median) > OUTLIER_M]
    return EstimatorOffset(
        task=task,
        object=obj,
        correction_xy=(float(-median[0]), float(-median[1])),
        bias_per_episode=biases.tolist(),
        robot_episodes=len(biases),
        sim_episodes=len(sim),
        grasp_offset={("left", "right")[a]: v.tolist() for a, v in offsets.items()},
        outliers=outliers,
    )


def _check_recorded_with(robot: list[dict], robot_dataset, estimator) -> None:
    """Refuse robot demonstrations whose sidecar rows name another estimator's weights (or the true poses)."""
    from embodied_gym.perception.pose_entry import estimator_source

    weights = estimator_source(estimator)["sha256"]
    for ep in robot:
        named = ep["row"].get("pose_estimator") or {}
        if named.get("values") == "ground_truth" or named.get("sha256") != weights:
            raise ValueError(
                f"episode {ep['episode']} of {robot_dataset} was not recorded with the estimate of "
                f"{estimator} (its sidecar names {named.get('path')!r}); record the robot's "
                f"demonstrations with --pose-estimator {estimator}"
            )


def _grasp_offsets(sim: list[dict], obj: str, sim_dataset) -> dict[int, np.ndarray]:
    """Per arm that grasped in the sim, the median of (the object's true start xy - the TCP's xy at success)."""
    grasp: dict[int, list[np.ndarray]] = {0: [], 1: []}
    for ep in sim:
        layout = ep["row"].get("layout", {})
        if obj not in layout:
            raise ValueError(
                f"episode {ep['episode']} of {sim_dataset} has no layout for {obj!r} in its sidecar "
                f"row: record the sim demonstrations with embodied-gym record (it stores the layout)"
            )
        arm = ep["arm"]
        grasp[arm].append(np.asarray(layout[obj][:2], dtype=np.float64) - ep["tcp_xy"][arm])
    return {arm: np.median(v, axis=0) for arm, v in grasp.items() if v}


def corrected_estimator(estimator: str | os.PathLike, offset: EstimatorOffset, out: str | os.PathLike) -> Path:
    """A copy of the estimator folder ``estimator`` at ``out`` whose config adds ``offset``'s correction
    to every estimate (on top of any correction it had), with ``offset.json`` beside it; written
    atomically. Returns ``out``."""
    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    correction = np.asarray(config.correction or np.zeros(config.output_dim), dtype=np.float64)
    names = config.output_names
    correction[names.index(f"{offset.object}.x")] += offset.correction_xy[0]
    correction[names.index(f"{offset.object}.y")] += offset.correction_xy[1]
    out = Path(out)
    with atomic_dir(out) as tmp:
        shutil.copy(Path(estimator) / WEIGHTS_NAME, tmp / WEIGHTS_NAME)
        d = config.to_dict()
        d["correction"] = correction.tolist()
        (tmp / CONFIG_NAME).write_text(json.dumps(d, indent=2))
        write_json(tmp / "offset.json", {"from": str(estimator), **offset.to_json()})
    return out


__all__ = ["HELD_AT_SUCCESS", "EstimatorOffset", "TooFewDemonstrations", "corrected_estimator", "fit_estimator_offset"]
