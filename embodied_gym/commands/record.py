"""``embodied-gym record``: record episodes into a LeRobotDataset (:func:`embodied_gym.data.recording.record`;
the scripted expert's episodes are rolled out by ``--workers`` processes,
:func:`embodied_gym.data.parallel.record_expert_demos`)."""

from __future__ import annotations

NAME = "record"
HELP = (
    "record episodes of a policy (the scripted expert by default) or a teleoperator into a local LeRobotDataset "
    "v3.0, on the sim, the stand-in or any LeRobot robot"
)
#: LeRobot's device flags, as lerobot-record takes them: --robot.type=... --teleop.type=...
LEROBOT_DEVICES = ("robot", "teleop")


def add_arguments(p) -> None:
    from embodied_gym.data.features import AFTER_SUCCESS_STEPS
    from embodied_gym.data.writer import DEFAULT_CRF

    p.add_argument("--env", required=True, help="env id, e.g. EmbodieDreamer-PickCup-Real-v0")
    p.add_argument(
        "--policy",
        default="expert",
        help="'expert' (the scripted expert), an ACT folder or an SB3 .zip; a teleoperator instead: "
        "--teleop.type=NAME --teleop.FIELD=VALUE ... (any LeRobot teleoperator)",
    )
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--out", required=True, help="dataset folder")
    p.add_argument("--resume", action="store_true", help="add episodes to an existing dataset")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument(
        "--cameras",
        nargs="+",
        default=["cam_high"],
        help="cameras whose videos are stored (default cam_high); 'none' for no video",
    )
    p.add_argument("--image-size", nargs=2, type=int, default=[240, 320], metavar=("H", "W"))
    p.add_argument(
        "--robot-config",
        help="stand-in robot config (YAML/JSON) for -Real- ids; any LeRobot robot instead: --robot.type=NAME "
        "--robot.FIELD=VALUE ... as lerobot-record takes them (the stand-in: --robot.type=embodied_gym_stand_in)",
    )
    p.add_argument(
        "--joint-map",
        nargs="*",
        metavar="JOINT=MOTOR",
        help="-Real- ids: our joint (left_waist ... right_gripper) -> the robot's (and teleoperator's) motor name",
    )
    p.add_argument(
        "--camera-map", nargs="*", metavar="CAMERA=KEY", help="-Real- ids: our camera -> the robot's camera key"
    )
    p.add_argument("--realtime", action="store_true", help="hold 50 Hz on Real ids (default: as fast as possible)")
    p.add_argument(
        "--pose-estimator",
        metavar="DIR",
        help="pose estimator folder: its estimate from the camera is stored as "
        "observation.environment_state (the camera is rendered even with --cameras none)",
    )
    p.add_argument(
        "--pose-source",
        choices=("estimate", "ground_truth"),
        default="estimate",
        help="with --pose-estimator: store its estimate (default), or, on sim ids, the simulator's true "
        "object poses in the estimator's layout (exact labels; the trained policy still runs on "
        "the estimator, whose folder the dataset names; no camera is rendered for it)",
    )
    p.add_argument(
        "--pose-update",
        choices=("every_frame", "at_reset"),
        default="every_frame",
        help="with --pose-estimator: store every camera frame's poses, or the reset frame's held for the "
        "episode (the dataset names it; eval then holds the estimate the same way)",
    )
    p.add_argument("--vcodec", default="h264", help="video codec (h264, or libsvtav1 as on the Hub)")
    p.add_argument(
        "--crf",
        type=int,
        default=DEFAULT_CRF,
        help=f"video quality (lower keeps more; 0 lossless; default {DEFAULT_CRF}, LeRobot's is 30)",
    )
    p.add_argument(
        "--after-success-steps",
        type=int,
        default=AFTER_SUCCESS_STEPS,
        help=f"control steps recorded after the first success (0: stop at success; default "
        f"{AFTER_SUCCESS_STEPS}; the time limit still ends an episode)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="with --policy expert: processes that roll out episodes while this one writes them in "
        "seed order (the dataset is the same for any N; default: the CPU count, 1 with --realtime)",
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="with --policy expert: where the workers run: local processes, or Ray tasks on a local "
        "Ray instance (pip install 'embodied-gym[ray]')",
    )
    p.add_argument(
        "--trust-policy-file",
        action="store_true",
        help="load --policy with its library's own loader, which can run code from the file",
    )


