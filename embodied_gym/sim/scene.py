"""Build the bimanual ALOHA scene with ``mujoco.MjSpec``.

The arms' kinematic chains and meshes are gym-aloha's ViperX-300 MJCF; everything else is added
here: the table, lights, the four named cameras, the tool-centre-point sites, actuators, the task's
objects, and the physics (:mod:`embodied_gym.sim.physics`). The same builder serves the simulator
and (with a different look) the stand-in robot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from embodied_gym.assets import aloha_asset_dir
from embodied_gym.sim import robot
from embodied_gym.sim.physics import PhysicsHandles, PhysicsParams, apply_physics

#: 50 Hz control over a 2 ms physics step.
TIMESTEP = 0.002
CONTROL_DT = 0.02
N_SUBSTEPS = round(CONTROL_DT / TIMESTEP)

CAMERAS: tuple[str, ...] = ("cam_high", "cam_front", "cam_left_wrist", "cam_right_wrist")

# Fixed cameras: position and look-at point (world frame, metres); the workspace centre is
# (0, 0.5, 0) on the table top, the arms' bases at x = ±0.469.
_FIXED_CAMERAS: dict[str, dict[str, Any]] = {
    "cam_high": dict(pos=(0.0, 0.15, 1.0), target=(0.0, 0.55, 0.0), fovy=55.0),
    "cam_front": dict(pos=(0.0, -0.15, 0.22), target=(0.0, 0.55, 0.05), fovy=50.0),
}
# Wrist cameras sit on the gripper housing, behind and above the fingers, looking at the pads.
_WRIST_CAMERA = dict(pos=(0.0, 0.0, 0.07), target=(0.16, 0.0, -0.01), fovy=75.0)

# Menagerie's actuator force limits (N·m) per arm joint.
_ARM_FORCE_LIMIT = (35.0, 144.0, 59.0, 22.0, 35.0, 35.0)
_GRIPPER_KV = 124.0  # Menagerie's finger actuator damping
_FINGER_DAMPING = 5.0
_FINGER_FORCE_LIMIT = 60.0

TABLE_HALF = (0.7, 0.4, 0.02)  # table top at z = 0
TABLE_CENTER_Y = 0.5


def lookat_quat(pos, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion of a MuJoCo camera at ``pos`` looking at ``target`` (camera looks along -z)."""
    f = np.asarray(target, float) - np.asarray(pos, float)
    f /= np.linalg.norm(f)
    x = np.cross(f, up)
    if np.linalg.norm(x) < 1e-6:
        x = np.cross(f, (0.0, 1.0, 0.0))
    x /= np.linalg.norm(x)
    y = np.cross(x, f)
    mat = np.stack([x, y, -f], axis=1)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, mat.ravel())
    return quat


def project_to_pixels(camera: str, points, frame_size: tuple[int, int]) -> np.ndarray:
    """Pixel ``(column, row)`` of world ``points`` (..., 3) in the nominal ``camera``'s ``frame_size``
    (H, W) frame: MuJoCo's pinhole model (vertical ``fovy``, square pixels, looking along -z).

    Only the fixed cameras (``cam_high``, ``cam_front``) at their nominal mount; a randomised look's
    mount offset (``SceneLook.camera_offsets``) is not applied.
    """
    if camera not in _FIXED_CAMERAS:
        raise ValueError(f"project_to_pixels: {camera!r} is not a fixed camera; valid: {list(_FIXED_CAMERAS)}")
    c = _FIXED_CAMERAS[camera]
    pos = np.asarray(c["pos"], float)
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, lookat_quat(pos, c["target"]))
    local = (np.asarray(points, float) - pos) @ rot.reshape(3, 3)  # camera frame: x right, y up, -z forward
    h, w = frame_size
    focal = (h / 2) / np.tan(np.deg2rad(c["fovy"]) / 2)
    depth = -local[..., 2]
    return np.stack([w / 2 + focal * local[..., 0] / depth, h / 2 - focal * local[..., 1] / depth], axis=-1)


