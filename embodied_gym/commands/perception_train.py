"""``embodied-gym perception train``: the pose estimator on frame folders
(:func:`embodied_gym.perception.training.train_pose_estimator`)."""

from __future__ import annotations

from embodied_gym import configs

GROUP = "perception"
NAME = "train"
HELP = (
    "train the pose estimator (the task objects' poses from the camera's table region) on frame folders; "
    "its input is theirs"
)


def add_arguments(p) -> None:
    from embodied_gym.perception.training import PoseTrainConfig

    configs.add_arguments(p, PoseTrainConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.perception.training import PoseTrainConfig, train_pose_estimator

    r = train_pose_estimator(configs.from_args(PoseTrainConfig, args, args.config))
    if r.out is None:
        raise RuntimeError("train_pose_estimator returned no output folder")
    errors = "; ".join(
        f"{obj} {e['xy_cm']:.2f} cm" for obj, e in r.val_errors.items() if isinstance(e, dict) and "xy_cm" in e
    )
    print(
        f"held-out episodes' horizontal error: {errors or '- (no held-out episodes)'}; estimator: {r.out / 'model'} "
        f"(use it: embodied-gym record/eval --pose-estimator {r.out / 'model'})"
    )
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "outputs/perception")
    resume = "rerun the same command" if getattr(args, "resume", False) else "rerun the same command plus --resume"
    return f"checkpoints (every --save-every steps) are kept in {out}/checkpoints; {resume} to continue"
