"""``embodied-gym sim2real``: does a simulator rank policies as the robot does? Pearson's r and MMRV
(:func:`embodied_gym.policies.sim2real.sim2real_agreement`, SimplerEnv's metrics, arXiv 2405.05941).

Two ways in: pairs of earlier ``eval --out`` files (``--pair NAME SIM_JSON REAL_JSON``), or policies
to evaluate here (``--policies ... --env ... --eval-dir DIR``) on the robot's ``-Real-`` id and in
one or more sims (``--sim LABEL[=PHYSICS_JSON]``: the nominal sim, a calibrated one, ...). Each such
evaluation is written to ``DIR/<sim label or real>/<policy>.json``, so a rerun reuses it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

NAME = "sim2real"
HELP = "does a sim rank policies as the robot does? Pearson r and MMRV of sim vs real success rates"

_LABEL = re.compile(r"^[A-Za-z0-9._-]+$")
_REAL_FOLDER = "real"  # the robot's evaluations under --eval-dir, beside one folder per --sim label


def add_arguments(p) -> None:
    p.add_argument(
        "--pair",
        nargs=3,
        action="append",
        metavar=("NAME", "SIM_JSON", "REAL_JSON"),
        help="a policy's `embodied-gym eval --out` files in the sim and on the robot (-Real- id); repeat for "
        "each policy (at least 2)",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        metavar="POLICY",
        help="policies to evaluate here (as `eval --policy`: 'expert', an ACT folder, an SB3 .zip) on the "
        "robot and in each --sim; needs --env and --eval-dir",
    )
    p.add_argument(
        "--sim",
        action="append",
        metavar="LABEL[=PHYSICS_JSON]",
        help="a simulator column: a label and, with --policies, optionally its physics JSON (e.g. a "
        "`calibrate` result; none: the nominal physics). Repeat to compare sims, e.g. --sim nominal --sim "
        "calibrated=result.json (default: one sim, 'nominal' with --policies, 'sim' with --pair)",
    )
    p.add_argument("--env", help="with --policies: the task's sim or -Real- id (both are evaluated)")
    p.add_argument(
        "--eval-dir",
        metavar="DIR",
        help="with --policies: where each evaluation's JSON is written (DIR/real/, DIR/<sim label>/); "
        "a rerun reuses those that match (env, policy, episodes, seed, physics)",
    )
    p.add_argument("--episodes", type=int, default=50, help="with --policies: episodes per evaluation")
    p.add_argument("--seed", type=int, default=0, help="with --policies: episode i is reset with seed + i")
    p.add_argument("--robot-config", help="with --policies: stand-in robot config for the -Real- id")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="with --policies: as `eval --workers`")
    p.add_argument("--trust-policy-file", action="store_true", help="with --policies: as `eval --trust-policy-file`")
    p.add_argument(
        "--out", metavar="FILE", help="JSON file: r, MMRV and each policy's rates and worst rank violation per sim"
    )


def _sims(args, default: str) -> list[tuple[str, str | None]]:
    """``[(label, physics JSON or None)]`` of the ``--sim`` groups, checked."""
    sims: list[tuple[str, str | None]] = []
    for value in args.sim or [default]:
        label, _, physics_path = value.partition("=")
        physics = physics_path or None
        if not _LABEL.match(label) or label == _REAL_FOLDER:
            raise ValueError(
                f"--sim {value}: a label is letters, digits, '.', '_' and '-' (it names a folder under "
                f"--eval-dir), and not {_REAL_FOLDER!r} (the robot's folder)"
            )
        if label in (s for s, _ in sims):
            raise ValueError(f"--sim {label} is given twice; give each simulator its own label")
        if physics is not None and not Path(physics).is_file():
            raise FileNotFoundError(f"--sim {value}: no such physics JSON {physics} (e.g. a `calibrate --out` result)")
        sims.append((label, physics))
    return sims


def _not_an_eval_file(flag: str, path: str, why: str) -> ValueError:
    return ValueError(
        f"{flag} {path}: not an `embodied-gym eval --out` JSON ({why}); rerun `embodied-gym eval ... --out FILE` "
        "to write one"
    )


def _read_eval(path: str, flag: str) -> dict:
    """An ``eval --out`` file's JSON, with the keys this command reads checked."""
    from embodied_gym.policies.evaluate import successes_by_seed

    try:
        data = json.loads(Path(path).read_text())
        successes_by_seed(data)  # the per-episode rows an `eval --out` file has
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path}: no such file (an `embodied-gym eval --out` JSON)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise _not_an_eval_file(flag, path, f"{type(e).__name__}: {e}") from None
    missing = [k for k in ("env_id", "success_rate", "episodes", "seed", "policy") if k not in data]
    if missing:
        raise _not_an_eval_file(flag, path, f"no {', '.join(missing)}")
    return data


