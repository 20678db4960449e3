"""``embodied-gym experts``: every task's scripted expert, evaluated and filmed
(:func:`embodied_gym.policies.evaluate.evaluate_experts`)."""

from __future__ import annotations

NAME = "experts"
HELP = "run every task's scripted expert in the sim, save videos per task, print success"


def add_arguments(p) -> None:
    p.add_argument("--tasks", nargs="*", help="tasks to run (default: all)")
    p.add_argument("--episodes", type=int, default=5, help="episodes per task (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--camera", default="cam_high")
    p.add_argument("--out", default="runs/experts", help="output folder (default runs/experts)")


def run(args) -> int:
    from embodied_gym.policies.evaluate import evaluate_experts

    results = evaluate_experts(args.tasks, args.episodes, args.seed, args.out, camera=args.camera)
    for task, r in results.items():
        lo, hi = r.ci95
        print(
            f"{task:12s} expert success {r.success_rate:6.1%} (95 % CI {lo:.0%}-{hi:.0%}) over {r.episodes} "
            f"episodes  (videos: {args.out}/{task})"
        )
    return 0


def interrupted(args) -> str:
    return f"videos of the tasks finished so far are in {args.out}; rerun the same command for all of them"
