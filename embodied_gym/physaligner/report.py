"""The report written beside a calibration result: ``<stem>.report.md`` and three PNG plots.

- ``<stem>.paths.png``: TCP paths of held-out episodes, recorded vs replayed under nominal and under
  calibrated physics (top and side views).
- ``<stem>.loss.png``: the method's loss curves (PhysAligner: the surrogate's validation MSE and the
  real loss per trust-region iteration, accepted and rejected steps; search methods: best fit loss
  per evaluation).
- ``<stem>.error_vs_time.png``: fit loss against wall time (search methods), with the held-out
  open-loop error before and after.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from embodied_gym.atomic import save_figure, write_text
from embodied_gym.data.reader import Episode
from embodied_gym.data.replay import ReplayResult, replay_episode
from embodied_gym.sim import robot as layout


def _savefig(fig, path: Path) -> None:
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def plot_paths(rows: list[tuple[str, ReplayResult, ReplayResult]], path: Path) -> None:
    """One row per (name, nominal replay, calibrated replay): recorded vs both, for the moving arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 4 * len(rows)), squeeze=False)
    for i, (name, nominal, calibrated) in enumerate(rows):
        for arm in range(2):
            sl = slice(arm * 7, arm * 7 + 3)
            real = nominal.real_ee[:, sl]
            if np.ptp(real, axis=0).max() < 0.01:  # an arm that stays put only clutters the plot
                continue
            for ax, (a, b), view in ((axes[i, 0], (0, 1), "top (x, y)"), (axes[i, 1], (0, 2), "side (x, z)")):
                ax.plot(real[:, a], real[:, b], "k-", lw=2, label=f"{layout.ARMS[arm]} recorded")
                ax.plot(
                    nominal.sim_ee[:, sl][:, a],
                    nominal.sim_ee[:, sl][:, b],
                    "--",
                    color="tab:red",
                    label=f"{layout.ARMS[arm]} nominal",
                )
                ax.plot(
                    calibrated.sim_ee[:, sl][:, a],
                    calibrated.sim_ee[:, sl][:, b],
                    "-",
                    color="tab:green",
                    label=f"{layout.ARMS[arm]} calibrated",
                )
                ax.set_title(f"{name}: {view}")
                ax.set_xlabel("x (m)")
                ax.set_ylabel("y (m)" if b == 1 else "z (m)")
                ax.set_aspect("equal", adjustable="datalim")
        n, c = nominal.summary(), calibrated.summary()
        axes[i, 1].text(
            0.02,
            0.02,
            f"TCP error: nominal {n['translation_error_m'] * 100:.2f} cm / "
            f"{n['rotation_error_rad']:.3f} rad; calibrated {c['translation_error_m'] * 100:.2f} cm / "
            f"{c['rotation_error_rad']:.3f} rad",
            transform=axes[i, 1].transAxes,
            fontsize=8,
        )
    axes[0, 0].legend(fontsize=7)
    _savefig(fig, path)