def _devices(args):
    """The LeRobot robot and teleoperator configs of ``--robot.*`` / ``--teleop.*`` (None where not given)."""
    from embodied_gym.commands.devices import is_stand_in, parse_devices
    from embodied_gym.errors import UserInputError

    devices = parse_devices(args.lerobot_devices) if args.lerobot_devices else {"robot": None, "teleop": None}
    robot, teleop = devices["robot"], devices["teleop"]
    if robot is not None and args.robot_config:
        raise UserInputError("give the robot once: --robot-config FILE (the stand-in) or --robot.type=NAME, not both")
    if robot is not None and "-Real-" not in args.env:
        raise UserInputError(f"--robot.type drives a robot; {args.env} is a sim id (use the -Real- id)")
    if teleop is not None and args.policy != "expert":
        raise UserInputError(f"give one source of actions: --policy {args.policy} or --teleop.type, not both")
    if teleop is None and args.policy == "expert" and robot is not None and not is_stand_in(robot):
        raise UserInputError(
            f"the scripted expert reads object poses a {robot.type} robot does not give: record its demonstrations "
            f"with a teleoperator (--teleop.type=..., or LeRobot's lerobot-record; docs/your_robot.md)"
        )
    return robot, teleop


def run(args) -> int:
    from embodied_gym.commands.devices import is_stand_in, name_map
    from embodied_gym.errors import UserInputError

    robot, teleop = _devices(args)
    joint_map = name_map("--joint-map", args.joint_map)
    camera_map = name_map("--camera-map", args.camera_map)
    cameras = () if [c.lower() for c in args.cameras] == ["none"] else tuple(args.cameras)
    on_hardware = robot is not None and not is_stand_in(robot)
    env_kwargs = dict(
        robot_config=robot if robot is not None else args.robot_config,
        # hardware and people keep time: a real robot (or a teleoperated run) is recorded at the 50 Hz rate
        realtime=args.realtime or on_hardware or teleop is not None,
        obs_type="pixels_state" if cameras else "state",
        cameras=cameras,
        image_size=tuple(args.image_size),
        pose_estimator=args.pose_estimator,
    )
    if args.pose_source != "estimate":
        if not args.pose_estimator:
            raise UserInputError(
                f"--pose-source {args.pose_source} needs --pose-estimator DIR (the estimator the "
                f"policy will run on: it fixes the layout of the stored poses)"
            )
        env_kwargs["pose_source"] = args.pose_source
    if args.pose_update != "every_frame":
        if not args.pose_estimator:
            raise UserInputError(f"--pose-update {args.pose_update} needs --pose-estimator DIR")
        env_kwargs["pose_update"] = args.pose_update
    if joint_map:
        env_kwargs["joint_map"] = joint_map
    if camera_map:
        env_kwargs["camera_map"] = camera_map
    if args.workers is not None and args.workers < 1:
        raise UserInputError(f"--workers must be at least 1 (1 records in this process), got {args.workers}")
    if teleop is not None or on_hardware:  # one robot, one operator: this process
        if args.workers not in (None, 1) or args.backend != "local":
            raise UserInputError("a robot or a teleoperator is recorded in this process: drop --workers and --backend")
        args.workers = 1
    options = dict(
        seed=args.seed,
        resume=args.resume,
        vcodec=args.vcodec,
        after_success_steps=args.after_success_steps,
        crf=args.crf,
        cameras=cameras,
    )
    if teleop is not None:
        from lerobot.teleoperators.utils import make_teleoperator_from_config

        from embodied_gym.factory import make_env
        from embodied_gym.policies.agents import TeleopAgent
        from embodied_gym.recording.episodes import record

        env = make_env(args.env, **env_kwargs)
        device = make_teleoperator_from_config(teleop)
        try:
            device.connect()
            summary = record(env, TeleopAgent(device, joint_map), args.out, args.episodes, env_id=args.env, **options)
        finally:
            if device.is_connected:
                device.disconnect()
            env.close()
    elif args.policy == "expert":
        from embodied_gym.recording.parallel import record_expert_demos

        workers = args.workers or (1 if args.realtime else None)
        summary = record_expert_demos(
            args.env, env_kwargs, args.out, args.episodes, workers=workers, backend=args.backend, **options
        )
    else:
        if args.workers not in (None, 1) or args.backend != "local":
            raise UserInputError(
                f"--workers and --backend apply to --policy expert (the scripted expert) only; "
                f"{args.policy} is recorded in this process: drop them"
            )
        from embodied_gym.factory import make_env
        from embodied_gym.policies.agents import make_agent
        from embodied_gym.recording.episodes import record

        env = make_env(args.env, **env_kwargs)
        try:
            policy = make_agent(args.policy, env, trust_policy_file=args.trust_policy_file)
            summary = record(env, policy, args.out, args.episodes, env_id=args.env, **options)
        finally:
            env.close()
    print(
        f"recorded {summary.recorded} episodes ({summary.success_rate:.0%} successful) into {summary.root}; "
        f"{summary.episodes} in total"
    )
    return 0


def interrupted(args) -> str:
    how = "the same command" if args.resume else "the same command plus --resume"
    return (
        f"the episodes finished so far are saved in {args.out} (those still being rolled out are dropped); "
        f"add the rest with {how}"
    )
