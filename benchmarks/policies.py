"""The paper's policy experiment (EmbodieDreamer, arXiv 2507.05198) against the stand-in robot, CPU-sized.

Rows (all evaluated on the stand-in robot, ``EmbodieDreamer-<Task>-Real-v0``):

(a) ACT on ``--demos`` stand-in demonstrations, three cameras (cam_high + both wrists)
(b) the same, cam_high only
(c) ACT, cam_high only, trained in the aligned sim: expert demonstrations in the sim with the
    calibrated physics (``--physics``) whose frames VisAligner renders (``--visaligner``); without
    ``--visaligner``, plain sim renders (and nominal physics without ``--physics``)
(d) (c) after TPO in the same (aligned) sim

    MUJOCO_GL=egl .venv/bin/python benchmarks/policies.py --out runs/bench_policies \
        [--physics result.json --visaligner DIR] [--steps 2000] [--eval-episodes 50]

The demo (``embodied-gym demo``) produces both inputs: ``runs/<name>/calibrate/result.json`` and
``runs/<name>/visaligner/train/model``.

Every stage is skipped when its output exists, so an interrupted run resumes (and a changed setting
needs a new ``--out``; rows (c)/(d) with and without ``--visaligner`` use separate folders). Results go to
``<out>/results.json`` and a bar chart with Wilson 95 % intervals to ``<out>/policies.png``
(``--figure`` copies it, e.g. to benchmarks/figures/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import embodied_gym  # noqa: F401  (registers the ids)
from embodied_gym.atomic import write_json
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.reader import is_dataset, read_info
from embodied_gym.data.recording import record
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.policies.act import ACTTrainConfig, latest_checkpoint, train_act
from embodied_gym.policies.evaluate import evaluate_policy
from embodied_gym.policies.loading import ExpertAgent, make_env_for
from embodied_gym.policies.tpo import TPOConfig, train_tpo
from embodied_gym.visaligner.generate import AlignedDemosConfig, generate_aligned_demos

THREE = ("cam_high", "cam_left_wrist", "cam_right_wrist")


def _record(env_id: str, root: Path, episodes: int, cameras, image_size, args, physics=None, seed=0) -> float:
    have = read_info(root)["total_episodes"] if is_dataset(root) else 0
    if have:
        if have >= episodes:
            return float("nan")
    agent = ExpertAgent()
    env = make_env_for(agent, env_id, physics=physics, obs_type="pixels_state", cameras=tuple(cameras),
                       image_size=tuple(image_size))
    t0 = time.time()
    try:
        record(env, agent, root, episodes - have, seed=seed, env_id=env_id, resume=have > 0,
               after_success_steps=args.after_success_steps, crf=args.crf)
    finally:
        env.close()
    return time.time() - t0


def _first_real_frame(dataset: Path, png: Path) -> Path:
    from PIL import Image

    from embodied_gym.data.reader import open_dataset

    if not png.exists():
        if not is_dataset(dataset):
            raise SystemExit(f"no stand-in recording at {dataset} to take the reference frame from: run row a or b "
                             f"first, or pass --reference IMAGE")
        Image.fromarray(open_dataset(dataset).frames("cam_high", 0)[0]).save(png)
    return png


def _train(dataset: Path, out: Path, cameras, args) -> float:
    ckpt = latest_checkpoint(out)
    if ckpt is None or int(ckpt.name) < args.steps:
        train_act(ACTTrainConfig(dataset=str(dataset), out=str(out), preset="cpu", cameras=tuple(cameras),
                                 steps=args.steps, resume=ckpt is not None, num_threads=args.threads,
                                 save_every=max(100, args.steps // 4)))
    return _train_time(out / "train_log.jsonl")


def _train_time(log: Path) -> float:
    """Optimisation time over all (resumed) runs: ``time_s`` restarts at every resume."""
    total, last = 0.0, 0.0
    for line in log.read_text().splitlines():
        t = json.loads(line)["time_s"]
        if t < last:
            total += last
        last = t
    return total + last


def _eval(policy: Path, env_id: str, out: Path, args) -> dict:
    if not out.exists():
        evaluate_policy(str(policy), env_id, args.eval_episodes, seed=args.eval_seed, out=str(out))
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="PickCup")
    p.add_argument("--out", default="runs/bench_policies")
    p.add_argument("--demos", type=int, default=50)
    p.add_argument("--image-size", nargs=2, type=int, default=[72, 96],
                   help="recorded frame size; ACT trains at exactly this size (the cpu preset keeps it)")
    p.add_argument("--after-success-steps", type=int, default=AFTER_SUCCESS_STEPS,
                   help="control steps recorded after the first success")
    p.add_argument("--crf", type=int, default=DEFAULT_CRF, help="video quality (lower keeps more; 0 lossless)")
    p.add_argument("--steps", type=int, default=2000, help="ACT steps per row (cpu preset)")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--eval-seed", type=int, default=100_000, help="evaluation seeds differ from demo seeds")
    p.add_argument("--physics", help="PhysAligner result JSON for the aligned sim (rows c, d)")
    p.add_argument("--visaligner", help="VisAligner model folder (rows c, d): the aligned sim's camera")
    p.add_argument("--visaligner-steps", type=int, default=10, help="VisAligner denoising steps (rows c, d)")
    p.add_argument("--reference", help="real frame the aligned-sim episodes start from (default: the first "
                                       "stand-in demo's first cam_high frame)")
    p.add_argument("--tpo-iterations", type=int, default=2)
    p.add_argument("--tpo-rollouts", type=int, default=8)
    p.add_argument("--tpo-pairs", type=int, default=4)
    p.add_argument("--tpo-epochs", type=int, default=5)
    p.add_argument("--tpo-laplace-scale", type=float, default=0.1, help="b of TPO's Laplace likelihood")
    p.add_argument("--tpo-sft-weight", type=float, default=0.0, help="TPO's optional L1 anchor (0: the paper's loss)")
    p.add_argument("--rows", nargs="+", default=["a", "b", "c", "d"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--figure", help="also copy the figure here")
    args = p.parse_args()
    if args.visaligner and not args.physics:
        raise SystemExit("--visaligner needs --physics too: row (c) is the aligned sim (calibrated physics and "
                         "VisAligner frames); run `embodied-gym calibrate` first, or the demo, which does both")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    real = f"EmbodieDreamer-{args.task}-Real-v0"
    sim = f"EmbodieDreamer-{args.task}-v0"
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    timings = results.get("_settings", {}).get("timings", {})
    cams_a = THREE if "a" in args.rows else ("cam_high",)  # row (b) uses cam_high of the same recording

    if {"a", "b"} & set(args.rows):
        t = _record(real, out / "data_standin", args.demos, cams_a, args.image_size, args)
        if t == t:  # NaN when the dataset was already there
            timings["record_standin_s"] = t
    sim_data = out / "data_sim"
    if {"c", "d"} & set(args.rows) and args.visaligner:
        # the aligned sim: expert demos in the calibrated sim, frames rendered by VisAligner from a real frame
        t0 = time.time()
        reference = args.reference or str(_first_real_frame(out / "data_standin", out / "reference.png"))
        gen = generate_aligned_demos(AlignedDemosConfig(
            task=args.task, episodes=args.demos, physics=args.physics, model=args.visaligner, reference=reference,
            image_size=tuple(args.image_size), seed=50_000, num_inference_steps=args.visaligner_steps,
            after_success_steps=args.after_success_steps, crf=args.crf),
            out / "data_aligned")
        sim_data = Path(gen["dataset"])
        timings.setdefault("generate_aligned_s", time.time() - t0)
    elif {"c", "d"} & set(args.rows):
        t = _record(sim, sim_data, args.demos, ("cam_high",), args.image_size, args, physics=args.physics,
                    seed=50_000)
        if t == t:
            timings["record_sim_s"] = t

    rows = {
        "a": ("ACT, stand-in demos, 3 cameras", out / "data_standin", cams_a),
        "b": ("ACT, stand-in demos, cam_high", out / "data_standin", ("cam_high",)),
        "c": ("ACT, aligned sim (calibrated physics, VisAligner frames), cam_high" if args.visaligner else
              "ACT, sim demos, cam_high" + (" (calibrated physics)" if args.physics else " (nominal physics)"),
              sim_data, ("cam_high",)),
    }
    results["_settings"] = {"task": args.task, "demos": args.demos, "image_size": args.image_size,
                            "after_success_steps": args.after_success_steps, "crf": args.crf,
                            "steps": args.steps, "eval_episodes": args.eval_episodes, "physics": args.physics,
                            "visaligner": args.visaligner, "visaligner_steps": args.visaligner_steps,
                            "timings": timings}
    # rows (c)/(d) in the aligned sim and in the plain sim never share output folders
    mode = "_aligned" if args.visaligner else ""
    folder = {"a": "a", "b": "b", "c": f"c{mode}", "mode": mode}
    for key in args.rows:  # in the order given; results are saved after every row
        if key in ("a", "b", "c"):
            name, data, cams = rows[key]
            t = _train(data, out / f"act_{folder[key]}", cams, args)
            ev = _eval(out / f"act_{folder[key]}", real, out / f"eval_{folder[key]}.json", args)
            results[key] = {"row": name, "success_rate": ev["success_rate"], "ci95": ev["ci95"],
                            "episodes": ev["episodes"], "mean_return": ev["mean_return"], "train_time_s": t,
                            "steps": args.steps}
        elif key == "d":
            t_c = _train(sim_data, out / f"act_{folder['c']}", ("cam_high",), args)
            b, w = args.tpo_laplace_scale, args.tpo_sft_weight
            # the default TPO is row (d); other likelihood scales and the optional anchor are extra rows
            tag = "d" + ("" if b == 0.1 else f"_b{b:g}") + ("" if not w else f"_sft{w:g}")
            tpo_out = out / f"tpo_{tag}{folder['mode']}"
            log = train_tpo(TPOConfig(policy=str(out / f"act_{folder['c']}"), env_id=sim, out=str(tpo_out),
                                      iterations=args.tpo_iterations, rollouts=args.tpo_rollouts,
                                      pairs=args.tpo_pairs, epochs=args.tpo_epochs, physics=args.physics,
                                      visaligner=args.visaligner, visaligner_steps=args.visaligner_steps,
                                      laplace_scale=b, sft_weight=w, num_threads=args.threads))
            tpo_time = sum(r["rollout_time_s"] + r["train_time_s"] for r in log)
            ev = _eval(tpo_out, real, out / f"eval_{tag}{folder['mode']}.json", args)
            results[tag] = {"row": f"(c) after TPO (Laplace b={b:g}" + (f", L1 anchor {w:g})" if w else ")"),
                            "success_rate": ev["success_rate"],
                            "ci95": ev["ci95"],
                            "episodes": ev["episodes"], "mean_return": ev["mean_return"],
                            "train_time_s": t_c + tpo_time, "tpo_time_s": tpo_time,
                            "tpo": {"iterations": args.tpo_iterations, "rollouts": args.tpo_rollouts,
                                    "pairs": args.tpo_pairs, "epochs": args.tpo_epochs, "laplace_scale": b,
                                    "sft_weight": w,
                                    "loss_last": [r["loss_last"] for r in log],
                                    "rollout_success": [r["rollout_success_rate"] for r in log],
                                    "score_mean": [r["score_mean"] for r in log]}}
        _save(results, results_path)
        _plot(results, out / "policies.png", args.task)
        if args.figure:
            Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(out / "policies.png", args.figure)
    print("| row | success on the stand-in (95 % CI) | mean return | training time |")
    print("|---|---|---|---|")
    for key in sorted(k for k in results if not k.startswith("_")):
        if key in results:
            r = results[key]
            lo, hi = r["ci95"]
            print(f"| ({key}) {r['row']} | {r['success_rate']:.0%} ({lo:.0%}-{hi:.0%}), n={r['episodes']} | "
                  f"{r['mean_return']:.1f} | {r['train_time_s'] / 60:.1f} min |")


def _save(results: dict, path: Path) -> None:
    write_json(path, results)


def _plot(results: dict, png: Path, task: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(k for k in results if not k.startswith("_"))
    if not keys:
        return
    rates = [results[k]["success_rate"] for k in keys]
    err = [[r - results[k]["ci95"][0] for k, r in zip(keys, rates)], [results[k]["ci95"][1] - r for k, r in zip(keys, rates)]]
    import textwrap

    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.bar(range(len(keys)), rates, yerr=err, capsize=4, color="#4c78a8")
    ax.set_xticks(range(len(keys)), [f"({k})\n" + textwrap.fill(results[k]["row"], 22) for k in keys], fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("success on the stand-in robot")
    ax.set_title(f"{task}: the paper's ACT rows (stand-in, Wilson 95 % CI)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
