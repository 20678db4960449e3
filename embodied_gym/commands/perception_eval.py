"""``embodied-gym perception eval``: a pose estimator's errors on frame folders
(:func:`embodied_gym.perception.evaluate.pose_errors`), e.g. frames of the stand-in robot's camera:
the visual gap the estimator meets there."""

from __future__ import annotations

NAME = "eval"
GROUP = "perception"
HELP = "measure a pose estimator on frame folders (e.g. the stand-in's camera: perception frames --env ...-Real-v0)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="the estimator folder (perception train's OUT/model)")
    p.add_argument(
        "--data",
        nargs="+",
        required=True,
        metavar="DIR",
        help="frame folders to measure on (perception frames' output)",
    )
    p.add_argument("--out", metavar="FILE", help="also write the errors here as JSON")


def run(args) -> int:
    from embodied_gym.atomic import write_json
    from embodied_gym.perception.evaluate import pose_errors
    from embodied_gym.perception.modeling import PoseEstimator

    errors = pose_errors(PoseEstimator.from_pretrained(args.model), args.data)
    for obj, e in errors.items():
        if isinstance(e, dict):
            extra = "".join(
                f", {k.split('_')[0]} {v:.2f} {'cm' if k == 'z_cm' else 'deg'}"
                for k, v in e.items()
                if k in ("z_cm", "yaw_deg")
            )
            print(
                f"{obj}: horizontal {e['xy_cm']:.2f} cm (median {e['xy_cm_median']:.2f}, p90 {e['xy_cm_p90']:.2f})"
                f"{extra}"
            )
    print(f"over {errors['frames']} frames of {' '.join(args.data)}")
    if args.out:
        write_json(args.out, {"model": args.model, "data": args.data, "errors": errors})
    return 0


def interrupted(args) -> str:
    return "nothing was written; rerun the same command"
