"""``embodied-gym train act``, ``embodied-gym train tpo`` and ``embodied-gym eval``."""

from __future__ import annotations

import json


def _cmd_train_act(args) -> int:
    from embodied_gym.policies.act import ACTTrainConfig, train_act

    cfg = ACTTrainConfig(dataset=args.dataset, out=args.out, preset=args.preset,
                         cameras=tuple(args.cameras) if args.cameras else None, steps=args.steps,
                         batch_size=args.batch_size, lr=args.lr, chunk_size=args.chunk_size,
                         n_action_steps=args.n_action_steps,
                         image_size=tuple(args.image_size) if args.image_size else None,
                         temporal_ensemble_coeff=args.temporal_ensemble, backbone_weights=args.backbone_weights,
                         episodes=args.episodes, save_every=args.save_every, seed=args.seed, device=args.device,
                         num_threads=args.threads, resume=args.resume)
    try:
        r = train_act(cfg)
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"embodied-gym: {e}") from None
    print(f"ACT trained to step {r.steps} (final batch loss {r.final_loss:.4f}) in {r.train_time_s:.0f} s "
          f"(+{r.decode_time_s:.0f} s decoding); policy: {r.checkpoint}")
    return 0


def _cmd_train_tpo(args) -> int:
    from embodied_gym.policies.tpo import TPOConfig, train_tpo

    cfg = TPOConfig(policy=args.policy, env_id=args.env, out=args.out, iterations=args.iterations,
                    rollouts=args.rollouts, pairs=args.pairs, beta=args.beta, epochs=args.epochs, lr=args.lr,
                    laplace_scale=args.laplace_scale, physics=args.physics, visaligner=args.visaligner,
                    visaligner_steps=args.visaligner_steps, sft_weight=args.sft_weight,
                    seed=args.seed, eval_episodes=args.eval_episodes, num_threads=args.threads,
                    batch_size=args.batch_size)
    try:
        log = train_tpo(cfg)
    except (FileExistsError, FileNotFoundError, ValueError, RuntimeError) as e:
        raise SystemExit(f"embodied-gym: {e}") from None
    last = log[-1] if log else {}
    print(f"TPO: {len(log)} iterations; last rollout success {last.get('rollout_success_rate', float('nan')):.0%}, "
          f"policy: {args.out} (eval --policy {args.out}; log: {args.out}/tpo_log.jsonl, plot: {args.out}/tpo.png)")
    return 0


def _cmd_eval(args) -> int:
    from embodied_gym.policies.evaluate import evaluate_policy

    try:
        r = evaluate_policy(args.policy, args.env, args.episodes, args.seed, visaligner=args.visaligner,
                            physics=args.physics, robot_config=args.robot_config, out=args.out, videos=args.videos,
                            temporal_ensemble_coeff=args.temporal_ensemble, control_mode=args.control_mode,
                            cameras=tuple(args.cameras) if args.cameras else None,
                            image_size=tuple(args.image_size) if args.image_size else None,
                            trust_policy_file=args.trust_policy_file)
    except (FileNotFoundError, ValueError, RuntimeError, KeyError) as e:
        raise SystemExit(f"embodied-gym: {e}") from None
    print(r.summary())
    if args.out:
        print(f"per-episode results: {args.out}")
    if args.json:
        print(json.dumps({k: v for k, v in r.to_json().items() if k != "per_episode"}))
    return 0


