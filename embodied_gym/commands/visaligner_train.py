"""``embodied-gym visaligner train``: train VisAligner (:func:`embodied_gym.visaligner.training.train`)."""

from __future__ import annotations

import logging

from embodied_gym import configs

GROUP = "visaligner"
NAME = "train"
HELP = "train VisAligner on paired real/sim episodes of a recorded dataset"

# Shortcuts for entries of --model (VisAlignerConfig overrides), spelled as they always were.
_MODEL_SHORTCUTS = ("image_size", "num_frames", "frame_stride", "mask_source", "pretrained_path", "crop")


def add_arguments(p) -> None:
    from embodied_gym.visaligner.training import VisAlignerTrainConfig

    configs.add_arguments(p, VisAlignerTrainConfig, config_file=True)
    g = p.add_argument_group("model shortcuts", "entries of --model, as single flags")
    g.add_argument(
        "--pretrained",
        dest="pretrained_path",
        help="svd preset: local Stable Video Diffusion folder (diffusers layout); nothing is downloaded",
    )
    g.add_argument("--image-size", nargs=2, type=int, metavar=("H", "W"), help="model frame size (preset's default)")
    g.add_argument(
        "--crop",
        nargs=4,
        type=float,
        metavar=("TOP", "LEFT", "BOTTOM", "RIGHT"),
        help="train on this region of the camera frame (fractions), e.g. 0.3 0.2 0.8 0.8: the table "
        "region, where small objects stay several pixels wide at a small --image-size",
    )
    g.add_argument("--num-frames", type=int, help="frames per clip (preset's default)")
    g.add_argument("--frame-stride", type=int, help="recorded steps between clip frames (preset's default)")
    g.add_argument("--no-masks", action="store_true", help="ablation: no object masks in the condition")
    g.add_argument("--mask-source", choices=["real", "sim"], help="training-condition masks (default real)")


def run(args) -> int:
    from embodied_gym.visaligner.training import VisAlignerTrainConfig, train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = configs.from_args(VisAlignerTrainConfig, args, args.config)
    for key in _MODEL_SHORTCUTS:
        value = getattr(args, key, None)
        if value is not None:
            cfg.model[key] = tuple(value) if key in ("image_size", "crop") else value
    if args.no_masks:
        cfg.model["use_masks"] = False
    if cfg.preset == "svd" and not cfg.model.get("pretrained_path"):
        raise ValueError(
            "--preset svd fine-tunes Stable Video Diffusion: pass --pretrained DIR, a local diffusers "
            "folder (unet/, vae/) such as a downloaded stable-video-diffusion-img2vid-xt; nothing is "
            "downloaded"
        )
    train(cfg)
    print(f"model written to {cfg.out}/model (loss log {cfg.out}/loss.jsonl, loss.png; samples in {cfg.out}/samples)")
    return 0


def interrupted(args) -> str:
    out = getattr(args, "out", "OUT")
    return (
        f"the last checkpoint (every --checkpoint-every steps) is kept in {out}/checkpoints; rerun the same "
        f"command to continue from it"
    )
