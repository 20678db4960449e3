"""``embodied-gym perception offset``: correct a pose estimator's constant bias on a camera: the robot's,
measured on the robot's own demonstrations
(:func:`embodied_gym.perception.robot_offset.fit_estimator_offset`), or the sim's own renders, measured against
the sim's true poses (``--sim``, :func:`embodied_gym.perception.sim_offset.fit_sim_offset`)."""

from __future__ import annotations

GROUP = "perception"
NAME = "offset"
HELP = (
    "measure the estimator's bias on the robot's camera from its recorded demonstrations (where the gripper "
    "grasped the object and released it, from the joint encoders), or with --sim on the sim's renders against "
    "its true poses, and write a corrected copy for that camera"
)


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="the estimator (the robot demos were recorded with)")
    p.add_argument(
        "--robot-dataset",
        metavar="DIR",
        help="demonstrations recorded on the robot with --pose-estimator MODEL",
    )
    p.add_argument(
        "--sim-dataset",
        metavar="DIR",
        help="demonstrations of the same expert in the sim (their true start poses give the grasp and release offsets)",
    )
    p.add_argument(
        "--sim",
        metavar="ENV",
        help="instead of the robot's bias: the bias on this sim env's renders (e.g. EmbodieDreamer-PickCup-v0), "
        "measured against its true poses at reset frames; the copy is for policies that run in the sim",
    )
    p.add_argument("--episodes", type=int, default=None, help="--sim: reset frames measured (default 50)")
    p.add_argument("--physics", default=None, metavar="JSON", help="--sim: calibrated physics (default nominal)")
    p.add_argument("--out", required=True, metavar="DIR", help="the corrected estimator folder")


def run(args) -> int:
    if args.sim:
        if args.robot_dataset or args.sim_dataset:
            raise SystemExit("--sim measures in the sim: drop --robot-dataset and --sim-dataset")
        return _run_sim(args)
    if not (args.robot_dataset and args.sim_dataset):
        raise SystemExit(
            "the robot's bias needs --robot-dataset and --sim-dataset (or --sim ENV for the sim's own bias)"
        )
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


def _run_sim(args) -> int:
    from embodied_gym.perception.robot_offset import corrected_estimator
    from embodied_gym.perception.sim_offset import DEFAULT_EPISODES, fit_sim_offset

    fit = fit_sim_offset(args.model, args.sim, episodes=args.episodes or DEFAULT_EPISODES, physics=args.physics)
    corrected_estimator(args.model, fit, args.out)
    for obj, offset in fit.objects.items():
        dx, dy = (100 * v for v in offset.correction_xy)
        sx, sy = (100 * v for v in offset.spread_xy)
        print(
            f"{obj}: correction ({dx:+.2f}, {dy:+.2f}) cm in (x, y) from {fit.episodes} reset frames of {args.sim} "
            f"(spread {sx:.2f} / {sy:.2f} cm)"
        )
    print(f"corrected estimator: {args.out} (use it in the sim: --pose-estimator {args.out})")
    return 0


def interrupted(args) -> str:
    return "nothing was written; rerun the same command"
