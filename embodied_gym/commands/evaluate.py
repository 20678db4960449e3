"""``embodied-gym eval``: success of a policy with a Wilson interval (:func:`embodied_gym.policies.evaluate.evaluate_policy`)."""

from __future__ import annotations

import json
from typing import Any

NAME = "eval"
HELP = "evaluate a policy: success with a Wilson 95 %% interval, returns, lengths (sim, stand-in or any LeRobot robot)"
#: LeRobot's robot flags, as lerobot-record takes them: --robot.type=... --robot.port=...
LEROBOT_DEVICES = ("robot",)


def add_arguments(p) -> None:
    p.add_argument("--policy", required=True, help="'expert', an ACT folder, or a stable-baselines3 .zip")
    p.add_argument("--env", required=True, help="sim or Real env id")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument("--visaligner", help="VisAligner model folder: wrap the sim env's cameras")
    p.add_argument("--physics", help="physics JSON for sim ids (e.g. a calibration result)")
    p.add_argument(
        "--robot-config",
        help="stand-in robot config for -Real- ids; any LeRobot robot instead: --robot.type=NAME --robot.FIELD=VALUE",
    )
    p.add_argument(
        "--joint-map", nargs="*", metavar="JOINT=MOTOR", help="-Real- ids: our joint -> the robot's motor name"
    )
    p.add_argument(
        "--camera-map", nargs="*", metavar="CAMERA=KEY", help="-Real- ids: our camera -> the robot's camera key"
    )
    p.add_argument(
        "--dry-run",
        metavar="DATASET",
        help="-Real- ids: first replay episode 0 of this dataset (an embodied-gym dataset, e.g. `embodied-gym "
        "import`'s) on the robot at --dry-run-speed, then evaluate: a check of the joint map, units and limits",
    )
    p.add_argument(
        "--dry-run-speed", type=float, default=0.25, help="fraction of the recorded rate the dry run plays at"
    )
    p.add_argument(
        "--no-confirm",
        action="store_true",
        help="on a robot that cannot set its own table (not the stand-in): start each episode without asking the "
        "operator to set the objects and press Enter",
    )
    p.add_argument("--out", help="JSON file: success_rate, ci95, episodes, per-episode results")
    p.add_argument("--videos", help="folder for videos of the first 3 episodes")
    p.add_argument("--temporal-ensemble", type=float, metavar="COEFF", help="ACT: temporal ensembling at inference")
    p.add_argument(
        "--control-mode",
        help="the control mode the policy acts in (default: the one it was trained with, from its checkpoint)",
    )
    p.add_argument("--cameras", nargs="+", help="cameras to render (default: the policy's; must include them)")
    p.add_argument(
        "--image-size",
        nargs=2,
        type=int,
        metavar=("H", "W"),
        help="render size (default: the policy's training size; frames are resized to the policy's input)",
    )
    p.add_argument(
        "--pose-estimator",
        metavar="DIR",
        help="ACT on estimated object poses: the pose estimator folder (default: the one its training "
        "data was recorded with, from its embodied_gym_policy.json)",
    )
    p.add_argument(
        "--pose-update",
        choices=("every_frame", "at_reset"),
        help="ACT on estimated object poses: estimate every camera frame, or the reset frame only and hold "
        "it for the episode (default: as its training data was recorded)",
    )
    p.add_argument(
        "--trust-policy-file",
        action="store_true",
        help="load with stable-baselines3's/LeRobot's own loader, which can run code from the file "
        "(default: read it without unpickling or importing; see docs/policies.md)",
    )
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch CPU threads (default: torch's, one per core). 1 is fastest for a policy on a pose "
        "estimate on a busy 2-core machine (the small model gains nothing from a second thread that the "
        "stand-in's simulator needs)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes that run the episodes, one torch thread each (the per-episode results do not "
        "change; default 1: this process)",
    )
    p.add_argument(
        "--compare",
        metavar="JSON",
        help="another `eval --out` file on the same seeds (another policy, or this one with another "
        "--pose-estimator): print the exact paired McNemar test between the two",
    )
    p.add_argument("--json", action="store_true", help="also print the summary as JSON")


