"""A pose estimator's constant bias on the robot's camera, measured from the robot's own demonstrations.

An estimator trained in the sim reads the robot's camera with a bias that is nearly constant over the
table (the camera's pose and lens differ a little from the sim's): on the stand-in as large as the
grasp's tolerance (BENCHMARKS.md, "A camera bias the robot's demonstrations measure"). The
demonstrations recorded on the robot already say where the objects were, without any sensor the robot
lacks, through two events of the gripper command the robot records (the ``action``'s gripper entry of
the arm that moves):

- the grasp, the first frame at which the command starts closing (:func:`gripper_events`): the
  task's :attr:`~embodied_gym.sim.tasks.base.Task.grasped_object` still rests at its start pose
  between the pads, so its start position is the tool centre point's (``observation.ee_pose``,
  forward kinematics of the joint encoders) plus a grasp offset, the same in every demonstration of
  the same expert and arm;
- the release, the first later frame at which the command opens again: the expert lets go where it
  aims relative to the task's :attr:`~embodied_gym.sim.tasks.base.Task.place_target` (the pen cup,
  the box, the mat), so that object's start position is the TCP's plus a release offset. The TCP is
  read once the command has finished opening, the arm settled on the release point (at the release
  frame it still trails its descent by a few mm that differ between the sim's dynamics and the robot's).

The sim, where the true poses are known, measures each offset (median over its demonstrations, per
arm: the object's true start xy minus the TCP's xy at the event). Per robot demonstration and object
the bias is then

    estimate at the reset frame - (TCP at the event + the arm's offset for the event)

and the object's correction is minus the median bias over the demonstrations (horizontal only; the
height is the table's). The grasped object's correction is required; the place target's is fitted
when at least 3 demonstrations of each dataset release (episodes cut earlier have no release) and
the estimator estimates it. :func:`corrected_estimator` writes a copy of the estimator folder whose
config adds the corrections to every estimate (:attr:`PoseEstimatorConfig.correction`), for the
robot's camera only: the sim's renders keep the uncorrected estimator.

Assumptions, checked where they can be: the grasped object is not moved before the grasp and the
place target not before the release (a push shows up as an outlier; the median ignores a few), the
robot's demonstrations were recorded with this estimator's estimate (the sidecar names its weights),
and the sim's demonstrations were made by the same expert (or operator) with the sim's true poses as
labels.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from embodied_gym.atomic import atomic_dir, write_json
from embodied_gym.perception.configuration import CONFIG_NAME, WEIGHTS_NAME, PoseEstimatorConfig
from embodied_gym.sim import robot

#: A robot demonstration whose bias is this far (m) from the median is reported as an outlier
#: (the object was probably pushed before the event).
OUTLIER_M = 0.02
#: How far (m of finger rail) a gripper command must fall below its highest value so far to count as
#: closing, or rise above its lowest value since the grasp to count as opening: 5 % of the rail's
#: travel (1.8 mm): jitter of a few tenths of a mm is no event, and a closing gripper passes it well
#: before its pads touch any task object (the 5 cm cup, the widest, after about 10 mm of closing).
GRIPPER_TOLERANCE = 0.05 * (robot.GRIPPER_OPEN - robot.GRIPPER_CLOSED)
GRASP, RELEASE = "grasp", "release"


class TooFewDemonstrations(ValueError):
    """Fewer than 3 demonstrations with a grasp in a dataset: nothing to fit the offset on."""


@dataclass
class ObjectOffset:
    """One object's measured correction (lengths in metres)."""

    event: str  # "grasp" or "release": the gripper event its position is read at
    correction_xy: tuple[float, float]  # added to the estimate: minus the median bias
    bias_per_episode: list[list[float]]  # robot demonstrations: (dx, dy) of estimate minus position
    tcp_offset: dict[str, list[float]]  # per arm (sim): the object's true start xy minus the TCP xy at the event
    episodes: list[int]  # the robot episodes measured, in the order of bias_per_episode
    outliers: list[int] = field(default_factory=list)  # robot episode indices beyond OUTLIER_M


