"""Pose error of the perception model on held-out sim frames and on stand-in ("real") frames.

    MUJOCO_GL=egl .venv/bin/python benchmarks/perception.py [--task PickCup] [--sim-episodes 60]
        [--standin-episodes 6] [--steps 1500] [--out runs/bench/perception]

Trains a pose estimator (embodied_gym.perception) on raw renders of scripted-expert episodes in the
nominal sim (without augmentation, with photometric augmentation, and on domain-randomised scene
looks with augmentation: ``--variants``; on the same episodes as a trained VisAligner shows them,
with augmentation: ``--visaligner NAME=MODEL``), and reports per object the
horizontal position error (cm), the height error (cm) and the yaw error (deg) on held-out sim
episodes and on stand-in episodes (ground truth from the stand-in's ``info["object_poses"]``, as a
motion-capture system would report it: evaluation only). The stand-in figure is the visual gap
VisAligner (arXiv 2507.05198, section 3.2) has to close. Resumable: rerun the same command after an
interruption.

VisAligner frames (BENCHMARKS.md, Perception section): models trained by
``benchmarks/visaligner.py --crop 0.3 0.2 0.8 0.8 --record-size 240 320 --image-size 80 128`` (the
estimator's crop, where the cup is about 9 px wide), the reference frame a stand-in recording's first:

    MUJOCO_GL=egl .venv/bin/python benchmarks/perception.py --out runs/bench/perception_visaligner \
        --input-size 80 128 --layouts-per-episode 0 --variants raw,raw_augmented \
        --visaligner full=runs/bench/visaligner_crop/full/model \
        --visaligner nomask=runs/bench/visaligner_crop/nomask/model \
        --reference runs/bench/visaligner_crop/standin_pickcup

``--with-raw`` also trains each VisAligner model's frames together with the raw renders of the same
episodes (``visaligner_NAME_with_raw``): the renders' geometry is exact, the VisAligner frames carry
the camera's look (BENCHMARKS.md, Perception section).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from embodied_gym.atomic import write_json
from embodied_gym.perception import PoseEstimatorConfig, generate_frames
from embodied_gym.perception.data import randomized_look
from embodied_gym.perception.visual_gap import measure_visual_gap
from embodied_gym.visaligner.pose_frames import generate_visaligner_frames
from embodied_gym.visaligner.render import reference_image


def paired_standin_errors(out: str, config, names: list[str]) -> dict:
    """Each model's mean horizontal error on each stand-in episode (the same frames for every model), and
    for every pair of models an exact Wilcoxon signed-rank test over those episodes: frames of one episode
    are correlated, so the episode is the unit (6 episodes: the smallest two-sided p is 1/32)."""
    import glob

    import numpy as np
    from scipy.stats import wilcoxon

    from embodied_gym.perception import PoseEstimator
    from embodied_gym.perception.evaluate import errors_from_estimates, predict_inputs

    files = sorted(glob.glob(os.path.join(out, "frames", "standin", "episode_*.npz")))
    per_episode = {}
    for name in names:
        model = PoseEstimator.from_pretrained(os.path.join(out, "models", name, "model"))
        errs = []
        for f in files:
            with np.load(f, allow_pickle=False) as z:
                est = predict_inputs(model, z["inputs"])
                errs.append(np.mean([e["xy_cm"] for o, e in errors_from_estimates(config, est, z["poses"]).items()]))
        per_episode[name] = errs
    tests = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            x, y = np.array(per_episode[a]), np.array(per_episode[b])
            tests[f"{a} vs {b}"] = {
                "episodes_a_lower": int((x < y).sum()),
                "episodes": len(x),
                "wilcoxon_p": float(wilcoxon(x, y).pvalue) if len(x) and (x != y).any() else 1.0,
            }
    return {"xy_cm_per_standin_episode": per_episode, "tests": tests}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="PickCup")
    p.add_argument("--out", default="runs/bench/perception")
    p.add_argument("--sim-episodes", type=int, default=60)
    p.add_argument("--val-episodes", type=int, default=8)
    p.add_argument("--standin-episodes", type=int, default=6)
    p.add_argument("--frame-stride", type=int, default=4)
    p.add_argument(
        "--layouts-per-episode",
        type=int,
        default=20,
        help="extra frames of fresh layouts (a reset each) after every training episode",
    )
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--keypoint-weight",
        type=float,
        default=1.0,
        help="weight of the keypoint loss (PoseTrainConfig.keypoint_weight; 0: off, as before it existed)",
    )
    p.add_argument(
        "--heatmap-weight",
        type=float,
        default=0.1,
        help="weight of the keypoint map loss (PoseTrainConfig.heatmap_weight; 0: off, as before it existed)",
    )
    p.add_argument(
        "--variants",
        default="raw,raw_augmented,randomized",
        help="models to train: raw (sim renders, no augmentation), raw_augmented (photometric "
        "augmentation), randomized (domain-randomised scene looks + augmentation)",
    )
    p.add_argument(
        "--robot-config",
        help="the stand-in world whose frames the models are evaluated on "
        "(a robot config YAML; default the shipped one)",
    )
    p.add_argument(
        "--input-size",
        nargs=2,
        type=int,
        metavar=("H", "W"),
        help="the network input the crop is resized to (default PoseEstimatorConfig's)",
    )
    p.add_argument(
        "--visaligner",
        action="append",
        default=[],
        metavar="NAME=MODEL",
        help="also train on the sim episodes as this VisAligner model shows them (repeatable); the "
        "model's frame stride must be --frame-stride",
    )
    p.add_argument(
        "--reference",
        help="with --visaligner: the real frame every episode starts from (an image, "
        "or a recorded dataset: its first frame)",
    )
    p.add_argument("--visaligner-steps", type=int, default=10, help="VisAligner denoising steps")
    p.add_argument(
        "--with-raw",
        action="store_true",
        help="with --visaligner: also train visaligner_NAME_with_raw on the raw renders and that "
        "model's frames of the same episodes together (augmented): the renders carry exact "
        "geometry, the VisAligner frames the camera's look",
    )
    return p


def visaligner_models(p: argparse.ArgumentParser, args) -> dict[str, str]:
    """``--visaligner NAME=MODEL`` as ``{"visaligner_NAME": MODEL}``."""
    models = {}
    for spec in args.visaligner:
        name, _, model = spec.partition("=")
        if not name or not model:
            p.error(f"--visaligner {spec!r}: expected NAME=MODEL_FOLDER")
        models[f"visaligner_{name}"] = model
    if models and not args.reference:
        p.error("--visaligner needs --reference (a real camera frame or a recorded dataset)")
    return models


def add_visaligner_sets(p, args, config, models: dict[str, str], sets: dict, variants: list[str], sim_train: str):
    """Generate each VisAligner model's frames of the sim episodes; add its training set(s) and variant(s)."""
    if models:  # the real frame every generated episode starts from, read once
        os.makedirs(args.out, exist_ok=True)
        reference = reference_image(args.reference, config.camera, os.path.join(args.out, "reference.png"))
    for name, model in models.items():
        stride = json.loads(Path(model, "model_index.json").read_text())["frame_stride"]
        if stride != args.frame_stride:
            p.error(f"--visaligner {model} generates every {stride}th step; pass --frame-stride {stride}")
        folder = os.path.join(args.out, "frames", f"sim_train_{name}")
        t = time.perf_counter()
        generate_visaligner_frames(
            folder, config, range(args.sim_episodes), model, str(reference), num_inference_steps=args.visaligner_steps
        )
        print(f"{name}: frames in {time.perf_counter() - t:.0f} s (0 when resumed)", flush=True)
        sets[name] = [folder]
        variants.append(name)
        if args.with_raw:
            sets[f"{name}_with_raw"] = [sim_train, folder]
            variants.append(f"{name}_with_raw")


