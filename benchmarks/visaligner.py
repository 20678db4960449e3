"""VisAligner benchmark: stand-in PickCup data, cam_high, tiny preset on CPU.

Trains VisAligner with and without object masks on 40 recorded stand-in episodes and compares,
on 10 held-out episodes, (a) the raw sim render, (b) VisAligner without masks, (c) VisAligner
full, (d) the full network with its temporal layers off (per frame): PSNR, SSIM, PSNR on the
object region, FD-local3D (a proxy; not FVD) and temporal flicker, plus a sample grid.

Held-out evaluation is the deployment setting: the sim replays each held-out episode's
recorded joints, the condition is its render with the *sim's* object masks, frame 0 is the
episode's first real frame, and the whole episode (every 4th step, the model's frame stride) is
generated chunk by chunk. Frame 0 (the reference itself) is left out of every metric.

    MUJOCO_GL=egl HF_HUB_OFFLINE=1 python benchmarks/visaligner.py --out runs/bench/visaligner

On the table region where the cup is about 9 px wide (the pose estimator's crop; BENCHMARKS.md,
VisAligner section), recorded at 240x320 (``--no-ablations``: the full model alone):

    MUJOCO_GL=egl HF_HUB_OFFLINE=1 python benchmarks/visaligner.py --out runs/bench/visaligner_crop \
        --crop 0.3 0.2 0.8 0.8 --record-size 240 320 --image-size 80 128

The base model (``scripts/make_visaligner_base.py``: trained on randomised sim looks, never on the
stand-in's frames) against the model trained from scratch, on the same held-out episodes: (e) the base
as it is, (f) the base fine-tuned for N denoiser steps on the training episodes (its VAE kept), each
also sampled with fewer denoising steps:

    MUJOCO_GL=egl HF_HUB_OFFLINE=1 python benchmarks/visaligner.py --out runs/bench/visaligner_crop \
        --crop 0.3 0.2 0.8 0.8 --record-size 240 320 --image-size 80 128 --no-ablations \
        --base runs/visaligner_base/model --fine-tune-steps 50 100 200 --few-steps 4 8

Steps resume: the dataset, paired cache, trained models and FD-local3D net are reused when present.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(cmd: list[str], log: Path) -> subprocess.Popen:
    print("$", " ".join(cmd), f"> {log}", flush=True)
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT)


def wait(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"command failed ({p.args}); see its log")


def dilate(masks: np.ndarray, r: int = 2) -> np.ndarray:
    import cv2

    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))
    return np.stack([cv2.dilate(m.astype(np.uint8), k).astype(bool) for m in masks])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench/visaligner")
    ap.add_argument(
        "--dataset",
        help="stand-in PickCup recording with cam_high (default: OUT/standin_pickcup, recorded when missing)",
    )
    ap.add_argument("--train-episodes", type=int, default=40)
    ap.add_argument("--heldout-episodes", type=int, default=10)
    ap.add_argument("--image-size", nargs=2, type=int, default=[64, 80], help="the model's frame size")
    ap.add_argument(
        "--crop",
        nargs=4,
        type=float,
        metavar=("TOP", "LEFT", "BOTTOM", "RIGHT"),
        help="train and evaluate on this region of the recorded frames (fractions; visaligner train "
        "--crop), e.g. 0.3 0.2 0.8 0.8 with --record-size 240 320 --image-size 80 128",
    )
    ap.add_argument(
        "--no-ablations",
        action="store_true",
        help="train and evaluate the full model only: rows (a) and (c), no mask or temporal ablation",
    )
    ap.add_argument("--record-size", nargs=2, type=int, help="recorded frame size (default --image-size)")
    ap.add_argument("--vae-steps", type=int, default=200)
    ap.add_argument("--steps", type=int, default=400, help="denoiser steps per model")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--sample-steps", type=int, default=10, help="denoising steps at evaluation")
    ap.add_argument("--local3d-steps", type=int, default=300)
    ap.add_argument("--base", help="a VisAligner base model folder: adds rows (e) and (f)")
    ap.add_argument(
        "--fine-tune-steps", nargs="*", type=int, default=[], help="row (f): the base fine-tuned this many steps"
    )
    ap.add_argument(
        "--few-steps",
        nargs="*",
        type=int,
        default=[],
        help="also sample (c) and the longest (f) with this many denoising steps",
    )
    ap.add_argument("--results", default=str(ROOT / "benchmarks/results/visaligner.json"))
    ap.add_argument("--figure", default=str(ROOT / "benchmarks/figures/visaligner_samples.png"))
    return ap.parse_args()


#: ``python -m embodied_gym.cli``, the commands the steps run.
CLI = [sys.executable, "-m", "embodied_gym.cli"]


def record_dataset(args, dataset: Path, out: Path) -> None:
    """Step 1: stand-in episodes with cam_high, unless ``dataset`` already holds a recording."""
    if (dataset / "meta" / "info.json").exists():
        return
    episodes, size = str(args.train_episodes + args.heldout_episodes), map(str, args.record_size or args.image_size)
    cmd = ["record", "--env", "EmbodieDreamer-PickCup-Real-v0", "--episodes", episodes, "--cameras", "cam_high"]
    cmd += ["--image-size", *size, "--workers", "2", "--out", str(dataset)]
    wait([run(CLI + cmd, out / "record.log")])


def data_command(args, dataset: Path, train_eps: list[int]) -> list[str]:
    """The ``visaligner train`` arguments every model here shares: the data and the training loop."""
    cmd = ["visaligner", "train", "--dataset", str(dataset), "--batch-size", str(args.batch_size)]
    return cmd + ["--sample-every", "200", "--checkpoint-every", "50", "--episodes", *map(str, train_eps)]


def train_command(args, dataset: Path, train_eps: list[int]) -> list[str]:
    """The ``visaligner train`` arguments of the models trained from scratch (the base fixes its own model)."""
    cmd = data_command(args, dataset, train_eps) + ["--preset", "tiny", "--image-size", *map(str, args.image_size)]
    return cmd + ["--vae-steps", str(args.vae_steps)] + (["--crop", *map(str, args.crop)] if args.crop else [])


def train_models(args, common: list[str], out: Path, timings: dict[str, float]) -> tuple[Path, Path]:
    """Step 2: the full model first (it trains the shared VAE), then full and no-mask in parallel."""
    from embodied_gym.checkpoints import latest

    full, nomask = out / "full", out / "nomask"
    t0 = time.time()
    if not (full / "vae" / "config.json").exists():
        # the VAE trains alone: every core; the two denoisers then train side by side, one thread each
        cmd = CLI + common + ["--out", str(full), "--steps", "0", "--threads", str(os.cpu_count() or 1)]
        wait([run(cmd, out / "train_vae.log")])
    timings["paired_and_vae_s"] = time.time() - t0
    nomask.mkdir(exist_ok=True)
    for name in () if args.no_ablations else ("vae", "paired.npz", "vae_loss.json"):
        src, dst = full / name, nomask / name
        if not dst.exists():
            subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    t0 = time.time()
    procs = []
    threads = str(os.cpu_count() or 1) if args.no_ablations else "1"  # one model alone: every core
    for d, extra in ((full, []),) + (() if args.no_ablations else ((nomask, ["--no-masks"]),)):
        done = latest(d)  # the newest checkpoint: trained this far already
        if not (done is not None and done.counter >= args.steps and (d / "model").exists()):
            cmd = CLI + common + ["--out", str(d), "--steps", str(args.steps), "--threads", threads] + extra
            procs.append(run(cmd, out / f"train_{d.name}.log"))
    wait(procs)
    timings["train_both_models_parallel_s"] = time.time() - t0
    return full, nomask


def fine_tune_models(args, base_cmd: list[str], out: Path, timings: dict[str, float]) -> dict[int, Path]:
    """Step 2b: the base model fine-tuned for each of ``--fine-tune-steps`` (one after another, every
    core; each resumes), with its wall time."""
    models = {}
    for n in sorted(args.fine_tune_steps):
        d = out / f"fine_tune_{n}"
        if not (d / "model" / "model_index.json").exists():
            t0 = time.time()
            cmd = CLI + base_cmd + ["--init", str(args.base), "--out", str(d), "--steps", str(n)]
            wait([run(cmd + ["--threads", str(os.cpu_count() or 1)], out / f"train_fine_tune_{n}.log")])
            (d / "wall_time_s.json").write_text(json.dumps(time.time() - t0))
        timings[f"fine_tune_{n}_s"] = json.loads((d / "wall_time_s.json").read_text())
        models[n] = d / "model"
    return models


def paired_data(args, dataset: Path, full: Path, eval_eps: list[int], out: Path) -> tuple[list, list]:
    """Step 3: the held-out (sim, real) episodes and the training ones, cut to the model's region when cropping."""
    from embodied_gym.visaligner.paired import crop_paired, load_paired, paired_episodes_cached, resize_paired

    held = paired_episodes_cached(dataset, out / "paired_heldout.npz", "cam_high", episodes=eval_eps)
    trained, _ = load_paired(full / "paired.npz")
    if args.crop:  # the model's region, cut as training cut it, measured at the model's size
        held, trained = (
            [resize_paired(crop_paired(e, args.crop), tuple(args.image_size)) for e in eps] for eps in (held, trained)
        )
    return held, trained


