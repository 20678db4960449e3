"""The four tasks of the paper's experiment: objects, start-state ranges, success and reward.

Every object's body frame sits at its base centre, so an object resting upright on the table
has z = 0. Success is decided from geometry and contacts, never by touching alone:

=============  ==========================================================================
PickCup        cup base >= 5 cm above the table, held by both finger pads of one gripper,
               no cup-table contact
PenInCup       the pen's lower tip inside the pen cup's inner volume, pen released
RemoteInBox    remote's centre inside the box's inner footprint, its top below the rim,
               remote released
CupOnMat       cup upright (tilt < 15 deg), base centre on the mat, resting on it, released
=============  ==========================================================================

Dense rewards lie in [0, 1] per step: the mean of stage terms (reach, grasp, lift or transport,
and a success term counted twice), each in [0, 1]; they are documented per task below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from embodied_gym.envs.scene import SceneIndex


# ----------------------------------------------------------------------------- geometry helpers
def yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def quat_yaw(quat) -> float:
    """Rotation about the vertical of a (w, x, y, z) quaternion."""
    w, x, y, z = quat
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def layout_from_poses(poses: dict) -> dict[str, np.ndarray]:
    """``{object: (x, y, yaw)}`` from recorded ``{object: [x, y, z, qw, qx, qy, qz]}`` poses."""
    return {k: np.array([p[0], p[1], quat_yaw(p[3:7])]) for k, p in poses.items()}


def _body_frame(data: mujoco.MjData, body: int) -> tuple[np.ndarray, np.ndarray]:
    return data.xpos[body].copy(), data.xmat[body].reshape(3, 3).copy()


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
        for a, arm in enumerate(("left", "right")):
            if self.touch(f"pad_{arm}_left", obj) and self.touch(f"pad_{arm}_right", obj):
                return a
        return None

    def held(self, obj: str) -> bool:
        """Any part of either gripper touches ``obj``."""
        return any(self.touch(f"{part}_{arm}{side}", obj) for arm in ("left", "right")
                   for part, side in (("gripper", ""), ("pad", "_left"), ("pad", "_right")))


def reach_term(distance: float, scale: float = 10.0) -> float:
    return 1.0 - math.tanh(scale * distance)


def _add_free_body(spec: mujoco.MjSpec, name: str, mass: float, com_height: float, inertia) -> mujoco.MjsBody:
    body = spec.worldbody.add_body(name=name)
    body.add_freejoint(name=f"{name}_joint")
    body.explicitinertial = True
    body.mass = mass
    body.ipos = (0.0, 0.0, com_height)
    body.inertia = tuple(inertia)
    return body


def _hollow_cylinder(spec, name, radius, height, wall, mass, rgba, segments=16, bottom=0.003):
    """An open-topped cylinder (cup) built from a base disc and ``segments`` wall slabs."""
    inertia_r = mass * (radius**2 / 2 + height**2 / 12)
    inertia_z = mass * radius**2
    body = _add_free_body(spec, name, mass, height / 2, (inertia_r, inertia_r, inertia_z))
    common = dict(rgba=rgba, condim=4, friction=(1.0, 0.005, 0.0001), solref=(0.01, 1), solimp=(0.95, 0.99, 0.001, 0.5, 2))
    body.add_geom(name=f"{name}_base", type=mujoco.mjtGeom.mjGEOM_CYLINDER, size=(radius, bottom / 2, 0),
                  pos=(0, 0, bottom / 2), **common)
    half_len = radius * math.tan(math.pi / segments) * 1.02
    for i in range(segments):
        a = 2 * math.pi * i / segments
        r = radius - wall / 2
        # Walls stand on the base, not on the table: 16 slabs on the table would add ~60 contacts.
        body.add_geom(name=f"{name}_wall{i}", type=mujoco.mjtGeom.mjGEOM_BOX,
                      size=(wall / 2, half_len, (height - bottom) / 2),
                      pos=(r * math.cos(a), r * math.sin(a), bottom + (height - bottom) / 2), quat=yaw_quat(a), **common)
    return body


def _open_box(spec, name, inner_half, height, wall, mass, rgba):
    hx, hy = inner_half
    inertia = (mass * (hy**2 + height**2) / 3, mass * (hx**2 + height**2) / 3, mass * (hx**2 + hy**2) / 3)
    body = _add_free_body(spec, name, mass, height / 3, inertia)
    common = dict(rgba=rgba, condim=4, friction=(1.0, 0.005, 0.0001))
    box = mujoco.mjtGeom.mjGEOM_BOX
    body.add_geom(name=f"{name}_bottom", type=box, size=(hx + wall, hy + wall, wall / 2), pos=(0, 0, wall / 2), **common)
    for side, (sx, sy, px, py) in {
        "px": (wall / 2, hy + wall, hx + wall / 2, 0), "nx": (wall / 2, hy + wall, -hx - wall / 2, 0),
        "py": (hx, wall / 2, 0, hy + wall / 2), "ny": (hx, wall / 2, 0, -hy - wall / 2),
    }.items():
        body.add_geom(name=f"{name}_wall_{side}", type=box, size=(sx, sy, (height - wall) / 2),
                      pos=(px, py, wall + (height - wall) / 2), **common)
    return body


@dataclass(frozen=True)
class TaskStatus:
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


@dataclass
class Task:
    """Base class. Subclasses define objects, ranges, success and reward."""

    name: str = ""
    description: str = ""
    max_episode_steps: int = 300
    ranges: dict[str, ObjectRange] = field(default_factory=dict)

    @property
    def object_names(self) -> tuple[str, ...]:
        return tuple(self.ranges)

    def add_objects(self, spec: mujoco.MjSpec) -> None:
        raise NotImplementedError

    def sample_layout(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Start poses ``{object: (x, y, yaw)}``, drawn from :attr:`ranges` in a fixed order."""
        return {name: r.sample(rng) for name, r in self.ranges.items()}

    def place(self, model: mujoco.MjModel, data: mujoco.MjData, layout: dict[str, np.ndarray]) -> None:
        for name, (x, y, yaw) in layout.items():
            adr = model.jnt_qposadr[model.joint(f"{name}_joint").id]
            data.qpos[adr:adr + 3] = (x, y, 0.0005)
            data.qpos[adr + 3:adr + 7] = yaw_quat(yaw)

    def evaluate(self, model: mujoco.MjModel, data: mujoco.MjData, idx: SceneIndex) -> TaskStatus:
        raise NotImplementedError

    # Shared stage terms ---------------------------------------------------------------
    @staticmethod
    def nearest_tcp_distance(data, idx: SceneIndex, point: np.ndarray) -> float:
        return min(math.dist(data.site_xpos[s], point) for s in idx.tcp_sites)

    def _place_status(self, data, idx: SceneIndex, obj: str, reach_point, moved_xy, target_xy, placed: bool,
                      placed_term: str) -> TaskStatus:
        """Terms of a pick-and-place task: reach ``obj``, hold it (or have placed it), bring
        ``moved_xy`` over ``target_xy``, ``placed``; success = placed and released."""
        contacts = Contacts(data, idx)
        carried = float(contacts.grasping_arm(obj) is not None or placed)
        terms = {
            "reach": reach_term(self.nearest_tcp_distance(data, idx, reach_point)),
            "grasp": carried,
            "transport": reach_term(math.dist(moved_xy, target_xy), 5.0) * carried,
            placed_term: float(placed),
        }
        return self._finish(terms, placed and not contacts.held(obj))

    @staticmethod
    def _finish(terms: dict[str, float], success: bool) -> TaskStatus:
        terms = dict(terms, success=float(success))
        reward = (sum(terms.values()) + terms["success"]) / (len(terms) + 1)
        return TaskStatus(success=success, reward=float(reward), terms=terms)


