"""Which physics makes the generated demonstrations train a weaker or a stronger ACT on the stand-in: the
calibrated delay, the rest of the fit, or how faithful the sim is at all.

On world2 the uncalibrated sim's demonstrations (row (b) of ``policies.py``) trained a better ACT than the
calibrated sim's (row (c)) on PickCup and on PenInCup, while on the default world (c) won. World2's robot acts
two control steps late and PhysAligner found that delay; the nominal sim has none. This script regenerates
row (c)'s demonstrations in variants of the sim and trains and evaluates ACT on each exactly as the demo run
did (its ``generate`` and ``act_aligned`` stage settings: the same episode seeds, estimator layout, true poses
as labels, ACT settings and training seed), then compares each variant with the run's (b) and (c) on the same
stand-in seeds (exact McNemar), beside each sim's open-loop replay error on the calibration's held-out episodes:

- ``no_delay``: the calibrated physics with the delay set to 0 steps;
- ``nominal_delay``: the nominal physics with the calibrated delay;
- ``no_backlash``: the calibrated physics with every joint's backlash set to 0;
- ``constrained``: the calibrated physics with every parameter the calibration result lists as not
  constrained by the data (``unconstrained``: moving it by a tenth of its box raises the fit loss by under 1 %)
  put back at its starting value;
- ``world``: the stand-in world's own hidden physics as far as ``PhysicsParams`` holds it (read from
  ``--robot-config`` for this measurement only, as ``sim_gap.py`` reads it): what a perfect calibration of
  those parameters would give.

    MUJOCO_GL=egl .venv/bin/python benchmarks/generate_physics.py --run runs/bench/policies/world2/PickCup/seed0 \\
        --task PickCup --robot-config embodied_gym/robots/stand_in_world2.yaml [--variants no_delay nominal_delay no_backlash constrained world]

Each variant's demonstrations, policy and evaluation go to ``RUN/generate_physics/VARIANT/``; a finished step is
read back, a stopped training resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

VARIANTS = {
    "no_delay": "calibrated physics, no delay",
    "nominal_delay": "nominal physics, the calibrated delay",
    "no_backlash": "calibrated physics, no backlash",
    "constrained": "calibrated physics, unconstrained parameters at their start",
    "world": "the world's hidden physics",
}


def variant_physics(name: str, result_path: str, robot_config: str | None):
    from sim_gap import world_physics  # this folder's sibling script

    from embodied_gym.physaligner.space import ParameterSpace
    from embodied_gym.sim.physics import PhysicsParams, resolve_physics

    calibrated = resolve_physics(result_path)
    if name == "constrained":
        result = json.loads(Path(result_path).read_text())
        space = ParameterSpace.with_free(result["unconstrained"] or [], base=calibrated)
        return space.to_physics([result["nominal"][n] for n in space.names])
    if name == "world":
        return world_physics(robot_config)[0]
    if name == "no_backlash":
        return dataclasses.replace(calibrated, backlash=(0.0,) * len(calibrated.backlash))
    if name == "no_delay":
        return dataclasses.replace(calibrated, latency_steps=0)
    return dataclasses.replace(PhysicsParams(), latency_steps=calibrated.latency_steps)


def run_variant(name: str, args, stages: dict, folder: Path):
    """Demonstrations, ACT and its stand-in evaluation for one variant; returns its physics and the evaluation JSON."""
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.policies.act import train_act
    from embodied_gym.policies.act.configuration import ACTTrainConfig
    from embodied_gym.policies.evaluate import evaluate_policy
    from embodied_gym.recording.parallel import record_expert_demos

    folder.mkdir(parents=True, exist_ok=True)
    physics = variant_physics(name, stages["calibrate"]["outputs"]["result"], args.robot_config)
    physics_path = folder / "physics.json"
    physics.save(physics_path)
    gen = stages["generate"]["settings"]
    estimator = stages["perception"]["outputs"]["model"]
    data = folder / "dataset"
    done = data.exists() and open_dataset(data).total_episodes >= gen["episodes"]
    if not done:
        print(f"[{name}] {gen['episodes']} expert demonstrations ({VARIANTS[name]})", flush=True)
        have = open_dataset(data).total_episodes if data.exists() else 0
        summary = record_expert_demos(
            f"EmbodieDreamer-{args.task}-v0",
            {
                "obs_type": "state",
                "camera_fps": gen["camera_fps"],
                "physics": str(physics_path),
                "pose_estimator": estimator,
                "pose_source": gen["sim_pose_source"],
                "pose_update": gen["pose_update"],
            },
            data,
            gen["episodes"] - have,
            seed=gen["seed"] + have,
            workers=args.workers,
            resume=have > 0,
            after_success_steps=gen["after_success_steps"],
            crf=gen["crf"],
            cameras=(),
        )
        print(f"[{name}] expert success {summary.success_rate:.0%}", flush=True)
    act = dict(stages["act_aligned"]["settings"])
    fields = {f.name for f in dataclasses.fields(ACTTrainConfig)}
    cfg = ACTTrainConfig(**{k: v for k, v in act.items() if k in fields})
    policy = folder / "policy"
    # one torch thread: two threads on a core another job holds wait on each other at every step
    cfg = dataclasses.replace(
        cfg,
        dataset=str(data),
        out=str(policy),
        images=False,
        env_state=True,
        resume=True,
        overrides=act["overrides"],
        num_threads=1,
    )
    train_act(cfg)
    out = folder / "stand_in.json"
    if not out.exists():
        print(f"[{name}] evaluating on the stand-in ({args.episodes} episodes)", flush=True)
        evaluate_policy(
            str(policy),
            f"EmbodieDreamer-{args.task}-Real-v0",
            args.episodes,
            seed=100_000,
            robot_config=args.robot_config,
            pose_estimator=stages["perception_offset"]["outputs"]["model"],
            pose_update="at_reset",
            workers=args.workers,
            out=str(out),
        )
    return physics, json.loads(out.read_text())


def held_out_replay_cm(result_path: str, task: str, physics: dict) -> dict[str, float]:
    """Open-loop replay TCP translation error (cm) of each of ``physics`` (name -> ``PhysicsParams``) on the
    calibration's held-out episodes (the ones PhysAligner did not fit): how faithful each sim is, in calibration's
    own terms."""
    from embodied_gym.data.reader import load_episodes
    from embodied_gym.physaligner.objective import ReplayObjective
    from embodied_gym.physaligner.space import ParameterSpace

    result = json.loads(Path(result_path).read_text())
    held_out = set(result["dataset"]["held_out_episodes"])
    episodes = [e for e in load_episodes(result["dataset"]["path"]) if e.index in held_out]
    objective = ReplayObjective(episodes, task, ParameterSpace())
    try:
        return {n: 100 * objective.errors_of(ph)["translation_error_m"] for n, ph in physics.items()}
    finally:
        objective.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a finished policies.py run (training seed 0)")
    p.add_argument("--task", required=True)
    p.add_argument("--robot-config", default=None, help="the run's stand-in world")
    p.add_argument("--variants", nargs="+", default=["no_delay", "nominal_delay"], choices=list(VARIANTS))
    p.add_argument("--episodes", type=int, default=100, help="stand-in evaluation episodes (seeds 100000+)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)

    from embodied_gym.policies.evaluate import paired_comparison, successes_by_seed
    from embodied_gym.sim.physics import PhysicsParams, resolve_physics

    stages = {}
    for name in ("perception", "calibrate", "generate", "act_aligned", "perception_offset"):
        stage = json.loads((args.run / name / "stage.json").read_text())
        stages[name] = stage
    evaluation = json.loads((args.run / "summary.json").read_text())["tasks"][args.task]["evaluation"]
    rows = {
        "(c) calibrated sim": successes_by_seed(json.loads(Path(evaluation["act_aligned"]["json"]).read_text())),
        "(b) nominal sim": successes_by_seed(json.loads(Path(evaluation["act_nominal"]["json"]).read_text())),
    }
    result_path = stages["calibrate"]["outputs"]["result"]
    physics = {"(c) calibrated sim": resolve_physics(result_path), "(b) nominal sim": PhysicsParams()}
    for name in args.variants:
        physics[VARIANTS[name]], result = run_variant(name, args, stages, args.run / "generate_physics" / name)
        rows[VARIANTS[name]] = successes_by_seed(result)
    replay = held_out_replay_cm(result_path, args.task, physics)
    print(f"\n{args.task}, {args.run}: ACT on 200 demonstrations per sim, {args.episodes} stand-in seeds")
    print("| demonstrations from | stand-in success | held-out replay TCP error (cm) |\n|---|---|---|")
    for n, s in rows.items():
        print(f"| {n} | {100 * sum(s.values()) / len(s):.0f} % | {replay[n]:.3f} |")
    print("\n| pair | only first / only second | exact McNemar p |\n|---|---|---|")
    names = list(rows)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            c = paired_comparison(rows[a], rows[b])
            print(f"| {a} vs {b} | {c.only_a} / {c.only_b} | {c.p_value:.2g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
