"""What every task shares: the :class:`Task` base class with its hooks, contacts, poses and rewards.

A task is one module of this package (``pick_cup.py``, ...) holding one :class:`Task` subclass
and everything about the task: its objects, start ranges, success test, reward, reach point,
TPO score target, scripted-expert waypoint plan, description, time limit, the text of its env's
docstring and, where the paper reports them, the paper's success rates. The registry in
``embodied_gym/sim/tasks/__init__.py`` lists the task classes; env ids, env classes, ``make_task``
and the CLI's task choices all follow from it.

Every object's body frame sits at its base centre, so an object resting upright on the table
has z = 0. Success is decided from geometry and contacts, never by touching alone. Dense
rewards lie in [0, 1] per step: the mean of stage terms (reach, grasp, lift or transport, and a
success term counted twice), each in [0, 1].

Poses: the hooks that plan or score from privileged state (:meth:`Task.reach_point`,
:meth:`Task.score_target`, :meth:`Task.expert_plan`) take ``{object: [x, y, z, qw, qx, qy, qz]}``
as the envs' ``info["object_poses"]`` holds them, so they work on the sim and the stand-in alike.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import mujoco
import numpy as np

from embodied_gym.sim.scene import CONTROL_DT, SceneIndex
from embodied_gym.sim.tasks.planning import ARM_BASES

if TYPE_CHECKING:
    from embodied_gym.sim.tasks.planning import ExpertPlan

Poses = Mapping[str, np.ndarray]
"""``{object: [x, y, z, qw, qx, qy, qz]}`` (world frame, m), as in ``info["object_poses"]``."""


# ----------------------------------------------------------------------------- geometry helpers
def yaw_quat(yaw: float) -> np.ndarray:
    """The (w, x, y, z) quaternion of a rotation by ``yaw`` (rad) about the vertical."""
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def quat_yaw(quat) -> float:
    """Rotation about the vertical of a (w, x, y, z) quaternion."""
    w, x, y, z = quat
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def quat_matrix(quat) -> np.ndarray:
    """The 3x3 rotation matrix of a (w, x, y, z) quaternion (columns: the body axes in world)."""
    out = np.empty(9)
    mujoco.mju_quat2Mat(out, np.asarray(quat, dtype=np.float64))
    return out.reshape(3, 3)


def layout_from_poses(poses: dict) -> dict[str, np.ndarray]:
    """``{object: (x, y, yaw)}`` from recorded ``{object: [x, y, z, qw, qx, qy, qz]}`` poses."""
    return {k: np.array([p[0], p[1], quat_yaw(p[3:7])]) for k, p in poses.items()}


def body_frame(data: mujoco.MjData, body: int) -> tuple[np.ndarray, np.ndarray]:
    """(position, 3x3 rotation) of ``body`` now."""
    return data.xpos[body].copy(), data.xmat[body].reshape(3, 3).copy()


def body_poses(data: mujoco.MjData, idx: SceneIndex, names) -> dict[str, np.ndarray]:
    """``{object: [x, y, z, qw, qx, qy, qz]}`` of the task objects ``names`` now (as ``info`` has them)."""
    return {n: np.concatenate([data.xpos[idx.object_bodies[n]], data.xquat[idx.object_bodies[n]]]) for n in names}


# Scene part names of each arm's finger pads, and of every part of both grippers (SceneIndex.owner_codes).
_PADS = tuple((f"pad_{arm}_left", f"pad_{arm}_right") for arm in ("left", "right"))
_GRIPPER_PARTS = tuple(
    f"{part}_{arm}{side}"
    for arm in ("left", "right")
    for part, side in (("gripper", ""), ("pad", "_left"), ("pad", "_right"))
)


class Contacts:
    """Which scene parts touch now: one pass over ``data.contact`` per control step.

    Parts are named as in :attr:`SceneIndex.owner_codes`: ``table``, ``pad_<arm>_<side>``,
    ``gripper_<arm>`` (the rest of a gripper) and each task object's name.
    """

    def __init__(self, data: mujoco.MjData, idx: SceneIndex):
        n = data.ncon
        o1 = idx.geom_owner[data.contact.geom1[:n]]
        o2 = idx.geom_owner[data.contact.geom2[:n]]
        self._pairs = {(a, b) if a <= b else (b, a) for a, b in zip(o1.tolist(), o2.tolist())}
        self._codes = idx.owner_codes

    def touch(self, a: str, b: str) -> bool:
        ca, cb = self._codes[a], self._codes[b]
        return ((ca, cb) if ca <= cb else (cb, ca)) in self._pairs

    def grasping_arm(self, obj: str) -> int | None:
        """The arm whose two finger pads both touch ``obj``, or None."""
        for a, (left_pad, right_pad) in enumerate(_PADS):
            if self.touch(left_pad, obj) and self.touch(right_pad, obj):
                return a
        return None

    def held(self, obj: str) -> bool:
        """Any part of either gripper touches ``obj``."""
        return any(self.touch(part, obj) for part in _GRIPPER_PARTS)


def reach_term(distance: float, scale: float = 10.0) -> float:
    """``1 - tanh(scale * distance)``: 1 at the point, towards 0 far from it."""
    return 1.0 - math.tanh(scale * distance)


@dataclass(frozen=True)
class TaskStatus:
    """What :meth:`Task.evaluate` returns: success, the step reward and its terms (``terms`` has
    exactly the names in the task's :attr:`Task.reward_terms`)."""

    success: bool
    reward: float
    terms: dict[str, float]


@dataclass(frozen=True)
class ObjectRange:
    """Uniform start-pose range of one object: x, y (m, world frame), yaw (rad)."""

    x: tuple[float, float]
    y: tuple[float, float]
    yaw: tuple[float, float] = (0.0, 0.0)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return np.array([rng.uniform(*self.x), rng.uniform(*self.y), rng.uniform(*self.yaw)])

    def contains(self, x: float, y: float, yaw: float, tol: float = 0.0) -> bool:
        """Whether (x, y, yaw) lies in the range, widened by ``tol`` on every side."""
        return all(lo - tol <= v <= hi + tol for v, (lo, hi) in ((x, self.x), (y, self.y), (yaw, self.yaw)))

    def describe(self) -> str:
        """``x in [a, b] m, y in [c, d] m[, yaw in [e, f] rad]``, for docstrings."""
        text = f"x in [{self.x[0]:.2f}, {self.x[1]:.2f}] m, y in [{self.y[0]:.2f}, {self.y[1]:.2f}] m"
        if self.yaw != (0.0, 0.0):
            text += f", yaw in [{self.yaw[0]:.2f}, {self.yaw[1]:.2f}] rad"
        return text


@dataclass
class Task(abc.ABC):
    """Base class of the tasks: one subclass per task module, registered in ``tasks/__init__.py``.

    Hooks a task implements (abstract here): :meth:`add_objects`, :meth:`evaluate`,
    :meth:`reach_point`, :meth:`score_target`, :meth:`expert_plan`; class attributes it sets
    (checked when the registry is built): :attr:`summary`, :attr:`object_docs`, :attr:`success_doc`,
    :attr:`reward_doc`, :attr:`reward_terms`. Hooks with a default: :meth:`sample_layout` and
    :meth:`place` (uniform draws from :attr:`ranges`, objects set on the table), :attr:`arm_doc`
    (the right arm), :attr:`paper_success` (none reported), :attr:`grasped_object` and
    :attr:`place_target` (none: the camera-bias correction cannot be measured on the task).
    """

    name: str = ""
    """The task's name, also its registry key and the ``<Task>`` of ``EmbodieDreamer-<Task>-v0``."""
    description: str = ""
    """The instruction given to policies (``info["task"]``, the dataset's task string)."""
    max_episode_steps: int = 300
    """Time limit in control steps (of ``CONTROL_DT`` = 0.02 s), set on the registered env ids."""
    ranges: dict[str, ObjectRange] = field(default_factory=dict)
    """Every object's start-pose range, in the order objects are drawn (their names are the objects')."""

    summary: ClassVar[str]
    """What the task asks, one line (the env docstring's first line), e.g. "grab a paper cup and lift it"."""
    object_docs: ClassVar[dict[str, str]]
    """Each object's physical description, e.g. ``{"cup": "paper cup, radius 2.5 cm, 8 cm tall, 15 g"}``."""
    success_doc: ClassVar[str]
    """When :meth:`evaluate` reports success, in words."""
    reward_doc: ClassVar[str]
    """How :meth:`evaluate`'s reward is made of its terms, in words."""
    reward_terms: ClassVar[tuple[str, ...]]
    """The names of the terms :meth:`evaluate` returns (``info["reward_terms"]``), ``success`` last."""
    arm_doc: ClassVar[str] = "Meant for the right arm."
    """Which arm does the task (documentation only; the expert plan decides)."""
    paper_success: ClassVar[tuple[int, int] | None] = None
    """The paper's real-robot success (%) before and after RL (arXiv 2507.05198, real-robot
    experiments: real-data SFT with three views -> after RL in EmbodieDreamer, single view), or None
    if the paper does not report the task. Shown beside our stand-in figures, never mixed with them."""
    grasped_object: ClassVar[str | None] = None
    """The object (a key of :attr:`ranges`) the expert's first grasp closes on while it still rests at
    its start pose, or None if the task has no such grasp. At the first frame whose gripper command
    starts closing, the object's start position is the TCP's plus an offset the sim measures: what
    :func:`~embodied_gym.perception.robot_offset.fit_estimator_offset` measures a pose estimator's
    bias on the robot's camera against (None: that function refuses the task)."""
    place_target: ClassVar[str | None] = None
    """The object (a key of :attr:`ranges`) the grasped object is released onto or into, where the
    expert aims its release at that object's start position, or None (no release, as in PickCup).
    At the first frame whose gripper command opens again after the grasp, its start position is the
    TCP's plus an offset the sim measures: the same bias measurement for this object."""

    @property
    def object_names(self) -> tuple[str, ...]:
        return tuple(self.ranges)

    # ------------------------------------------------------------------ scene and start state
    @abc.abstractmethod
    def add_objects(self, spec: mujoco.MjSpec) -> None:
        """Add the task's objects to the scene: one free body per name in :attr:`ranges`, its
        frame at the object's base centre, with a free joint named ``<object>_joint``."""

    def sample_layout(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Start poses ``{object: (x, y, yaw)}``, drawn from :attr:`ranges` in a fixed order."""
        return {name: r.sample(rng) for name, r in self.ranges.items()}

    def place(self, model: mujoco.MjModel, data: mujoco.MjData, layout: dict[str, np.ndarray]) -> None:
        """Set each object of ``layout`` on the table at (x, y) turned by yaw (the env settles them)."""
        for name, (x, y, yaw) in layout.items():
            adr = model.jnt_qposadr[model.joint(f"{name}_joint").id]
            data.qpos[adr : adr + 3] = (x, y, 0.0005)
            data.qpos[adr + 3 : adr + 7] = yaw_quat(yaw)

    # ------------------------------------------------------------------ success and reward
    @abc.abstractmethod
    def evaluate(self, model: mujoco.MjModel, data: mujoco.MjData, idx: SceneIndex) -> TaskStatus:
        """Success, reward in [0, 1] and its terms (:attr:`reward_terms`) of the current state."""

    @abc.abstractmethod
    def reach_point(self, poses: Poses) -> np.ndarray:
        """The world point (x, y, z) the reward's reach term measures the nearest TCP against,
        from the objects' current poses (used by :meth:`evaluate` and the RL reach stage)."""

    # ------------------------------------------------------------------ TPO and the expert
    @abc.abstractmethod
    def score_target(self, start_poses: Poses, poses: Poses) -> np.ndarray:
        """Where the nearest TCP should end when the task is done (x, y, z), from the objects'
        start and current poses: TPO ranks trajectories by their final distance to it."""

    @abc.abstractmethod
    def expert_plan(self, poses: Poses) -> ExpertPlan:
        """The scripted expert's plan from the objects' start poses: the arm and its TCP waypoints."""

    # ------------------------------------------------------------------ documentation
    def doc_sections(self) -> dict[str, str]:
        """The task-specific sections of its env class's docstring (gymnasium's MuJoCo env layout):
        ``Description``, ``Starting State``, ``Success``, ``Rewards``, ``Episode End``."""
        objects = "\n".join(f"- ``{n}`` ({self.object_docs[n]}): {r.describe()}" for n, r in self.ranges.items())
        steps = self.max_episode_steps
        return {
            "Description": f'{self.summary[0].upper()}{self.summary[1:]}. Instruction: "{self.description}"',
            "Starting State": (
                "Both arms in the folded sleep pose with open grippers (the arms' bases are at "
                f"x = ±{ARM_BASES[1, 0]:g} m, y = {ARM_BASES[1, 1]:g} m); each object on the table "
                "at a pose drawn uniformly from the reset seed, then settled for 0.1 s:\n\n"
                f"{objects}\n\n{self.arm_doc}"
            ),
            "Success": self.success_doc,
            "Rewards": self.reward_doc,
            "Episode End": (
                f"Terminated on success (if ``terminate_on_success``); truncated after {steps} steps "
                f"({steps * CONTROL_DT:g} s) or on a physics blow-up."
            ),
        }

    # ------------------------------------------------------------------ shared stage terms
    @staticmethod
    def nearest_tcp_distance(data, idx: SceneIndex, point: np.ndarray) -> float:
        return min(math.dist(data.site_xpos[s], point) for s in idx.tcp_sites)

    def _place_status(
        self, data, idx: SceneIndex, obj: str, target: str, placed: bool, placed_term: str, moved_xy=None
    ) -> TaskStatus:
        """Terms of a pick-and-place task: reach ``obj`` (at :meth:`reach_point`), hold it (or have
        placed it), bring ``moved_xy`` (default: ``obj``'s base centre) over ``target``'s base centre,
        ``placed``; success = placed and released."""
        contacts = Contacts(data, idx)
        carried = float(contacts.grasping_arm(obj) is not None or placed)
        if moved_xy is None:
            moved_xy = data.xpos[idx.object_bodies[obj]][:2]
        terms = {
            "reach": reach_term(self.nearest_tcp_distance(data, idx, self.reach_point(body_poses(data, idx, (obj,))))),
            "grasp": carried,
            "transport": reach_term(math.dist(moved_xy, data.xpos[idx.object_bodies[target]][:2]), 5.0) * carried,
            placed_term: float(placed),
        }
        return self._finish(terms, placed and not contacts.held(obj))

    @staticmethod
    def _finish(terms: dict[str, float], success: bool) -> TaskStatus:
        terms = dict(terms, success=float(success))
        reward = (sum(terms.values()) + terms["success"]) / (len(terms) + 1)
        return TaskStatus(success=success, reward=float(reward), terms=terms)