# ----------------------------------------------------------------------------- the four tasks
CUP_RADIUS = 0.025
CUP_HEIGHT = 0.08
_CUP_GRASP_OFFSET = np.array([0.0, 0.0, CUP_HEIGHT - 0.03])  # 3 cm below the rim


@dataclass
class PickCup(Task):
    """Grab a paper cup and lift it at least 5 cm.

    Objects: ``cup`` (paper cup, radius 2.5 cm, height 8 cm, 15 g) anywhere in
    x in [-0.15, 0.15], y in [0.42, 0.58]; either arm may take it.
    Reward terms: reach (TCP to the cup's grasp point), grasp (both pads touch the cup),
    lift (base height / 5 cm while grasped), success.
    """

    name: str = "PickCup"
    description: str = "Grab the paper cup and lift it."
    max_episode_steps: int = 200
    lift_height: float = 0.05
    ranges: dict = field(default_factory=lambda: {"cup": ObjectRange((-0.15, 0.15), (0.42, 0.58))})

    def add_objects(self, spec):
        _hollow_cylinder(spec, "cup", CUP_RADIUS, CUP_HEIGHT, 0.002, 0.015, (0.93, 0.92, 0.86, 1))

    def evaluate(self, model, data, idx):
        cup = idx.object_bodies["cup"]
        contacts = Contacts(data, idx)
        pos = data.xpos[cup]
        arm = contacts.grasping_arm("cup")
        on_table = contacts.touch("table", "cup")
        height = float(pos[2])
        success = arm is not None and not on_table and height >= self.lift_height
        grasp_point = pos + _CUP_GRASP_OFFSET
        terms = {
            "reach": reach_term(self.nearest_tcp_distance(data, idx, grasp_point)),
            "grasp": float(arm is not None),
            "lift": float(arm is not None) * min(max(height / self.lift_height, 0.0), 1.0),
        }
        return self._finish(terms, success)


