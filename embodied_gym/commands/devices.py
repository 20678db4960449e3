"""LeRobot robot and teleoperator configs on embodied-gym's command line, spelt as LeRobot's own scripts
spell them: ``--robot.type=koch_follower --robot.port=/dev/ttyACM0 --teleop.type=koch_leader ...``.

The flags are parsed by draccus into LeRobot's ``RobotConfig`` / ``TeleoperatorConfig`` registries, with
the devices ``lerobot-record`` knows (its module registers LeRobot's own) plus every installed LeRobot
plugin (``register_third_party_plugins``, which includes embodied-gym's stand-in robot and scripted
operator), so a flag set that works with ``lerobot-record`` works here.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from dataclasses import field, make_dataclass
from typing import Any

#: the command-line prefixes of each device kind
PREFIXES = {"robot": "--robot.", "teleop": "--teleop."}


def device_args(argv: list[str], kinds: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split ``argv`` into the LeRobot device flags of ``kinds`` (``--robot.*``, ``--teleop.*``) and the rest."""
    prefixes = tuple(PREFIXES[k] for k in kinds)
    devices, rest = [], []
    it = iter(argv)
    for arg in it:
        if not arg.startswith(prefixes):
            rest.append(arg)
        elif "=" in arg:
            devices.append(arg)
        else:  # --robot.port /dev/ttyACM0: draccus reads the = form
            devices.append(f"{arg}={next(it, '')}")
    return devices, rest


def _register_lerobot_devices() -> None:
    import importlib

    from lerobot.utils.import_utils import register_third_party_plugins

    # lerobot-record's module imports (and so registers) every robot, teleoperator and camera LeRobot ships
    importlib.import_module("lerobot.scripts.lerobot_record")
    register_third_party_plugins()


def parse_devices(args: list[str]) -> dict[str, Any]:
    """``{"robot": RobotConfig | None, "teleop": TeleoperatorConfig | None}`` from LeRobot-style flags.

    Raises:
        ValueError: draccus refused the flags (an unknown type or field; its message, with the valid
            choices, is in the error), or a device's fields were given without its ``type``.
    """
    import draccus
    from lerobot.robots import RobotConfig
    from lerobot.teleoperators import TeleoperatorConfig

    # real types, not the strings this module's annotations would be: draccus resolves them
    Devices = make_dataclass(
        "Devices",
        [
            ("robot", RobotConfig | None, field(default=None)),
            ("teleop", TeleoperatorConfig | None, field(default=None)),
        ],
    )

    for kind, prefix in PREFIXES.items():
        given = [a for a in args if a.startswith(prefix)]
        if given and not any(a.startswith(f"{prefix}type=") or a == f"{prefix}type" for a in given):
            raise ValueError(
                f"{given[0]} needs {prefix}type=NAME (the LeRobot {kind} type, e.g. embodied_gym_stand_in)"
            )
    _register_lerobot_devices()
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            parsed: Any = draccus.parse(Devices, args=args)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln] or err.getvalue().splitlines()[-1:]
        raise ValueError(
            "LeRobot device flags: " + " ".join(ln.split("error:", 1)[-1].strip() for ln in lines)
        ) from None
    return {"robot": parsed.robot, "teleop": parsed.teleop}


def name_map(flag: str, items) -> dict[str, str]:
    """``--joint-map`` / ``--camera-map`` items ``OURS=THEIRS`` as a dict; a malformed one is named."""
    from embodied_gym.errors import UserInputError

    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UserInputError(f"{flag}: {item!r} is not NAME=VALUE")
        out[key] = value
    return out


def is_stand_in(robot_config) -> bool:
    """Whether ``robot_config`` is embodied-gym's stand-in (which knows its task state: the scripted expert
    and evaluation's success may read it)."""
    from embodied_gym.robots import sets_its_own_table

    return sets_its_own_table(robot_config)


def ask_operator(robot, seed: int | None) -> None:
    """The ``reset_fn`` of a real robot on the command line: the arms are at the start pose; the operator sets
    the table and presses Enter (``q`` stops the run, leaving the robot to the env's close)."""
    answer = input(
        f"[embodied-gym] episode (seed {seed}): set the objects on the table, then press Enter (q + Enter: stop) "
    )
    if answer.strip().lower() in ("q", "quit", "stop"):
        raise KeyboardInterrupt


__all__ = ["PREFIXES", "ask_operator", "device_args", "is_stand_in", "name_map", "parse_devices"]
