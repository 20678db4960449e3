"""How far a pose estimator's reading of the stand-in's reset frame is from each object's true pose, per object:
the one estimate the demo's policies read (``pose_update: at_reset``), against what each task tolerates
(``benchmarks/expert_tolerance.py``). Also the error left once the estimate's mean offset over these resets is
subtracted (a constant bias of the camera, which the demo's ``perception_offset`` stage fits from the robot's
demonstrations): what a perfect bias correction would leave, the estimator's spread. And, as the floor of
not looking, the error of always answering the middle of the object's start range.

For each reset seed the stand-in robot (``-Real-`` id, the world ``--robot-config`` names) renders its camera,
the estimator reads it, and the estimate is compared with the stand-in's reported poses (read here for
measurement only): horizontal error (cm) per object and, for objects with a yaw output, the yaw error (deg,
modulo the object's visual symmetry).

    MUJOCO_GL=egl .venv/bin/python benchmarks/reset_perception.py --estimator runs/quick/perception/train/model \\
        --episodes 100 [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np


def reset_errors(estimator: str, episodes: int, seed: int, robot_config: str | None) -> dict[str, dict]:
    """Per object: the horizontal (cm) and, where estimated, yaw (deg) error of every reset's estimate."""
    import embodied_gym
    from embodied_gym.factory import make_env
    from embodied_gym.perception.configuration import CONFIG_NAME, PoseEstimatorConfig
    from embodied_gym.perception.pose_entry import KEY
    from embodied_gym.sim.tasks import quat_yaw

    config = PoseEstimatorConfig.from_json(Path(estimator) / CONFIG_NAME)
    env = make_env(
        embodied_gym.env_id(config.task, real=True),
        robot_config=robot_config,
        pose_estimator=estimator,
        pose_update="at_reset",
    )
    names = config.output_names
    errors: dict[str, dict[str, list[float]]] = {
        o: {"xy_cm": [], "yaw_deg": [], "range_centre_xy_cm": []} for o in config.objects
    }
    offsets: dict[str, list[tuple[float, float]]] = {o: [] for o in config.objects}
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        est = np.asarray(obs[KEY], dtype=np.float64)
        for o in config.objects:
            true = np.asarray(info["object_poses"][o], dtype=np.float64)
            dx, dy = est[names.index(f"{o}.x")] - true[0], est[names.index(f"{o}.y")] - true[1]
            errors[o]["xy_cm"].append(100 * math.hypot(dx, dy))
            offsets[o].append((100 * dx, 100 * dy))
            cx, cy = (config.centre[names.index(f"{o}.{a}")] for a in "xy")
            errors[o]["range_centre_xy_cm"].append(100 * math.hypot(cx - true[0], cy - true[1]))
            k = config.yaw_symmetry[o]
            if k:
                angle = math.atan2(est[names.index(f"{o}.sin_yaw")], est[names.index(f"{o}.cos_yaw")])
                diff = (angle - k * quat_yaw(true[3:7]) + math.pi) % (2 * math.pi) - math.pi
                errors[o]["yaw_deg"].append(math.degrees(abs(diff)) / k)
    env.close()
    for o, d in offsets.items():
        d_cm = np.asarray(d)
        errors[o]["unbiased_xy_cm"] = list(np.hypot(*(d_cm - d_cm.mean(axis=0)).T))
    return {o: {k: v for k, v in e.items() if v} for o, e in errors.items()}


def describe(errors: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for o, e in errors.items():
        out[o] = {
            f"{k}_{stat}": float(f(np.asarray(v)))
            for k, v in e.items()
            for stat, f in (("median", np.median), ("p90", lambda a: np.percentile(a, 90)), ("mean", np.mean))
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--estimator", required=True, help="a pose estimator folder (a demo's perception/train/model)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=100_000, help="first reset seed (the demo's evaluation seeds)")
    p.add_argument("--robot-config", help="a stand-in world config (default: the shipped world)")
    p.add_argument("--out", help="also write the per-object figures here (JSON)")
    args = p.parse_args(argv)
    stats = describe(reset_errors(args.estimator, args.episodes, args.seed, args.robot_config))
    world = Path(args.robot_config).stem if args.robot_config else "default world"
    print(
        f"| object ({world}, {args.episodes} resets) | xy cm: median / p90 / mean | mean offset removed: median / "
        "p90 / mean | yaw deg: median / p90 | the start range's middle: mean |"
    )
    print("|---|---|---|---|---|")
    for o, s in stats.items():
        yaw = f"{s['yaw_deg_median']:.1f} / {s['yaw_deg_p90']:.1f}" if "yaw_deg_median" in s else "-"
        xy = " / ".join(f"{s[f'xy_cm_{k}']:.2f}" for k in ("median", "p90", "mean"))
        unbiased = " / ".join(f"{s[f'unbiased_xy_cm_{k}']:.2f}" for k in ("median", "p90", "mean"))
        print(f"| {o} | {xy} | {unbiased} | {yaw} | {s['range_centre_xy_cm_mean']:.2f} |")
    if args.out:
        from embodied_gym.atomic import write_json

        write_json(Path(args.out), {"estimator": args.estimator, "robot_config": args.robot_config, "objects": stats})
    return 0


if __name__ == "__main__":
    sys.exit(main())
