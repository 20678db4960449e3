"""``embodied-gym perception frames``: camera frames with ground-truth object poses to train or measure
a pose estimator on (:func:`embodied_gym.perception.data.make_frames`)."""

from __future__ import annotations

from embodied_gym import configs

GROUP = "perception"
NAME = "frames"
HELP = (
    "film scripted-expert episodes with their objects' true poses (the sim's renders, randomised looks, or "
    "VisAligner's frames): a pose estimator's training data"
)


def add_arguments(p) -> None:
    from embodied_gym.perception.data import PoseFramesConfig

    configs.add_arguments(p, PoseFramesConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.perception.data import PoseFramesConfig, load_frames
    from embodied_gym.visaligner.pose_frames import make_frames

    cfg = configs.from_args(PoseFramesConfig, args, args.config)
    files = make_frames(cfg)
    frames = load_frames(cfg.out, cfg.estimator_config())
    print(
        f"{len(files)} episodes, {len(frames)} frames ({cfg.look}) in {cfg.out} (train on them: embodied-gym "
        f"perception train --data {cfg.out} --out DIR)"
    )
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    return f"the episodes finished so far are kept in {out}; rerun the same command to continue"
