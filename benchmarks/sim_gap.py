"""Where an aligned-sim policy's gap between its calibrated sim and the stand-in robot comes from: the grip, which
calibration from joint trajectories does not see (the finger gain, the pads' and the objects' friction, the
objects' mass), the rest of the hidden physics, or what no simulator parameter holds.

The demo run's ``act_aligned`` policy is evaluated greedily on the same seeds (from 100000, as the demo evaluates)
in these places: its calibrated sim as calibrated; the same sim reading the sim's true object poses at the reset
frame instead of the estimate (what its demonstrations stored: the perception share of the gap); the same sim
with one group of the stand-in world's hidden parameters put in (the grip; the arm joints' gains, damping,
friction and armature; the backlash); the sim with every hidden parameter of the world a ``PhysicsParams``
can hold (arm gains, damping, friction, armature, the grip, the delay and the backlash; what is left is the
world's velocity-dependent friction, its sensor noise and its camera), with the estimate and with the true
poses; the stand-in world with the sim's camera look instead of its own (its dynamics, the sim's camera: the
policy reads the estimator it reads in the sim), with and without its joint-sensor noise; and the stand-in robot
itself, reading the run's bias-corrected estimator as the demo evaluates it. In
the sim rows the policy reads the estimator the demo reads there: the sim-corrected copy of stage
``perception_sim_offset`` when the run has one, else the estimator its data was recorded with.

Beside the rates, the estimate's signed error at the reset frame per object (estimate minus truth, mean and
spread over the same seeds): in the calibrated sim with the estimator the data was recorded with, with the
sim-corrected one (when the run has it) and on the stand-in with the robot-corrected one. A constant error
that one place's correction removes and another's keeps shows as a mean far from zero. The world's parameters
are read from its config file here, for this measurement only: nothing the loop runs reads them. Paired tests (exact McNemar) between the rows.

    MUJOCO_GL=egl .venv/bin/python benchmarks/sim_gap.py --run runs/PenInCup_sn --task PenInCup --episodes 50 \\
        [--robot-config embodied_gym/robots/stand_in_world2.yaml] [--out FILE.json]

A row whose JSON is already in ``--out``'s folder is read back, not rerun (``--rows`` picks rows by short name).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

#: the world's hidden parameters in groups that calibration treats alike: the grip (which joint trajectories do not
#: show, so calibration keeps it nominal), the arm joints' dynamics and the joints' backlash
GROUPS = {
    "grip": ("gripper_kp", "pad_friction", "object_friction", "object_mass_scale"),
    "arm": ("kp", "damping", "frictionloss", "armature"),
    "backlash": ("backlash",),
}

#: short name (also the row's JSON file) -> the place, as printed
ROWS = {
    "sim": "calibrated sim",
    "sim_true_poses": "calibrated sim, true poses at reset",
    "sim_grip": "calibrated sim, the world's grip",
    "sim_arm": "calibrated sim, the world's arm gains, damping, friction and armature",
    "sim_backlash": "calibrated sim, the world's backlash",
    "sim_world": "sim, every hidden parameter of the world",
    "sim_world_true_poses": "sim, every hidden parameter of the world, true poses at reset",
    "stand_in_sim_camera": "stand-in, the sim's camera look",
    "stand_in_sim_camera_quiet": "stand-in, the sim's camera look, no joint-sensor noise",
    "stand_in": "stand-in",
}


def sim_look() -> dict:
    """The sim's plain look (``SceneLook()``'s defaults) in a stand-in config's ``look`` section: the stand-in's
    camera rendering as the sim's does (no photographs, tint, blur, image noise or camera offset)."""
    from embodied_gym.sim.scene import SceneLook

    plain = SceneLook()
    return {"shadows": plain.shadows, "light_diffuse": list(plain.light_diffuse), "ambient": list(plain.ambient)}


def run_outputs(run: Path, task: str) -> dict[str, dict]:
    """Every finished stage's outputs of one task's demo run, by stage name: from its ``summary.json`` (which
    also names the stages a ``--reuse`` run read from another run's folder), else from its stage folders."""
    from embodied_gym.demo.stages import finished_outputs

    summary = run / "summary.json"
    if summary.exists():
        stages = json.loads(summary.read_text())["tasks"][task]["stages"]
        return {name: st["outputs"] for name, st in stages.items() if "outputs" in st}
    return finished_outputs(run)


