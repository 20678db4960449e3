"""The ``embodied-gym`` commands, one module each, in the order of the pipeline.

    record (or import) -> replay -> calibrate -> visaligner train -> visaligner render / generate
           -> perception frames -> perception train -> perception offset (perception eval)
           -> train act -> train tpo (train residual) -> eval -> sim2real   (and: experts, demo: the whole loop)

Each module is a thin command line over one library function and declares ``NAME`` (and
``GROUP`` for two-word commands such as ``train act``), ``HELP``, ``add_arguments(parser)``,
``run(args) -> exit status`` and ``interrupted(args)``: what a Ctrl-C kept and how to go on.
A command that drives a robot sets ``LEROBOT_DEVICES = ("robot", ...)``: the CLI then hands it LeRobot's
device flags (``--robot.type=...``, ``--teleop.type=...``) as ``args.lerobot_devices``, which
:mod:`embodied_gym.commands.devices` parses. ``add_arguments`` runs only when its command is used (:mod:`embodied_gym.cli`), so it, not the
module, imports the command's config: ``embodied-gym --help`` imports none of them (no torch).
A command whose flags' help depends on its own arguments (``demo``: the chosen profile's values)
sets ``ARGUMENTS_READ_ARGV = True`` and takes ``add_arguments(parser, argv=...)``.
"""

from embodied_gym.commands import (
    calibrate,
    demo,
    evaluate,
    experts,
    generate,
    import_dataset,
    perception_eval,
    perception_frames,
    perception_offset,
    perception_train,
    record,
    replay,
    sim2real,
    train_act,
    train_residual,
    train_tpo,
    visaligner_render,
    visaligner_train,
)

#: Every command, in pipeline order (the order of ``embodied-gym --help``).
COMMANDS = (
    record,
    import_dataset,
    replay,
    calibrate,
    visaligner_train,
    visaligner_render,
    generate,
    perception_frames,
    perception_train,
    perception_offset,
    perception_eval,
    train_act,
    train_tpo,
    train_residual,
    evaluate,
    sim2real,
    experts,
    demo,
)

#: Help of the two-word command groups.
GROUPS = {
    "visaligner": "VisAligner: sim renders -> the real camera's video (train, render)",
    "perception": "the pose estimator the policies read: training frames (frames), training (train), its "
    "bias on the robot's camera (offset), its errors on a camera's frames (eval)",
    "train": "train a policy (act: imitation with LeRobot's ACT; tpo: preference RL in the aligned sim; "
    "residual: stable-baselines3 RL of a correction to a frozen ACT)",
}

__all__ = ["COMMANDS", "GROUPS"]
