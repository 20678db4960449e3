"""``embodied-gym visaligner render``: recorded episodes re-rendered by VisAligner
(:func:`embodied_gym.visaligner.render.render_dataset`)."""

from __future__ import annotations

import json
import logging
import sys

GROUP = "visaligner"
NAME = "render"
HELP = "translate recorded episodes into a new LeRobotDataset of generated frames"


def add_arguments(p) -> None:
    from embodied_gym.data.writer import DEFAULT_CRF

    p.add_argument("--dataset", required=True, help="recorded episodes (sim or real) to re-render")
    p.add_argument("--model", required=True, help="a trained model folder (train's OUT/model)")
    p.add_argument("--out", required=True, help="new dataset folder")
    p.add_argument("--camera", default="cam_high")
    p.add_argument("--reference", help="reference image to swap in (new background/foreground)")
    p.add_argument("--episodes", type=int, nargs="*")
    p.add_argument("--physics", help="calibrated physics JSON for the sim replay")
    p.add_argument("--num-inference-steps", type=int, help="denoising steps per generated frame (model's default)")
    p.add_argument("--steps", dest="legacy_steps", type=int, help="old name of --num-inference-steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--frame-stride", type=int, help="generate every k-th frame and hold it (default: the model's training stride)"
    )
    p.add_argument(
        "--batch-episodes",
        type=int,
        default=8,
        help="episodes generated together (faster on a CPU; memory grows with it)",
    )
    p.add_argument("--resume", action="store_true", help="continue an interrupted render")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument(
        "--crf",
        type=int,
        default=DEFAULT_CRF,
        help=f"video quality of the new dataset (lower keeps more; 0 lossless; default {DEFAULT_CRF})",
    )


def run(args) -> int:
    from embodied_gym.visaligner.render import render_dataset

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    steps = args.num_inference_steps
    if args.legacy_steps is not None:
        # "--steps" means training steps in `visaligner train`; here it always meant denoising steps.
        print("embodied-gym visaligner render: --steps is now --num-inference-steps", file=sys.stderr)
        steps = steps if steps is not None else args.legacy_steps
    summary = render_dataset(
        args.dataset,
        args.model,
        args.out,
        camera=args.camera,
        reference=args.reference,
        episodes=args.episodes,
        physics=args.physics,
        num_inference_steps=steps,
        seed=args.seed,
        frame_stride=args.frame_stride,
        batch_episodes=args.batch_episodes,
        resume=args.resume,
        crf=args.crf,
    )
    print(json.dumps(summary))
    return 0


def interrupted(args) -> str:
    how = "the same command" if args.resume else "the same command plus --resume"
    return f"the episodes finished so far are saved in {args.out}; add the rest with {how}"