def plot_losses(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = result.get("logs", {})
    if result["method"] == "physaligner":
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
        its = logs.get("iterations", [])
        k = [it["iteration"] for it in its]
        a.semilogy(k, [it["surrogate_val_mse"] for it in its], "o-")
        a.set(title="stage 2: surrogate validation MSE (standardised)", xlabel="trust-region iteration")
        b.plot(k, [it["real_loss_centre"] for it in its], "k-", label="real loss at the centre")
        for acc, colour, label in ((True, "tab:green", "step accepted"), (False, "tab:red", "step rejected")):
            pts = [(it["iteration"], it["real_loss_step"]) for it in its if it["accepted"] == acc]
            if pts:
                b.plot(*zip(*pts), "o", color=colour, label=label)
        b.set(title="real loss (open-loop replay, fit episodes)", xlabel="trust-region iteration")
        b.legend(fontsize=7)
    else:
        fig, b = plt.subplots(figsize=(6, 3.6))
        h = np.asarray(result["search_history"])
        if len(h):
            b.plot(h[:, 0], h[:, 2])
        b.set(
            title=f"{result['method']}: best fit loss",
            xlabel="objective evaluations",
            ylabel="translation (m) + rotation (rad)" if result["method"] != "sysid" else "‖residual‖²",
        )
    _savefig(fig, path)


def plot_error_vs_time(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    err = result["held_out_errors"]
    total = result["wall_time_s"]["total"]
    score = lambda e: e["translation_error_m"] + e["rotation_error_rad"]
    ax.plot([0, total], [score(err["before"]), score(err["after"])], "o--", label="held out: before, after")
    h = np.asarray(result["search_history"])
    if len(h) and result["method"] != "sysid":  # sysid's loss is a squared residual, another unit
        ax.plot(h[:, 1], h[:, 2], "-", label="fit episodes: best so far")
    t = 0.0
    for stage, secs in result["wall_time_s"].items():
        if stage.startswith("stage"):
            t += secs
            ax.axvline(t, color="grey", lw=0.5)
            ax.text(t, ax.get_ylim()[1], stage.split("_")[0], fontsize=7, ha="right", va="top")
    ax.set(
        xlabel="wall time (s)",
        ylabel="TCP translation (m) + rotation (rad)",
        title=f"{result['method']}: open-loop replay error vs wall time",
    )
    ax.legend(fontsize=8)
    _savefig(fig, path)


def write_report(result: dict, out: str | os.PathLike, held: list[Episode], episodes_in_plot: int = 2) -> Path:
    """Write ``<stem>.report.md`` and its plots beside ``out``; returns the Markdown path."""
    out = Path(out)
    stem = out.with_suffix("")
    paths_png, loss_png, time_png = (Path(f"{stem}.{n}.png") for n in ("paths", "loss", "error_vs_time"))
    from embodied_gym.sim.physics import PhysicsParams

    calibrated = PhysicsParams.from_dict(result["values"])
    rows = []
    for ep in held[:episodes_in_plot]:
        rows.append(
            (
                f"held-out episode {ep.index}",
                replay_episode(ep, result["task"]),
                replay_episode(ep, result["task"], physics=calibrated),
            )
        )
    plot_paths(rows, paths_png)
    plot_losses(result, loss_png)
    plot_error_vs_time(result, time_png)

    b, a = result["held_out_errors"]["before"], result["held_out_errors"]["after"]
    lines = [
        f"# Calibration report: {result['method']} on {result['task']}",
        "",
        f"Dataset `{result['dataset']['path']}` (sha256 {result['dataset']['sha256'][:12]}…): "
        f"{len(result['dataset']['fit_episodes'])} episodes fitted, {len(result['dataset']['held_out_episodes'])} held out.",
        "",
        "## Held-out open-loop replay error",
        "",
        "| | TCP translation (cm) | TCP rotation (rad) | arm joint RMSE (rad) |",
        "|---|---|---|---|",
        f"| nominal | {b['translation_error_m'] * 100:.3f} | {b['rotation_error_rad']:.4f} | {b['joint_rmse_rad']:.4f} |",
        f"| calibrated | {a['translation_error_m'] * 100:.3f} | {a['rotation_error_rad']:.4f} | {a['joint_rmse_rad']:.4f} |",
        "",
        *([f"**{result['acceptance']['message']}**.", ""] if result.get("acceptance") else []),
        *(
            [
                f"Actuation delay: {result['latency_steps']['calibrated']} control step(s) "
                f"(start {result['latency_steps']['start']}; profiled over {result['latency_steps']['candidates']}).",
                "",
            ]
            if result.get("latency_steps")
            else []
        ),
        "## Wall time",
        "",
        "| stage | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.1f} |" for k, v in result["wall_time_s"].items()],
        "",
        *_parameter_lines(result),
        "",
        f"![TCP paths]({paths_png.name})",
        "",
        f"![losses]({loss_png.name})",
        "",
        f"![error vs wall time]({time_png.name})",
        "",
    ]
    md = Path(f"{stem}.report.md")
    write_text(md, "\n".join(lines))
    return md


def _parameter_lines(result: dict) -> list[str]:
    """The report's parameter table and what it says about the parameters the data does not constrain."""
    unc = result.get("uncertainty") or {}
    lines = [
        "## Parameters",
        "",
        f"Uncertainty: {result.get('uncertainty_kind') or 'not available for this method'}.",
        "",
        "| parameter | nominal | calibrated | low | high | ± |",
        "|---|---|---|---|---|---|",
    ]
    for n in result["calibrated"]:
        lo, hi = result["bounds"][n]
        pm = f"{unc[n]:.4g}" if n in unc else "–"
        lines.append(
            f"| {n} | {result['nominal'][n]:.4g} | {result['calibrated'][n]:.4g} | {lo:.4g} | {hi:.4g} | {pm} |"
        )
    lines.append("")
    loose = result.get("unconstrained")
    if loose is None:
        lines.append(
            "Which parameters the data constrains: not estimated for this method "
            "(physaligner and sysid estimate it from the loss curvature)."
        )
    elif loose:
        lines.append(
            f"**Not constrained by this data** (moving one by 10 % of its range changes the fit loss by "
            f"< 1 %): {', '.join(loose)}. Their calibrated values are guesses; record motions that "
            f"exercise them (other joints, faster moves, contact) to pin them down."
        )
    else:
        lines.append("Every free parameter is constrained by the data (10 % of its range moves the loss by ≥ 1 %).")
    return lines
