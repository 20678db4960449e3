"""``embodied-gym train residual``: residual RL over a frozen ACT policy with stable-baselines3
(:func:`embodied_gym.policies.residual.train_residual`), the library RL baseline beside TPO."""

from __future__ import annotations

from embodied_gym import configs

GROUP = "train"
NAME = "residual"
HELP = "residual RL (stable-baselines3 PPO or SAC) over a frozen ACT policy in the (aligned) sim"


def add_arguments(p) -> None:
    from embodied_gym.policies.residual import ResidualRLConfig

    configs.add_arguments(p, ResidualRLConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.policies.residual import ResidualRLConfig, train_residual

    cfg = configs.from_args(ResidualRLConfig, args, args.config)
    meta = train_residual(cfg)
    ev = meta.get("eval")
    if ev:
        print(
            f"greedy success in the sim over {cfg.eval_episodes} episodes: ACT {ev['base']['success_rate']:.0%}, "
            f"ACT + residual {ev['residual']['success_rate']:.0%}"
        )
    print(f"policy: {cfg.out} (eval --policy {cfg.out}; training curve: {cfg.out}/residual.png)")
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    return f"the last checkpoint is kept in {out} (checkpoint.zip); rerun the same command to continue from it"