PEN_RADIUS = 0.006
PEN_HALF_LENGTH = 0.075
PENCUP_INNER = 0.03
PENCUP_HEIGHT = 0.09


@dataclass
class PenInCup(Task):
    """Put a pen into a pen cup.

    Objects: ``pen`` (15 cm long, 12 mm thick, 12 g) lying on the table, x in [0.10, 0.18],
    y in [0.40, 0.46], yaw in [-0.3, 0.3] (its long axis near the x axis); ``pencup`` (inner radius
    3 cm, 9 cm tall, 300 g) at x in [0.0, 0.06], y in [0.55, 0.60]. The right arm does the task.
    Reward terms: reach (TCP to the pen's centre), grasp, transport (pen tip to above the cup),
    inside (tip inside the cup), success.
    """

    name: str = "PenInCup"
    description: str = "Put the pen into the pen cup."
    max_episode_steps: int = 350
    ranges: dict = field(default_factory=lambda: {
        "pen": ObjectRange((0.10, 0.18), (0.40, 0.46), (-0.3, 0.3)),
        "pencup": ObjectRange((0.0, 0.06), (0.55, 0.60)),
    })

    def add_objects(self, spec):
        m, L, r = 0.012, PEN_HALF_LENGTH, PEN_RADIUS
        # The pen's long axis is its body x axis; it lies on the table.
        body = _add_free_body(spec, "pen", m, r, (m * r**2 / 2, m * L**2 / 3, m * L**2 / 3))
        body.add_geom(name="pen", type=mujoco.mjtGeom.mjGEOM_CAPSULE, size=(r, L - r, 0), pos=(0, 0, r),
                      quat=(math.cos(math.pi / 4), 0, math.sin(math.pi / 4), 0), rgba=(0.1, 0.2, 0.75, 1),
                      condim=4, friction=(1.0, 0.005, 0.0001))
        _hollow_cylinder(spec, "pencup", PENCUP_INNER + 0.004, PENCUP_HEIGHT, 0.004, 0.3, (0.25, 0.25, 0.28, 1))

    def pen_tips(self, data, idx) -> tuple[np.ndarray, np.ndarray]:
        pos, rot = _body_frame(data, idx.object_bodies["pen"])
        centre = pos + rot[:, 2] * PEN_RADIUS
        a, b = centre + rot[:, 0] * PEN_HALF_LENGTH, centre - rot[:, 0] * PEN_HALF_LENGTH
        return (a, b) if a[2] <= b[2] else (b, a)  # (lower tip, upper tip)

    def tip_inside(self, data, idx) -> bool:
        low, _ = self.pen_tips(data, idx)
        cpos, crot = _body_frame(data, idx.object_bodies["pencup"])
        local = crot.T @ (low - cpos)
        return bool(np.hypot(local[0], local[1]) < PENCUP_INNER and 0.0 <= local[2] <= PENCUP_HEIGHT)

    def evaluate(self, model, data, idx):
        low, up = self.pen_tips(data, idx)
        cup = data.xpos[idx.object_bodies["pencup"]]
        return self._place_status(data, idx, "pen", (low + up) / 2, low[:2], cup[:2], self.tip_inside(data, idx),
                                  "inside")


REMOTE_HALF = (0.085, 0.0225, 0.01)
BOX_INNER_HALF = (0.13, 0.07)
BOX_HEIGHT = 0.07


