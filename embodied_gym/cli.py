"""The ``embodied-gym`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# Subsystem commands; light to import: their heavy imports live in the handlers.
from embodied_gym.policies import cli as policies_cli
from embodied_gym.visaligner import cli as visaligner_cli


def _cmd_demo(args) -> int:
    """The whole Real2Sim2Real loop on the stand-in robot (embodied_gym.demo.pipeline)."""
    from embodied_gym.demo.config import load_config
    from embodied_gym.demo.pipeline import run_demo

    profile = "full" if args.full else args.profile
    try:
        cfg = load_config(profile, args.config)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"embodied-gym demo: {e}") from None
    if args.tasks:
        cfg.tasks = list(args.tasks)
    run_dir = os.path.join(args.runs, args.name or profile)
    summary = run_demo(cfg, run_dir, rerun_from=getattr(args, "from"))
    for task, t in summary["tasks"].items():
        for name, e in t["evaluation"].items():
            print(f"{task:12s} {name:12s} success on the stand-in {e['success_rate']:6.1%} "
                  f"(95 % CI {e['ci95'][0]:.0%}-{e['ci95'][1]:.0%}, {e['episodes']} episodes)")
    print(f"report: {os.path.join(run_dir, 'report.html')}  (summary: {os.path.join(run_dir, 'summary.json')})")
    return 0


def _cmd_experts(args) -> int:
    """Every task's scripted expert solving its task; a video per task; success printed."""
    import gymnasium as gym
    import numpy as np
    from tqdm import tqdm

    import embodied_gym
    from embodied_gym.envs.tasks import TASKS
    from embodied_gym.video import write_mp4

    tasks = args.tasks or list(TASKS)
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for task in tasks:
        env = gym.make(embodied_gym.env_id(task), obs_type="state", render_mode="rgb_array",
                       cameras=(args.camera,), image_size=(240, 320))
        expert = embodied_gym.make_expert(env)
        successes, frames = [], []
        for ep in tqdm(range(args.episodes), desc=f"{task:12s}", unit="ep"):
            obs, info = env.reset(seed=args.seed + ep)
            record = ep == 0
            if record:
                frames.append(env.render())
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(expert(obs, info))
                done = terminated or truncated
                if record and info["step"] % 2 == 0:
                    frames.append(env.render())
            successes.append(bool(info["is_success"]))
        env.close()
        video = os.path.join(args.out, f"{task}.mp4")
        write_mp4(video, frames, fps=25)
        rate = float(np.mean(successes))
        summary[task] = {"success_rate": rate, "episodes": len(successes), "video": video}
        print(f"{task:12s} expert success {rate:6.1%} over {len(successes)} episodes  (video: {video})")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return 0


def _make_env(env_id: str, robot_config: str | None, **kwargs):
    import gymnasium as gym

    import embodied_gym  # noqa: F401

    if env_id not in gym.registry:
        ids = sorted(k for k in gym.registry if k.startswith("EmbodieDreamer-"))
        raise SystemExit(f"embodied-gym: unknown env id {env_id!r}; valid: {ids}")
    if "-Real-" in env_id:
        kwargs.update(robot_config=robot_config, realtime=kwargs.pop("realtime", False))
    else:
        kwargs.pop("realtime", None)
        if robot_config:
            raise SystemExit("embodied-gym: --robot-config only applies to -Real- env ids")
    return gym.make(env_id, **kwargs)


def _load_policy(spec: str, env):
    import embodied_gym

    if spec == "expert":
        return embodied_gym.make_expert(env)
    from embodied_gym.policies.loading import load_agent

    try:
        agent = load_agent(spec)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"embodied-gym: {e}") from None
    need, have = agent.requirements, env.unwrapped
    if need.control_mode != have.control_mode or not set(need.cameras) <= set(have.cameras):
        raise SystemExit(f"embodied-gym: policy {spec!r} needs control_mode={need.control_mode!r} and cameras "
                         f"{list(need.cameras)}; record with --cameras {' '.join(need.cameras) or 'cam_high'}")
    agent.reset()
    return _ResettingAgent(agent)