@dataclass
class EstimatorOffset:
    """What :func:`fit_estimator_offset` measured: a correction per object (lengths in metres).

    ``object`` is the grasped object, whose correction is always measured; ``correction_xy``,
    ``bias_per_episode``, ``grasp_offset`` and ``outliers`` are its entries of ``objects``.
    """

    task: str
    object: str
    objects: dict[str, ObjectOffset]  # object -> its correction; the grasped object first
    robot_episodes: int  # robot demonstrations with a grasp
    sim_episodes: int  # sim demonstrations with a grasp
    uncorrected: dict[str, str] = field(default_factory=dict)  # place target -> why it has no correction

    @property
    def correction_xy(self) -> tuple[float, float]:
        return self.objects[self.object].correction_xy

    @property
    def bias_per_episode(self) -> list[list[float]]:
        return self.objects[self.object].bias_per_episode

    @property
    def grasp_offset(self) -> dict[str, list[float]]:
        return self.objects[self.object].tcp_offset

    @property
    def outliers(self) -> list[int]:
        return self.objects[self.object].outliers

    def to_json(self) -> dict:
        return asdict(self)


class GripperEvents(NamedTuple):
    """Frame indices of one arm's gripper events in an episode (None: not found); see :func:`gripper_events`."""

    grasp: int | None  # the command starts closing
    release: int | None  # after the grasp, it starts opening again
    opened: int | None  # after the release, it has finished opening (the frame the release is read at)


def gripper_events(command, tolerance: float = GRIPPER_TOLERANCE) -> GripperEvents:
    """The grasp, release and opened frames of one arm's gripper command over an episode (finger rail
    position, m; larger is more open).

    The grasp is the first frame whose command lies more than ``tolerance`` below its highest value
    so far (the gripper starts closing); the release the first later frame whose command lies more
    than ``tolerance`` above its lowest value since the grasp (it opens again); opened the first frame
    from the release on whose command is within ``tolerance / 4`` of its highest value after the
    release, provided the episode goes on past it (else the recording may have cut the opening short).
    """
    command = np.asarray(command, dtype=np.float64).reshape(-1)
    closing = np.flatnonzero(command < np.maximum.accumulate(command) - tolerance)
    if not closing.size:
        return GripperEvents(None, None, None)
    grasp = int(closing[0])
    after = command[grasp:]
    opening = np.flatnonzero(after > np.minimum.accumulate(after) + tolerance)
    if not opening.size:
        return GripperEvents(grasp, None, None)
    release = grasp + int(opening[0])
    rest = command[release:]
    opened = release + int(np.argmax(rest >= rest.max() - tolerance / 4))
    return GripperEvents(grasp, release, opened if opened < len(command) - 1 else None)


@dataclass
class _Demonstration:
    """One recorded episode with a grasp: the arm that moved and its TCP xy at each event found."""

    episode: int
    row: dict  # its sidecar row
    arm: int
    tcp_xy: dict[str, np.ndarray]  # at GRASP (always) and RELEASE (read where it finished opening, if it did)
    reset_estimate: np.ndarray | None  # observation.environment_state of its first frame