@dataclass
class RemoteInBox(Task):
    """Put a TV remote into an open box.

    Objects: ``remote`` (17 x 4.5 x 2 cm, 100 g) at x in [0.14, 0.20], y in [0.38, 0.45],
    yaw in [-0.3, 0.3]; ``box`` (open cardboard box, inner 26 x 14 cm, 7 cm tall, 400 g) at
    x in [-0.02, 0.04], y in [0.56, 0.62], yaw in [-0.15, 0.15]. The right arm does the task.
    Reward terms: reach, grasp, transport (remote to the box centre, horizontally), inside, success.
    """

    name: str = "RemoteInBox"
    description: str = "Put the TV remote into the box."
    max_episode_steps: int = 350
    ranges: dict = field(default_factory=lambda: {
        "remote": ObjectRange((0.14, 0.20), (0.38, 0.45), (-0.3, 0.3)),
        "box": ObjectRange((-0.02, 0.04), (0.56, 0.62), (-0.15, 0.15)),
    })

    def add_objects(self, spec):
        hx, hy, hz = REMOTE_HALF
        m = 0.1
        body = _add_free_body(spec, "remote", m, hz, (m * (hy**2 + hz**2) / 3, m * (hx**2 + hz**2) / 3, m * (hx**2 + hy**2) / 3))
        body.add_geom(name="remote", type=mujoco.mjtGeom.mjGEOM_BOX, size=REMOTE_HALF, pos=(0, 0, hz),
                      rgba=(0.08, 0.08, 0.09, 1), condim=4, friction=(1.0, 0.005, 0.0001))
        _open_box(spec, "box", BOX_INNER_HALF, BOX_HEIGHT, 0.006, 0.4, (0.62, 0.47, 0.3, 1))

    def inside(self, data, idx) -> bool:
        rpos, rrot = _body_frame(data, idx.object_bodies["remote"])
        bpos, brot = _body_frame(data, idx.object_bodies["box"])
        centre = rpos + rrot[:, 2] * REMOTE_HALF[2]
        local = brot.T @ (centre - bpos)
        top = centre[2] + np.abs(rrot[2, :]) @ np.array(REMOTE_HALF)  # highest corner
        return bool(abs(local[0]) < BOX_INNER_HALF[0] and abs(local[1]) < BOX_INNER_HALF[1]
                    and top < bpos[2] + BOX_HEIGHT)

    def evaluate(self, model, data, idx):
        rpos = data.xpos[idx.object_bodies["remote"]]
        bpos = data.xpos[idx.object_bodies["box"]]
        return self._place_status(data, idx, "remote", rpos + np.array([0, 0, 2 * REMOTE_HALF[2]]), rpos[:2], bpos[:2],
                                  self.inside(data, idx), "inside")


MAT_HALF = (0.06, 0.06, 0.002)


@dataclass
class CupOnMat(Task):
    """Place a cup upright on a mat.

    Objects: ``cup`` (radius 2.5 cm, 8 cm tall, 30 g) at x in [0.10, 0.18], y in [0.40, 0.46];
    ``mat`` (12 x 12 cm, 4 mm thick, 200 g) at x in [-0.04, 0.04], y in [0.56, 0.62],
    yaw in [-0.3, 0.3]. The right arm does the task.
    Reward terms: reach, grasp, transport (cup to the mat centre, horizontally), on_mat, success.
    """

    name: str = "CupOnMat"
    description: str = "Place the cup upright on the mat."
    max_episode_steps: int = 350
    max_tilt_deg: float = 15.0
    ranges: dict = field(default_factory=lambda: {
        "cup": ObjectRange((0.10, 0.18), (0.40, 0.46)),
        "mat": ObjectRange((-0.04, 0.04), (0.56, 0.62), (-0.3, 0.3)),
    })

    def add_objects(self, spec):
        _hollow_cylinder(spec, "cup", CUP_RADIUS, CUP_HEIGHT, 0.002, 0.03, (0.85, 0.3, 0.25, 1))
        m = 0.2
        hx, hy, hz = MAT_HALF
        body = _add_free_body(spec, "mat", m, hz, (m * hy**2 / 3, m * hx**2 / 3, m * (hx**2 + hy**2) / 3))
        body.add_geom(name="mat", type=mujoco.mjtGeom.mjGEOM_BOX, size=MAT_HALF, pos=(0, 0, hz),
                      rgba=(0.2, 0.55, 0.3, 1), condim=3, friction=(1.2, 0.005, 0.0001))

    def on_mat(self, data, idx) -> bool:
        cpos, crot = _body_frame(data, idx.object_bodies["cup"])
        mpos, mrot = _body_frame(data, idx.object_bodies["mat"])
        local = mrot.T @ (cpos - mpos)
        upright = crot[2, 2] > math.cos(math.radians(self.max_tilt_deg))
        resting = -0.005 < local[2] - 2 * MAT_HALF[2] < 0.015
        return bool(upright and abs(local[0]) < MAT_HALF[0] and abs(local[1]) < MAT_HALF[1] and resting)

    def evaluate(self, model, data, idx):
        cpos = data.xpos[idx.object_bodies["cup"]]
        mpos = data.xpos[idx.object_bodies["mat"]]
        return self._place_status(data, idx, "cup", cpos + _CUP_GRASP_OFFSET, cpos[:2], mpos[:2],
                                  self.on_mat(data, idx), "on_mat")


TASKS: dict[str, type[Task]] = {"PickCup": PickCup, "PenInCup": PenInCup, "RemoteInBox": RemoteInBox,
                                 "CupOnMat": CupOnMat}


def make_task(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; valid tasks: {sorted(TASKS)}") from None
