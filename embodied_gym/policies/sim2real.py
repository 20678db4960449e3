"""Does a simulator rank policies as the robot does? SimplerEnv's two sim-to-real metrics.

Li et al., "Evaluating Real-World Robot Manipulation Policies in Simulation" (SIMPLER, arXiv
2405.05941) judge a simulator as an evaluation proxy by the success rates of N policies in the sim
(S) and on the robot (R):

- Pearson's r between S and R: do the two rise together (linearly)?
- MMRV, the Mean Maximum Rank Violation: for each pair of policies the sim orders differently
  from the robot, the violation is the pair's gap on the robot,

      RankViolation(i, j) = |R_i - R_j| * 1[(S_i < S_j) != (R_i < R_j)]
      MMRV = (1 / N) * sum_i max_j RankViolation(i, j)

  so an order swap between two policies the robot barely tells apart costs little, and one between
  a good and a bad policy costs their whole gap. 0 is a perfect ranking; lower is better.

Ties in the sim: the paper's indicator uses ``<``, so a pair the sim ties (S_i = S_j) but the robot
separates (R_i < R_j) is a violation in the row of the robot's weaker policy (i) only. SimplerEnv's
own code (``simpler_env/utils/metrics.py``) writes the indicator with ``>``, which puts the same
violation in the stronger policy's row instead; the two agree on every table without such ties, and
this module follows the paper. Success rates from few episodes tie often, so with ties MMRV can
differ slightly from numbers computed with SimplerEnv's code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def rank_violation(sim: Sequence[float], real: Sequence[float], i: int, j: int) -> float:
    """How much the sim's order of policies ``i`` and ``j`` contradicts the robot's: the robot's gap
    ``|R_i - R_j|`` when ``(S_i < S_j) != (R_i < R_j)``, else 0 (the paper's RankViolation)."""
    if (sim[i] < sim[j]) != (real[i] < real[j]):
        return abs(real[i] - real[j])
    return 0.0


def worst_rank_violations(sim: Sequence[float], real: Sequence[float]) -> list[tuple[float, int | None]]:
    """For each policy ``i``: ``(max_j RankViolation(i, j), the first j that attains it)``, with
    ``(0.0, None)`` for a policy the sim orders as the robot does against every other policy."""
    rows: list[tuple[float, int | None]] = []
    for i in range(len(sim)):
        worst, by = 0.0, None
        for j in range(len(sim)):
            v = rank_violation(sim, real, i, j)
            if v > worst:
                worst, by = v, j
        rows.append((worst, by))
    return rows


def mean_maximum_rank_violation(sim: Sequence[float], real: Sequence[float]) -> float:
    """MMRV: the mean over policies of each one's worst :func:`rank_violation` (0 = the sim ranks
    the policies as the robot does)."""
    return float(np.mean([worst for worst, _ in worst_rank_violations(sim, real)]))


def _pearson(sim: Sequence[float], real: Sequence[float]) -> tuple[float | None, str | None]:
    """Pearson's r, or None and why it is undefined (a constant column has no variance)."""
    s, r = np.asarray(sim, dtype=float), np.asarray(real, dtype=float)
    constant = [
        f"{name} success rates are all {x[0]:.1%}" for name, x in (("sim", s), ("real", r)) if np.all(x == x[0])
    ]
    if constant:
        return None, f"Pearson's r is undefined: the {' and the '.join(constant)}; MMRV still applies"
    s, r = s - s.mean(), r - r.mean()
    value = float(np.sum(s * r) / math.sqrt(float(np.sum(s * s)) * float(np.sum(r * r))))
    return max(-1.0, min(1.0, value)), None  # rounding can step just past +-1


def pearson_correlation(sim: Sequence[float], real: Sequence[float]) -> float | None:
    """Pearson's r between the sim's and the robot's success rates; None when either is constant."""
    return _pearson(sim, real)[0]


@dataclass(frozen=True)
class Sim2RealAgreement:
    """How well one simulator's success rates rank N policies as the robot's do (arXiv 2405.05941)."""

    sim_label: str  # which simulator: "nominal", "calibrated", ...
    policies: tuple[str, ...]
    sim_rates: tuple[float, ...]
    real_rates: tuple[float, ...]
    pearson_r: float | None  # None: undefined (see pearson_note)
    pearson_note: str | None  # why pearson_r is None
    mmrv: float
    #: per policy: max_j RankViolation(i, j), and the policy j that attains it (None: no violation)
    worst_violation: tuple[float, ...]
    worst_violated_by: tuple[str | None, ...]

    @property
    def n(self) -> int:
        return len(self.policies)

    def to_json(self) -> dict:
        return {
            "sim_label": self.sim_label,
            "n": self.n,
            "pearson_r": self.pearson_r,
            "pearson_note": self.pearson_note,
            "mmrv": self.mmrv,
            "policies": [
                {
                    "policy": p,
                    "sim_success_rate": s,
                    "real_success_rate": r,
                    "worst_rank_violation": v,
                    "worst_rank_violation_with": by,
                }
                for p, s, r, v, by in zip(
                    self.policies, self.sim_rates, self.real_rates, self.worst_violation, self.worst_violated_by
                )
            ],
        }

    def summary(self) -> str:
        """A table of the policies' rates in this sim and on the robot, then r and MMRV."""
        return summary_table([self])


def sim2real_agreement(
    sim_rates: Mapping[str, float], real_rates: Mapping[str, float], sim_label: str = "sim"
) -> Sim2RealAgreement:
    """Pearson's r and MMRV between per-policy success rates in a simulator and on the robot.

    Args:
        sim_rates: ``{policy name: success rate in [0, 1]}`` in the simulator; its order is the
            order of the result's policies.
        real_rates: the same policies' success rates on the robot.
        sim_label: names the simulator in the summary and JSON.

    Returns:
        A :class:`Sim2RealAgreement`; ``pearson_r`` is None (with ``pearson_note``) when the sim's or the
        robot's rates are all equal.

    Raises:
        ValueError: fewer than 2 policies, names in one mapping but not the other, or a rate that is
            not a number in [0, 1].
    """
    only_sim, only_real = sorted(set(sim_rates) - set(real_rates)), sorted(set(real_rates) - set(sim_rates))
    if only_sim or only_real:
        raise ValueError(
            "the sim and real success rates must name the same policies: "
            + "; ".join(
                f"only in the {where}: {', '.join(names)}"
                for where, names in (("sim", only_sim), ("real", only_real))
                if names
            )
        )
    policies = tuple(sim_rates)
    if len(policies) < 2:
        raise ValueError(
            f"ranking agreement needs at least 2 policies, got {len(policies)} ({', '.join(policies) or 'none'}); "
            "evaluate more policies in the sim and on the robot"
        )
    for where, rates in (("sim", sim_rates), ("real", real_rates)):
        for p in policies:
            x = rates[p]
            if isinstance(x, bool) or not isinstance(x, int | float) or not 0.0 <= x <= 1.0:
                raise ValueError(
                    f"{where} success rate of {p!r} is {x!r}; give a success rate as a fraction in [0, 1] "
                    "(e.g. 0.8, not 80)"
                )
    sim = [float(sim_rates[p]) for p in policies]
    real = [float(real_rates[p]) for p in policies]
    r, note = _pearson(sim, real)
    worst = worst_rank_violations(sim, real)
    return Sim2RealAgreement(
        sim_label=sim_label,
        policies=policies,
        sim_rates=tuple(sim),
        real_rates=tuple(real),
        pearson_r=r,
        pearson_note=note,
        mmrv=float(np.mean([v for v, _ in worst])),
        worst_violation=tuple(v for v, _ in worst),
        worst_violated_by=tuple(None if j is None else policies[j] for _, j in worst),
    )


def summary_table(agreements: Sequence[Sim2RealAgreement]) -> str:
    """One table for one or more simulators judged against the same robot evaluations: each policy's
    real rate, then per sim its rate and worst rank violation (with which policy), then r and MMRV.

    Raises:
        ValueError: no agreements, or agreements over different policies or real rates.
    """
    if not agreements:
        raise ValueError("summary_table needs at least one Sim2RealAgreement")
    first = agreements[0]
    for a in agreements[1:]:
        if (set(a.policies), dict(zip(a.policies, a.real_rates))) != (
            set(first.policies),
            dict(zip(first.policies, first.real_rates)),
        ):
            raise ValueError(
                f"sims {first.sim_label!r} and {a.sim_label!r} were judged against different policies or "
                "real success rates; one table needs the same robot evaluations"
            )
    header = ["policy", "real"]
    for a in agreements:
        header += [a.sim_label, "worst RV"]
    rows = []
    for k, policy in enumerate(first.policies):
        row = [policy, f"{first.real_rates[k]:.1%}"]
        for a in agreements:
            i = a.policies.index(policy)
            by = a.worst_violated_by[i]
            row += [f"{a.sim_rates[i]:.1%}", "0" if by is None else f"{a.worst_violation[i]:.3f} (vs {by})"]
        rows.append(row)
    footer = [
        ["Pearson r", ""]
        + [x for a in agreements for x in ("n/a" if a.pearson_r is None else f"{a.pearson_r:.3f}", "")],
        ["MMRV", ""] + [x for a in agreements for x in (f"{a.mmrv:.3f}", "")],
    ]
    table = [header, *rows, *footer]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(len(rows) + 1, "-" * len(lines[0]))
    text = "\n".join(lines)
    text += (
        f"\n{first.n} policies. r: Pearson correlation of sim and real success rates (1 = they rise together); "
        "MMRV: mean over policies of the largest real-rate gap to a policy the sim orders the other way "
        "(0 = the same ranking; arXiv 2405.05941)"
    )
    for a in agreements:
        if a.pearson_note:
            text += f"\n{a.sim_label}: {a.pearson_note}"
    return text