def _demonstrations(root: str | os.PathLike, env_state: bool) -> list[_Demonstration]:
    """The episodes of a recorded dataset whose moving arm's gripper command closes (see the module
    docstring); ``env_state``: also read each one's estimate at the reset frame."""
    from embodied_gym.data.features import ACTION, EE_POSE, ENV_STATE
    from embodied_gym.data.reader import open_dataset, read_sidecar

    table = open_dataset(root).table()
    if env_state and ENV_STATE not in table.column_names:
        raise ValueError(f"dataset {root} has no {ENV_STATE}: record it with --pose-estimator DIR")
    episode = np.asarray(table["episode_index"])
    # both arms' TCP positions, (frames, arm, xyz): observation.ee_pose is 7 numbers per arm
    tcp = np.stack(table[EE_POSE]).astype(np.float64).reshape(-1, 2, 7)[:, :, :3]
    grip = np.stack(table[ACTION]).astype(np.float64)[:, robot.GRIPPER_INDICES]
    state = np.stack(table[ENV_STATE]).astype(np.float64) if env_state else None
    rows = {r["episode_index"]: r for r in read_sidecar(root)}
    out = []
    for e in np.unique(episode):
        sel = np.flatnonzero(episode == e)
        # the arm that went to the object (the other stays at rest): the farthest from its start
        arm = int(np.argmax(np.linalg.norm(tcp[sel] - tcp[sel[0]], axis=2).max(axis=0)))
        found = gripper_events(grip[sel, arm])
        if found.grasp is None:
            continue
        # the release is read once the gripper has finished opening: the arm has settled on the point
        # it released at by then (at the release frame itself it still trails the descent by a few
        # mm, by how much depends on the robot's dynamics, which differ between the sim and the robot)
        events = {GRASP: found.grasp} if found.opened is None else {GRASP: found.grasp, RELEASE: found.opened}
        out.append(
            _Demonstration(
                episode=int(e),
                row=rows.get(int(e), {}),
                arm=arm,
                tcp_xy={name: tcp[sel[k], arm, :2] for name, k in events.items()},
                reset_estimate=state[sel[0]] if state is not None else None,
            )
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
        ValueError: a task whose :attr:`~embodied_gym.sim.tasks.base.Task.grasped_object` is None, an
            estimator that does not estimate the grasped object, or a robot dataset recorded with
            another estimator (or without one).
        TooFewDemonstrations: fewer than 3 demonstrations with a grasp in either dataset.
    """
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.sim.tasks import TASKS

    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    task = config.task
    grasped, target = TASKS[task].grasped_object, TASKS[task].place_target
    if grasped is None:
        raise ValueError(
            f"{task} names no grasped_object (embodied_gym/sim/tasks): its demonstrations have no grasp "
            f"of an object at rest to measure the estimator's bias against"
        )
    names = config.output_names
    if f"{grasped}.x" not in names:
        raise ValueError(
            f"the estimator {estimator} does not estimate the {grasped} ({names}), the object "
            f"{task}'s demonstrations grasp: train one whose objects include it"
        )
    for root in (robot_dataset, sim_dataset):
        found = open_dataset(root).task
        if found is not None and found != task:
            raise ValueError(f"dataset {root} holds {found} demonstrations; the estimator {estimator} is for {task}")
    robot_demos = _demonstrations(robot_dataset, env_state=True)
    _check_recorded_with(robot_demos, robot_dataset, estimator)
    sim_demos = _demonstrations(sim_dataset, env_state=False)
    if len(robot_demos) < 3 or len(sim_demos) < 3:
        raise TooFewDemonstrations(
            f"need at least 3 demonstrations whose gripper closes on the {grasped} in each dataset to fit "
            f"the offset (successful demonstrations do; episodes cut before the grasp do not); "
            f"{robot_dataset}: {len(robot_demos)}, {sim_dataset}: {len(sim_demos)}"
        )

    grasp_fit = _object_offset(grasped, GRASP, names, robot_demos, sim_demos, sim_dataset)
    if isinstance(grasp_fit, str):
        raise TooFewDemonstrations(grasp_fit)
    objects = {grasped: grasp_fit}
    uncorrected: dict[str, str] = {}
    if target is not None:
        release_fit = (
            _object_offset(target, RELEASE, names, robot_demos, sim_demos, sim_dataset)
            if f"{target}.x" in names
            else f"the estimator does not estimate the {target}"
        )
        if isinstance(release_fit, str):
            uncorrected[target] = release_fit
        else:
            objects[target] = release_fit
    return EstimatorOffset(
        task=task,
        object=grasped,
        objects=objects,
        robot_episodes=len(robot_demos),
        sim_episodes=len(sim_demos),
        uncorrected=uncorrected,
    )


def _object_offset(
    obj: str,
    event: str,
    names: list[str],
    robot_demos: list[_Demonstration],
    sim_demos: list[_Demonstration],
    sim_dataset,
) -> ObjectOffset | str:
    """``obj``'s correction read at ``event``, or why it cannot be fitted (fewer than 3 demonstrations
    of either dataset with the event, on an arm the sim measured)."""
    offsets = _tcp_offsets(sim_demos, obj, event, sim_dataset)
    ix, iy = names.index(f"{obj}.x"), names.index(f"{obj}.y")
    bias, used = [], []
    for demo in robot_demos:
        if event not in demo.tcp_xy or demo.arm not in offsets:  # no such event, or an arm the sim never used
            continue
        assert demo.reset_estimate is not None  # read with env_state=True
        bias.append(demo.reset_estimate[[ix, iy]] - (demo.tcp_xy[event] + offsets[demo.arm]))
        used.append(demo.episode)
    sim_count = sum(event in d.tcp_xy for d in sim_demos)
    if len(bias) < 3 or sim_count < 3:
        return (
            f"only {len(bias)} robot and {sim_count} sim demonstrations have a {event} of the {obj} with an arm "
            f"both datasets used (3 each needed)"
        )
    biases = np.asarray(bias)
    median = np.median(biases, axis=0)
    return ObjectOffset(
        event=event,
        correction_xy=(float(-median[0]), float(-median[1])),
        bias_per_episode=biases.tolist(),
        tcp_offset={robot.ARMS[a]: v.tolist() for a, v in offsets.items()},
        episodes=used,
        outliers=[e for e, b in zip(used, biases) if np.linalg.norm(b - median) > OUTLIER_M],
    )


def _check_recorded_with(robot_demos: list[_Demonstration], robot_dataset, estimator) -> None:
    """Refuse robot demonstrations whose sidecar rows name another estimator's weights (or the true poses)."""
    from embodied_gym.perception.pose_entry import estimator_source

    weights = estimator_source(estimator)["sha256"]
    for demo in robot_demos:
        named = demo.row.get("pose_estimator") or {}
        if named.get("values") == "ground_truth" or named.get("sha256") != weights:
            raise ValueError(
                f"episode {demo.episode} of {robot_dataset} was not recorded with the estimate of "
                f"{estimator} (its sidecar names {named.get('path')!r}); record the robot's "
                f"demonstrations with --pose-estimator {estimator}"
            )


