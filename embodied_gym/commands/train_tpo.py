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
    from embodied_gym.policies.tpo import TPOConfig, selected_iteration, train_tpo

    cfg = configs.from_args(TPOConfig, args, args.config)
    log = train_tpo(cfg)
    trained = [r for r in log if r["iteration"] > 0]
    last = trained[-1] if trained else {}
    chosen = selected_iteration(log, cfg.select)
    rates = ", ".join(f"{r['iteration']}: {r['eval_success_rate']:.0%}" for r in log if "eval_success_rate" in r)
    print(
        f"TPO: {len(trained)} iterations; last rollout success {last.get('rollout_success_rate', float('nan')):.0%}"
        + (f"; greedy success in the sim by iteration (0: the reference) {rates}" if rates else "")
    )
    which = "the reference policy (no iteration did better in the sim)" if chosen == 0 else f"iteration {chosen}"
    print(
        f"policy: {cfg.out}, {which} (eval --policy {cfg.out}; log: {cfg.out}/tpo_log.jsonl, plot: {cfg.out}/tpo.png)"
    )
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    return (
        f"finished iterations are kept in {out} (tpo_log.jsonl); rerun the same command to continue after the last one"
    )
