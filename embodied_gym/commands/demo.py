"""``embodied-gym demo``: the whole Real2Sim2Real loop on the stand-in robot (:func:`embodied_gym.demo.pipeline.run_demo`)."""

from __future__ import annotations

import os

from embodied_gym import configs

NAME = "demo"
HELP = "the whole Real2Sim2Real loop on the stand-in robot, with an HTML report"


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


def add_arguments(p) -> None:
    from embodied_gym.demo.config import DemoConfig
    from embodied_gym.demo.pipeline import STAGES

    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one task, small sizes, 2 CPU cores (the default)")
    size.add_argument("--full", action="store_true", help="all four tasks, paper-like sizes (a GPU machine)")
    size.add_argument("--profile", default="quick", help="a profile of embodied_gym/demo/profiles (quick, full, smoke)")
    p.add_argument("--config", help="YAML file overriding any stage setting of the profile")
    p.add_argument("--from", choices=STAGES, help="rerun from this stage on (later stages rerun too)")
    p.add_argument("--name", help="run name: output in RUNS/NAME (default: the profile's name)")
    p.add_argument("--runs", default="runs", help="folder of runs (default runs/)")
    # Every setting of the profile, e.g. --tasks PickCup --act.steps 800 --calibrate.method physaligner
    # (the flags override the profile and --config); the demo fills the stages' data paths itself.
    settings = p.add_argument_group("profile settings", "any setting of the profile YAML, by its dotted name")
    configs.add_arguments(settings, DemoConfig, skip=_DEMO_FILLS)


def _run_dir(args) -> str:
    return os.path.join(args.runs, args.name or ("full" if args.full else args.profile))


def run(args) -> int:
    from embodied_gym.demo.config import DemoConfig, check_config, load_config
    from embodied_gym.demo.pipeline import run_demo

    cfg = load_config("full" if args.full else args.profile, args.config)
    configs.merge(cfg, configs.given(args, DemoConfig), "command line")
    check_config(cfg)
    run_dir = _run_dir(args)
    summary = run_demo(cfg, run_dir, rerun_from=getattr(args, "from"))
    for task, t in summary["tasks"].items():
        for name, e in t["evaluation"].items():
            print(
                f"{task:12s} {name:12s} success on the stand-in {e['success_rate']:6.1%} "
                f"(95 % CI {e['ci95'][0]:.0%}-{e['ci95'][1]:.0%}, {e['episodes']} episodes)"
            )
    print(f"report: {os.path.join(run_dir, 'report.html')}  (summary: {os.path.join(run_dir, 'summary.json')})")
    return 0


def interrupted(args) -> str:
    return (
        f"finished stages are kept in {_run_dir(args)}; rerun the same command to continue from the interrupted stage"
    )
