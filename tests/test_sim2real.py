"""Does a sim rank policies as the robot does: Pearson's r and MMRV (arXiv 2405.05941), and
`embodied-gym sim2real` on fabricated `eval --out` files (no env episodes, no training)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from embodied_gym import atomic
from embodied_gym.policies.evaluate import EpisodeResult, EvalResult, wilson_interval
from embodied_gym.policies.sim2real import (
    mean_maximum_rank_violation,
    pearson_correlation,
    sim2real_agreement,
    summary_table,
)

SIM_ID, REAL_ID = "EmbodieDreamer-PickCup-v0", "EmbodieDreamer-PickCup-Real-v0"


def _agreement(sim: list[float], real: list[float], label: str = "sim"):
    names = [f"p{i}" for i in range(len(sim))]
    return sim2real_agreement(dict(zip(names, sim)), dict(zip(names, real)), sim_label=label)


def test_a_perfect_ranking_has_no_violation_and_r_1():
    a = _agreement([0.2, 0.5, 0.9], [0.1, 0.4, 0.8])  # real = sim - 0.1: same order, linear
    assert a.mmrv == 0.0
    assert a.pearson_r == pytest.approx(1.0)
    assert a.worst_violation == (0.0, 0.0, 0.0) and a.worst_violated_by == (None, None, None)
    assert a.n == 3


def test_one_swapped_pair_costs_twice_its_real_gap_over_n():
    real = [0.1, 0.3, 0.6, 0.9]
    sim = [0.1, 0.6, 0.3, 0.9]  # the sim orders p1 and p2 the other way; every other pair agrees
    a = _agreement(sim, real)
    gap = 0.6 - 0.3
    # RankViolation(1, 2) = RankViolation(2, 1) = gap, all others 0: rows 1 and 2 have max gap
    assert a.worst_violation == pytest.approx((0.0, gap, gap, 0.0))
    assert a.worst_violated_by == (None, "p2", "p1", None)
    assert a.mmrv == pytest.approx(2 * gap / 4)


def test_a_hand_computed_table():
    # S = (.9, .2, .5, .4), R = (.3, .8, .6, .1). Pairs the sim orders the other way, with their real gap:
    # A-B .5, A-C .3, B-C .2, B-D .7 (A-D and C-D agree). Row maxima: A .5 (B), B .7 (D), C .3 (A), D .7 (B).
    a = _agreement([0.9, 0.2, 0.5, 0.4], [0.3, 0.8, 0.6, 0.1])
    assert a.worst_violation == pytest.approx((0.5, 0.7, 0.3, 0.7))
    assert a.worst_violated_by == ("p1", "p3", "p0", "p1")
    assert a.mmrv == pytest.approx((0.5 + 0.7 + 0.3 + 0.7) / 4)
    # deviations from the means .5 and .45: s = (.4, -.3, 0, -.1), r = (-.15, .35, .15, -.35)
    assert a.pearson_r == pytest.approx(-0.13 / np.sqrt(0.26 * 0.29))
    assert a.pearson_r == pytest.approx(np.corrcoef(a.sim_rates, a.real_rates)[0, 1])
    assert mean_maximum_rank_violation(a.sim_rates, a.real_rates) == pytest.approx(a.mmrv)


def test_a_fully_reversed_ranking():
    a = _agreement([0.9, 0.5, 0.1], [0.1, 0.5, 0.9])
    assert a.pearson_r == pytest.approx(-1.0)
    # every pair is violated: row maxima .8, .4, .8
    assert a.mmrv == pytest.approx((0.8 + 0.4 + 0.8) / 3)


def test_a_sim_tie_counts_in_the_weaker_policys_row_as_in_the_paper():
    """The paper's indicator 1[(S_i < S_j) != (R_i < R_j)]: the sim ties p0 and p1, the robot has p0 < p1,
    so only p0's row holds that violation (SimplerEnv's code, written with >, would put it in p1's row
    and give (0.2 + 0.4 + 0.2) / 3 here)."""
    a = _agreement([0.5, 0.5, 0.1], [0.2, 0.6, 0.4])
    # row 0: vs p1 (tie in sim, 0.2 < 0.6) 0.4, vs p2 (sim 0.5 > 0.1, real 0.2 < 0.4) 0.2; row 1: none;
    # row 2: vs p0 0.2
    assert a.worst_violation == pytest.approx((0.4, 0.0, 0.2))
    assert a.mmrv == pytest.approx(0.6 / 3)


def test_constant_rates_leave_r_undefined_with_a_reason():
    a = _agreement([0.5, 0.5, 0.5], [0.2, 0.6, 0.4])
    assert a.pearson_r is None
    assert "sim success rates are all 50.0%" in a.pearson_note
    assert pearson_correlation(a.sim_rates, a.real_rates) is None
    both = _agreement([1.0, 1.0], [0.0, 0.0])
    assert both.pearson_r is None and "sim" in both.pearson_note and "real" in both.pearson_note
    assert both.mmrv == 0.0
    assert "n/a" in a.summary() and "Pearson's r is undefined" in a.summary()
    json.dumps(a.to_json())  # None, not NaN: valid JSON


@pytest.mark.parametrize(
    ("sim", "real", "message"),
    [
        ({"a": 0.5}, {"a": 0.4}, "at least 2 policies"),
        ({}, {}, "at least 2 policies"),
        ({"a": 0.5, "b": 0.1}, {"a": 0.4, "c": 0.2}, "only in the sim: b; only in the real: c"),
        ({"a": 0.5, "b": 80}, {"a": 0.4, "b": 0.2}, "sim success rate of 'b' is 80"),
        ({"a": 0.5, "b": 0.1}, {"a": float("nan"), "b": 0.2}, "real success rate of 'a' is nan"),
        ({"a": 0.5, "b": 0.1}, {"a": "0.4", "b": 0.2}, "fraction in [0, 1]"),
    ],
)
def test_bad_input_is_refused_with_what_to_fix(sim, real, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        sim2real_agreement(sim, real)


def test_to_json_and_a_table_of_two_sims():
    nominal = sim2real_agreement({"a": 0.9, "b": 0.2}, {"a": 0.3, "b": 0.8}, sim_label="nominal")
    calibrated = sim2real_agreement({"b": 0.7, "a": 0.4}, {"a": 0.3, "b": 0.8}, sim_label="calibrated")
    d = nominal.to_json()
    assert d["n"] == 2 and d["mmrv"] == pytest.approx(0.5) and d["pearson_r"] == pytest.approx(-1.0)
    assert d["policies"][0] == {
        "policy": "a",
        "sim_success_rate": 0.9,
        "real_success_rate": 0.3,
        "worst_rank_violation": pytest.approx(0.5),
        "worst_rank_violation_with": "b",
    }
    text = summary_table([nominal, calibrated])
    header, row_a = text.splitlines()[:2]
    assert header.split()[:4] == ["policy", "real", "nominal", "worst"] and "calibrated" in header
    assert row_a.split()[:3] == ["a", "30.0%", "90.0%"] and "40.0%" in row_a
    assert "MMRV" in text and "0.500" in text and "0.000" in text
    other_robot = sim2real_agreement({"a": 0.9, "b": 0.2}, {"a": 0.4, "b": 0.8})
    with pytest.raises(ValueError, match="same robot evaluations"):
        summary_table([nominal, other_robot])


# --- the command ---------------------------------------------------------------------------------


def _eval_result(env_id: str, policy: str, successes: list[bool], seed: int = 0, physics=None) -> EvalResult:
    """What evaluate_policy returns for these per-episode successes."""
    rows = [
        EpisodeResult(episode=i, seed=seed + i, success=s, ret=float(s), length=100, final_reward=float(s))
        for i, s in enumerate(successes)
    ]
    k, n = sum(successes), len(successes)
    return EvalResult(
        env_id=env_id,
        policy=policy,
        episodes=n,
        seed=seed,
        success_rate=k / n,
        ci95=wilson_interval(k, n),
        mean_return=k / n,
        mean_length=100.0,
        wall_time_s=1.0,
        per_episode=rows,
        physics=physics,
    )


def _eval_json(path, env_id: str, policy: str, successes: list[bool]) -> str:
    """An `eval --out` file as evaluate_policy writes it (EvalResult.to_json)."""
    atomic.write_json(path, _eval_result(env_id, policy, successes).to_json())
    return str(path)


def _outcomes(k: int, n: int = 10) -> list[bool]:
    return [True] * k + [False] * (n - k)


def test_the_command_on_eval_files(tmp_path, capsys):
    from embodied_gym.cli import main

    sim_k, real_k = {"a": 9, "b": 2, "c": 5}, {"a": 3, "b": 8, "c": 6}
    argv = ["sim2real", "--sim", "calibrated", "--out", str(tmp_path / "out" / "sim2real.json")]
    for name in sim_k:
        sim = _eval_json(tmp_path / f"{name}_sim.json", SIM_ID, name, _outcomes(sim_k[name]))
        real = _eval_json(tmp_path / f"{name}_real.json", REAL_ID, name, _outcomes(real_k[name]))
        argv += ["--pair", name, sim, real]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = sim2real_agreement({"a": 0.9, "b": 0.2, "c": 0.5}, {"a": 0.3, "b": 0.8, "c": 0.6})
    assert "calibrated" in out and "Pearson r" in out and "MMRV" in out
    assert f"{expected.pearson_r:.3f}" in out and f"{expected.mmrv:.3f}" in out
    written = json.loads((tmp_path / "out" / "sim2real.json").read_text())
    (agreement,) = written["agreements"]
    assert agreement["sim_label"] == "calibrated"
    assert agreement["mmrv"] == pytest.approx(expected.mmrv)
    assert agreement["pearson_r"] == pytest.approx(expected.pearson_r)
    assert written["evaluations"]["a"] == {
        "real": str(tmp_path / "a_real.json"),
        "calibrated": str(tmp_path / "a_sim.json"),
    }


def test_the_command_refuses_swapped_or_broken_files(tmp_path, capsys):
    from embodied_gym.cli import main

    sim = _eval_json(tmp_path / "a_sim.json", SIM_ID, "a", _outcomes(5))
    real = _eval_json(tmp_path / "a_real.json", REAL_ID, "a", _outcomes(6))
    sim_b = _eval_json(tmp_path / "b_sim.json", SIM_ID, "b", _outcomes(2))
    real_b = _eval_json(tmp_path / "b_real.json", REAL_ID, "b", _outcomes(1))
    assert main(["sim2real", "--pair", "a", real, sim, "--pair", "b", sim_b, real_b]) == 2
    assert "swapped?" in capsys.readouterr().err

    assert main(["sim2real", "--pair", "a", sim, real]) == 2  # one policy ranks nothing
    assert "at least 2 policies" in capsys.readouterr().err

    broken = tmp_path / "broken.json"
    broken.write_text('{"success_rate": 0.5}')
    assert main(["sim2real", "--pair", "a", sim, real, "--pair", "b", str(broken), real_b]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "not an `embodied-gym eval --out` JSON" in err
    no_rate = json.loads(Path(sim_b).read_text())
    del no_rate["success_rate"]
    broken.write_text(json.dumps(no_rate))
    assert main(["sim2real", "--pair", "a", sim, real, "--pair", "b", str(broken), real_b]) == 2
    assert "(no success_rate)" in capsys.readouterr().err

    assert main(["sim2real", "--pair", "a", sim, real, "--pair", "b", str(tmp_path / "none.json"), real_b]) == 2
    assert "no such file" in capsys.readouterr().err

    assert main(["sim2real"]) == 2
    assert "give either --pair" in capsys.readouterr().err


def test_the_command_evaluates_each_policy_once_and_reuses_it(tmp_path, capsys, monkeypatch):
    """--policies: the robot's and each sim's evaluation go to --eval-dir; a rerun reads them back."""
    from embodied_gym.cli import main
    from embodied_gym.policies import evaluate

    physics = tmp_path / "result.json"
    physics.write_text("{}")
    # success counts out of 10: by (policy, env, physics)
    table = {
        ("runs/a", REAL_ID, None): 8,
        ("runs/a", SIM_ID, None): 3,
        ("runs/a", SIM_ID, str(physics)): 7,
        ("runs/b", REAL_ID, None): 4,
        ("runs/b", SIM_ID, None): 6,
        ("runs/b", SIM_ID, str(physics)): 5,
    }
    calls = []

    def fake_evaluate_policy(policy, env_id, episodes, seed, *, physics=None, out=None, **options):
        calls.append((policy, env_id, physics, options["robot_config"]))
        result = _eval_result(env_id, policy, _outcomes(table[(policy, env_id, physics)], episodes), seed, physics)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(out, result.to_json())
        return result

    monkeypatch.setattr(evaluate, "evaluate_policy", fake_evaluate_policy)
    eval_dir = tmp_path / "evals"
    argv = ["sim2real", "--policies", "runs/a", "runs/b", "--env", SIM_ID, "--eval-dir", str(eval_dir)]
    argv += [
        "--sim",
        "nominal",
        "--sim",
        f"calibrated={physics}",
        "--episodes",
        "10",
        "--out",
        str(tmp_path / "o.json"),
    ]
    assert main(argv) == 0
    assert len(calls) == 6 and ("runs/a", REAL_ID, None, None) in calls
    assert (eval_dir / "real" / "runs_a.json").is_file() and (eval_dir / "calibrated" / "runs_b.json").is_file()
    out = capsys.readouterr().out
    assert "nominal" in out and "calibrated" in out and "MMRV" in out
    written = json.loads((tmp_path / "o.json").read_text())
    nominal, calibrated = written["agreements"]
    assert nominal["sim_label"] == "nominal" and nominal["mmrv"] == pytest.approx(0.4)  # order swapped: 2 * 0.4 / 2
    assert calibrated["mmrv"] == 0.0 and calibrated["pearson_r"] == pytest.approx(1.0)

    calls.clear()
    assert main(argv) == 0
    assert calls == [] and "reusing" in capsys.readouterr().out

    # another episode count does not silently reuse the 10-episode files
    assert main([*argv, "--episodes", "20"]) == 2
    err = capsys.readouterr().err
    assert "episodes 10, now 20" in err and "delete it" in err and calls == []

    assert main(["sim2real", "--policies", "runs/a", "runs/b", "--env", SIM_ID]) == 2
    assert "--eval-dir" in capsys.readouterr().err
    assert main([*argv, "--sim", "real"]) == 2
    assert "not 'real'" in capsys.readouterr().err
    assert main([*argv, "--sim", "other=missing.json"]) == 2
    assert "no such physics JSON missing.json" in capsys.readouterr().err
