"""Where the scene's meshes come from.

The ViperX-300 arm MJCF and its STL meshes ship in the installed ``gym-aloha`` wheel
(Apache-2.0, adapted from ALOHA). We locate them at run time instead of copying them into this
repository; everything else in the scene (table, cameras, lights, task objects, actuators,
physics) is built by :mod:`embodied_gym.sim.scene`.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache


@cache
def aloha_asset_dir() -> str:
    """Folder holding gym-aloha's ``vx300s_*.xml`` and meshes (found without importing gym-aloha,
    whose import pulls in dm_control)."""
    spec = importlib.util.find_spec("gym_aloha")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "embodied-gym needs the arm meshes from the 'gym-aloha' package; install it with "
            "`pip install gym-aloha==0.1.5` (or rerun the project's setup script)"
        )
    path = os.path.join(spec.submodule_search_locations[0], "assets")
    missing = [
        f
        for f in ("vx300s_left.xml", "vx300s_right.xml", "vx300s_dependencies.xml")
        if not os.path.exists(os.path.join(path, f))
    ]
    if missing:
        raise FileNotFoundError(f"gym-aloha at {path} lacks {missing}; reinstall gym-aloha==0.1.5")
    return path