def fd_local3d_net(args, trained, stride: int, out: Path):
    """The FD-local3D net trained on the training episodes (reused when present), and its JSON record."""
    from embodied_gym.visaligner import metrics as M

    net_path = out / "fd_local3d.safetensors"
    if not net_path.exists():
        r = M.train_local3d(
            [e.real[::stride] for e in trained],
            [e.sim[::stride] for e in trained],
            net_path,
            steps=args.local3d_steps,
            clip_length=8,
            stride=1,
        )
        (out / "fd_local3d.json").write_text(json.dumps(r.__dict__))
    return M.load_local3d(net_path), json.loads((out / "fd_local3d.json").read_text())


def methods_to_compare(args, pipe_full, pipe_nomask, tuned: dict | None = None) -> dict:
    """Row name -> ``(pipeline, temporal layers on, denoising steps)``, or None for the raw sim render
    (pipelines loaded from a folder: their videos are cached by it, see :func:`generate_heldout`)."""
    from embodied_gym.visaligner.pipeline import VisAlignerPipeline

    n = args.sample_steps
    methods = {
        "(a) raw sim render": None,
        "(b) VisAligner, no masks": (pipe_nomask, True, n),
        "(c) VisAligner full": (pipe_full, True, n),
        "(d) full, temporal layers off": (pipe_full, False, n),
    }
    if args.no_ablations:
        methods = {k: v for k, v in methods.items() if k.startswith(("(a)", "(c)"))}
    if args.base:
        methods["(e) base model, no fine-tune"] = (VisAlignerPipeline.from_pretrained(args.base), True, n)
    pipes = {k: VisAlignerPipeline.from_pretrained(d) for k, d in (tuned or {}).items()}
    for k, pipe in pipes.items():
        methods[f"(f) base + {k} fine-tune steps"] = (pipe, True, n)
    for few in args.few_steps:
        methods[f"(c), {few} denoising steps"] = (pipe_full, True, few)
        if pipes:
            k = max(pipes)
            methods[f"(f) base + {k} fine-tune steps, {few} denoising steps"] = (pipes[k], True, few)
    return methods