@dataclass
class SceneLook:
    """How the scene looks. The simulator's default is flat and fast; the stand-in robot
    overrides it (photo textures, shadows, light, camera placement) to play a real camera."""

    shadows: bool = False
    shadow_size: int = 1024  # shadow-map resolution when shadows are on
    offsamples: int = 0
    light_diffuse: tuple[float, float, float] = (0.7, 0.7, 0.7)
    ambient: tuple[float, float, float] = (0.35, 0.35, 0.35)
    table_rgba: tuple[float, float, float, float] = (0.45, 0.38, 0.3, 1.0)
    floor_rgba: tuple[float, float, float, float] = (0.25, 0.25, 0.27, 1.0)
    table_texture: np.ndarray | None = None  # (H, W, 3) uint8 image tiled on the table top
    backdrop_texture: np.ndarray | None = None  # image on a wall behind the table
    camera_offsets: dict = field(default_factory=dict)  # camera -> (dpos xyz in m, drot xyz in rad)


def _add_texture_material(spec: mujoco.MjSpec, name: str, image: np.ndarray, repeat) -> str:
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w = image.shape[:2]
    tex = spec.add_texture(name=f"{name}_tex", type=mujoco.mjtTexture.mjTEXTURE_2D, width=w, height=h, nchannel=3)
    tex.data = image.tobytes()
    mat = spec.add_material(name=f"{name}_mat", texrepeat=repeat)
    roles = list(mat.textures)
    roles[mujoco.mjtTextureRole.mjTEXROLE_RGB] = f"{name}_tex"
    mat.textures = roles
    return f"{name}_mat"


def _offset_quat(quat: np.ndarray, drot) -> np.ndarray:
    """``quat`` turned by the small rotation ``drot`` (axis-angle, camera frame)."""
    angle = float(np.linalg.norm(drot))
    if angle == 0.0:
        return quat
    dq = np.zeros(4)
    mujoco.mju_axisAngle2Quat(dq, np.asarray(drot, float) / angle, angle)
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, quat, dq)
    return out


def build_arms_spec() -> mujoco.MjSpec:
    """The two arms from gym-aloha's MJCF, without its actuators, scene or task objects."""
    d = aloha_asset_dir()
    xml = f"""<mujoco model="embodied_aloha">
  <compiler angle="radian" meshdir="{d}" autolimits="true"/>
  <include file="{d}/vx300s_dependencies.xml"/>
  <worldbody>
    <include file="{d}/vx300s_left.xml"/>
    <include file="{d}/vx300s_right.xml"/>
  </worldbody>
</mujoco>"""
    return mujoco.MjSpec.from_string(xml)


def build_scene(task, look: SceneLook | None = None) -> mujoco.MjSpec:
    """The full scene for ``task`` (an :class:`embodied_gym.sim.tasks.Task`)."""
    look = look or SceneLook()
    spec = build_arms_spec()
    spec.modelname = f"embodied_aloha_{task.name}"
    _set_options(spec, look)
    # gym-aloha's wrist cameras have a known wrong pose; ours replace them.
    for cam in list(spec.cameras):
        spec.delete(cam)
    _add_room(spec, look)
    _add_fixed_cameras(spec, look)
    for arm in robot.ARMS:
        _add_arm_hardware(spec, arm, look)
    task.add_objects(spec)
    return spec


def _set_options(spec: mujoco.MjSpec, look: SceneLook) -> None:
    """Physics options and the renderer's quality, headlight and offscreen buffer."""
    spec.option.timestep = TIMESTEP
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 10.0  # firmer frictional grasps (Menagerie's ALOHA setting)
    spec.visual.quality.offsamples = look.offsamples
    spec.visual.quality.shadowsize = look.shadow_size if look.shadows else 0
    spec.visual.headlight.ambient = look.ambient
    spec.visual.headlight.diffuse = (0.3, 0.3, 0.3)
    spec.visual.global_.offwidth = 1280
    spec.visual.global_.offheight = 960


