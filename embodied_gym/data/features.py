"""The LeRobotDataset schema of embodied-gym recordings: every feature key, the sidecar file, the frame rate.

Code outside :mod:`embodied_gym.data` names a feature through these constants (or
:func:`image_key` / :func:`camera_of`), never as a string literal. The keys are LeRobot's own
(``observation.state``, ``action``, ``observation.images.<camera>``, as in its ALOHA datasets), so a
policy's input and output features use the same names.
"""

from __future__ import annotations

from embodied_gym.sim.robot import ARMS, JOINT_NAMES

FPS = 50
EE_POSE_NAMES = [f"{arm}_{c}" for arm in ARMS for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
SIDECAR = "meta/embodied_gym_episodes.jsonl"  # per-episode seed, success, start layout, env id
INFO = "meta/info.json"  # LeRobot's dataset description; its presence makes a folder a dataset

STATE = "observation.state"  # (14,) measured joint positions
VELOCITY = "observation.velocity"  # (14,) measured joint velocities
EE_POSE = "observation.ee_pose"  # (14,) both TCP poses, position + quaternion wxyz
# (D,) estimated object poses (a perception model's output, never the simulator's ground truth);
# LeRobot's key for ACT's environment-state input token
ENV_STATE = "observation.environment_state"
ACTION = "action"  # (14,) joint targets given to the controllers
REWARD = "next.reward"
SUCCESS = "next.success"
DONE = "next.done"
IMAGES = "observation.images"  # prefix of the camera features
ACTION_IS_PAD = "action_is_pad"  # LeRobot's padding flag of action chunks past an episode's end
TASK = "task"  # the frame's task description (LeRobot's key)
# Columns LeRobot adds to every frame itself.
AUTO_FEATURES = ("index", "timestamp", "frame_index", "episode_index", "task_index")
# What replay and calibration read from every episode.
TRAJECTORY = (STATE, VELOCITY, EE_POSE, ACTION)


def image_key(camera: str) -> str:
    """The feature key of ``camera``'s video, ``observation.images.<camera>``."""
    return f"{IMAGES}.{camera}"


def camera_of(key: str) -> str:
    """The camera name of an image feature key (inverse of :func:`image_key`)."""
    if not key.startswith(IMAGES + "."):
        raise ValueError(f"{key!r} is not a camera feature (expected {IMAGES}.<camera>)")
    return key[len(IMAGES) + 1 :]


def dataset_features(cameras, image_size, env_state_names=None, outcomes: bool = True) -> dict:
    """Features: joint state, velocity, both TCP poses, joint-target action, reward/success/done
    flags (``outcomes``; an imported teleoperated recording has none to give), one video per camera,
    and ``observation.environment_state`` (float32, one entry per name) when ``env_state_names`` is given."""
    names = list(JOINT_NAMES)
    feats: dict[str, dict] = {
        STATE: {"dtype": "float32", "shape": (14,), "names": names},
        VELOCITY: {"dtype": "float32", "shape": (14,), "names": names},
        EE_POSE: {"dtype": "float32", "shape": (14,), "names": EE_POSE_NAMES},
        ACTION: {"dtype": "float32", "shape": (14,), "names": names},
    }
    if outcomes:
        feats[REWARD] = {"dtype": "float32", "shape": (1,), "names": None}
        feats[SUCCESS] = {"dtype": "bool", "shape": (1,), "names": None}
        feats[DONE] = {"dtype": "bool", "shape": (1,), "names": None}
    if env_state_names:
        names_e = [str(n) for n in env_state_names]
        feats[ENV_STATE] = {"dtype": "float32", "shape": (len(names_e),), "names": names_e}
    h, w = image_size
    for cam in cameras:
        feats[image_key(cam)] = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
    return feats


AFTER_SUCCESS_STEPS = 40
"""Default control steps recorded after the first success (0.8 s at 50 Hz). Success triggers
midway through the expert's last motion (PickCup: at 5 cm, halfway up its 10 cm lift), and the
rest of the motion plus the hold takes ~30 steps; 40 also exceeds the action chunks ACT predicts
(20 in the cpu preset, 32 in the paper's), so every chunk that starts before success is made of
recorded actions, never padding."""
