"""``embodied-gym replay``: open-loop replay of recorded episodes in the sim (:func:`embodied_gym.data.replay.replay_dataset`)."""

from __future__ import annotations

NAME = "replay"
HELP = "replay recorded episodes open-loop in the sim and measure how far the trajectories part"


def add_arguments(p) -> None:
    p.add_argument("--dataset", required=True)
    p.add_argument("--episodes", type=int, nargs="*", help="episode indices (default: all)")
    p.add_argument("--task", help="task name (default: from the recording)")
    p.add_argument("--physics", help="physics JSON file (default: nominal)")
    p.add_argument("--out", default="runs/replay")
    p.add_argument("--plot-episodes", type=int, default=3, help="episodes drawn in replay.png")


def run(args) -> int:
    from embodied_gym.data.replay import replay_dataset

    r = replay_dataset(
        args.dataset, args.out, args.episodes, task=args.task, physics=args.physics, plot_episodes=args.plot_episodes
    )
    for row in r["episodes"]:
        print(
            f"episode {row['episode']:3d}: joint RMSE {row['joint_rmse_rad']:.4f} rad, TCP translation "
            f"{row['translation_error_m'] * 100:.2f} cm, rotation {row['rotation_error_rad']:.4f} rad"
        )
    m = r["mean"]
    print(
        f"mean over {len(r['episodes'])}: joint RMSE {m['joint_rmse_rad']:.4f} rad, translation "
        f"{m['translation_error_m'] * 100:.2f} cm, rotation {m['rotation_error_rad']:.4f} rad "
        f"(written to {args.out}/replay.json, replay.png)"
    )
    return 0


def interrupted(args) -> str:
    return "nothing was written (results are written at the end); rerun the same command"
