"""``embodied-gym calibrate``: calibrate the simulator's physics (:func:`embodied_gym.physaligner.calibrate.calibrate`)."""

from __future__ import annotations

import os

from embodied_gym import configs

NAME = "calibrate"
HELP = "calibrate the simulator's physics from a recorded dataset (PhysAligner, mujoco.sysid, CMA-ES, SA)"


def add_arguments(p) -> None:
    from embodied_gym.physaligner.calibrate import CalibrationConfig

    p.add_argument("--dataset", required=True, help="recorded episodes (e.g. `record --env ...-Real-v0`)")
    p.add_argument("--task", help="task name (default: from the recording)")
    p.add_argument("--out", required=True, help="result JSON (usable as physics=... and --physics)")
    p.add_argument(
        "--free",
        nargs="*",
        help="parameters to calibrate, or 'all' (default: kp, damping, frictionloss "
        "and backlash of every joint the recording moves); the rest stay at the base values",
    )
    configs.add_arguments(p, CalibrationConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate
    from embodied_gym.physaligner.space import ParameterSpace

    cfg = configs.from_args(CalibrationConfig, args, args.config)
    task = args.task or open_dataset(args.dataset).require_task()
    space = ParameterSpace.with_free(args.free) if args.free else None  # None: the default free set
    r = calibrate(args.dataset, task, args.out, space, cfg)
    b, a = r["held_out_errors"]["before"], r["held_out_errors"]["after"]
    print(
        f"{cfg.method}: held-out TCP translation {b['translation_error_m'] * 100:.2f} -> "
        f"{a['translation_error_m'] * 100:.2f} cm, rotation {b['rotation_error_rad']:.4f} -> "
        f"{a['rotation_error_rad']:.4f} rad, joint RMSE {b['joint_rmse_rad']:.4f} -> {a['joint_rmse_rad']:.4f} rad "
        f"in {r['wall_time_s']['total']:.0f} s; result: {args.out}, report: "
        f"{os.path.splitext(args.out)[0]}.report.md"
    )
    print(f"actuation delay: {r['latency_steps']['calibrated']} control step(s)")
    acc = r["acceptance"]
    print(("" if acc["improved"] else "NOTE: ") + acc["message"])
    if r["unconstrained"]:
        print(f"not constrained by this data: {', '.join(r['unconstrained'])} (see the report)")
    return 0


def interrupted(args) -> str:
    if getattr(args, "method", None) == "physaligner":
        return (
            f"PhysAligner's trust-region state (written after every iteration) is kept in {args.out}.work; "
            f"rerun the same command to continue from there"
        )
    return "nothing was written (this method keeps no checkpoint); rerun the same command"