def _pairs(args) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]]]:
    """From ``--pair``: ``({"real": {policy: rate}, label: {...}}, {policy: {"real": file, label: file}})``."""
    from embodied_gym.registration import parse_env_id

    sims = _sims(args, "sim")
    if len(sims) != 1 or sims[0][1] is not None:
        raise ValueError(
            "with --pair, give at most one --sim LABEL, without =PHYSICS_JSON (the sim files were evaluated "
            "already); compare another sim with another `sim2real --pair ...` call"
        )
    label = sims[0][0]
    rates: dict[str, dict[str, float]] = {_REAL_FOLDER: {}, label: {}}
    files: dict[str, dict[str, str]] = {}
    for name, sim_path, real_path in args.pair:
        flag = f"--pair {name}"
        if name in files:
            raise ValueError(f"{flag} is given twice; give each policy one --pair with its own NAME")
        sim, real = _read_eval(sim_path, flag), _read_eval(real_path, flag)
        try:
            sim_id, real_id = parse_env_id(sim["env_id"]), parse_env_id(real["env_id"])
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None
        if sim_id.real or not real_id.real:
            raise ValueError(
                f"{flag} {sim_path} {real_path}: SIM_JSON must be a sim evaluation and REAL_JSON a -Real- one, "
                f"got {sim['env_id']} and {real['env_id']} (swapped?)"
            )
        if sim_id.task != real_id.task:
            raise ValueError(
                f"{flag}: the sim file evaluated task {sim_id.task} ({sim_path}), the real one {real_id.task} "
                f"({real_path}); pair evaluations of the same task"
            )
        rates[label][name], rates[_REAL_FOLDER][name] = float(sim["success_rate"]), float(real["success_rate"])
        files[name] = {_REAL_FOLDER: real_path, label: sim_path}
    return rates, files


def _file_name(policy: str) -> str:
    """A file name for ``policy`` ("runs/act_a" -> "runs_act_a")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", policy).strip("_.") or "policy"


def _evaluations(args) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]]]:
    """Evaluate (or reuse) each of ``--policies`` on the robot and in each ``--sim``; see :func:`_pairs`."""
    from embodied_gym.policies.evaluate import evaluate_policy
    from embodied_gym.registration import EnvId, parse_env_id

    if not args.env or not args.eval_dir:
        raise ValueError(
            "--policies needs --env (the task's sim or -Real- id) and --eval-dir DIR (where the evaluations "
            "are written, and reused by a rerun)"
        )
    task = parse_env_id(args.env)
    real_env, sim_env = str(EnvId(task.task, True, task.version)), str(EnvId(task.task, False, task.version))
    sims = _sims(args, "nominal")
    names: dict[str, str] = {}
    for policy in args.policies:
        file_name = _file_name(policy)
        if file_name in names:
            raise ValueError(
                f"--policies {names[file_name]} and {policy} would share the file name {file_name}.json under "
                "--eval-dir (given twice, or names that differ only in punctuation); give distinct paths"
            )
        names[file_name] = policy
    columns = [(_REAL_FOLDER, real_env, None, args.robot_config), *((s, sim_env, ph, None) for s, ph in sims)]
    rates: dict[str, dict[str, float]] = {label: {} for label, *_ in columns}
    files: dict[str, dict[str, str]] = {policy: {} for policy in args.policies}
    for file_name, policy in names.items():
        for label, env_id, physics, robot_config in columns:
            path = Path(args.eval_dir) / label / f"{file_name}.json"
            wanted = {
                "env_id": env_id,
                "policy": policy,
                "episodes": args.episodes,
                "seed": args.seed,
                "physics": physics,
            }
            if path.is_file():
                data = _read_eval(str(path), f"--eval-dir {args.eval_dir}:")
                differ = {k: (data.get(k), v) for k, v in wanted.items() if data.get(k) != v}
                if differ:
                    raise ValueError(
                        f"{path} holds another evaluation ("
                        + ", ".join(f"{k} {old!r}, now {new!r}" for k, (old, new) in differ.items())
                        + "); delete it to evaluate again, or give another --eval-dir"
                    )
                print(f"{label}: {policy}: reusing {path}")
                rate = float(data["success_rate"])
            else:
                print(f"{label}: {policy} on {env_id}" + (f" with {physics}" if physics else "") + f" -> {path}")
                rate = evaluate_policy(
                    policy,
                    env_id,
                    args.episodes,
                    args.seed,
                    physics=physics,
                    robot_config=robot_config,
                    out=str(path),
                    trust_policy_file=args.trust_policy_file,
                    workers=args.workers,
                ).success_rate
            rates[label][policy] = rate
            files[policy][label] = str(path)
    return rates, files


def run(args) -> int:
    from embodied_gym import atomic
    from embodied_gym.policies.sim2real import sim2real_agreement, summary_table

    if bool(args.pair) == bool(args.policies):
        raise ValueError(
            "give either --pair NAME SIM_JSON REAL_JSON (repeated; earlier `eval --out` files) or --policies "
            "POLICY ... --env ID --eval-dir DIR (evaluate them here)"
        )
    if args.pair and (args.env or args.eval_dir or args.robot_config):
        raise ValueError(
            "--env, --eval-dir and --robot-config are for --policies; --pair reads evaluations done already"
        )
    rates, files = _pairs(args) if args.pair else _evaluations(args)
    real = rates.pop(_REAL_FOLDER)
    agreements = [sim2real_agreement(sim, real, sim_label=label) for label, sim in rates.items()]
    print(summary_table(agreements))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(args.out, {"agreements": [a.to_json() for a in agreements], "evaluations": files})
        print(f"written: {args.out}")
    return 0


def interrupted(args) -> str:
    if getattr(args, "policies", None) and getattr(args, "eval_dir", None):
        return (
            f"the evaluations that finished are kept in {args.eval_dir}; rerun the same command to reuse them "
            "and run the rest"
        )
    return "nothing was written; rerun the same command"
