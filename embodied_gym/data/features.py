"""The LeRobotDataset schema of embodied-gym recordings."""

from __future__ import annotations

from embodied_gym.envs.robot import ARMS, JOINT_NAMES

FPS = 50
EE_POSE_NAMES = [f"{arm}_{c}" for arm in ARMS for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
SIDECAR = "meta/embodied_gym_episodes.jsonl"  # per-episode seed, success, start layout


def dataset_features(cameras, image_size) -> dict:
    """Features: joint state, velocity, both TCP poses, joint-target action, reward/success/done
    flags, and one video per camera."""
    names = list(JOINT_NAMES)
    feats = {
        "observation.state": {"dtype": "float32", "shape": (14,), "names": names},
        "observation.velocity": {"dtype": "float32", "shape": (14,), "names": names},
        "observation.ee_pose": {"dtype": "float32", "shape": (14,), "names": EE_POSE_NAMES},
        "action": {"dtype": "float32", "shape": (14,), "names": names},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    h, w = image_size
    for cam in cameras:
        feats[f"observation.images.{cam}"] = {"dtype": "video", "shape": (h, w, 3),
                                              "names": ["height", "width", "channels"]}
    return feats