class _ResettingAgent:
    """Calls the agent's ``reset()`` when a new episode starts (``info["step"] == 0``)."""

    def __init__(self, agent):
        self.agent = agent

    def __call__(self, obs, info):
        if info.get("step") == 0:
            self.agent.reset()
        return self.agent(obs, info)


def _cmd_record(args) -> int:
    from embodied_gym.data.recording import record

    env = _make_env(args.env, args.robot_config, obs_type="pixels_state", cameras=tuple(args.cameras),
                    image_size=tuple(args.image_size), realtime=args.realtime)
    policy = _load_policy(args.policy, env)
    try:
        summary = record(env, policy, args.out, args.episodes, seed=args.seed, resume=args.resume,
                         env_id=args.env, vcodec=args.vcodec)
    except FileExistsError as e:
        raise SystemExit(f"embodied-gym: {e}") from None
    finally:
        env.close()
    print(f"recorded {summary.recorded} episodes ({summary.success_rate:.0%} successful) into {summary.root}; "
          f"{summary.episodes} in total")
    return 0


def _cmd_replay(args) -> int:
    from embodied_gym.data.replay import load_episodes, plot_replay, replay_episode

    episodes = load_episodes(args.dataset, args.episodes)
    task = args.task or _task_from_sidecar(args.dataset)
    results = [replay_episode(ep, task, physics=args.physics) for ep in episodes]
    rows = [r.summary() for r in results]
    mean = {k: float(sum(r[k] for r in rows) / len(rows)) for k in ("joint_rmse_rad", "translation_error_m",
                                                                       "rotation_error_rad")}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "replay.json"), "w") as f:
        json.dump({"dataset": str(args.dataset), "physics": args.physics, "task": task, "mean": mean,
                   "episodes": rows}, f, indent=2)
    plot_replay(results[: args.plot_episodes], os.path.join(args.out, "replay.png"))
    for r in rows:
        print(f"episode {r['episode']:3d}: joint RMSE {r['joint_rmse_rad']:.4f} rad, TCP translation "
              f"{r['translation_error_m'] * 100:.2f} cm, rotation {r['rotation_error_rad']:.4f} rad")
    print(f"mean over {len(rows)}: joint RMSE {mean['joint_rmse_rad']:.4f} rad, translation "
          f"{mean['translation_error_m'] * 100:.2f} cm, rotation {mean['rotation_error_rad']:.4f} rad "
          f"(written to {args.out}/replay.json, replay.png)")
    return 0


def _cmd_calibrate(args) -> int:
    from embodied_gym.physaligner import ParameterSpace
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate
    from embodied_gym.physaligner.space import parameter_names

    task = args.task or _task_from_sidecar(args.dataset)
    space = None  # the default free set, from the joints the recording moves
    if args.free == ["all"]:
        space = ParameterSpace()
    elif args.free:
        unknown = [n for n in args.free if n not in parameter_names()]
        if unknown:
            raise SystemExit(f"embodied-gym: unknown parameter(s) {unknown}; e.g. kp.left_waist, damping.right_elbow, "
                             f"backlash.right_waist, gripper_kp, or 'all'")
        space = ParameterSpace(frozen=[n for n in parameter_names() if n not in args.free])
    cfg = CalibrationConfig(method=args.method, samples=args.samples, surrogate_epochs=args.epochs,
                            sa_steps=args.sa_steps, cmaes_evaluations=args.cmaes_evaluations,
                            sysid_iterations=args.sysid_iterations, budget_s=args.budget, seed=args.seed,
                            workers=args.workers, restarts=args.restarts, refine_steps=args.refine_steps,
                            backend=args.backend, ray_address=args.ray_address, held_out=args.held_out,
                            test_dataset=args.test_dataset, latency_candidates=tuple(args.latency))
    try:
        r = calibrate(args.dataset, task, args.out, space, cfg)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"embodied-gym calibrate: {e}") from None
    b, a = r["held_out_errors"]["before"], r["held_out_errors"]["after"]
    print(f"{args.method}: held-out TCP translation {b['translation_error_m'] * 100:.2f} -> "
          f"{a['translation_error_m'] * 100:.2f} cm, rotation {b['rotation_error_rad']:.4f} -> "
          f"{a['rotation_error_rad']:.4f} rad, joint RMSE {b['joint_rmse_rad']:.4f} -> {a['joint_rmse_rad']:.4f} rad "
          f"in {r['wall_time_s']['total']:.0f} s; result: {args.out}, report: "
          f"{os.path.splitext(args.out)[0]}.report.md")
    print(f"actuation delay: {r['latency_steps']['calibrated']} control step(s)")
    acc = r["acceptance"]
    print(("" if acc["improved"] else "NOTE: ") + acc["message"])
    if r["unconstrained"]:
        print(f"not constrained by this data: {', '.join(r['unconstrained'])} (see the report)")
    return 0


