"""Object builders the task modules share: free bodies, an open-topped cylinder, an open box, the cup.

Every builder puts the body frame at the object's base centre (z = 0 when it rests upright on
the table) and names the free joint ``<object>_joint``, as :meth:`Task.place` expects.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from embodied_gym.sim.tasks.base import yaw_quat

CUP_RADIUS = 0.025
CUP_HEIGHT = 0.08
CUP_GRASP_BELOW_RIM = 0.03
CUP_GRASP_OFFSET = np.array([0.0, 0.0, CUP_HEIGHT - CUP_GRASP_BELOW_RIM])
"""From the cup's base frame to its grasp point (3 cm below the rim): its reach point."""


def add_free_body(spec: mujoco.MjSpec, name: str, mass: float, com_height: float, inertia) -> mujoco.MjsBody:
    """A world body ``name`` with a free joint ``<name>_joint`` and an explicit inertial."""
    body = spec.worldbody.add_body(name=name)
    body.add_freejoint(name=f"{name}_joint")
    body.explicitinertial = True
    body.mass = mass
    body.ipos = (0.0, 0.0, com_height)
    body.inertia = tuple(inertia)
    return body


def hollow_cylinder(spec, name, radius, height, wall, mass, rgba, segments=16, bottom=0.003):
    """An open-topped cylinder (cup) built from a base disc and ``segments`` wall slabs."""
    inertia_r = mass * (radius**2 / 2 + height**2 / 12)
    inertia_z = mass * radius**2
    body = add_free_body(spec, name, mass, height / 2, (inertia_r, inertia_r, inertia_z))
    common = dict(
        rgba=rgba, condim=4, friction=(1.0, 0.005, 0.0001), solref=(0.01, 1), solimp=(0.95, 0.99, 0.001, 0.5, 2)
    )
    body.add_geom(
        name=f"{name}_base",
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=(radius, bottom / 2, 0),
        pos=(0, 0, bottom / 2),
        **common,
    )
    half_len = radius * math.tan(math.pi / segments) * 1.02
    for i in range(segments):
        a = 2 * math.pi * i / segments
        r = radius - wall / 2
        # Walls stand on the base, not on the table: 16 slabs on the table would add ~60 contacts.
        body.add_geom(
            name=f"{name}_wall{i}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=(wall / 2, half_len, (height - bottom) / 2),
            pos=(r * math.cos(a), r * math.sin(a), bottom + (height - bottom) / 2),
            quat=yaw_quat(a),
            **common,
        )
    return body


def open_box(spec, name, inner_half, height, wall, mass, rgba):
    """An open-topped box with inner half-extents ``inner_half`` (x, y), ``height`` tall."""
    hx, hy = inner_half
    inertia = (mass * (hy**2 + height**2) / 3, mass * (hx**2 + height**2) / 3, mass * (hx**2 + hy**2) / 3)
    body = add_free_body(spec, name, mass, height / 3, inertia)
    common = dict(rgba=rgba, condim=4, friction=(1.0, 0.005, 0.0001))
    box = mujoco.mjtGeom.mjGEOM_BOX
    body.add_geom(
        name=f"{name}_bottom", type=box, size=(hx + wall, hy + wall, wall / 2), pos=(0, 0, wall / 2), **common
    )
    for side, (sx, sy, px, py) in {
        "px": (wall / 2, hy + wall, hx + wall / 2, 0),
        "nx": (wall / 2, hy + wall, -hx - wall / 2, 0),
        "py": (hx, wall / 2, 0, hy + wall / 2),
        "ny": (hx, wall / 2, 0, -hy - wall / 2),
    }.items():
        body.add_geom(
            name=f"{name}_wall_{side}",
            type=box,
            size=(sx, sy, (height - wall) / 2),
            pos=(px, py, wall + (height - wall) / 2),
            **common,
        )
    return body


def add_cup(spec, mass: float, rgba) -> mujoco.MjsBody:
    """The body ``cup``: radius 2.5 cm, 8 cm tall, 2 mm wall, ``mass`` kg."""
    return hollow_cylinder(spec, "cup", CUP_RADIUS, CUP_HEIGHT, 0.002, mass, rgba)
