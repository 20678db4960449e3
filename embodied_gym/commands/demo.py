"""``embodied-gym demo``: the whole Real2Sim2Real loop on the stand-in robot (:func:`embodied_gym.demo.loop.run_demo`)."""

from __future__ import annotations

import os

from embodied_gym import configs

NAME = "demo"
HELP = "the whole Real2Sim2Real loop on the stand-in robot (or from your LeRobot demonstrations), with an HTML report"


# Paths and ids each stage gets from the stage before it, not from the user.
_DEMO_FILLS = frozenset(
    {
        "dataset",
        "out",
        "policy",
        "env_id",
        "generate.model",
        "reference",
        "physics",
        "task",
        "tpo.visaligner",
        "tpo.max_episode_steps",
        "generate.max_episode_steps",
        "generate.camera",
        "generate.image_size",
        "visaligner.camera",
        "act.cameras",
        "act.images",
        "act.env_state",
        "perception.train.data",
        "perception.train.resume",
    }
)


#: ``add_arguments`` reads the command's own arguments: the help shows the chosen profile's values.
ARGUMENTS_READ_ARGV = True
#: ``--robot.type=embodied_gym_stand_in --robot.config_path=FILE``, as LeRobot's scripts spell the robot
LEROBOT_DEVICES = ("robot",)


def chosen_profile(argv) -> tuple[str, str | None]:
    """The profile (and ``--config`` file) that ``argv``, the demo's own arguments, choose:
    ``--full``, ``--profile NAME`` or the default, quick."""
    import argparse

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--quick", action="store_true")
    pre.add_argument("--full", action="store_true")
    pre.add_argument("--profile", default="quick")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(list(argv))
    return ("full" if known.full else "quick" if known.quick else known.profile), known.config


def profile_defaults(argv):
    """The settings a demo run with ``argv`` starts from (its profile, then ``--config``), and their
    source's name, for the help; the class defaults (and a note) when the profile or file cannot be read:
    the run itself reports that error."""
    from embodied_gym.demo.configuration import DemoConfig, load_config

    profile, config = chosen_profile(argv)
    for override in (config, None) if config else (None,):
        try:
            cfg = load_config(profile, override)
        except Exception:  # the help still shows; the run itself says what is wrong
            continue
        return cfg, f"{profile} profile" + (f" + {override}" if override else "")
    return DemoConfig(), f"the settings' own (profile {profile!r} could not be read)"


def add_arguments(p, argv=()) -> None:
    from embodied_gym.demo.stages import STAGE_NAMES

    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one task, small sizes, 2 CPU cores (the default)")
    size.add_argument("--full", action="store_true", help="all four tasks, paper-like sizes (a GPU machine)")
    size.add_argument("--profile", default="quick", help="a profile of embodied_gym/demo/profiles (quick, full, smoke)")
    p.add_argument("--config", help="YAML file overriding any stage setting of the profile")
    p.add_argument("--from", choices=STAGE_NAMES, help="rerun this stage and every stage that reads it")
    p.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="another run folder whose finished stages with the same settings and inputs are used in place "
        "(e.g. a run that differs only in act.seed shares perception, recording, calibration and data)",
    )
    p.add_argument(
        "--demos",
        metavar="DATASET",
        help="start from demonstrations recorded with LeRobot's tools (lerobot-record) instead of recording the "
        "scripted expert: the record stage imports them (same as --record.demos; one task: --tasks T; "
        "--record.joint-map / --record.camera-map where the names differ; docs/your_robot.md)",
    )
    p.add_argument("--name", help="run name: output in RUNS/NAME (default: the profile's name)")
    p.add_argument("--runs", default="runs", help="folder of runs (default runs/)")
    # Every setting of the profile, e.g. --tasks PickCup --act.steps 800 --calibrate.method physaligner
    # (the flags override the profile and --config); the demo fills the stages' data paths itself.
    cfg, source = profile_defaults(argv)
    settings = p.add_argument_group(
        "profile settings",
        f"any setting of the profile YAML, by its dotted name. Defaults shown: {source} "
        f"(`demo --full --help`, `demo --profile NAME --help`: another profile's)",
    )
    configs.add_arguments(settings, type(cfg), skip=_DEMO_FILLS, defaults=cfg, defaults_from=source)


def _stand_in_config(args) -> str:
    """The stand-in config file that ``--robot.type=embodied_gym_stand_in`` names (the demo's evaluation needs a
    robot that sets its own table: the stand-in)."""
    from embodied_gym.commands.devices import is_stand_in, parse_devices
    from embodied_gym.robots import robot_config_file

    robot = parse_devices(args.lerobot_devices)["robot"]
    if not is_stand_in(robot):
        raise ValueError(
            f"the demo evaluates its policies on a robot that sets its own table (--robot.type=embodied_gym_stand_in); "
            f"with a {robot.type}: start the loop from its demonstrations (--demos DATASET) and evaluate the trained "
            f"policies on it with `embodied-gym eval --robot.type={robot.type} ...` (docs/your_robot.md)"
        )
    if getattr(args, "robot_config", None):  # a profile setting: absent from args unless given
        raise ValueError("give the robot once: --robot-config FILE or --robot.type=embodied_gym_stand_in, not both")
    return robot_config_file(robot)


def _run_dir(args) -> str:
    return os.path.join(args.runs, args.name or ("full" if args.full else args.profile))


def run(args) -> int:
    from embodied_gym.demo.configuration import DemoConfig, check_config, load_config
    from embodied_gym.demo.loop import run_demo
    from embodied_gym.demo.report import task_table_text

    cfg = load_config("full" if args.full else args.profile, args.config)
    configs.merge(cfg, configs.given(args, DemoConfig), "command line")
    if args.demos:
        cfg.record.demos = args.demos
    if args.lerobot_devices:
        cfg.robot_config = _stand_in_config(args)
    check_config(cfg)
    run_dir = _run_dir(args)
    summary = run_demo(cfg, run_dir, rerun_from=getattr(args, "from"), reuse=tuple(args.reuse))
    for task, t in summary["tasks"].items():
        for name, e in t["evaluation"].items():
            print(
                f"{task:12s} {name:12s} success {_where(name)} {e['success_rate']:6.1%} "
                f"(95 % CI {e['ci95'][0]:.0%}-{e['ci95'][1]:.0%}, {e['episodes']} episodes)"
            )
    print(task_table_text(summary))
    print(f"report: {os.path.join(run_dir, 'report.html')}  (summary: {os.path.join(run_dir, 'summary.json')})")
    return 0


def _where(entry: str) -> str:
    """Where the evaluate stage's entry ran (``NAME``, ``NAME_in_sim``, ``NAME_in_nominal_sim``)."""
    if entry.endswith("_in_nominal_sim"):
        return "in the nominal sim"
    return "in the calibrated sim" if entry.endswith("_in_sim") else "on the stand-in"


def interrupted(args) -> str:
    return (
        f"finished stages are kept in {_run_dir(args)}; rerun the same command to continue from the interrupted stage"
    )
