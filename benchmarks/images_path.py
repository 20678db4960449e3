"""The paper's own path at a size two CPU cores train: LeRobot's ACT reading the camera's frames (the demo's
``observation: images``) instead of the pose estimate, on one task.

Rows (each a policy trained here, every step resumable: a finished recording, training or evaluation is read,
not rerun):

- ``sim``: ACT on ``--sim-demos`` scripted-expert demonstrations recorded in the nominal sim (its plain
  renders), evaluated in the nominal sim (can image ACT learn the task at this size at all?) and on the stand-in
  robot (the look and physics gap VisAligner and PhysAligner exist for);
- ``stand_in``: ACT on ``--stand-in-demos`` demonstrations recorded on the stand-in robot, its own
  camera, evaluated on the stand-in.

Sizes: ``cam_high`` recorded at ``--record-size`` and fed to ACT at ``--image-size``; ACT's ``cpu`` preset
(ResNet-18 from random weights: nothing is downloaded; ``--backbone-weights FILE`` for ImageNet's), without its
VAE, ``--steps`` steps of batch 32, temporal ensembling 0.01, 5 mrad of arm-state noise, one torch thread.
Every policy is evaluated on the same ``--episodes`` seeds from 100000 in each place; exact McNemar tests
between the stand-in rows.

    MUJOCO_GL=egl .venv/bin/python benchmarks/images_path.py --out runs/images_path            # PickCup, both rows
    MUJOCO_GL=egl .venv/bin/python benchmarks/images_path.py --out runs/images_path --rows sim  # one row
    MUJOCO_GL=egl .venv/bin/python benchmarks/images_path.py --out runs/images_path --report   # what finished

Output: the table on stdout (markdown) and ``OUT/images_path.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
EVAL_SEED = 100_000


def recorded_episodes(folder: Path) -> int:
    info = folder / "meta" / "info.json"
    return json.loads(info.read_text())["total_episodes"] if info.exists() else 0


def record(env: str, folder: Path, episodes: int, seed: int, args) -> Path:
    """``episodes`` scripted-expert demonstrations with the camera's video (a folder holding them is kept)."""
    if recorded_episodes(folder) >= episodes:
        return folder
    if folder.exists():  # a stopped recording: start it again (record appends to a folder)
        raise SystemExit(f"{folder} holds {recorded_episodes(folder)} of {episodes} episodes: remove it and rerun")
    cmd = [str(BIN / "embodied-gym"), "record", "--env", env, "--episodes", str(episodes), "--seed", str(seed)]
    cmd += ["--cameras", "cam_high", "--image-size", *map(str, args.record_size), "--workers", str(args.workers)]
    if args.robot_config and "-Real-" in env:
        cmd += ["--robot-config", args.robot_config]
    subprocess.run([*cmd, "--out", str(folder)], check=True)
    return folder


def train(dataset: Path, folder: Path, args) -> Path:
    """ACT on ``dataset``'s frames and joint state (resumes from its last checkpoint); its policy folder."""
    policy = folder / "checkpoints" / f"{args.steps:06d}" / "pretrained_model"
    if policy.is_dir():
        return policy
    cmd = [str(BIN / "embodied-gym"), "train", "act", "--dataset", str(dataset), "--out", str(folder)]
    cmd += ["--preset", "cpu", "--images", "--steps", str(args.steps), "--batch-size", "32", "--image-size"]
    cmd += [*map(str, args.image_size), "--temporal-ensemble", "0.01", "--state-noise", "0.005", "--threads", "1"]
    cmd += ["--seed", str(args.seed), "--resume", "--overrides", "use_vae=false"]
    if args.backbone_weights:
        cmd += ["--backbone-weights", args.backbone_weights]
    subprocess.run(cmd, check=True)
    return policy


