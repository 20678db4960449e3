"""What kind of error the pose estimate makes at the reset frame on a stand-in camera: frame noise that averaging
frames would remove, a bias affine in the object's position that a richer correction would remove, or what is
left (an error that changes layout by layout).

For each seed (100000+, the evaluation seeds) the stand-in is reset and then held still for ``--frames`` - 1
control steps (the command: the joints as read), and the estimator reads every frame. Reported per object, in
cm: the estimate minus the true position at the reset frame (mean, std per axis, mean distance), the std of
the mean of the frames, the frame-to-frame std (mean over seeds), and the std left after a least-squares fit of
the error as an affine function of the true x, y (in-sample: an optimistic bound on what such a correction
could remove). The stand-in's true poses are read from ``info`` here, for this measurement only.

    MUJOCO_GL=egl .venv/bin/python benchmarks/estimate_scatter.py \\
        --estimator runs/bench/policies/world2/PickCup/seed0/perception_offset/model --task PickCup \\
        --robot-config embodied_gym/robots/stand_in_world2.yaml --episodes 100
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--estimator", required=True, help="a pose estimator folder (e.g. the run's robot-corrected one)")
    p.add_argument("--task", required=True)
    p.add_argument("--robot-config", default=None, help="the stand-in world (default: the shipped one)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--frames", type=int, default=5, help="frames read per seed, the arms held still")
    p.add_argument("--out", default=None, help="JSON of the result")
    args = p.parse_args(argv)

    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY, true_pose_entry

    env = make_env(
        f"EmbodieDreamer-{args.task}-Real-v0",
        robot_config=args.robot_config,
        pose_estimator=args.estimator,
        pose_update="every_frame",
    )
    config = env.get_wrapper_attr("estimator").config
    names = config.output_names
    truth, estimates = [], []
    try:
        for i in range(args.episodes):
            obs, info = env.reset(seed=100_000 + i)
            truth.append(true_pose_entry(config, info["object_poses"]))
            frames = [np.asarray(obs[KEY], np.float64)]
            hold = np.asarray(obs["joint_pos"], np.float32)
            for _ in range(args.frames - 1):
                obs, *_ = env.step(hold)
                frames.append(np.asarray(obs[KEY], np.float64))
            estimates.append(frames)
    finally:
        env.close()
    true, est = np.asarray(truth, np.float64), np.asarray(estimates)  # (n, d), (n, frames, d)
    result = {}
    for obj in config.objects:
        cols = [names.index(f"{obj}.x"), names.index(f"{obj}.y")]
        t = true[:, cols]
        err = 100.0 * (est[:, 0, cols] - t)
        err_mean = 100.0 * (est[:, :, cols].mean(1) - t)
        frame_std = 100.0 * est[:, :, cols].std(1).mean(0)
        design = np.c_[t, np.ones(len(t))]
        coef, *_ = np.linalg.lstsq(design, err, rcond=None)
        result[obj] = {
            "mean_xy_cm": err.mean(0).round(3).tolist(),
            "std_xy_cm": err.std(0).round(3).tolist(),
            "mean_distance_cm": round(float(np.hypot(*err.T).mean()), 3),
            "frames_mean_std_xy_cm": err_mean.std(0).round(3).tolist(),
            "frame_to_frame_std_xy_cm": frame_std.round(3).tolist(),
            "affine_residual_std_xy_cm": (err - design @ coef).std(0).round(3).tolist(),
        }
    print(f"{args.task}, {args.robot_config or 'default world'}, {args.episodes} seeds, {args.frames} frames each")
    print(
        "| object | mean x, y | std x, y | mean distance | std of the frames' mean | frame-to-frame std | std after an affine fit |"
    )
    print("|---|---|---|---|---|---|---|")
    for obj, r in result.items():
        f = "{:.2f} / {:.2f}".format
        print(
            f"| {obj} | {r['mean_xy_cm'][0]:+.2f}, {r['mean_xy_cm'][1]:+.2f} | {f(*r['std_xy_cm'])} | "
            f"{r['mean_distance_cm']:.2f} | {f(*r['frames_mean_std_xy_cm'])} | {f(*r['frame_to_frame_std_xy_cm'])} | "
            f"{f(*r['affine_residual_std_xy_cm'])} |"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
