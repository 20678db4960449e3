"""The ``embodied-gym`` command: one subcommand per module of :mod:`embodied_gym.commands`.

``main`` parses, runs the command and turns the two ways a run ends early into one line each:
Ctrl-C (what was kept and how to go on, exit 130) and a user error (:mod:`embodied_gym.errors`:
``embodied-gym <command>: error: <message>``, exit 2). A bug keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from embodied_gym.commands import COMMANDS, GROUPS


class _CommandParser(argparse.ArgumentParser):
    """A command's parser that adds the command's flags only when it is used (parsed, or its help
    printed): ``embodied-gym --help`` lists the commands without importing their configs (torch,
    diffusers, LeRobot), and ``embodied-gym <command> ...`` imports only that command's."""

    def __init__(self, *args, command=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._command_module = command
        self._flags_added = command is None  # a group's parser (``train``) has no flags of its own

    def add_command_arguments(self, argv=()) -> argparse.ArgumentParser:
        """Add the command's flags (once). ``argv``: the command's own arguments, for a command
        whose flags' defaults depend on them (``demo --full --help`` shows the full profile's)."""
        if not self._flags_added:
            self._flags_added = True
            cmd = self._command_module
            if getattr(cmd, "ARGUMENTS_READ_ARGV", False):
                cmd.add_arguments(self, argv=list(argv or ()))
            else:
                cmd.add_arguments(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        self.add_command_arguments(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.add_command_arguments()
        return super().format_usage()

    def format_help(self) -> str:
        self.add_command_arguments()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    """The ``embodied-gym`` parser. Each command's flags are added when that command is parsed (or
    its help printed; :meth:`_CommandParser.add_command_arguments` adds them at once), so building
    it imports no command's config."""
    p = argparse.ArgumentParser(
        prog="embodied-gym",
        description="EmbodieDreamer's Real2Sim2Real loop "
        "(arXiv 2507.05198): record -> calibrate -> render -> train -> evaluate",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)
    groups: dict[str, argparse._SubParsersAction] = {}
    for cmd in COMMANDS:
        group = getattr(cmd, "GROUP", None)
        if group is None:
            parent = sub
        else:
            if group not in groups:
                g = sub.add_parser(group, help=GROUPS[group], description=GROUPS[group])
                groups[group] = g.add_subparsers(
                    dest="subcommand", required=True, metavar="SUBCOMMAND", parser_class=_CommandParser
                )
            parent = groups[group]
        parser = parent.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP, command=cmd)
        parser.set_defaults(_command=cmd)
    return p


def _quiet_progress() -> None:
    """Keep the terminal to our own progress bars: `datasets` draws a "Map" bar for every saved
    episode. LeRobot re-enables those bars after each save, so only `datasets`' environment
    switch (read at import, which has priority) holds; process-wide, so only the CLI sets it."""
    import warnings

    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", message="Cannot enable progress bars")
    # the stages and worker pools are spawned processes: they inherit the environment, not the filter
    os.environ.setdefault("PYTHONWARNINGS", "ignore:Cannot enable progress bars")


def _close_progress_bars() -> None:
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _command_name(args) -> str:
    """``record``, ``visaligner train``, ``train act``, ..."""
    cmd = args._command
    group = getattr(cmd, "GROUP", None)
    return f"{group} {cmd.NAME}" if group else cmd.NAME


def main(argv: list[str] | None = None) -> int:
    """Run one command. Ctrl-C ends it with one line saying what was kept (exit 130); a user error
    (:mod:`embodied_gym.errors`) with one ``error:`` line (exit 2); a bug with its traceback."""
    from embodied_gym.commands.devices import PREFIXES, device_args
    from embodied_gym.errors import is_user_error, user_message

    _quiet_progress()
    devices, argv = device_args(list(sys.argv[1:] if argv is None else argv), tuple(PREFIXES))
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("embodied-gym: interrupted before the command started; nothing was written", file=sys.stderr)
        return 130
    # LeRobot's device flags (--robot.type=..., --teleop.type=...), for the commands that drive a robot
    kinds = getattr(args._command, "LEROBOT_DEVICES", ())
    refused = [a for a in devices if not a.startswith(tuple(PREFIXES[k] for k in kinds))]
    if refused:
        takes = f"it takes only {', '.join(PREFIXES[k] + '*' for k in kinds)}" if kinds else "it drives no robot"
        parser.error(f"{_command_name(args)} does not take {refused[0].split('=')[0]} ({takes})")
    args.lerobot_devices = devices
    name = _command_name(args)
    t0 = time.time()
    try:
        rc = args._command.run(args)
    except KeyboardInterrupt:
        _close_progress_bars()  # their last line before ours, not after it when they are collected
        start = "\n" if sys.stderr.isatty() else ""  # off the "^C" the terminal echoed
        print(f"{start}embodied-gym {name}: interrupted; {args._command.interrupted(args)}", file=sys.stderr)
        return 130
    except Exception as e:
        if not is_user_error(e):
            raise
        print(f"embodied-gym {name}: error: {user_message(e)}", file=sys.stderr)
        return 2
    print(f"done in {time.time() - t0:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
