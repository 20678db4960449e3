"""``embodied-gym train act``: LeRobot's ACT, offline (:func:`embodied_gym.policies.act.train_act`)."""

from __future__ import annotations

from embodied_gym import configs

GROUP = "train"
NAME = "act"
HELP = "train LeRobot's ACT on a recorded (or generated) LeRobotDataset, offline"


def add_arguments(p) -> None:
    from embodied_gym.policies.act import ACTTrainConfig

    configs.add_arguments(p, ACTTrainConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.policies.act import ACTTrainConfig, train_act

    r = train_act(configs.from_args(ACTTrainConfig, args, args.config))
    print(
        f"ACT trained to step {r.steps} (final batch loss {r.final_loss:.4f}) in {r.train_time_s:.0f} s "
        f"(+{r.decode_time_s:.0f} s decoding); policy: {r.checkpoint}"
    )
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    resume = "rerun the same command" if getattr(args, "resume", False) else "rerun the same command plus --resume"
    return f"checkpoints (every --save-every steps) are kept in {out}/checkpoints; {resume} to continue"
