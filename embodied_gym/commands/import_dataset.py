"""``embodied-gym import``: demonstrations recorded with LeRobot's tools into an embodied-gym dataset
(:func:`embodied_gym.recording.lerobot_import.import_lerobot_dataset`)."""

from __future__ import annotations

from embodied_gym import configs

NAME = "import"
HELP = (
    "import demonstrations recorded with LeRobot's tools (lerobot-record, teleoperated) on your robot: "
    "every stage reads the result"
)


def add_arguments(p) -> None:
    from embodied_gym.recording.lerobot_import import ImportConfig

    configs.add_arguments(p, ImportConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.recording.lerobot_import import ImportConfig, import_lerobot_dataset

    cfg = configs.from_args(ImportConfig, args, args.config)
    s = import_lerobot_dataset(cfg)
    notes = "".join(f"; {n}" for n in s.notes)
    print(
        f"imported {s.imported} episodes into {s.root} ({s.episodes} in total; velocities {s.velocity}{notes}). "
        f"Next: embodied-gym calibrate --dataset {s.root} ..., or embodied-gym demo --demos {cfg.source}"
    )
    return 0


def interrupted(args) -> str:
    return f"the episodes imported so far are kept in {args.out}; rerun the same command to import the rest"
