"""``embodied-gym train tpo``: trajectory preference optimisation (:func:`embodied_gym.policies.tpo.train_tpo`)."""

from __future__ import annotations

from embodied_gym import configs

GROUP = "train"
NAME = "tpo"
HELP = "trajectory preference optimisation of an ACT policy in the (aligned) sim"


def add_arguments(p) -> None:
    from embodied_gym.policies.tpo import TPOConfig

    configs.add_arguments(p, TPOConfig, config_file=True)


def run(args) -> int:
    from embodied_gym.policies.tpo import TPOConfig, train_tpo

    cfg = configs.from_args(TPOConfig, args, args.config)
    log = train_tpo(cfg)
    last = log[-1] if log else {}
    print(f"TPO: {len(log)} iterations; last rollout success {last.get('rollout_success_rate', float('nan')):.0%}, "
          f"policy: {cfg.out} (eval --policy {cfg.out}; log: {cfg.out}/tpo_log.jsonl, plot: {cfg.out}/tpo.png)")
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    return f"finished iterations are kept in {out} (tpo_log.jsonl); rerun the same command to continue after the last one"