def generate_sim_frames(args, config, variants: list[str], sim_train: str, randomized: str) -> None:
    """The raw renders (and the domain-randomised ones) of the sim episodes that the variants train on."""
    if {"raw", "raw_augmented"} & set(variants) or args.with_raw:
        generate_frames(
            sim_train,
            config,
            range(args.sim_episodes),
            frame_stride=args.frame_stride,
            layouts_per_episode=args.layouts_per_episode,
        )
    if "randomized" in variants:
        generate_frames(
            randomized,
            config,
            range(args.sim_episodes),
            frame_stride=args.frame_stride,
            look=randomized_look,
            layouts_per_episode=args.layouts_per_episode,
        )


def train_and_measure(args, config, variants: list[str], sets: dict) -> dict:
    """Train each variant's model and measure it on held-out sim and stand-in frames."""
    results = {}
    for name in variants:
        folders = sets[name]
        train = {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "augment": name != "raw",
            "keypoint_weight": args.keypoint_weight,
            "heatmap_weight": args.heatmap_weight,
        }
        r = measure_visual_gap(
            args.out,
            config,
            {name: folders},
            sim_episodes=args.sim_episodes,
            val_episodes=args.val_episodes,
            standin_episodes=args.standin_episodes,
            frame_stride=args.frame_stride,
            train=train,
            layouts_per_episode=args.layouts_per_episode,
            standin_kwargs={"robot_config": args.robot_config} if args.robot_config else None,
        )
        results.setdefault("frames", r["frames"])
        results.setdefault("centre_baseline", r["centre_baseline"])
        results.setdefault("models", {}).update(r["models"])
    return results


