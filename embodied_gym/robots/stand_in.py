"""A simulated stand-in for the real ALOHA robot, behind LeRobot's ``Robot`` interface.

No hardware reaches our machines, so the "real world" is this: its own MuJoCo scene with hidden
physics that differ from the nominal simulator, effects no simulator parameter can represent
(actuation latency, backlash, Stribeck friction, noisy joint readings) and a camera look of its
own (photo textures, shadows, warm light, blur, sensor noise, a camera mounted slightly off).
Everything comes from one YAML/JSON file (``stand_in_default.yaml`` beside this module, or a
path of yours). Nothing outside ``embodied_gym/robots/`` reads it: calibration, rendering and
policy code only ever see what a real robot would give them. Figures measured against it are
labelled *stand-in*, never *real*.

It knows the task state, so :meth:`StandInRobot.task_status` reports success and the privileged
object poses for evaluation, as a motion-capture system would.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from lerobot.robots import Robot, RobotConfig

from embodied_gym.sim import robot as layout
from embodied_gym.sim.core import ActuatorEffects, SimCore, StribeckFriction
from embodied_gym.sim.physics import ARM_JOINT_NAMES, PhysicsParams
from embodied_gym.sim.scene import CAMERAS, SceneLook
from embodied_gym.sim.tasks import make_task
from embodied_gym.sim.timing import camera_period

DEFAULT_CONFIG = Path(__file__).with_name("stand_in_default.yaml")
_TOP_KEYS = {"seed", "physics", "effects", "look"}
_EFFECT_KEYS = {"latency_steps", "backlash", "stribeck", "joint_position_noise", "joint_velocity_noise"}
_LOOK_KEYS = {
    "table_texture",
    "table_tint",
    "backdrop_texture",
    "backdrop_tint",
    "shadows",
    "light_diffuse",
    "ambient",
    "white_balance",
    "blur_sigma",
    "image_noise",
    "camera_offsets",
}


def _check_keys(where: str, got: dict, allowed: set) -> None:
    unknown = sorted(set(got) - allowed, key=str)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where}; valid: {sorted(allowed)}")


def _mapping(where: str, v: Any) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{where} must be a mapping, got {v!r} ({type(v).__name__})")
    return v


def _real(where: str, v: Any, low: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where} must be a number >= {low:g}, got {v!r} ({type(v).__name__})")
    if not (np.isfinite(v) and v >= low):
        raise ValueError(f"{where} must be a number >= {low:g}, got {v!r}")
    return float(v)


def _reals(where: str, v: Any, n: int, low: float = -np.inf) -> None:
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise ValueError(f"{where} must be a list of {n} numbers, got {v!r}")
    for i, x in enumerate(v):
        _real(f"{where}[{i}]", x, low)


def _validate(settings: dict) -> None:
    """Types and ranges of everything :class:`StandInRobot` reads (keys were checked already)."""
    if "seed" in settings and (isinstance(settings["seed"], bool) or not isinstance(settings["seed"], int)):
        raise ValueError(f"seed must be an integer, got {settings['seed']!r}")
    eff, look = settings.get("effects", {}), settings.get("look", {})
    if "latency_steps" in eff:
        v = eff["latency_steps"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"effects.latency_steps must be a whole number of control steps >= 0, got {v!r}")
    for j, b in _mapping("effects.backlash", eff.get("backlash")).items():
        if j not in ARM_JOINT_NAMES:
            raise ValueError(f"unknown joint {j!r} in effects.backlash; valid: {list(ARM_JOINT_NAMES)}")
        _real(f"effects.backlash.{j}", b)
    st = _mapping("effects.stribeck", eff.get("stribeck"))
    _check_keys("'effects.stribeck'", st, {"static", "coulomb", "viscous", "stribeck_velocity"})
    for key in ("static", "coulomb", "viscous"):
        if key not in st:
            continue
        if isinstance(st[key], (list, tuple)):
            _reals(f"effects.stribeck.{key}", st[key], 6, 0.0)
        else:
            _real(f"effects.stribeck.{key} (one number, or a list of 6 for waist..wrist_rotate)", st[key])
    if "stribeck_velocity" in st and _real("effects.stribeck.stribeck_velocity", st["stribeck_velocity"]) <= 0:
        raise ValueError(f"effects.stribeck.stribeck_velocity must be > 0, got {st['stribeck_velocity']!r}")
    for key in ("joint_position_noise", "joint_velocity_noise"):
        if key in eff:
            _real(f"effects.{key}", eff[key])
    for key in ("table_texture", "backdrop_texture"):
        if look.get(key) is not None and not isinstance(look[key], str):
            raise ValueError(
                f"look.{key} must be the name of a scikit-image photograph (e.g. 'gravel'), got {look[key]!r}"
            )
    for key in ("table_tint", "backdrop_tint", "light_diffuse", "ambient", "white_balance"):
        if key in look:
            _reals(f"look.{key}", look[key], 3, 0.0)
    if "shadows" in look and not isinstance(look["shadows"], bool):
        raise ValueError(f"look.shadows must be true or false, got {look['shadows']!r}")
    for key in ("blur_sigma", "image_noise"):
        if key in look:
            _real(f"look.{key}", look[key])
    for cam, o in _mapping("look.camera_offsets", look.get("camera_offsets")).items():
        if cam not in CAMERAS:
            raise ValueError(f"unknown camera {cam!r} in look.camera_offsets; valid: {list(CAMERAS)}")
        o = _mapping(f"look.camera_offsets.{cam}", o)
        _check_keys(f"'look.camera_offsets.{cam}'", o, {"pos", "rot"})
        for key in ("pos", "rot"):
            if key in o:
                _reals(f"look.camera_offsets.{cam}.{key}", o[key], 3)


def load_settings(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Read and validate a stand-in config (YAML or JSON); errors name the file and the key."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.exists():
        raise FileNotFoundError(f"stand-in robot config {path} does not exist")
    if path.is_dir():
        raise ValueError(f"stand-in robot config {path} is a directory; pass a YAML or JSON file")
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            settings = json.loads(text)
        else:
            import yaml

            settings = yaml.safe_load(text)
    except OSError as e:
        raise ValueError(f"stand-in config {path} cannot be read: {e.strerror or e}") from None
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ValueError(f"stand-in config {path} is not valid {kind}: {e}") from None
    if not isinstance(settings, dict):
        raise ValueError(f"stand-in config {path} must hold a mapping")
    try:
        _check_keys("the top level", settings, _TOP_KEYS)
        for section in ("effects", "look", "physics"):
            settings[section] = _mapping(f"'{section}'", settings.get(section))
        _check_keys("'effects'", settings["effects"], _EFFECT_KEYS)
        _check_keys("'look'", settings["look"], _LOOK_KEYS)
        _validate(settings)
        in_physics = sorted({"latency_steps", "backlash"} & set(settings["physics"]))
        if in_physics:  # one place for the hidden effects, with the friction the physics section cannot hold
            raise ValueError(
                f"{in_physics} belong in the 'effects' section (effects.latency_steps, "
                f"effects.backlash), not in 'physics'"
            )
        settings["physics"] = PhysicsParams.from_dict(settings["physics"])
    except ValueError as e:
        raise ValueError(f"stand-in config {path}: {e}") from None
    settings["_path"] = str(path)
    return settings


def _photo(name: str, tint, size: int = 256) -> np.ndarray:
    """A scikit-image photograph (shipped in its wheel), greyscale-tinted to ``tint``."""
    import cv2
    import skimage.data

    try:
        img = getattr(skimage.data, name)()
    except AttributeError:
        raise ValueError(f"stand-in config: scikit-image has no image {name!r}") from None
    grey = img.mean(axis=2) if img.ndim == 3 else img.astype(float)
    grey = cv2.resize(grey.astype(np.float32), (size, size), interpolation=cv2.INTER_AREA) / 255.0
    rgb = (0.35 + 0.9 * grey)[..., None] * np.asarray(tint, dtype=np.float32)[None, None]
    return np.clip(rgb * 255, 0, 255).astype(np.uint8)


def scene_look(settings: dict) -> SceneLook:
    look = settings.get("look", {})
    offsets = {
        cam: (tuple(o.get("pos", (0, 0, 0))), tuple(o.get("rot", (0, 0, 0))))
        for cam, o in look.get("camera_offsets", {}).items()
    }
    return SceneLook(
        shadows=bool(look.get("shadows", True)),
        offsamples=4,
        light_diffuse=tuple(look.get("light_diffuse", (0.8, 0.75, 0.65))),
        ambient=tuple(look.get("ambient", (0.3, 0.3, 0.3))),
        table_texture=_photo(look["table_texture"], look.get("table_tint", (0.56, 0.48, 0.4)))
        if look.get("table_texture")
        else None,
        backdrop_texture=_photo(look["backdrop_texture"], look.get("backdrop_tint", (0.8, 0.8, 0.8)))
        if look.get("backdrop_texture")
        else None,
        camera_offsets=offsets,
    )


@RobotConfig.register_subclass("embodied_gym_stand_in")
@dataclass
class StandInRobotConfig(RobotConfig):
    """Configuration of :class:`StandInRobot`."""

    task: str = "PickCup"
    config_path: str | None = None  # hidden settings (YAML/JSON); None: the shipped default
    camera_names: tuple[str, ...] = ("cam_high",)  # not `cameras`: LeRobot reserves it for CameraConfigs
    image_size: tuple[int, int] = (240, 320)
    camera_fps: float | None = None  # the cameras' frame rate; None: a frame per 50 Hz control step
    # The table connect() sets: that of the Real env's reset(seed=episode_seed) (None: a random one).
    # LeRobot's own scripts never reset a robot's scene, so this is how `lerobot-record` gets a known
    # layout that a scripted operator (teleop embodied_gym_scripted) with the same seed can see.
    episode_seed: int | None = None

    def __post_init__(self):
        super().__post_init__()
        camera_period(self.camera_fps)  # raises naming the value
        if self.episode_seed is not None and (isinstance(self.episode_seed, bool) or self.episode_seed < 0):
            raise ValueError(f"episode_seed must be a whole number >= 0 or None, got {self.episode_seed!r}")
        if self.calibration_dir is None:  # nothing to calibrate; keep LeRobot's cache folder clean
            self.calibration_dir = Path(tempfile.gettempdir()) / "embodied_gym_stand_in"


class StandInRobot(Robot):
    """LeRobot ``Robot`` backed by a hidden MuJoCo world (see module docstring).

    Features: ``<joint>.pos`` and ``<joint>.vel`` for the 14 ALOHA joints (rad; a gripper is its
    finger's rail position in m), and one ``(H, W, 3)`` image per camera. Actions:
    ``<joint>.pos`` targets. One :meth:`send_action` advances its world by one 20 ms control step.
    """

    config_class = StandInRobotConfig
    name = "embodied_gym_stand_in"

    def __init__(self, config: StandInRobotConfig):
        super().__init__(config)
        self.config = config
        self._settings = load_settings(config.config_path)
        self._world: SimCore | None = None
        self._camera_period = camera_period(config.camera_fps)  # observations per camera frame
        # LeRobot's robots keep their camera devices here (lerobot-record sizes its image writer by it);
        # the stand-in renders its frames itself, so it has none.
        self.cameras: dict[str, Any] = {}

    # ------------------------------------------------------------------ features
    @property
    def observation_features(self) -> dict:
        feats: dict[str, Any] = {f"{j}.pos": float for j in layout.JOINT_NAMES}
        feats.update({f"{j}.vel": float for j in layout.JOINT_NAMES})
        feats.update({cam: (*self.config.image_size, 3) for cam in self.config.camera_names})
        return feats

    @property
    def action_features(self) -> dict:
        return {f"{j}.pos": float for j in layout.JOINT_NAMES}

    # ------------------------------------------------------------------ lifecycle
    @property
    def is_connected(self) -> bool:
        return self._world is not None

    @property
    def is_calibrated(self) -> bool:
        return True

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            return
        s = self._settings
        self._world = SimCore(
            make_task(self.config.task), s["physics"], look=scene_look(s), effects=actuator_effects(s)
        )
        eff = s.get("effects", {})
        self._pos_noise = float(eff.get("joint_position_noise", 0.0))
        self._vel_noise = float(eff.get("joint_velocity_noise", 0.0))
        self._scene_rng: np.random.Generator | None = None
        seed = self.config.episode_seed
        self.reset_scene(seed=None if seed is None else scene_seed_of(seed))

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def disconnect(self) -> None:
        if self._world is not None:
            self._world.close()
            self._world = None

    def _require(self):
        if self._world is None:
            raise ConnectionError(f"{self} is not connected; call connect() first")
        return self._world

    # ------------------------------------------------------------------ the world
    def reset_scene(self, seed: int | None = None) -> None:
        """Arms to the start pose, objects placed from ``seed`` (an operator resetting the table)."""
        world = self._require()
        if seed is not None or self._scene_rng is None:
            self._scene_rng, _ = seeding.np_random(seed)
        world.reset_scene(self._scene_rng)
        # Sensor noise restarts with the scene, so the same seed gives the same episode; the cameras draw
        # from their own stream, so the joint readings do not depend on which cameras are rendered.
        base = [self._settings.get("seed", 0), seed if seed is not None else 0]
        self._rng = np.random.default_rng(base)
        self._image_rng = np.random.default_rng([*base, 1])
        self._reads = 0  # observations since the reset: the camera captures every camera_period-th
        self._frames: dict[str, np.ndarray] = {}

    def get_observation(self) -> dict[str, Any]:
        world = self._require()
        q = world.joint_positions() + self._rng.normal(0.0, self._pos_noise, 14)
        v = world.joint_velocities() + self._rng.normal(0.0, self._vel_noise, 14)
        obs: dict[str, Any] = {f"{j}.pos": float(x) for j, x in zip(layout.JOINT_NAMES, q)}
        obs.update({f"{j}.vel": float(x) for j, x in zip(layout.JOINT_NAMES, v)})
        if self._reads % self._camera_period == 0 or not self._frames:
            self._frames = {
                cam: self._camera_frame(world.render_camera(cam, self.config.image_size))
                for cam in self.config.camera_names
            }
        self._reads += 1
        obs.update({cam: f.copy() for cam, f in self._frames.items()})  # between two camera frames, the last one
        return obs

    def _camera_frame(self, img: np.ndarray) -> np.ndarray:
        import cv2

        look = self._settings.get("look", {})
        out: np.ndarray = img.astype(np.float32) * np.asarray(look.get("white_balance", (1, 1, 1)), np.float32)
        sigma = float(look.get("blur_sigma", 0.0))
        if sigma > 0:
            out = cv2.GaussianBlur(out, (0, 0), sigma)
        out += self._image_rng.normal(0.0, float(look.get("image_noise", 0.0)), out.shape).astype(np.float32)
        return np.clip(out, 0, 255).astype(np.uint8)

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        world = self._require()
        missing = [f"{j}.pos" for j in layout.JOINT_NAMES if f"{j}.pos" not in action]
        if missing:
            raise KeyError(f"action lacks {missing}")
        cmd = np.clip(
            np.array([float(action[f"{j}.pos"]) for j in layout.JOINT_NAMES]), layout.JOINT_LOW, layout.JOINT_HIGH
        )
        world.command(cmd)  # through the hidden latency and backlash
        world.step()  # one 20 ms control step, with the hidden friction
        return {f"{j}.pos": float(x) for j, x in zip(layout.JOINT_NAMES, cmd)}

    def task_status(self) -> dict[str, Any]:
        """Success, reward and the privileged poses, as the sim env reports them in ``info``."""
        world = self._require()
        status = world.evaluate()
        info = world.privileged_info(status)
        return {
            "is_success": info["is_success"],
            "reward": status.reward,
            "reward_terms": info["reward_terms"],
            "object_poses": info["object_poses"],
            "tcp_poses": info["tcp_poses"],
        }


def scene_seed_of(episode_seed: int) -> int:
    """The scene seed that ``reset(seed=episode_seed)`` of a ``-Real-`` env hands :meth:`StandInRobot.reset_scene`
    (the env draws it from its gymnasium generator), so a robot connected with ``episode_seed`` sets the same table."""
    rng, _ = seeding.np_random(int(episode_seed))
    return int(rng.integers(2**31 - 1))


def actuator_effects(settings: dict) -> ActuatorEffects:
    """The hidden actuator effects of a stand-in config's ``effects`` section."""
    eff = settings.get("effects", {})
    backlash = np.zeros(14)
    for j, b in eff.get("backlash", {}).items():
        backlash[layout.JOINT_NAMES.index(j)] = float(b)
    st = eff.get("stribeck", {})

    def per_joint(key):  # 6 values (one arm, mirrored) or one for all
        v = np.broadcast_to(np.asarray(st.get(key, 0.0), dtype=np.float64), (6,))
        return np.tile(v, 2)

    friction = StribeckFriction(
        static=per_joint("static"),
        coulomb=per_joint("coulomb"),
        viscous=per_joint("viscous"),
        stribeck_velocity=float(st.get("stribeck_velocity", 0.1)),
    )
    has_friction = any(np.any(getattr(friction, k)) for k in ("static", "coulomb", "viscous"))
    return ActuatorEffects(
        latency_steps=int(eff.get("latency_steps", 0)), backlash=backlash, friction=friction if has_friction else None
    )


__all__ = ["StandInRobot", "StandInRobotConfig", "actuator_effects", "load_settings", "scene_seed_of"]
