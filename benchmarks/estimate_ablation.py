"""Does the camera's pose estimate limit a policy, or what the policy learnt? An ablation in the sim
or on the stand-in robot.

Runs an ACT policy that reads ``observation.environment_state`` (the cup position of
:mod:`embodied_gym.perception`) in a sim env wrapped with its pose estimator, as ``eval`` does, and
feeds it either the estimate (``--feed estimate``, the deployable observation) or, in its place, the
simulator's true cup position held at the same camera frames (``--feed truth``: privileged, an
ablation only). On a ``-Real-`` id of the stand-in robot (a simulator standing in for hardware; a real
robot has no such truth) the truth is the stand-in's ``info["object_poses"]``, which it reports for
evaluation, so the transfer gap can be split into what the estimate costs and what the physics costs.
Per step it logs the estimate's error against the truth, so the table
shows where in the episode the estimate is off (the arm occludes the cup on the approach).

    # row (c)'s policy on the stand-in robot, fed the stand-in's true cup position
    MUJOCO_GL=egl .venv/bin/python benchmarks/estimate_ablation.py --policy runs/bench/policies_n200_16k/act_c \
        --env EmbodieDreamer-PickCup-Real-v0 --feed truth --out runs/bench/ablation/n200_16k_standin_truth.json
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
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import numpy as np
import torch

from embodied_gym.atomic import write_json
from embodied_gym.factory import make_env_for
from embodied_gym.perception.pose_entry import KEY, true_pose_entry
from embodied_gym.policies.agents import load_agent
from embodied_gym.policies.evaluate import paired_comparison
from embodied_gym.wrappers.pose import GroundTruthPoseWrapper

BIN = 10  # control steps per row of the error table
REST_Z = 0.005  # m: the cup counts as resting on the table below this height
TRUTH_KEY = "object_pose_truth"


class _StandInTruth(gym.Wrapper):
    """``obs[TRUTH_KEY]``: the stand-in's true object poses in the estimate's layout, held at the camera
    rate (what :class:`GroundTruthPoseWrapper` does for a sim env; it refuses robots)."""

    def __init__(self, env, config):
        from embodied_gym.sim.timing import camera_period

        super().__init__(env)
        self.config = config
        self._period = camera_period(getattr(env.unwrapped, "camera_fps", None))
        self._held = None

    def _with_truth(self, obs, info):
        if self._held is None or int(info.get("step", 0)) % self._period == 0:
            self._held = true_pose_entry(self.config, info["object_poses"])
        return {**obs, TRUTH_KEY: self._held.copy()}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._held = None
        return self._with_truth(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_truth(obs, info), reward, terminated, truncated, info


def _agent_and_env(args):
    """The policy, its env with the truth beside the estimate (``obs[TRUTH_KEY]``), and the env's kinematics."""
    import embodied_gym
    from embodied_gym.sim.kinematics import ArmKinematics

    agent = load_agent(args.policy, temporal_ensemble_coeff=args.temporal_ensemble)
    real = embodied_gym.parse_env_id(args.env).real
    env = make_env_for(agent, args.env, physics=args.physics, robot_config=args.robot_config if real else None)
    estimator = env.get_wrapper_attr("estimator")
    # the true position as a camera frame at this step would show it, beside the estimate (the stand-in:
    # computed here from its info, as GroundTruthPoseWrapper refuses robots)
    env = _StandInTruth(env, estimator.config) if real else GroundTruthPoseWrapper(env, estimator, key=TRUTH_KEY)
    kin = ArmKinematics(env.unwrapped.kinematics.model, env.unwrapped.kinematics.idx)
    return agent, env, kin


@dataclass
class _Feed:
    """What ``--feed`` puts in the policy's ``obs[KEY]``, and the estimate it holds over an episode."""

    feed: str
    hold_radius: float
    kin: object
    first: np.ndarray | None = None  # set at step 0 by the feeds that hold an estimate
    held: np.ndarray | None = None

    def __call__(self, obs: dict, info: dict) -> dict:
        from embodied_gym.sim import robot

        est = obs[KEY]
        if self.feed == "truth":
            return {**obs, KEY: obs[TRUTH_KEY]}
        if self.feed == "first":  # the first frame's estimate, before any arm moves, held throughout
            self.first = est.copy() if info["step"] == 0 else self.first
            return {**obs, KEY: self.first}
        if self.feed == "hold_near":  # hold the estimate while a TCP is within --hold-radius of it
            q = np.asarray(obs["joint_pos"], np.float64)[robot.ARM_INDICES]
            tcps = [self.kin.tcp_pose(q, arm)[0][:2] for arm in (0, 1)]
            if info["step"] == 0 or min(np.linalg.norm(t - self.held[:2]) for t in tcps) > self.hold_radius:
                self.held = est.copy()
            return {**obs, KEY: self.held}
        return obs


