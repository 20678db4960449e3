"""``embodied-gym perception offset``: correct a pose estimator's constant bias on the robot's camera,
measured on the robot's own demonstrations
(:func:`embodied_gym.perception.robot_offset.fit_estimator_offset`)."""

from __future__ import annotations

GROUP = "perception"
NAME = "offset"
HELP = (
    "measure the estimator's bias on the robot's camera from its recorded demonstrations (where the gripper "
    "grasped the object and released it, from the joint encoders) and write a corrected copy for the robot"
)


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="the estimator the robot demos were recorded with")
    p.add_argument(
        "--robot-dataset",
        required=True,
        metavar="DIR",
        help="demonstrations recorded on the robot with --pose-estimator MODEL",
    )
    p.add_argument(
        "--sim-dataset",
        required=True,
        metavar="DIR",
        help="demonstrations of the same expert in the sim (their true start poses give the grasp and release offsets)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the corrected estimator folder (for the robot only)")


def run(args) -> int:
    import numpy as np

    from embodied_gym.perception.robot_offset import corrected_estimator, fit_estimator_offset

    fit = fit_estimator_offset(args.model, args.robot_dataset, args.sim_dataset)
    corrected_estimator(args.model, fit, args.out)
    for obj, offset in fit.objects.items():
        dx, dy = (100 * v for v in offset.correction_xy)
        spread = 100 * np.std(offset.bias_per_episode, axis=0)
        print(
            f"{obj} (at the {offset.event}): correction ({dx:+.2f}, {dy:+.2f}) cm in (x, y) from "
            f"{len(offset.episodes)} robot demonstrations (per-episode spread {spread[0]:.2f} / {spread[1]:.2f} cm; "
            f"outliers: {offset.outliers or 'none'})"
        )
    for obj, why in fit.uncorrected.items():
        print(f"{obj}: not corrected ({why})")
    print(f"corrected estimator: {args.out} (use it on the robot: --pose-estimator {args.out})")
    return 0


def interrupted(args) -> str:
    return "nothing was written; rerun the same command"