def _add_room(spec: mujoco.MjSpec, look: SceneLook) -> None:
    """The key light, the floor, the table and (when the look has one) the backdrop."""
    world = spec.worldbody
    world.add_light(
        name="key",
        pos=(0.3, -0.3, 1.6),
        dir=(-0.2, 0.5, -1.0),
        type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
        castshadow=look.shadows,
        diffuse=look.light_diffuse,
        specular=(0.2, 0.2, 0.2),
    )
    world.add_geom(
        name="floor",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=(3, 3, 0.1),
        pos=(0, 0, -0.75),
        rgba=look.floor_rgba,
        contype=0,
        conaffinity=0,
    )
    table = world.add_body(name="table", pos=(0.0, TABLE_CENTER_Y, -TABLE_HALF[2]))
    table_look: dict[str, Any] = {"rgba": look.table_rgba}
    if look.table_texture is not None:
        table_look = {"material": _add_texture_material(spec, "table", look.table_texture, (6, 4))}
    table.add_geom(
        name="table", type=mujoco.mjtGeom.mjGEOM_BOX, size=TABLE_HALF, friction=(1.0, 0.005, 0.0001), **table_look
    )
    if look.backdrop_texture is not None:
        world.add_geom(
            name="backdrop",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=(1.5, 0.01, 0.9),
            pos=(0, 1.3, 0.2),
            material=_add_texture_material(spec, "backdrop", look.backdrop_texture, (1, 1)),
            contype=0,
            conaffinity=0,
        )


def _camera_pose(look: SceneLook, name: str, pos, quat) -> tuple[np.ndarray, np.ndarray]:
    """Camera ``name``'s mount ``(pos, quat)`` moved by the look's offset for it, if any."""
    dpos, drot = look.camera_offsets.get(name, ((0, 0, 0), (0, 0, 0)))
    return np.asarray(pos, float) + np.asarray(dpos, float), _offset_quat(quat, drot)


def _add_fixed_cameras(spec: mujoco.MjSpec, look: SceneLook) -> None:
    for name, c in _FIXED_CAMERAS.items():
        pos, quat = _camera_pose(look, name, c["pos"], lookat_quat(c["pos"], c["target"]))
        spec.worldbody.add_camera(name=name, pos=pos, quat=quat, fovy=c["fovy"])


def _add_arm_hardware(spec: mujoco.MjSpec, arm: str, look: SceneLook) -> None:
    """One arm's tool-centre-point site, wrist camera, joint actuators, finger pads and finger actuators."""
    gripper = spec.body(f"vx300s_{arm}/gripper_link")
    gripper.add_site(name=robot.tcp_site(arm), pos=(robot.TCP_OFFSET, 0, 0), size=(0.005, 0, 0), rgba=(0, 0, 0, 0))
    pos, quat = _camera_pose(
        look, f"cam_{arm}_wrist", _WRIST_CAMERA["pos"], lookat_quat(_WRIST_CAMERA["pos"], _WRIST_CAMERA["target"])
    )
    gripper.add_camera(name=f"cam_{arm}_wrist", pos=pos, quat=quat, fovy=_WRIST_CAMERA["fovy"])
    _add_arm_actuators(spec, arm)
    for side, sign in (("left", -1.0), ("right", 1.0)):
        _add_finger_collision(spec, arm, side, sign)
    _add_finger_actuators(spec, arm)


def _add_arm_actuators(spec: mujoco.MjSpec, arm: str) -> None:
    """A position actuator per arm joint, limited to the joint's range and Menagerie's force."""
    for joint, force in zip(robot.ARM_JOINTS, _ARM_FORCE_LIMIT):
        jname = robot.mjcf_joint(arm, joint)
        act = spec.add_actuator(
            name=f"{arm}_{joint}",
            target=jname,
            trntype=mujoco.mjtTrn.mjTRN_JOINT,
            ctrlrange=spec.joint(jname).range,
            ctrllimited=True,
            forcerange=(-force, force),
            forcelimited=True,
        )
        act.set_to_position(kp=1.0)  # real gains come from PhysicsParams