def evaluate(policy: Path, env: str, out: Path, args) -> dict:
    """``policy`` on ``--episodes`` seeds from 100000 in ``env`` (the evaluation JSON; kept and read back)."""
    if not out.exists():
        cmd = [str(BIN / "embodied-gym"), "eval", "--policy", str(policy), "--env", env, "--episodes"]
        cmd += [str(args.episodes), "--seed", str(EVAL_SEED), "--workers", str(args.workers), "--threads", "1"]
        if "-Real-" in env:
            cmd += ["--no-confirm"] + (["--robot-config", args.robot_config] if args.robot_config else [])
        subprocess.run([*cmd, "--out", str(out)], check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/images_path"))
    p.add_argument("--task", default="PickCup")
    p.add_argument("--sim-demos", type=int, default=200, help="nominal-sim demonstrations of row sim")
    p.add_argument("--stand-in-demos", type=int, default=50, help="stand-in demonstrations of row stand_in")
    p.add_argument("--rows", nargs="+", default=["sim", "stand_in"], choices=["sim", "stand_in"], help="rows to run")
    p.add_argument("--record-size", type=int, nargs=2, default=[96, 128], metavar=("H", "W"))
    p.add_argument("--image-size", type=int, nargs=2, default=[64, 80], metavar=("H", "W"), help="ACT's input")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0, help="ACT's training seed")
    p.add_argument("--backbone-weights", default=None, help="a local ResNet-18 weights file (default: random init)")
    p.add_argument("--episodes", type=int, default=50, help="evaluation episodes per place")
    p.add_argument("--robot-config", default=None, help="the stand-in world (default: the shipped one)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--report", action="store_true", help="only print what finished")
    args = p.parse_args(argv)

    from embodied_gym.policies.evaluate import pairwise_comparisons

    sim_env, real_env = f"EmbodieDreamer-{args.task}-v0", f"EmbodieDreamer-{args.task}-Real-v0"
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows = {"sim": (sim_env, out / "sim_demos", args.sim_demos, 50_000)}
    rows["stand_in"] = (real_env, out / "stand_in_demos", args.stand_in_demos, 0)
    places = {"sim": sim_env, "stand_in": real_env}
    results: dict = {}
    for row, (env, demos, n, seed) in rows.items():
        evals = {place: out / f"{row}_on_{place}.json" for place in places if row == "sim" or place == "stand_in"}
        if not args.report and row in args.rows:
            policy = train(record(env, demos, n, seed, args), out / f"act_{row}", args)
            for place, path in evals.items():
                evaluate(policy, places[place], path, args)
        done = {place: json.loads(path.read_text()) for place, path in evals.items() if path.exists()}
        if done:
            results[row] = done

    size = f"{args.image_size[0]}x{args.image_size[1]}"
    print(f"\n{args.task}: image ACT ({size} frames, {args.steps} steps of 32), {args.episodes} seeds per place")
    print(
        "| row | demos | success in the nominal sim | on the stand-in | grasped on the stand-in |\n|---|---|---|---|---|"
    )
    for row, evals in results.items():
        cells = []
        for place in places:
            r = evals.get(place)
            cells.append("-" if r is None else f"{r['success_rate']:.0%} ({r['ci95'][0]:.0%}-{r['ci95'][1]:.0%})")
        grasp = evals.get("stand_in", {}).get("grasp_rate")
        demos = f"{rows[row][2]} {'nominal-sim' if row == 'sim' else 'stand-in'}"
        print(f"| {row} | {demos} | {cells[0]} | {cells[1]} | {'-' if grasp is None else f'{grasp:.0%}'} |")
    on_robot = {
        r: [e["success"] for e in ev["stand_in"]["per_episode"]] for r, ev in results.items() if "stand_in" in ev
    }
    tests = {f"{a} vs {b}": c.to_json() for (a, b), c in pairwise_comparisons(on_robot).items()}
    if tests:
        print("\n| on the stand-in | rates | only first / only second | exact McNemar p |\n|---|---|---|---|")
    for name, t in tests.items():
        print(
            f"| {name} | {t['rate_a']:.0%} vs {t['rate_b']:.0%} | {t['only_a']} / {t['only_b']} | {t['p_value']:.2g} |"
        )
    summary = {"task": args.task, "image_size": args.image_size, "steps": args.steps, "episodes": args.episodes}
    summary |= {"rows": {r: {p_: ev[p_]["success_rate"] for p_ in ev} for r, ev in results.items()}, "tests": tests}
    from embodied_gym import atomic

    atomic.write_json(out / "images_path.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
