"""``embodied-gym generate``: expert demonstrations in the aligned simulator
(:func:`embodied_gym.recording.aligned.generate_aligned_demos`)."""

from __future__ import annotations

import json

from embodied_gym import configs

NAME = "generate"
HELP = (
    "generate training data in the aligned sim: expert demos under calibrated physics, their camera "
    "rendered by VisAligner (the demo's generate stage)"
)


def add_arguments(p) -> None:
    from embodied_gym.recording.aligned import AlignedDemosConfig

    p.add_argument("--out", required=True, help="output folder: sim/ (plain renders) and aligned/ (the dataset)")
    configs.add_arguments(p, AlignedDemosConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.recording.aligned import AlignedDemosConfig, generate_aligned_demos

    cfg = configs.from_args(AlignedDemosConfig, args, args.config)
    summary = generate_aligned_demos(cfg, args.out)
    print(json.dumps(summary))
    print(
        f"aligned-sim dataset: {summary['dataset']} (train on it: embodied-gym train act --dataset "
        f"{summary['dataset']} --out DIR)"
    )
    return 0


def interrupted(args) -> str:
    return (
        f"the episodes finished so far are kept in {args.out}/sim and {args.out}/aligned; rerun the same "
        f"command to continue"
    )
