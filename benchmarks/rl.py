"""RL in the aligned sim (issue: RL that lifts success on the robot): TPO recipes and the stable-baselines3
residual baseline, each started from the same aligned-sim ACT policy of a finished demo run, trained in that
run's calibrated sim, then evaluated on the stand-in robot on the same seeds as the policy they start from.

Rows (each a policy folder under ``--out``; a row that finished is read, not rerun; each trainer resumes):

- ``c``: the demo run's ``act_aligned`` (no training here);
- ``tpo``: ``embodied-gym train tpo`` with the current defaults (pairs within a start state's rollouts,
  per-step likelihood, anchor) at the sizes below;
- ``tpo_paper``: the same budget with the paper's loss (top-M vs bottom-M of all rollouts, summed
  likelihood, beta 0.1, no anchor);
- ``tpo_truth`` (not run by default): the defaults, rollouts reading the sim's true object poses instead of
  the estimate;
- ``tpo_grip`` (not run by default): the defaults, each start state's rollouts and every in-sim evaluation
  episode under a grip redrawn from its seed (``--contact-spread 0.3``: finger gain, pad and object
  friction, object mass, each within about ±30 %; calibration does not see them), so that the
  preferences cannot favour a grasp that holds only under the simulator's nominal grip;
- ``tpo_noise`` (not run by default): the defaults with ``--state-noise 0.005``, the arm-state noise the
  quick demo's ACT trains with, in every preference step (a policy trained before ACT recorded its state
  noise gets none by default);
- ``tpo_ensemble`` (not run by default): the defaults with ``--rollout-action ensemble``: the rollouts sample
  around, and the likelihood is centred on, the action ACT's temporal ensembling executes (as the policy is
  deployed) instead of the newest chunk's first element;
- ``residual``: ``embodied-gym train residual`` (PPO), the same budget in env steps.

With ``--every-iteration`` each TPO row's iterations are evaluated on the stand-in too (``ROW_itI``; the
in-sim selection returns one of them), and ``--random-control`` adds ``ROW_random``: (c)'s weights moved as
far as the iteration the row returned (iteration 1 if it returned (c)) moved each weight tensor, in a random
direction. If that control lifts the stand-in as much as TPO did, the update's direction did not matter.

The demo runs are the ones ``benchmarks/lerobot_demos.py --world W --out runs/lerobot_W`` writes. Every TPO
row: 3 iterations x 64 rollouts (16 start states x 4), 32 pairs, 10 epochs, rollout noise 0.05, and
the best of the reference and its iterations by 50 greedy episodes in the calibrated sim. The residual:
36,000 env steps (about the TPO rows' 3 x 64 episodes), 2 envs. On the stand-in every row reads the demo run's
corrected pose estimator (as the demo evaluates the sim-trained policies), ``--episodes`` seeds from 100000;
in the sim (rollouts, training, the in-sim selection) they read the run's sim-corrected estimator (stage
``perception_sim_offset``) when the run has one, as the demo's TPO and residual stages do.

    MUJOCO_GL=egl .venv/bin/python benchmarks/rl.py --run runs/lerobot_default/demo --out runs/rl_default
    MUJOCO_GL=egl .venv/bin/python benchmarks/rl.py --run runs/lerobot_world2/demo --out runs/rl_world2 \\
        --robot-config embodied_gym/robots/stand_in_world2.yaml --rows tpo residual
    MUJOCO_GL=egl .venv/bin/python benchmarks/rl.py --run R --task PenInCup --out runs/rl_pen \\
        --rows tpo_ensemble tpo --every-iteration --random-control
    MUJOCO_GL=egl .venv/bin/python benchmarks/rl.py --report --out runs/rl_default   # tables of what finished

Output: the tables on stdout (markdown), ``OUT/rl.json`` (``rows``: every policy's rates and paired test
against (c); ``selection``: which iteration each selection rule returns) and ``OUT/rl.png`` (greedy in-sim
success per TPO iteration, with ``--every-iteration`` the stand-in's too; the stand-in rate of each row).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

BIN = Path(sys.executable).parent
TPO_SIZES = ["--iterations", "3", "--rollouts", "64", "--pairs", "32", "--epochs", "10", "--rollout-noise", "0.05"]
TPO_ROWS = {
    "tpo": [],
    "tpo_paper": ["--rollouts-per-seed", "1", "--likelihood", "sum", "--beta", "0.1", "--sft-weight", "0"]
    + ["--min-score-gap", "0"],
    "tpo_truth": ["--rollout-poses", "ground_truth"],
    "tpo_grip": ["--contact-spread", "0.3"],
    "tpo_noise": ["--state-noise", "0.005"],
    "tpo_ensemble": ["--rollout-action", "ensemble"],
}
RESIDUAL = ["--total-steps", "36000", "--n-envs", "2"]
LABELS = {
    "c": "(c) ACT, aligned sim",
    "tpo": "(c) + TPO, this recipe",
    "tpo_paper": "(c) + TPO, the paper's loss",
    "tpo_truth": "(c) + TPO, rollouts on true poses",
    "tpo_grip": "(c) + TPO, grip redrawn per start state (±30 %)",
    "tpo_noise": "(c) + TPO, 5 mrad arm-state noise in the updates",
    "tpo_ensemble": "(c) + TPO, rollouts and likelihood of the temporal ensemble",
    "residual": "(c) + SB3 PPO residual",
}


def label(row: str) -> str:
    """The table label of a row, of one of a TPO row's iterations (``ROW_itI``) or of its random control."""
    base, _, suffix = row.rpartition("_it")
    if base in TPO_ROWS and suffix.isdigit():
        return f"{LABELS[base]}: iteration {int(suffix)}"
    if row.endswith("_random") and row[: -len("_random")] in TPO_ROWS:
        return f"{LABELS[row[: -len('_random')]]}: same step size, random direction"
    return LABELS.get(row, row)