@dataclass
class HeldOut:
    """The held-out episodes at the model's frame stride, and every method's video of each."""

    videos: dict[str, list[np.ndarray]]
    reals: list[np.ndarray] = field(default_factory=list)
    objs: list[np.ndarray] = field(default_factory=list)  # dilated real object masks
    conds: list[np.ndarray] = field(default_factory=list)  # the condition videos


def _video_cache(cache_dir: Path, spec, ep_index: int) -> Path | None:
    """Where a method's video of one held-out episode is kept between runs: named by the model folder
    (and the time it was written), the temporal switch, the denoising steps and the episode."""
    import hashlib

    pipe, temporal, steps = spec
    folder = Path(pipe.config._name_or_path)
    if not (folder / "model_index.json").exists():
        return None
    key = f"{folder.resolve()}|{(folder / 'model_index.json').stat().st_mtime_ns}|{temporal}|{steps}|{ep_index}"
    return cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.npy"


def generate_heldout(held, methods: dict, stride: int, cache_dir: Path) -> HeldOut:
    """Step 4: every method's video of every held-out episode, generated chunk by chunk from its first
    real frame (or read from ``cache_dir``, where a rerun finds what an earlier one generated)."""
    import torch
    from tqdm import tqdm

    from embodied_gym.atomic import atomic_path
    from embodied_gym.visaligner.conditioning import condition_video

    cache_dir.mkdir(parents=True, exist_ok=True)
    h = HeldOut(videos={k: [] for k in methods})
    for ep in tqdm(held, desc="held-out generation", unit="ep"):
        real, sim, smask = ep.real[::stride], ep.sim[::stride], ep.sim_mask[::stride]
        h.reals.append(real)
        h.objs.append(dilate(ep.real_mask[::stride]))
        h.conds.append(condition_video(real[0], sim, smask))
        for name, spec in methods.items():
            if spec is None:
                h.videos[name].append(sim)
                continue
            pipe, temporal, steps = spec
            cached = _video_cache(cache_dir, spec, ep.index)
            if cached is not None and cached.exists():
                h.videos[name].append(np.load(cached))
                continue
            g = torch.Generator().manual_seed(1000 + ep.index)
            video = pipe.generate_video(real[0], sim, smask, steps, g, temporal)
            if cached is not None:
                with atomic_path(cached) as tmp, open(tmp, "wb") as f:
                    np.save(f, video)
            h.videos[name].append(video)
    return h