def _add_finger_actuators(spec: mujoco.MjSpec, arm: str) -> None:
    """A damped position actuator per finger, between the closed and open gripper widths."""
    for finger, sign in (("left_finger", 1.0), ("right_finger", -1.0)):
        jname = robot.mjcf_joint(arm, finger)
        j = spec.joint(jname)
        j.frictionloss = 0.0
        j.damping = (_FINGER_DAMPING, 0.0, 0.0)  # MuJoCo 3.8: [linear, 2 higher-order terms]
        lo, hi = sorted((sign * robot.GRIPPER_CLOSED, sign * robot.GRIPPER_OPEN))
        act = spec.add_actuator(
            name=f"{arm}_{finger}",
            target=jname,
            trntype=mujoco.mjtTrn.mjTRN_JOINT,
            ctrlrange=(lo, hi),
            ctrllimited=True,
            forcerange=(-_FINGER_FORCE_LIMIT, _FINGER_FORCE_LIMIT),
            forcelimited=True,
        )
        act.set_to_position(kp=1.0, kv=_GRIPPER_KV)


# Finger collision boxes in the finger body's frame (x forward, y the sliding axis). The mesh's
# inner face is the plane |y| = 0.0224; its convex hull makes a poor pad (the tip is 1 cm tall and
# a pinched object pivots), so, like Menagerie, collisions use simple shapes.
_PAD: dict[str, Any] = dict(x=(0.03, 0.085), z_half=0.011)
_FINGER_BASE: dict[str, Any] = dict(x=(-0.005, 0.03), z_half=0.03)
_FINGER_Y = (0.0224, -0.002)  # inner face, outer face (for the left finger; mirrored for the right)
PAD_FRICTION = (1.0, 0.02, 0.0001)  # soft pads resist twisting: torsional coefficient 2 cm


def _add_finger_collision(spec: mujoco.MjSpec, arm: str, side: str, sign: float) -> None:
    """Replace a finger mesh's collision by two boxes: the pad (tip) and the finger's base."""
    mesh = spec.geom(f"vx300s_{arm}/10_{side}_gripper_finger")
    mesh.contype = 0
    mesh.conaffinity = 0
    body = spec.body(f"vx300s_{arm}/{side}_finger_link")
    y_in, y_out = sign * _FINGER_Y[0], sign * _FINGER_Y[1]
    for name, part in (("pad", _PAD), ("base", _FINGER_BASE)):
        (x0, x1), zh = part["x"], part["z_half"]
        body.add_geom(
            name=f"{arm}_{side}_finger_{name}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=((x1 - x0) / 2, abs(y_out - y_in) / 2, zh),
            pos=((x0 + x1) / 2, (y_in + y_out) / 2, 0),
            rgba=(0, 0, 0, 0),
            group=3,
            condim=4,
            friction=PAD_FRICTION,
            solref=(0.01, 1),
            solimp=(0.95, 0.99, 0.001, 0.5, 2),
        )


@dataclass(frozen=True)
class SceneIndex:
    """Ids into a compiled scene that the env, tasks and experts look up often."""

    arm_qpos: np.ndarray  # (12,) qpos addresses of the arm joints, JOINT_NAMES order
    arm_dof: np.ndarray  # (12,)
    finger_qpos: np.ndarray  # (2, 2): per arm, (left finger, right finger)
    finger_dof: np.ndarray  # (2, 2)
    arm_actuators: np.ndarray  # (12,)
    finger_actuators: np.ndarray  # (2, 2)
    tcp_sites: np.ndarray  # (2,)
    pad_geoms: np.ndarray  # (2, 2): per arm, both finger pads
    gripper_geoms: np.ndarray  # every geom on either gripper (housing, fingers)
    table_geom: int
    object_bodies: dict[str, int]
    object_geoms: dict[str, np.ndarray]
    cameras: dict[str, int]
    geom_owner: np.ndarray  # (ngeom,) code of the part each geom belongs to (see owner_codes)
    owner_codes: dict[str, int]  # "table", "pad_<arm>_<side>", "gripper_<arm>", object names; 0 = other

    joint_qpos: np.ndarray  # (14,) qpos addresses of the 14-D joint vector (a gripper is its left finger)
    joint_dof: np.ndarray  # (14,)