def world_physics(robot_config: str | None):
    """The stand-in world's hidden physics as far as ``PhysicsParams`` holds it, and its grip parameters
    alone; for this measurement (and ``generate_physics.py``'s ``world`` variant) only."""
    from embodied_gym.robots.stand_in import load_settings
    from embodied_gym.sim.physics import PhysicsParams

    settings = load_settings(robot_config)
    effects = {k: settings["effects"][k] for k in ("latency_steps", "backlash") if k in settings["effects"]}
    physics = PhysicsParams.from_dict(effects, base=settings["physics"])
    grip: dict[str, Any] = {k: float(getattr(physics, k)) for k in GROUPS["grip"]}
    return physics, grip


def world_variant(robot_config: str | None, folder: Path, name: str, quiet: bool) -> str:
    """A copy of the stand-in world's config, written to ``folder``, whose camera renders the sim's look
    (:func:`sim_look`) and, with ``quiet``, whose joint readings carry no noise: the stand-in's dynamics
    (physics, delay, backlash, velocity-dependent friction) with the sim's camera, for this measurement only."""
    import yaml

    from embodied_gym.robots.stand_in import DEFAULT_CONFIG

    source = Path(robot_config) if robot_config else DEFAULT_CONFIG
    settings = yaml.safe_load(source.read_text())
    settings["look"] = sim_look()
    if quiet:
        for key in ("joint_position_noise", "joint_velocity_noise"):
            settings.setdefault("effects", {}).pop(key, None)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def evaluate_row(name: str, folder: Path, args, env_id: str, **kwargs) -> list[bool]:
    """The policy's success per seed in ``env_id`` (``kwargs``: evaluate_policy's env options)."""
    from embodied_gym.policies.evaluate import evaluate_policy

    path = folder / f"{name}.json"
    if not path.exists():
        print(f"[gap] {name}: {args.episodes} episodes", flush=True)
        r = evaluate_policy(
            str(args.policy),
            env_id,
            args.episodes,
            seed=100_000,
            pose_update="at_reset",
            workers=args.workers,
            progress=False,
            **kwargs,
        )
        path.write_text(json.dumps({"successes": [bool(e.success) for e in r.per_episode]}))
    return json.loads(path.read_text())["successes"]