def iteration_policy(folder: Path, iteration: int) -> Path:
    """The policy folder of one finished TPO iteration (every iteration stays loadable)."""
    from embodied_gym.policies.act.checkpoints import MODEL_DIR

    return folder / "checkpoints" / f"{iteration:06d}" / MODEL_DIR


def finished_iterations(folder: Path) -> list[int]:
    return [i for i, _ in in_sim_curve(folder) if i > 0 and iteration_policy(folder, i).is_dir()]


def returned_iteration(folder: Path) -> int:
    """The iteration a TPO row returned (0: the reference policy (c))."""
    from embodied_gym.policies.act.checkpoints import MODEL_DIR, POLICY_META

    meta = json.loads((folder / MODEL_DIR / POLICY_META).read_text())
    return int(meta["tpo_selected"]["iteration"])


def random_direction_control(reference: Path, moved: Path, out: Path, seed: int = 0) -> Path:
    """A copy of ``moved`` (a TPO iteration's policy) whose weights are ``reference``'s (its ACT) plus, per weight
    tensor, a Gaussian random direction scaled to the norm of that tensor's TPO update (tensors TPO left
    alone stay as they are). Written atomically to ``out``; returns it."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from embodied_gym.atomic import atomic_dir
    from embodied_gym.policies.act.checkpoints import resolve_pretrained_dir

    if out.is_dir():
        return out
    reference, moved = resolve_pretrained_dir(reference), resolve_pretrained_dir(moved)
    name = "model.safetensors"
    ref, new = load_file(str(reference / name)), load_file(str(moved / name))
    if ref.keys() != new.keys():
        raise ValueError(f"{moved / name} and {reference / name} hold different tensors: not the same ACT")
    gen = torch.Generator().manual_seed(seed)
    perturbed = {}
    for key, r in ref.items():
        step = (new[key].double() - r.double()).norm()
        if not r.is_floating_point() or step == 0:
            perturbed[key] = r
            continue
        direction = torch.randn(r.shape, generator=gen, dtype=torch.float64)
        perturbed[key] = (r.double() + direction * (step / direction.norm())).to(r.dtype).contiguous()
    with atomic_dir(out) as tmp:
        for f in moved.iterdir():
            if f.is_file() and f.name != name:
                shutil.copy2(f, tmp / f.name)
        save_file(perturbed, str(tmp / name))
    return out


def stage_outputs(run: Path, stage: str) -> dict:
    return json.loads((run / stage / "stage.json").read_text())["outputs"]


def train(row: str, run: Path, out: Path, task: str, workers: int) -> Path:
    """Train one row (resumes; a finished run returns at once); returns its policy folder."""
    policy = stage_outputs(run, "act_aligned")["policy"]
    physics = stage_outputs(run, "calibrate")["result"]
    folder = out / row
    common = ["--policy", policy, "--env", f"EmbodieDreamer-{task}-v0", "--physics", physics]
    common += [
        "--pose-update",
        "at_reset",
        "--out",
        str(folder),
        "--eval-episodes",
        "50",
        "--eval-workers",
        str(workers),
    ]
    # in the sim the rollouts and the in-sim selection read the estimator without the sim's own constant bias
    # (the demo's TPO and residual stages do the same), when the run measured it
    sim_estimator = (run / "perception_sim_offset" / "stage.json").exists() and stage_outputs(
        run, "perception_sim_offset"
    ).get("model")
    common += ["--pose-estimator", sim_estimator] if sim_estimator else []
    if row == "residual":
        cmd = [str(BIN / "embodied-gym"), "train", "residual", *common, *RESIDUAL]
    else:
        cmd = [str(BIN / "embodied-gym"), "train", "tpo", *common, *TPO_SIZES, *TPO_ROWS[row]]
        cmd += ["--rollout-workers", str(workers), "--threads", str(workers)]
    print("[rl] " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return folder


def evaluate_on_stand_in(policy: str, json_out: Path, run: Path, task: str, args) -> dict:
    if not json_out.exists():
        from embodied_gym.demo.stages import finished_outputs, sim_policy_estimator

        estimator = sim_policy_estimator(finished_outputs(run))
        cmd = [str(BIN / "embodied-gym"), "eval", "--policy", policy, "--env", f"EmbodieDreamer-{task}-Real-v0"]
        cmd += ["--episodes", str(args.episodes), "--seed", "100000", "--pose-update", "at_reset"]
        cmd += ["--workers", str(args.workers), "--out", str(json_out)]
        cmd += ["--pose-estimator", estimator] if estimator else []
        cmd += ["--robot-config", args.robot_config] if args.robot_config else []
        print("[rl] " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return json.loads(json_out.read_text())


def in_sim_curve(folder: Path) -> list[tuple[int, float]]:
    from embodied_gym.policies.tpo import read_log

    return [(r["iteration"], r["eval_success_rate"]) for r in read_log(folder) if "eval_success_rate" in r]


def stand_in_by_iteration(results: dict, row: str) -> dict[int, float]:
    """A TPO row's stand-in success per evaluated iteration (``ROW_itI``), (c)'s as iteration 0."""
    its = {int(k.rpartition("_it")[2]): v["stand_in"] for k, v in results.items() if k.startswith(f"{row}_it")}
    return ({0: results["c"]["stand_in"]} if "c" in results else {}) | its


def lost_seeds(row: dict, c: dict) -> dict:
    """Where a row lost against (c): on the seeds only (c) solved and on those both solved, the mean reset-frame
    estimate error (cm, the stand-in's own measure) and how many of the lost ones the row grasped."""
    import numpy as np

    mine = {e["seed"]: e for e in row["per_episode"]}
    theirs = {e["seed"]: e for e in c["per_episode"]}
    only_c = [s for s, e in theirs.items() if e["success"] and not mine[s]["success"]]
    both = [s for s, e in theirs.items() if e["success"] and mine[s]["success"]]

    def error(seeds):
        errors = [theirs[s].get("reset_pose_error_cm") for s in seeds]
        return None if not seeds or None in errors else float(np.mean(errors))

    return {
        "only_c": len(only_c),
        "only_c_grasped": sum(bool(mine[s].get("grasped")) for s in only_c),
        "only_c_reset_error_cm": error(only_c),
        "both_reset_error_cm": error(both),
    }


def collect(out: Path, rows: list[str]) -> dict:
    from embodied_gym.policies.evaluate import paired_comparison, successes_by_seed

    results: dict = {}
    names = ["c"]
    for row in rows:  # a row, then its iterations and its random control when they were evaluated
        its = sorted(
            int(f.stem.rpartition("_it")[2]) for f in out.glob(f"{row}_it*.json") if f.stem[len(row) + 3 :].isdigit()
        )
        names += [row, *(f"{row}_it{i}" for i in its), f"{row}_random"]
    evals = {r: json.loads((out / f"{r}.json").read_text()) for r in names if (out / f"{r}.json").exists()}
    for row, ev in evals.items():
        entry: dict = {"stand_in": ev["success_rate"], "ci95": ev["ci95"], "episodes": ev["episodes"]}
        base, _, it = row.rpartition("_it")
        if base in TPO_ROWS and it.isdigit():
            entry["in_sim"] = [(i, v) for i, v in in_sim_curve(out / base) if i == int(it)]
        else:
            entry["in_sim"] = in_sim_curve(out / row)
        meta = out / row / "residual.json"
        if meta.exists():
            sim = json.loads(meta.read_text()).get("eval") or {}
            entry["in_sim"] = [(0, sim["base"]["success_rate"]), (1, sim["residual"]["success_rate"])] if sim else []
        if row != "c" and "c" in evals:
            entry["vs_c"] = paired_comparison(successes_by_seed(ev), successes_by_seed(evals["c"])).to_json()
            entry["lost"] = lost_seeds(ev, evals["c"])
        results[row] = entry
    if "residual" in evals:  # the library baseline against each TPO row, same seeds
        for row in [r for r in evals if r.startswith("tpo")]:
            results["residual"][f"vs_{row}"] = paired_comparison(
                successes_by_seed(evals["residual"]), successes_by_seed(evals[row])
            ).to_json()
    return results


def selection_rules(out: Path, row: str, results: dict) -> dict:
    """Which iteration each rule would return from one TPO row, and that policy's stand-in rate (from the
    row's evaluated iterations; (c) is iteration 0): the in-sim greedy evaluation (``select best``, the
    default), the last iteration (``select last``, the paper's loop), the sampled rollouts' success (iteration
    k's rollouts come from iteration k - 1's policy, so the last iteration has none) and, for reference, the
    best on the stand-in, which no user has before deploying."""
    from embodied_gym.policies.tpo import read_log, selected_iteration

    log = read_log(out / row)
    on_robot = stand_in_by_iteration(results, row)
    noisy = {r["iteration"] - 1: r["rollout_success_rate"] for r in log if "rollout_success_rate" in r}

    def pick(scores: dict) -> int:  # ties to the earlier iteration, as TPO's own selection
        return max(scores, key=lambda i: (scores[i], -i))

    picks = {"in-sim greedy (select best, the default)": selected_iteration(log, "best")}
    picks["last (select last, the paper's)"] = selected_iteration(log, "last")
    picks["sampled rollouts' success"] = pick(noisy) if noisy else None
    picks["best on the stand-in (hindsight)"] = pick(on_robot)
    return {rule: {"iteration": i, "stand_in": on_robot.get(i)} for rule, i in picks.items() if i is not None}


def print_tables(results: dict) -> None:
    print(
        "| row | stand-in success (95 % CI) | greedy in-sim success by iteration (0: (c)) | vs (c): only row / "
        "only (c) | exact McNemar p | of the seeds only (c) solved: grasped by the row | reset-frame estimate "
        "error (cm), seeds only (c) solved / both solved |"
    )
    print("|---|---|---|---|---|---|---|")
    for row, r in results.items():
        lo, hi = r["ci95"]
        curve = " -> ".join(f"{100 * v:.0f}" for _, v in r["in_sim"]) or "-"
        t, lost = r.get("vs_c"), r.get("lost")
        paired = f"{t['only_a']} / {t['only_b']} | {t['p_value']:.3g}" if t else "- | -"
        if lost and lost["only_c"]:
            err = lost["only_c_reset_error_cm"], lost["both_reset_error_cm"]
            where = f"{lost['only_c_grasped']} of {lost['only_c']} | " + " / ".join(
                "-" if e is None else f"{e:.2f}" for e in err
            )
        else:
            where = "- | -"
        print(
            f"| {label(row)} | **{100 * r['stand_in']:.0f} %** ({100 * lo:.0f}-{100 * hi:.0f}), "
            f"n = {r['episodes']} | {curve} | {paired} | {where} |"
        )
    for key, t in results.get("residual", {}).items():
        if key.startswith("vs_tpo"):
            print(
                f"\n{LABELS['residual']} vs {LABELS[key[3:]]}, same seeds: {100 * t['rate_a']:.0f} % vs "
                f"{100 * t['rate_b']:.0f} %, only the residual / only TPO {t['only_a']} / {t['only_b']}, exact "
                f"McNemar p = {t['p_value']:.3g}"
            )


def plot(results: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_gym.atomic import save_figure

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for row, r in results.items():
        if row in TPO_ROWS and r["in_sim"]:
            (line,) = a1.plot(*zip(*r["in_sim"]), "o-", label=f"{LABELS[row]}: calibrated sim")
            on_robot = stand_in_by_iteration(results, row)
            if len(on_robot) > 1:
                xs, ys = zip(*sorted(on_robot.items()))
                a1.plot(xs, ys, "s--", color=line.get_color(), label=f"{LABELS[row]}: stand-in")
    a1.set(xlabel="TPO iteration (0: (c))", ylabel="greedy success (sim: 50 episodes)", ylim=(0, 1.02))
    a1.set_xticks(range(max((len(r["in_sim"]) for r in results.values() if r.get("in_sim")), default=1)))
    a1.legend(fontsize=6, loc="lower left")
    names = list(results)
    a2.bar(range(len(names)), [results[n]["stand_in"] for n in names], color="#4c78a8")
    lo = [results[n]["stand_in"] - results[n]["ci95"][0] for n in names]
    hi = [results[n]["ci95"][1] - results[n]["stand_in"] for n in names]
    a2.errorbar(range(len(names)), [results[n]["stand_in"] for n in names], yerr=[lo, hi], fmt="none", color="k")
    a2.set_xticks(range(len(names)), [textwrap.fill(label(n), 22) for n in names], fontsize=5)
    a2.set(ylabel="success on the stand-in (same seeds)", ylim=(0, 1.02))
    fig.suptitle(f"{png.parent.name}: TPO and the SB3 residual from one aligned-sim ACT", fontsize=9)
    fig.tight_layout()
    save_figure(fig, png)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--run", help="a finished demo run folder of one task (with act_aligned, calibrate, perception_offset)"
    )
    p.add_argument("--out", required=True, help="this benchmark's folder")
    p.add_argument("--task", default="PickCup")
    p.add_argument("--robot-config", help="the stand-in world the demo ran against (default: the shipped one)")
    p.add_argument(
        "--rows", nargs="+", default=["tpo", "tpo_paper", "residual"], choices=[*TPO_ROWS, "residual"], help="rows"
    )
    p.add_argument("--episodes", type=int, default=100, help="stand-in evaluation episodes (paired seeds)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--every-iteration", action="store_true", help="also evaluate every TPO iteration on the stand-in (ROW_itI)"
    )
    p.add_argument(
        "--random-control",
        action="store_true",
        help="also evaluate (c) moved as far as TPO's returned iteration, in a random direction (ROW_random)",
    )
    p.add_argument("--report", action="store_true", help="only print the tables of what finished under --out")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        if not args.run:
            p.error("--run is required (or --report)")
        run = Path(args.run)
        evaluate_on_stand_in(stage_outputs(run, "act_aligned")["policy"], out / "c.json", run, args.task, args)
        reference = Path(stage_outputs(run, "act_aligned")["policy"])
        for row in args.rows:
            folder = train(row, run, out, args.task, args.workers)
            evaluate_on_stand_in(str(folder), out / f"{row}.json", run, args.task, args)
            if row == "residual":
                continue
            if args.every_iteration:
                for it in finished_iterations(folder):
                    evaluate_on_stand_in(
                        str(iteration_policy(folder, it)), out / f"{row}_it{it}.json", run, args.task, args
                    )
            if args.random_control:
                moved = iteration_policy(folder, max(1, returned_iteration(folder)))
                control = random_direction_control(reference, moved, out / f"{row}_random" / moved.name)
                evaluate_on_stand_in(str(control), out / f"{row}_random.json", run, args.task, args)
    results = collect(out, args.rows)
    selection = {
        row: selection_rules(out, row, results)
        for row in args.rows
        if row in TPO_ROWS and "c" in results and any(k.startswith(f"{row}_it") for k in results)
    }
    from embodied_gym import atomic

    atomic.write_json(out / "rl.json", {"rows": results, "selection": selection})
    print_tables(results)
    for row, rules in selection.items():
        print(f"\nWhich iteration of {LABELS[row]} each rule returns (0: (c)):\n")
        print("| rule | iteration | its stand-in success |\n|---|---|---|")
        for rule, v in rules.items():
            rate = "not evaluated" if v["stand_in"] is None else f"{100 * v['stand_in']:.0f} %"
            print(f"| {rule} | {v['iteration']} | {rate} |")
    plot(results, out / "rl.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
