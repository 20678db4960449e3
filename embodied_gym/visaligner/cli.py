"""``embodied-gym visaligner train | render``."""

from __future__ import annotations

import json
import logging


def _threads(args) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def _cmd_train(args) -> int:
    from embodied_gym.visaligner.train import TrainConfig, train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _threads(args)
    model = {}
    if args.image_size:
        model["image_size"] = tuple(args.image_size)
    if args.num_frames:
        model["num_frames"] = args.num_frames
    if args.frame_stride:
        model["frame_stride"] = args.frame_stride
    if args.no_masks:
        model["use_masks"] = False
    if args.mask_source:
        model["mask_source"] = args.mask_source
    if args.pretrained:
        model["pretrained_path"] = args.pretrained
    elif args.preset == "svd":
        raise SystemExit("embodied-gym: --preset svd fine-tunes Stable Video Diffusion: pass --pretrained DIR, a local "
                         "diffusers folder (unet/, vae/) such as a downloaded stable-video-diffusion-img2vid-xt; "
                         "nothing is downloaded")
    tc = TrainConfig(dataset=args.dataset, out=args.out, preset=args.preset, camera=args.camera,
                     episodes=args.episodes, physics=args.physics, sam_checkpoint=args.sam_checkpoint, model=model,
                     vae_steps=args.vae_steps, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                     sample_every=args.sample_every, checkpoint_every=args.checkpoint_every, seed=args.seed)
    train(tc)
    print(f"model written to {args.out}/model (loss log {args.out}/loss.jsonl, loss.png; "
          f"samples in {args.out}/samples)")
    return 0


def _cmd_render(args) -> int:
    from embodied_gym.visaligner.render import render_dataset

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _threads(args)
    summary = render_dataset(args.dataset, args.model, args.out, camera=args.camera, reference=args.reference,
                             episodes=args.episodes, physics=args.physics, num_inference_steps=args.steps,
                             seed=args.seed, frame_stride=args.frame_stride,
                             batch_episodes=args.batch_episodes, resume=args.resume)
    print(json.dumps(summary))
    return 0


def add_commands(subparsers) -> None:
    """Add ``visaligner`` (with ``train`` and ``render``) to the ``embodied-gym`` command."""
    vis = subparsers.add_parser("visaligner", help="VisAligner: sim renders -> the real camera's video")
    sub = vis.add_subparsers(dest="visaligner_command", required=True)

    tr = sub.add_parser("train", help="train VisAligner on paired real/sim episodes of a recorded dataset")
    tr.add_argument("--dataset", required=True, help="LeRobotDataset recorded with a camera (e.g. a -Real- id)")
    tr.add_argument("--out", required=True, help="output folder (paired cache, checkpoint/, samples/, model/)")
    tr.add_argument("--preset", default="tiny", choices=["tiny", "svd"])
    tr.add_argument("--pretrained", help="svd preset: local Stable Video Diffusion folder (diffusers layout)")
    tr.add_argument("--camera", default="cam_high")
    tr.add_argument("--episodes", type=int, nargs="*", help="training episodes (default: all)")
    tr.add_argument("--physics", help="calibrated physics JSON for the sim replay (default: nominal)")
    tr.add_argument("--sam-checkpoint", help="segment-anything weights for real-video object masks "
                                             "(default: classical static-camera masks)")
    tr.add_argument("--image-size", nargs=2, type=int, metavar=("H", "W"), help="model frame size (preset's default)")
    tr.add_argument("--num-frames", type=int, help="frames per clip (preset's default)")
    tr.add_argument("--frame-stride", type=int, help="recorded steps between clip frames (preset's default)")
    tr.add_argument("--no-masks", action="store_true", help="ablation: no object masks in the condition")
    tr.add_argument("--mask-source", choices=["real", "sim"], help="training-condition masks (default real)")
    tr.add_argument("--vae-steps", type=int, default=400)
    tr.add_argument("--steps", type=int, default=1000, help="denoiser training steps")
    tr.add_argument("--batch-size", type=int, default=4)
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--sample-every", type=int, default=250)
    tr.add_argument("--checkpoint-every", type=int, default=100)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy machine)")
    tr.set_defaults(func=_cmd_train)

    rd = sub.add_parser("render", help="translate recorded episodes into a new LeRobotDataset of generated frames")
    rd.add_argument("--dataset", required=True, help="recorded episodes (sim or real) to re-render")
    rd.add_argument("--model", required=True, help="a trained model folder (train's OUT/model)")
    rd.add_argument("--out", required=True, help="new dataset folder")
    rd.add_argument("--camera", default="cam_high")
    rd.add_argument("--reference", help="reference image to swap in (new background/foreground)")
    rd.add_argument("--episodes", type=int, nargs="*")
    rd.add_argument("--physics", help="calibrated physics JSON for the sim replay")
    rd.add_argument("--steps", type=int, help="denoising steps (model's default)")
    rd.add_argument("--seed", type=int, default=0)
    rd.add_argument("--frame-stride", type=int,
                    help="generate every k-th frame and hold it (default: the model's training stride)")
    rd.add_argument("--batch-episodes", type=int, default=8,
                    help="episodes generated together (faster on a CPU; memory grows with it)")
    rd.add_argument("--resume", action="store_true", help="continue an interrupted render")
    rd.add_argument("--threads", type=int)
    rd.set_defaults(func=_cmd_render)


def interrupted_note(args) -> str:
    """What an interrupted ``visaligner`` command kept, and how to go on (printed by ``embodied-gym``)."""
    if args.visaligner_command == "train":
        return (f"the last checkpoint (every --checkpoint-every steps) is kept in {args.out}/checkpoint; rerun the "
                f"same command to continue from it")
    how = "the same command" if args.resume else "the same command plus --resume"
    return f"the episodes finished so far are saved in {args.out}; add the rest with {how}"