def add_commands(sub) -> None:
    """Add ``train`` (``act``, ``tpo``) and ``eval`` to the ``embodied-gym`` parser."""
    train = sub.add_parser("train", help="train a policy (act: imitation with LeRobot's ACT; tpo: preference RL)")
    tsub = train.add_subparsers(dest="algo", required=True)

    act = tsub.add_parser("act", help="train LeRobot's ACT on a recorded (or generated) LeRobotDataset, offline")
    act.add_argument("--dataset", required=True, help="LeRobotDataset folder (from `embodied-gym record`)")
    act.add_argument("--out", required=True, help="output folder: checkpoints/, train_log.jsonl, loss.png")
    act.add_argument("--cameras", nargs="+", help="cameras to use (default: all in the dataset)")
    act.add_argument("--preset", default="cpu", choices=["cpu", "paper"],
                     help="cpu: small ACT, 72x96 images, 2000 steps; paper: the sizes of ACT (arXiv 2304.13705) as the paper trains it (default cpu)")
    act.add_argument("--steps", type=int, help="optimisation steps (default: the preset's)")
    act.add_argument("--batch-size", type=int)
    act.add_argument("--lr", type=float)
    act.add_argument("--chunk-size", type=int)
    act.add_argument("--n-action-steps", type=int, help="actions run per predicted chunk")
    act.add_argument("--image-size", nargs=2, type=int, metavar=("H", "W"), help="resize images to (default: preset)")
    act.add_argument("--temporal-ensemble", type=float, metavar="COEFF",
                     help="ACT temporal ensembling coefficient (0.01 in ACT); sets n_action_steps to 1")
    act.add_argument("--backbone-weights", help="local ResNet weights file (.safetensors/.pth); default: random init")
    act.add_argument("--episodes", type=int, nargs="*", help="dataset episodes to train on (default: all)")
    act.add_argument("--save-every", type=int, default=500)
    act.add_argument("--seed", type=int, default=0)
    act.add_argument("--device", default="cpu")
    act.add_argument("--threads", type=int, help="torch CPU threads")
    act.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    act.set_defaults(func=_cmd_train_act)

    tpo = tsub.add_parser("tpo", help="trajectory preference optimisation of an ACT policy in the (aligned) sim")
    tpo.add_argument("--policy", required=True, help="ACT folder (the reference policy)")
    tpo.add_argument("--env", required=True, help="sim env id, e.g. EmbodieDreamer-PickCup-v0")
    tpo.add_argument("--out", required=True)
    tpo.add_argument("--iterations", type=int, default=3)
    tpo.add_argument("--rollouts", type=int, help="rollouts per iteration (default 2 x pairs)")
    tpo.add_argument("--pairs", type=int, default=25, help="M: top-M vs bottom-M trajectories (default 25)")
    tpo.add_argument("--beta", type=float, default=0.1)
    tpo.add_argument("--epochs", type=int, default=80)
    tpo.add_argument("--lr", type=float, default=1e-5)
    tpo.add_argument("--batch-size", type=int, default=8, help="preference pairs per gradient step")
    tpo.add_argument("--laplace-scale", type=float, default=0.1,
                     help="b of the Laplace likelihood, in normalised action units (default 0.1)")
    tpo.add_argument("--physics", help="calibrated physics JSON (PhysAligner result)")
    tpo.add_argument("--visaligner", help="VisAligner model folder (observations rendered photoreal)")
    tpo.add_argument("--sft-weight", type=float, default=0.0,
                     help="add this times ACT's L1 loss on the preferred trajectories (default 0: the paper's loss)")
    tpo.add_argument("--visaligner-steps", type=int, help="denoising steps per generated frame (default: the model's)")
    tpo.add_argument("--eval-episodes", type=int, default=0, help="greedy evaluation episodes after each iteration")
    tpo.add_argument("--seed", type=int, default=0)
    tpo.add_argument("--threads", type=int)
    tpo.set_defaults(func=_cmd_train_tpo)

    ev = sub.add_parser("eval", help="evaluate a policy: success with a Wilson 95 %% interval, returns, lengths")
    ev.add_argument("--policy", required=True, help="'expert', an ACT folder, or a stable-baselines3 .zip")
    ev.add_argument("--env", required=True, help="sim or Real env id")
    ev.add_argument("--episodes", type=int, default=50)
    ev.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    ev.add_argument("--visaligner", help="VisAligner model folder: wrap the sim env's cameras")
    ev.add_argument("--physics", help="physics JSON for sim ids (e.g. a calibration result)")
    ev.add_argument("--robot-config", help="stand-in robot config for -Real- ids")
    ev.add_argument("--out", help="JSON file: success_rate, ci95, episodes, per-episode results")
    ev.add_argument("--videos", help="folder for videos of the first 3 episodes")
    ev.add_argument("--temporal-ensemble", type=float, metavar="COEFF", help="ACT: temporal ensembling at inference")
    ev.add_argument("--control-mode", help="the control mode the policy acts in (default: the one it was trained "
                    "with, from its checkpoint)")
    ev.add_argument("--cameras", nargs="+", help="cameras to render (default: the policy's; must include them)")
    ev.add_argument("--image-size", nargs=2, type=int, metavar=("H", "W"),
                    help="render size (default: the policy's training size; frames are resized to the policy's input)")
    ev.add_argument("--trust-policy-file", action="store_true",
                    help="load with stable-baselines3's/LeRobot's own loader, which can run code from the file "
                         "(default: read it without unpickling or importing; see docs/policies.md)")
    ev.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ev.set_defaults(func=_cmd_eval)


def interrupted_note(args) -> str:
    """What an interrupted ``train``/``eval`` command kept, and how to go on (printed by ``embodied-gym``)."""
    if args.command == "eval":
        return "nothing was written (results are written at the end); rerun the same command"
    if args.algo == "act":
        resume = "rerun the same command" if args.resume else "rerun the same command plus --resume"
        return f"checkpoints (every --save-every steps) are kept in {args.out}/checkpoints; {resume} to continue"
    return (f"finished iterations are kept in {args.out} (tpo_log.jsonl); rerun the same command to continue "
            f"after the last one")