def reset_estimate_error(folder: Path, name: str, args, env_id: str, estimator: str, **kwargs) -> dict:
    """Estimate minus truth (cm) of each object's x and y at the reset frame over the evaluation seeds:
    mean, standard deviation and the mean horizontal distance, per object. ``info["object_poses"]`` is
    read here for the measurement only."""
    import numpy as np

    from embodied_gym.factory import make_env
    from embodied_gym.perception.pose_entry import KEY, true_pose_entry

    path = folder / f"{name}_reset_error.json"
    if not path.exists():
        env = make_env(env_id, pose_estimator=estimator, pose_update="at_reset", **kwargs)
        config = env.get_wrapper_attr("estimator").config
        names = config.output_names
        rows = []
        try:
            for i in range(args.episodes):
                obs, info = env.reset(seed=100_000 + i)
                est, true = np.asarray(obs[KEY], np.float64), true_pose_entry(config, info["object_poses"])
                rows.append(
                    [
                        100.0 * (est[names.index(f"{o}.{a}")] - true[names.index(f"{o}.{a}")])
                        for o in config.objects
                        for a in "xy"
                    ]
                )
        finally:
            env.close()
        err = np.asarray(rows)
        out = {}
        for k, o in enumerate(config.objects):
            xy = err[:, 2 * k : 2 * k + 2]
            out[o] = {
                "mean_xy_cm": xy.mean(0).round(3).tolist(),
                "std_xy_cm": xy.std(0).round(3).tolist(),
                "mean_distance_cm": round(float(np.hypot(xy[:, 0], xy[:, 1]).mean()), 3),
            }
        path.write_text(json.dumps(out))
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a finished demo run of one task")
    p.add_argument("--task", required=True)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--robot-config", default=None, help="the stand-in world (default: the shipped one)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument(
        "--rows",
        nargs="+",
        default=list(ROWS),
        choices=list(ROWS),
        help="which places to evaluate (default: all): " + ", ".join(f"{k} ({v})" for k, v in ROWS.items()),
    )
    p.add_argument("--out", type=Path, default=None, help="JSON of the result (default: RUN/sim_gap/WORLD.json)")
    args = p.parse_args(argv)

    from embodied_gym.demo.stages import sim_policy_estimator
    from embodied_gym.policies.evaluate import pairwise_comparisons
    from embodied_gym.sim.physics import resolve_physics

    world = Path(args.robot_config).stem if args.robot_config else "default"
    out = args.out or args.run / "sim_gap" / f"{world}.json"
    folder = out.parent / out.stem
    folder.mkdir(parents=True, exist_ok=True)
    outputs = run_outputs(args.run, args.task)
    args.policy = outputs["act_aligned"]["policy"]
    calibrated = resolve_physics(outputs["calibrate"]["result"])
    world_params, grip = world_physics(args.robot_config)

    def with_world(group: str):
        return dataclasses.replace(calibrated, **{k: getattr(world_params, k) for k in GROUPS[group]})

    sim_id, real_id = f"EmbodieDreamer-{args.task}-v0", f"EmbodieDreamer-{args.task}-Real-v0"
    sim_estimator = outputs["perception"]["model"]
    sim_corrected = outputs.get("perception_sim_offset", {}).get("model")
    in_sim = {"pose_estimator": sim_corrected} if sim_corrected else {}
    true_poses = {"env_kwargs": {"pose_source": "ground_truth"}, "pose_estimator": sim_estimator}
    robot_estimator = sim_policy_estimator(outputs)
    places = {
        "sim": dict(env_id=sim_id, physics=calibrated, **in_sim),
        "sim_true_poses": dict(env_id=sim_id, physics=calibrated, **true_poses),
        "sim_grip": dict(env_id=sim_id, physics=with_world("grip"), **in_sim),
        "sim_arm": dict(env_id=sim_id, physics=with_world("arm"), **in_sim),
        "sim_backlash": dict(env_id=sim_id, physics=with_world("backlash"), **in_sim),
        "sim_world": dict(env_id=sim_id, physics=world_params, **in_sim),
        "sim_world_true_poses": dict(env_id=sim_id, physics=world_params, **true_poses),
        "stand_in": dict(env_id=real_id, robot_config=args.robot_config, pose_estimator=robot_estimator),
    }
    for name, quiet in (("stand_in_sim_camera", False), ("stand_in_sim_camera_quiet", True)):
        if name in args.rows:  # the sim's look: the policy reads the estimate the sim reads, corrected as there
            config = world_variant(args.robot_config, folder, name, quiet)
            places[name] = dict(env_id=real_id, robot_config=config, pose_estimator=sim_corrected or sim_estimator)
    rows = {ROWS[k]: evaluate_row(k, folder, args, **places[k]) for k in args.rows}
    errors = {
        "calibrated sim (the estimator the data was recorded with)": reset_estimate_error(
            folder, "sim", args, sim_id, sim_estimator, physics=calibrated
        ),
    }
    if sim_corrected:
        errors["calibrated sim (the sim-corrected estimator)"] = reset_estimate_error(
            folder, "sim_corrected", args, sim_id, sim_corrected, physics=calibrated
        )
    errors["stand-in (the robot-corrected estimator)"] = reset_estimate_error(
        folder, "stand_in", args, real_id, robot_estimator, robot_config=args.robot_config
    )
    if "stand_in_sim_camera" in places:
        errors["stand-in, the sim's camera look (the sim's estimator)"] = reset_estimate_error(
            folder,
            "stand_in_sim_camera",
            args,
            real_id,
            sim_corrected or sim_estimator,
            robot_config=places["stand_in_sim_camera"]["robot_config"],
        )
    names = list(rows)
    print(f"\n{args.task}, {world} world, act_aligned of {args.run}, {args.episodes} paired seeds; grip put in: {grip}")
    print("| where | success |\n|---|---|")
    for n in names:
        print(f"| {n} | {100 * sum(rows[n]) / len(rows[n]):.0f} % |")
    print("\n| where | object | estimate - truth at reset, mean x, y (cm) | std x, y (cm) | mean distance (cm) |")
    print("|---|---|---|---|---|")
    for where, objs in errors.items():
        for o, e in objs.items():
            mx, my = e["mean_xy_cm"]
            sx, sy = e["std_xy_cm"]
            print(f"| {where} | {o} | {mx:+.2f}, {my:+.2f} | {sx:.2f}, {sy:.2f} | {e['mean_distance_cm']:.2f} |")
    print("\n| pair | only first / only second | exact McNemar p |\n|---|---|---|")
    tests = {}
    for (a, b), c in pairwise_comparisons(rows).items():
        tests[f"{a} vs {b}"] = c.to_json()
        print(f"| {a} vs {b} | {c.only_a} / {c.only_b} | {c.p_value:.2g} |")
    out.write_text(
        json.dumps(
            {"task": args.task, "world": world, "grip": grip, "rows": rows, "tests": tests, "reset_error": errors},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