def _task_from_sidecar(root) -> str:
    from embodied_gym.data.features import SIDECAR

    path = os.path.join(root, SIDECAR)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                env_id = json.loads(line).get("env_id") or ""
                if env_id.startswith("EmbodieDreamer-"):
                    return env_id.split("-")[1]
    raise SystemExit("embodied-gym: cannot tell the dataset's task; pass --task")


def build_parser() -> argparse.ArgumentParser:
    from embodied_gym.physaligner.calibrate import METHODS, RECOMMENDED

    p = argparse.ArgumentParser(prog="embodied-gym", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    from embodied_gym.demo.pipeline import STAGES

    demo = sub.add_parser("demo", help="the whole Real2Sim2Real loop on the stand-in robot, with an HTML report")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one task, small sizes, 2 CPU cores (the default)")
    size.add_argument("--full", action="store_true", help="all four tasks, paper-like sizes (a GPU machine)")
    size.add_argument("--profile", default="quick", help="a profile of embodied_gym/demo/profiles (quick, full, smoke)")
    demo.add_argument("--config", help="YAML file overriding any stage setting of the profile")
    demo.add_argument("--tasks", nargs="*", help="tasks (default: the profile's)")
    demo.add_argument("--from", choices=STAGES, help="rerun from this stage on (later stages rerun too)")
    demo.add_argument("--name", help="run name: output in RUNS/NAME (default: the profile's name)")
    demo.add_argument("--runs", default="runs", help="folder of runs (default runs/)")
    demo.set_defaults(func=_cmd_demo)

    exp = sub.add_parser("experts", help="run every task's scripted expert, save a video per task, print success")
    exp.add_argument("--tasks", nargs="*", help="tasks to run (default: all four)")
    exp.add_argument("--episodes", type=int, default=5, help="episodes per task (default 5)")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--camera", default="cam_high")
    exp.add_argument("--out", default="runs/experts", help="output folder (default runs/experts)")
    exp.set_defaults(func=_cmd_experts)

    rec = sub.add_parser("record", help="record episodes into a local LeRobotDataset v3.0")
    rec.add_argument("--env", required=True, help="env id, e.g. EmbodieDreamer-PickCup-Real-v0")
    rec.add_argument("--policy", default="expert", help="'expert' (the scripted expert), an ACT folder or an SB3 .zip")
    rec.add_argument("--episodes", type=int, default=50)
    rec.add_argument("--out", required=True, help="dataset folder")
    rec.add_argument("--resume", action="store_true", help="add episodes to an existing dataset")
    rec.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    rec.add_argument("--cameras", nargs="+", default=["cam_high"])
    rec.add_argument("--image-size", nargs=2, type=int, default=[240, 320], metavar=("H", "W"))
    rec.add_argument("--robot-config", help="stand-in robot config (YAML/JSON) for -Real- ids")
    rec.add_argument("--realtime", action="store_true", help="hold 50 Hz on Real ids (default: as fast as possible)")
    rec.add_argument("--vcodec", default="h264", help="video codec (h264, or libsvtav1 as on the Hub)")
    rec.set_defaults(func=_cmd_record)

    rep = sub.add_parser("replay", help="replay recorded episodes open-loop in the sim and measure the gap")
    rep.add_argument("--dataset", required=True)
    rep.add_argument("--episodes", type=int, nargs="*", help="episode indices (default: all)")
    rep.add_argument("--task", help="task name (default: from the recording)")
    rep.add_argument("--physics", help="physics JSON file (default: nominal)")
    rep.add_argument("--out", default="runs/replay")
    rep.add_argument("--plot-episodes", type=int, default=3, help="episodes drawn in replay.png")
    rep.set_defaults(func=_cmd_replay)

    cal = sub.add_parser("calibrate", help="calibrate the simulator's physics from a recorded dataset")
    cal.add_argument("--dataset", required=True)
    cal.add_argument("--task", help="task name (default: from the recording)")
    cal.add_argument("--method", default=RECOMMENDED, choices=list(METHODS),
                     help=f"calibration method (default {RECOMMENDED}, the best in benchmarks/calibration.py)")
    cal.add_argument("--out", required=True, help="result JSON (usable as physics=... and --physics)")
    cal.add_argument("--free", nargs="*", help="parameters to calibrate, or 'all' (default: kp, damping, frictionloss "
                     "and backlash of every arm joint the recording moves); the rest stay nominal")
    cal.add_argument("--held-out", type=float, default=0.3,
                     help="share of episodes kept out of the fit to judge the result (default 0.3)")
    cal.add_argument("--test-dataset", help="judge the result on this dataset's episodes instead (all of --dataset is fitted)")
    cal.add_argument("--latency", type=int, nargs="*", default=[0, 1, 2, 3],
                     help="actuation delays to profile, in 20 ms control steps (default 0 1 2 3; none: keep 0)")
    cal.add_argument("--samples", type=int, default=64, help="classic stage 1 (simulate_transitions): θ samples")
    cal.add_argument("--epochs", type=int, default=40, help="physaligner stage 2: surrogate epochs per iteration")
    cal.add_argument("--restarts", type=int, default=4, help="unused by the trust-region PhysAligner (kept for scripts)")
    cal.add_argument("--refine-steps", type=int, default=150,
                     help="physaligner stage 3: Adam steps per trust-region iteration")
    cal.add_argument("--backend", default="processes", choices=["processes", "ray"],
                     help="physaligner stage 1: local processes, or Ray (pip install 'embodied-gym[ray]')")
    cal.add_argument("--ray-address", help="Ray cluster address for --backend ray (default: a local Ray)")
    cal.add_argument("--sa-steps", type=int, default=2000, help="sa: annealing steps (SimplerEnv: 2000)")
    cal.add_argument("--cmaes-evaluations", type=int, default=2000, help="cmaes: objective evaluations")
    cal.add_argument("--sysid-iterations", type=int, default=20, help="sysid: Gauss-Newton iterations")
    cal.add_argument("--budget", type=float, help="wall-time budget of the search, seconds (every method)")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--workers", type=int, help="stage-1 processes (default: all CPUs)")
    cal.set_defaults(func=_cmd_calibrate)
    visaligner_cli.add_commands(sub)  # visaligner train|render
    policies_cli.add_commands(sub)  # train act|tpo, eval
    return p


def _quiet_progress() -> None:
    """Keep the terminal to our own progress bars: `datasets` draws a "Map" bar for every saved
    episode. LeRobot re-enables those bars after each save, so only `datasets`' environment
    switch (read at import, which has priority) holds; process-wide, so only the CLI sets it."""
    import warnings

    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", message="Cannot enable progress bars")


def main(argv: list[str] | None = None) -> int:
    _quiet_progress()
    args = build_parser().parse_args(argv)
    if getattr(args, "tasks", None):
        from embodied_gym.envs.tasks import TASKS

        unknown = [t for t in args.tasks if t not in TASKS]
        if unknown:
            print(f"embodied-gym: unknown task(s) {unknown}; valid: {sorted(TASKS)}", file=sys.stderr)
            return 2
    t0 = time.time()
    rc = args.func(args)
    print(f"done in {time.time() - t0:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
