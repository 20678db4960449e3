"""Does the camera's pose estimate limit a policy, or what the policy learnt? An ablation in the sim.

Runs an ACT policy that reads ``observation.environment_state`` (the cup position of
:mod:`embodied_gym.perception`) in a sim env wrapped with its pose estimator, as ``eval`` does, and
feeds it either the estimate (``--feed estimate``, the deployable observation) or, in its place, the
simulator's true cup position held at the same camera frames (``--feed truth``: privileged, an
ablation only; sim ids only). Per step it logs the estimate's error against the truth, so the table
shows where in the episode the estimate is off (the arm occludes the cup on the approach).

    # the policy of benchmarks/policies.py's row (c') (trained on the estimate), fed either way
    MUJOCO_GL=egl .venv/bin/python benchmarks/estimate_ablation.py --policy runs/bench/policies_kp/act_c \\
        --physics runs/bench/policies/calibrate/result.json --feed estimate --out runs/bench/ablation/kp_est.json
    MUJOCO_GL=egl .venv/bin/python benchmarks/estimate_ablation.py --policy runs/bench/policies_kp/act_c \\
        --physics runs/bench/policies/calibrate/result.json --feed truth --out runs/bench/ablation/kp_truth.json \\
        --compare runs/bench/ablation/kp_est.json

Episode ``i`` is reset with ``--seed + i`` (the policy benchmark's evaluation seeds by default);
``--compare`` runs an exact McNemar test against another output of this script on the same seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from embodied_gym.atomic import write_json  # noqa: E402
from embodied_gym.perception.wrapper import KEY, GroundTruthPoseWrapper  # noqa: E402
from embodied_gym.policies.evaluate import paired_comparison  # noqa: E402
from embodied_gym.policies.loading import load_agent, make_env_for  # noqa: E402

BIN = 10  # control steps per row of the error table
REST_Z = 0.005  # m: the cup counts as resting on the table below this height
TRUTH_KEY = "object_pose_truth"


def run(args) -> dict:
    agent = load_agent(args.policy, temporal_ensemble_coeff=args.temporal_ensemble)
    env = make_env_for(agent, args.env, physics=args.physics)
    # the true position as a camera frame at this step would show it, beside the estimate
    env = GroundTruthPoseWrapper(env, env.get_wrapper_attr("estimator"), key=TRUTH_KEY)
    successes, errors = {}, []  # errors: (step, xy error m, z error m) while the cup rests
    t0 = time.time()
    try:
        for i in range(args.episodes):
            seed = args.seed + i
            agent.reset()
            obs, info = env.reset(seed=seed)
            while True:
                true = np.asarray(info["object_poses"]["cup"][:3], np.float32)
                est = obs[KEY]
                if true[2] < REST_Z:
                    errors.append((info["step"], float(np.linalg.norm(est[:2] - true[:2])), float(abs(est[2] - true[2]))))
                fed = {**obs, KEY: obs[TRUTH_KEY]} if args.feed == "truth" else obs
                obs, _, terminated, truncated, info = env.step(agent(fed, info))
                if terminated or truncated:
                    break
            successes[seed] = bool(info.get("is_success"))
            print(f"episode {i + 1}/{args.episodes}: {'success' if successes[seed] else 'failure'} "
                  f"({np.mean(list(successes.values())):.0%} so far, {time.time() - t0:.0f} s)", flush=True)
    finally:
        env.close()
    e = np.array(errors)
    table = []
    for start in range(0, int(e[:, 0].max()) + 1, BIN):
        sel = (e[:, 0] >= start) & (e[:, 0] < start + BIN)
        if sel.sum() >= 20:
            table.append({"steps": [start, start + BIN - 1], "frames": int(sel.sum()),
                          "xy_cm": 100 * float(e[sel, 1].mean()), "xy_p90_cm": 100 * float(np.percentile(e[sel, 1], 90)),
                          "z_cm": 100 * float(e[sel, 2].mean())})
    return {"policy": args.policy, "env": args.env, "physics": args.physics, "feed": args.feed,
            "episodes": args.episodes, "seed": args.seed, "success_rate": float(np.mean(list(successes.values()))),
            "successes": {str(k): v for k, v in successes.items()}, "estimate_error_while_resting": table,
            "wall_time_s": time.time() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="an ACT folder that reads observation.environment_state")
    p.add_argument("--env", default="EmbodieDreamer-PickCup-v0", help="a sim id (the truth comes from the sim)")
    p.add_argument("--physics", help="a calibration result JSON (the calibrated sim)")
    p.add_argument("--feed", choices=("estimate", "truth"), default="estimate")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=100_000)
    p.add_argument("--temporal-ensemble", type=float, default=0.01)
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--compare", metavar="JSON", help="another output of this script, same seeds: paired test")
    args = p.parse_args()
    if "-Real-" in args.env:
        p.error("--env must be a sim id: the true cup position comes from the simulator")
    torch.set_num_threads(1)
    result = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"\n{args.policy}, fed the {args.feed}: {result['success_rate']:.0%} of {args.episodes} episodes")
    print("\n| steps | frames (cup resting) | estimate xy error, mean (p90) | z error |")
    print("|---|---|---|---|")
    for r in result["estimate_error_while_resting"]:
        print(f"| {r['steps'][0]}-{r['steps'][1]} | {r['frames']} | {r['xy_cm']:.2f} ({r['xy_p90_cm']:.2f}) cm | "
              f"{r['z_cm']:.2f} cm |")
    if args.compare:
        other = json.loads(Path(args.compare).read_text())
        c = paired_comparison({int(k): v for k, v in result["successes"].items()},
                              {int(k): v for k, v in other["successes"].items()})
        print(f"\nvs {args.compare} (fed the {other['feed']}): {c.rate_a:.0%} vs {c.rate_b:.0%}, only this / only "
              f"that {c.only_a} / {c.only_b}, exact McNemar p = {c.p_value:.3g}")


if __name__ == "__main__":
    main()