def print_results(args, config, results: dict) -> None:
    print(
        f"\n{args.task}: crop {config.crop} of a {config.frame_size} {config.camera} frame -> {config.input_size}; "
        f"frames: {results['frames']}; {results['wall_s'] / 60:.1f} min"
    )
    print(
        f"{'model':<15} {'frames on':<9} {'object':<8} {'xy cm (mean/median/p90)':<26} {'z cm':>6} {'yaw deg':>8} {'ms/frame':>9}"
    )
    b = results["centre_baseline"]["standin"]
    for obj, e in b.items():
        if obj != "frames":
            print(
                f"{'range centre':<15} {'standin':<9} {obj:<8} {e['xy_cm']:<26.2f} {e.get('z_cm', float('nan')):>6.2f} "
                f"{e.get('yaw_deg', float('nan')):>8.2f}"
            )
    for name, m in results["models"].items():
        for where in ("sim", "standin"):
            for obj, e in m[where].items():
                if obj == "frames":
                    continue
                xy = f"{e['xy_cm']:.2f} / {e['xy_cm_median']:.2f} / {e['xy_cm_p90']:.2f}"
                print(
                    f"{name:<15} {where:<9} {obj:<8} {xy:<26} {e.get('z_cm', float('nan')):>6.2f} "
                    f"{e.get('yaw_deg', float('nan')):>8.2f} {m['ms_per_frame']:>9.2f}"
                )
    print("\nstand-in, per episode (mean xy cm over its objects):")
    for name, errs in results["paired"]["xy_cm_per_standin_episode"].items():
        print(f"  {name:<18} " + " ".join(f"{e:6.2f}" for e in errs))
    for pair, t in results["paired"]["tests"].items():
        print(
            f"  {pair}: first lower in {t['episodes_a_lower']}/{t['episodes']} episodes, exact Wilcoxon p = "
            f"{t['wilcoxon_p']:.3g}"
        )


def main():
    p = build_parser()
    args = p.parse_args()
    config = PoseEstimatorConfig(task=args.task, **({"input_size": tuple(args.input_size)} if args.input_size else {}))
    t0 = time.perf_counter()
    sim_train = os.path.join(args.out, "frames", "sim_train")
    randomized = os.path.join(args.out, "frames", "sim_train_randomized")
    sets = {"raw": [sim_train], "raw_augmented": [sim_train], "randomized": [randomized]}
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in sets]
    if unknown:
        p.error(f"unknown --variants {unknown}; valid: {list(sets)}")
    models = visaligner_models(p, args)
    add_visaligner_sets(p, args, config, models, sets, variants, sim_train)
    if args.with_raw and not models:
        p.error("--with-raw needs --visaligner NAME=MODEL")
    generate_sim_frames(args, config, variants, sim_train, randomized)
    results = train_and_measure(args, config, variants, sets)
    results["paired"] = paired_standin_errors(args.out, config, list(results["models"]))
    results["config"] = {**config.to_dict(), **vars(args)}
    results["wall_s"] = time.perf_counter() - t0
    write_json(os.path.join(args.out, "results.json"), results)
    print_results(args, config, results)


if __name__ == "__main__":
    main()