def _episode(env, agent, args, kin, seed: int, errors: list) -> bool:
    """One episode fed as ``--feed`` says; appends (step, xy error m, z error m) while the cup rests."""
    agent.reset()
    obs, info = env.reset(seed=seed)
    feed = _Feed(args.feed, args.hold_radius, kin)
    while True:
        true = np.asarray(info["object_poses"]["cup"][:3], np.float32)
        est = obs[KEY]
        if true[2] < REST_Z:
            errors.append((info["step"], float(np.linalg.norm(est[:2] - true[:2])), float(abs(est[2] - true[2]))))
        obs, _, terminated, truncated, info = env.step(agent(feed(obs, info), info))
        if terminated or truncated:
            return bool(info.get("is_success"))


def _error_table(errors: list) -> list[dict]:
    """The estimate's error while the cup rests, per ``BIN`` control steps with at least 20 frames."""
    e = np.array(errors)
    table = []
    for start in range(0, int(e[:, 0].max()) + 1, BIN):
        sel = (e[:, 0] >= start) & (e[:, 0] < start + BIN)
        if sel.sum() >= 20:
            table.append(
                {
                    "steps": [start, start + BIN - 1],
                    "frames": int(sel.sum()),
                    "xy_cm": 100 * float(e[sel, 1].mean()),
                    "xy_p90_cm": 100 * float(np.percentile(e[sel, 1], 90)),
                    "z_cm": 100 * float(e[sel, 2].mean()),
                }
            )
    return table


def run(args) -> dict:
    agent, env, kin = _agent_and_env(args)
    successes, errors = {}, []  # errors: (step, xy error m, z error m) while the cup rests
    t0 = time.time()
    try:
        for i in range(args.episodes):
            seed = args.seed + i
            successes[seed] = _episode(env, agent, args, kin, seed, errors)
            print(
                f"episode {i + 1}/{args.episodes}: {'success' if successes[seed] else 'failure'} "
                f"({np.mean(list(successes.values())):.0%} so far, {time.time() - t0:.0f} s)",
                flush=True,
            )
    finally:
        env.close()
    return {
        "policy": args.policy,
        "env": args.env,
        "physics": args.physics,
        "feed": args.feed,
        "episodes": args.episodes,
        "seed": args.seed,
        "success_rate": float(np.mean(list(successes.values()))),
        "successes": {str(k): v for k, v in successes.items()},
        "estimate_error_while_resting": _error_table(errors),
        "wall_time_s": time.time() - t0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="an ACT folder that reads observation.environment_state")
    p.add_argument(
        "--env",
        default="EmbodieDreamer-PickCup-v0",
        help="a sim id, or the stand-in's -Real- id (the truth comes from the simulator either way)",
    )
    p.add_argument("--robot-config", metavar="FILE", help="with a -Real- id: the stand-in world's config")
    p.add_argument("--physics", help="a calibration result JSON (the calibrated sim)")
    p.add_argument(
        "--feed",
        choices=("estimate", "truth", "first", "hold_near"),
        default="estimate",
        help="what the policy reads: the estimate; the true position (privileged); the first frame's "
        "estimate held all episode; the estimate held while a TCP is within --hold-radius of it",
    )
    p.add_argument("--hold-radius", type=float, default=0.10, help="m, in xy (--feed hold_near)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=100_000)
    p.add_argument("--temporal-ensemble", type=float, default=0.01)
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--compare", metavar="JSON", help="another output of this script, same seeds: paired test")
    args = p.parse_args()
    if args.robot_config and "-Real-" not in args.env:
        p.error("--robot-config is the stand-in world of a -Real- --env")
    if "-Real-" in args.env and args.physics:
        p.error("--physics sets a sim's physics; the stand-in's are its robot config's")
    torch.set_num_threads(1)
    result = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"\n{args.policy}, fed the {args.feed}: {result['success_rate']:.0%} of {args.episodes} episodes")
    print("\n| steps | frames (cup resting) | estimate xy error, mean (p90) | z error |")
    print("|---|---|---|---|")
    for r in result["estimate_error_while_resting"]:
        print(
            f"| {r['steps'][0]}-{r['steps'][1]} | {r['frames']} | {r['xy_cm']:.2f} ({r['xy_p90_cm']:.2f}) cm | "
            f"{r['z_cm']:.2f} cm |"
        )
    if args.compare:
        other = json.loads(Path(args.compare).read_text())
        c = paired_comparison(
            {int(k): v for k, v in result["successes"].items()}, {int(k): v for k, v in other["successes"].items()}
        )
        print(
            f"\nvs {args.compare} (fed the {other['feed']}): {c.rate_a:.0%} vs {c.rate_b:.0%}, only this / only "
            f"that {c.only_a} / {c.only_b}, exact McNemar p = {c.p_value:.3g}"
        )


if __name__ == "__main__":
    main()