def _read_comparison(path: str) -> dict[int, bool]:
    """``{seed: success}`` of an ``eval --out`` file, checked before any episode runs."""
    from pathlib import Path

    from embodied_gym.policies.evaluate import successes_by_seed

    try:
        data = json.loads(Path(path).read_text())
        return successes_by_seed(data)
    except FileNotFoundError:
        raise ValueError(f"--compare {path}: no such file (an `embodied-gym eval --out` JSON)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(
            f"--compare {path}: not an `embodied-gym eval --out` JSON with per-episode seeds and "
            f"successes ({type(e).__name__}: {e})"
        ) from None


def run(args) -> int:
    from embodied_gym.policies.evaluate import evaluate_policy, paired_comparison, successes_by_seed

    other = _read_comparison(args.compare) if args.compare else None
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)

    from embodied_gym.commands.devices import ask_operator, is_stand_in, name_map, parse_devices

    robot = parse_devices(args.lerobot_devices)["robot"] if args.lerobot_devices else None
    if robot is not None and args.robot_config:
        raise ValueError("give the robot once: --robot-config FILE (the stand-in) or --robot.type=NAME, not both")
    env_extra: dict[str, Any] = {}
    for flag, key, items in (
        ("--joint-map", "joint_map", args.joint_map),
        ("--camera-map", "camera_map", args.camera_map),
    ):
        if items:
            env_extra[key] = name_map(flag, items)
    if robot is not None and not is_stand_in(robot):
        if args.workers != 1:
            raise ValueError(f"one {robot.type} robot runs one episode at a time: drop --workers")
        if args.policy == "expert":
            raise ValueError(f"the scripted expert reads object poses a {robot.type} robot does not give")
        env_extra["realtime"] = True  # hardware keeps time
        if not args.no_confirm:  # the operator sets the table before each episode (Enter; q stops)
            env_extra["reset_fn"] = ask_operator
    if args.dry_run:
        _dry_run(args, robot, env_extra)
    r = evaluate_policy(
        args.policy,
        args.env,
        args.episodes,
        args.seed,
        visaligner=args.visaligner,
        physics=args.physics,
        robot_config=robot if robot is not None else args.robot_config,
        env_kwargs=env_extra,
        out=args.out,
        videos=args.videos,
        temporal_ensemble_coeff=args.temporal_ensemble,
        control_mode=args.control_mode,
        cameras=tuple(args.cameras) if args.cameras else None,
        image_size=tuple(args.image_size) if args.image_size else None,
        trust_policy_file=args.trust_policy_file,
        pose_estimator=args.pose_estimator,
        pose_update=args.pose_update,
        workers=args.workers,
    )
    print(r.summary())
    if args.out:
        print(f"per-episode results: {args.out}")
    if other is not None:
        c = paired_comparison(successes_by_seed(r), other)
        print(
            f"paired with {args.compare} on {c.n} common seeds: {c.rate_a:.0%} vs {c.rate_b:.0%}, only this / only "
            f"that {c.only_a} / {c.only_b}, exact McNemar p = {c.p_value:.3g}"
        )
    if args.json:
        print(json.dumps({k: v for k, v in r.to_json().items() if k != "per_episode"}))
    return 0


def _dry_run(args, robot, env_extra: dict) -> None:
    """Replay a recorded episode on the robot, slowly, before any policy moves it (then disconnect)."""
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.data.replay import replay_on_robot
    from embodied_gym.factory import make_env

    if "-Real-" not in args.env:
        raise ValueError(f"--dry-run replays on a robot; {args.env} is a sim id")
    episode = open_dataset(args.dry_run).episodes([0])[0]
    env = make_env(
        args.env,
        robot_config=robot if robot is not None else args.robot_config,
        obs_type="state",
        **{"realtime": True, **env_extra},
    )
    try:
        steps = replay_on_robot(env, episode.action, speed=args.dry_run_speed, seed=args.seed)
    finally:
        env.close()
    print(f"dry run: episode 0 of {args.dry_run} replayed at {args.dry_run_speed:g}x ({steps} control steps)")


def interrupted(args) -> str:
    return "nothing was written (results are written at the end); rerun the same command"