def metric_rows(h: HeldOut, net, n_eval: int) -> dict[str, dict]:
    """Step 5: each method's metrics (frame 0, the reference, excluded), and the proxy's noise floor."""
    from embodied_gym.visaligner import metrics as M

    reals, objs = h.reals, h.objs
    rows = {}
    for name, vids in h.videos.items():
        rows[name] = {
            "psnr_db": float(np.mean([M.psnr(v[1:], r[1:]) for v, r in zip(vids, reals)])),
            "ssim": float(np.mean([M.ssim(v[1:], r[1:]) for v, r in zip(vids, reals)])),
            "object_psnr_db": float(np.nanmean([M.psnr(v[1:], r[1:], o[1:]) for v, r, o in zip(vids, reals, objs)])),
            "fd_local3d": M.fd_local3d(net, [v[1:] for v in vids], [r[1:] for r in reals], clip_length=8, stride=1),
            "flicker": float(np.mean([M.flicker(v[1:], r[1:]) for v, r in zip(vids, reals)])),
        }
    if n_eval >= 4:  # the proxy's noise floor: real held-out episodes against other real ones
        rows["(ref) real vs real, two halves of the held-out episodes"] = {
            "fd_local3d": M.fd_local3d(
                net,
                [r[1:] for r in reals[: n_eval // 2]],
                [r[1:] for r in reals[n_eval // 2 :]],
                clip_length=8,
                stride=1,
            )
        }
    return rows


def sample_grid(h: HeldOut, figure: str) -> tuple[list[str], np.ndarray]:
    """Step 6: one held-out episode, 8 frames from t = 1, a row per video; returns (row names, frames)."""
    from embodied_gym.visaligner.training import save_png

    k = 0
    cols = np.arange(1, min(len(h.reals[k]), 1 + 8 * 3), 3)[:8]
    grid_rows = [("real (target)", h.reals[k]), ("condition", h.conds[k])] + [(n, v[k]) for n, v in h.videos.items()]
    pad = lambda row: np.concatenate(
        [x for f in row[cols] for x in (f, np.full((f.shape[0], 2, 3), 255, np.uint8))], axis=1
    )
    img = np.concatenate([x for _, r in grid_rows for x in (pad(r), np.full((2, pad(r).shape[1], 3), 255, np.uint8))])
    Path(figure).parent.mkdir(parents=True, exist_ok=True)
    save_png(figure, img)
    return [n for n, _ in grid_rows], cols


def print_table(rows: dict, local3d_info: dict, figure: str, timings: dict) -> None:
    print("| method (10 held-out stand-in episodes) | PSNR dB | SSIM | object-region PSNR dB | FD-local3D | flicker |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        f = lambda key, fmt, r=r: (fmt % r[key]) if key in r else "—"
        print(
            f"| {name} | {f('psnr_db', '%.2f')} | {f('ssim', '%.3f')} | {f('object_psnr_db', '%.2f')} | "
            f"{f('fd_local3d', '%.4f')} | {f('flicker', '%.4f')} |"
        )
    print(f"FD-local3D net sha256 {local3d_info['sha256']}; figure {figure}; timings {timings}")


def main() -> int:
    args = parse_args()
    import torch

    torch.set_num_threads(1)  # one thread per process is fastest on a shared 2-core machine
    from embodied_gym.atomic import write_json
    from embodied_gym.visaligner.pipeline import VisAlignerPipeline

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    n_train, n_eval = args.train_episodes, args.heldout_episodes
    dataset = Path(args.dataset or out / "standin_pickcup")
    t0 = time.time()
    record_dataset(args, dataset, out)
    timings["record_s"] = time.time() - t0
    train_eps = list(range(n_train))
    eval_eps = list(range(n_train, n_train + n_eval))
    full, nomask = train_models(args, train_command(args, dataset, train_eps), out, timings)

    # 3. held-out data at the model's frame stride; FD-local3D net trained on the training episodes
    pipe_full = VisAlignerPipeline.from_pretrained(full / "model")
    pipe_nomask = None if args.no_ablations else VisAlignerPipeline.from_pretrained(nomask / "model")
    stride = pipe_full.config.frame_stride
    held, trained = paired_data(args, dataset, full, eval_eps, out)
    t0 = time.time()
    net, local3d_info = fd_local3d_net(args, trained, stride, out)
    timings["fd_local3d_train_s"] = time.time() - t0

    t0 = time.time()
    tuned = fine_tune_models(args, data_command(args, dataset, train_eps), out, timings) if args.base else {}
    methods = methods_to_compare(args, pipe_full, pipe_nomask, tuned)
    h = generate_heldout(held, methods, stride, out / "heldout_videos")
    timings["heldout_generation_s"] = time.time() - t0
    rows = metric_rows(h, net, n_eval)
    row_order, cols = sample_grid(h, args.figure)

    result = {
        "rows": rows,
        "row_order_in_figure": row_order,
        "figure_frames": cols.tolist(),
        "train_episodes": train_eps,
        "heldout_episodes": eval_eps,
        "frame_stride": stride,
        "sample_steps": args.sample_steps,
        "crop": args.crop,
        "image_size": args.image_size,
        "record_size": args.record_size or args.image_size,
        "denoiser_steps": args.steps,
        "vae_steps": args.vae_steps,
        "batch_size": args.batch_size,
        "fd_local3d_net": local3d_info,
        "timings_s": timings,
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "torch_threads": torch.get_num_threads(),
        },
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    for path in (out / "results.json", Path(args.results)):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, result)
    print_table(rows, local3d_info, args.figure, timings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