def _tcp_offsets(sim_demos: list[_Demonstration], obj: str, event: str, sim_dataset) -> dict[int, np.ndarray]:
    """Per arm with ``event`` in the sim, the median of (``obj``'s true start xy - the TCP's xy at the event)."""
    offsets: dict[int, list[np.ndarray]] = {0: [], 1: []}
    for demo in sim_demos:
        if event not in demo.tcp_xy:
            continue
        layout = demo.row.get("layout", {})
        if obj not in layout:
            raise ValueError(
                f"episode {demo.episode} of {sim_dataset} has no layout for {obj!r} in its sidecar "
                f"row: record the sim demonstrations with embodied-gym record (it stores the layout)"
            )
        offsets[demo.arm].append(np.asarray(layout[obj][:2], dtype=np.float64) - demo.tcp_xy[event])
    return {arm: np.median(v, axis=0) for arm, v in offsets.items() if v}


class _ObjectCorrection(Protocol):
    @property
    def correction_xy(self) -> tuple[float, float]: ...


class Corrections(Protocol):
    """What :func:`corrected_estimator` writes: a correction per object and a record of how it was measured
    (:class:`EstimatorOffset` on the robot; :class:`~embodied_gym.perception.sim_offset.SimOffset` in the sim)."""

    @property
    def objects(self) -> Mapping[str, _ObjectCorrection]: ...

    def to_json(self) -> dict: ...


def corrected_estimator(estimator: str | os.PathLike, offset: Corrections, out: str | os.PathLike) -> Path:
    """A copy of the estimator folder ``estimator`` at ``out`` whose config adds each of ``offset``'s
    object corrections to every estimate (on top of any correction it had), with ``offset.json``
    (``offset.to_json()`` and the folder it was made from) beside it; written atomically. Returns ``out``."""
    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    correction = np.asarray(config.correction or np.zeros(config.output_dim), dtype=np.float64)
    names = config.output_names
    for obj, fit in offset.objects.items():
        correction[names.index(f"{obj}.x")] += fit.correction_xy[0]
        correction[names.index(f"{obj}.y")] += fit.correction_xy[1]
    out = Path(out)
    with atomic_dir(out) as tmp:
        shutil.copy(Path(estimator) / WEIGHTS_NAME, tmp / WEIGHTS_NAME)
        d = config.to_dict()
        d["correction"] = correction.tolist()
        (tmp / CONFIG_NAME).write_text(json.dumps(d, indent=2))
        write_json(tmp / "offset.json", {"from": str(estimator), **offset.to_json()})
    return out


__all__ = [
    "GRIPPER_TOLERANCE",
    "Corrections",
    "EstimatorOffset",
    "GripperEvents",
    "ObjectOffset",
    "TooFewDemonstrations",
    "corrected_estimator",
    "fit_estimator_offset",
    "gripper_events",
]
