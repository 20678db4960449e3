"""The loop started from demonstrations recorded with LeRobot's own ``lerobot-record`` (issue: your own robot).

A user with a real ALOHA records teleoperated demonstrations with ``lerobot-record`` and starts the loop
from them with ``embodied-gym demo --demos DATASET``. No hardware reaches us, so this records the same
way on a stand-in world: ``lerobot-record --robot.type=embodied_gym_stand_in`` with the scripted operator
as the teleoperator (``--teleop.type=embodied_gym_scripted``), one episode per call (LeRobot never resets
a robot's scene; episode i is set from ``episode_seed = seed + i`` on both), into a LeRobotDataset with
LeRobot's feature names and no embodied-gym sidecar. Then the quick demo runs from that dataset, against
the same stand-in world, and the tables of benchmarks/demo.py are printed:

    MUJOCO_GL=egl .venv/bin/python benchmarks/lerobot_demos.py --world default --out runs/lerobot_default
    MUJOCO_GL=egl .venv/bin/python benchmarks/lerobot_demos.py --world world2 --out runs/lerobot_world2

Resumable: the recording continues from the episodes the dataset holds, and the demo from its finished
stages. Any other flag goes to the demo, e.g. the RL rows on 100 paired seeds (BENCHMARKS.md, TPO section):

    MUJOCO_GL=egl .venv/bin/python benchmarks/lerobot_demos.py --world default --out runs/lerobot_default \
        --evaluate.episodes 100 --evaluate.policies expert act_stand_in act_aligned tpo residual \
        --evaluate.comparisons act_aligned,act_stand_in tpo,act_aligned residual,act_aligned tpo,residual

``--summary`` prints the tables of a finished run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROBOTS = Path(__file__).resolve().parents[1] / "embodied_gym" / "robots"
WORLDS = {"default": ROBOTS / "stand_in_default.yaml", "world2": ROBOTS / "stand_in_world2.yaml"}
BIN = Path(sys.executable).parent


def recorded(root: Path) -> int:
    info = root / "meta" / "info.json"
    return int(json.loads(info.read_text()).get("total_episodes", 0)) if info.is_file() else 0


def record(args, root: Path, world: Path) -> float:
    """Record the missing episodes with lerobot-record, one call each; returns the seconds it took."""
    t0 = time.time()
    description = {"PickCup": "pick up the paper cup"}.get(args.task, args.task)
    for i in range(recorded(root), args.episodes):
        seed = args.seed + i
        cmd = [
            str(BIN / "lerobot-record"),
            "--robot.type=embodied_gym_stand_in",
            f"--robot.task={args.task}",
            f"--robot.config_path={world}",
            f"--robot.episode_seed={seed}",
            "--robot.camera_names=[cam_high]",
            f"--robot.image_size=[{args.image_size[0]},{args.image_size[1]}]",
            f"--robot.camera_fps={args.camera_fps}",
            "--teleop.type=embodied_gym_scripted",
            f"--teleop.task={args.task}",
            f"--teleop.config_path={world}",
            f"--teleop.episode_seed={seed}",
            f"--dataset.repo_id=local/{root.name}",
            f"--dataset.root={root}",
            "--dataset.fps=50",
            f"--dataset.episode_time_s={args.episode_time_s}",
            "--dataset.reset_time_s=0",
            "--dataset.num_episodes=1",
            f"--dataset.single_task={description}",
            "--dataset.push_to_hub=false",
            "--dataset.no_stamp=true",
            "--play_sounds=false",
            *(["--resume=true"] if i else []),
        ]
        print(f"[lerobot_demos] lerobot-record episode {i + 1}/{args.episodes} (episode_seed {seed})", flush=True)
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or recorded(root) != i + 1:
            sys.exit(f"lerobot-record failed on episode {i}:\n{res.stderr[-3000:]}")
        said = [ln for ln in res.stderr.splitlines() if "[embodied_gym_scripted]" in ln]
        print("  " + (said[-1] if said else "(the operator said nothing)"), flush=True)
        if not said or "did not succeed" in said[-1]:
            # lerobot-record ends an episode by the wall clock; a demonstration cut before the task is done is
            # not one a person would keep (the dataset cannot drop it, so start again)
            sys.exit(
                f"episode {i} ended before the operator finished the task (a slow or busy machine records fewer "
                f"frames in --episode-time-s {args.episode_time_s}): delete {root} and rerun with a longer one"
            )
    return time.time() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", choices=sorted(WORLDS), default="default")
    p.add_argument("--task", default="PickCup")
    p.add_argument("--episodes", type=int, default=20, help="demonstrations (the quick profile records 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--episode-time-s",
        type=float,
        default=10.0,
        help="lerobot-record's episode length (wall clock; the task takes ~130 control steps, which the stand-in "
        "runs at 20-35 Hz here)",
    )
    p.add_argument("--camera-fps", type=float, default=10.0, help="the stand-in camera's rate (the quick profile's)")
    p.add_argument(
        "--image-size", type=int, nargs=2, default=[240, 320], help="camera frames (the pose estimator's size)"
    )
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", help="run folder: OUT/lerobot_dataset and the demo's run OUT/demo")
    p.add_argument("--summary", metavar="RUN", help="print the tables of a finished run folder (OUT) and exit")
    args, passed = p.parse_known_args()  # any other flag goes to the demo (e.g. --evaluate.episodes 100)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from demo import tables  # benchmarks/demo.py

    if args.summary:
        print(tables(json.loads((Path(args.summary) / "demo" / "summary.json").read_text())))
        return
    if not args.out:
        p.error("--out is required (or --summary RUN)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    world = WORLDS[args.world]
    dataset = out / "lerobot_dataset"
    seconds = record(args, dataset, world)
    print(
        f"[lerobot_demos] {recorded(dataset)} episodes in {dataset} ({seconds / 60:.1f} min of recording)", flush=True
    )
    demo = [
        str(BIN / "embodied-gym"),
        "demo",
        "--profile",
        args.profile,
        "--tasks",
        args.task,
        "--demos",
        str(dataset),
        "--robot-config",
        str(world),
        "--record.episodes",
        str(args.episodes),
        "--runs",
        str(out),
        "--name",
        "demo",
        *passed,
    ]
    print("[lerobot_demos] " + " ".join(demo), flush=True)
    subprocess.run(demo, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    print(tables(json.loads((out / "demo" / "summary.json").read_text())))


if __name__ == "__main__":
    main()