def index_scene(model: mujoco.MjModel, object_names) -> SceneIndex:
    def jid(name):
        return model.joint(name).id

    arm_j = [jid(robot.mjcf_joint(a, j)) for a in robot.ARMS for j in robot.ARM_JOINTS]
    fingers = [[jid(robot.mjcf_joint(a, f)) for f in ("left_finger", "right_finger")] for a in robot.ARMS]
    obj_bodies = {n: model.body(n).id for n in object_names}
    obj_geoms = {n: np.flatnonzero(model.geom_bodyid == b) for n, b in obj_bodies.items()}
    grippers = {model.body(f"vx300s_{a}/gripper_link").id for a in robot.ARMS}

    def on_gripper(body: int) -> bool:
        while body > 0:
            if body in grippers:
                return True
            body = model.body_parentid[body]
        return False

    gripper_geoms = np.array([g for g in range(model.ngeom) if on_gripper(model.geom_bodyid[g])])
    pad_geoms = np.array([[model.geom(f"{a}_{s}_finger_pad").id for s in ("left", "right")] for a in robot.ARMS])
    codes: dict[str, int] = {}
    owner = np.zeros(model.ngeom, dtype=np.int32)

    def label(name, geoms):
        codes[name] = len(codes) + 1
        owner[np.asarray(geoms, dtype=int)] = codes[name]

    for a, arm in enumerate(robot.ARMS):
        on_this = [g for g in gripper_geoms if model.body(model.geom_bodyid[g]).name.startswith(f"vx300s_{arm}/")]
        label(f"gripper_{arm}", on_this)
        for s, side in enumerate(("left", "right")):
            label(f"pad_{arm}_{side}", [pad_geoms[a, s]])
    label("table", [model.geom("table").id])
    for n, g in obj_geoms.items():
        label(n, g)
    arm_qpos, arm_dof = model.jnt_qposadr[arm_j], model.jnt_dofadr[arm_j]
    finger_qpos, finger_dof = model.jnt_qposadr[np.array(fingers)], model.jnt_dofadr[np.array(fingers)]

    def fourteen(arm, finger):
        return np.concatenate([arm[:6], finger[0, :1], arm[6:], finger[1, :1]])

    return SceneIndex(
        arm_qpos=arm_qpos,
        arm_dof=arm_dof,
        finger_qpos=finger_qpos,
        finger_dof=finger_dof,
        joint_qpos=fourteen(arm_qpos, finger_qpos),
        joint_dof=fourteen(arm_dof, finger_dof),
        arm_actuators=np.array([model.actuator(f"{a}_{j}").id for a in robot.ARMS for j in robot.ARM_JOINTS]),
        finger_actuators=np.array(
            [[model.actuator(f"{a}_{f}").id for f in ("left_finger", "right_finger")] for a in robot.ARMS]
        ),
        tcp_sites=np.array([model.site(robot.tcp_site(a)).id for a in robot.ARMS]),
        pad_geoms=pad_geoms,
        gripper_geoms=gripper_geoms,
        table_geom=model.geom("table").id,
        object_bodies=obj_bodies,
        object_geoms=obj_geoms,
        cameras={c: model.camera(c).id for c in CAMERAS},
        geom_owner=owner,
        owner_codes=codes,
    )


def physics_handles(model: mujoco.MjModel, idx: SceneIndex, movable_objects) -> PhysicsHandles:
    bodies = np.array([idx.object_bodies[n] for n in movable_objects], dtype=int)
    geoms = np.concatenate([idx.object_geoms[n] for n in idx.object_bodies]) if idx.object_bodies else np.zeros(0, int)
    return PhysicsHandles(
        arm_actuators=idx.arm_actuators,
        arm_dofs=idx.arm_dof,
        finger_actuators=idx.finger_actuators.ravel(),
        object_geoms=geoms,
        pad_geoms=idx.pad_geoms.ravel(),
        object_bodies=bodies,
        nominal_body_mass=model.body_mass[bodies].copy(),
        nominal_body_inertia=model.body_inertia[bodies].copy(),
    )


def compile_scene(task, physics: PhysicsParams, look: SceneLook | None = None):
    """Compile the scene for ``task`` with ``physics`` applied. Returns (model, index, handles)."""
    model = build_scene(task, look).compile()
    idx = index_scene(model, task.object_names)
    handles = physics_handles(model, idx, task.object_names)
    apply_physics(model, physics, handles)
    return model, idx, handles
