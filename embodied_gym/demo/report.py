"""The demo's self-contained HTML report (images and videos inlined, opens offline)."""

from __future__ import annotations

import base64
import html
import io
import json
import os
import textwrap
from pathlib import Path

from embodied_gym.atomic import write_text
from embodied_gym.sim.tasks import TASKS

# The paper's task success (%) on the real robot, real-data SFT (three views) -> after RL in
# EmbodieDreamer (single view), from each task's module (Task.paper_success); shown next to our
# stand-in figures, never mixed with them.
PAPER = {name: cls.paper_success for name, cls in TASKS.items() if cls.paper_success is not None}
LABELS = {
    "expert": "scripted expert",
    "act_stand_in": "ACT, stand-in demos",
    "act_nominal": "ACT, nominal sim",
    "act_aligned": "ACT, aligned sim",
    "tpo": "ACT, aligned sim + TPO",
    "residual": "ACT, aligned sim + SB3 residual",
    "act_aligned_ablation_estimator": "ACT, aligned sim, ablation estimator",
    "act_aligned_in_sim": "ACT, aligned sim, in its own sim",
}


#: the policies trained in the aligned (calibrated) sim, one of which the per-task table shows as the loop's
SIM_TRAINED = ("act_aligned", "tpo", "residual")


def task_rows(summary: dict) -> list[dict]:
    """One row per task of a demo summary: the expert's and the stand-in-demo policy's success, the best
    sim-trained policy's (and which), their grasp rates, the paired test between the two policies when
    the run made it, and the paper's two real-robot numbers for the task (None where it reports none)."""
    rows = []
    for task, t in summary["tasks"].items():
        ev = t["evaluation"]
        trained = [n for n in SIM_TRAINED if n in ev]
        best = max(trained, key=lambda n: ev[n]["success_rate"]) if trained else None
        test = next(
            (c for c in t.get("paired", []) if {c["a"], c["b"]} == {best, "act_stand_in"}),
            None,
        )
        rows.append(
            {
                "task": task,
                "expert": ev.get("expert", {}).get("success_rate"),
                "stand_in": ev.get("act_stand_in", {}).get("success_rate"),
                "stand_in_grasp": ev.get("act_stand_in", {}).get("grasp_rate"),
                "best_sim": best,
                "sim": ev[best]["success_rate"] if best else None,
                "sim_grasp": ev[best].get("grasp_rate") if best else None,
                "episodes": ev[best]["episodes"] if best else None,
                "p_value": test["p_value"] if test else None,
                "paper": PAPER.get(task),
            }
        )
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def task_table_text(summary: dict) -> str:
    """:func:`task_rows` as a plain-text table (the demo command prints it)."""
    lines = [
        f"{'task':12s} {'expert':>7s} {'ACT stand-in demos':>19s} {'best sim-trained':>26s} {'p':>8s} "
        f"{'paper: real-data ACT -> EmbodieDreamer':>40s}"
    ]
    for r in task_rows(summary):
        sim = f"{_pct(r['sim'])} ({r['best_sim']})" if r["best_sim"] else "-"
        p = "-" if r["p_value"] is None else f"{r['p_value']:.2g}"
        paper = f"{r['paper'][0]} % -> {r['paper'][1]} %" if r["paper"] else "-"
        lines.append(
            f"{r['task']:12s} {_pct(r['expert']):>7s} {_pct(r['stand_in']):>19s} {sim:>26s} {p:>8s} {paper:>40s}"
        )
    return "\n".join(lines)


def _task_table_html(summary: dict) -> str:
    out = [
        "<table><tr><th>task</th><th>scripted expert</th><th>ACT, stand-in demos (grasped)</th>"
        "<th>best sim-trained policy (grasped)</th><th>episodes</th><th>exact McNemar p</th>"
        "<th>paper, real robot: real-data ACT</th><th>paper: after RL in EmbodieDreamer</th></tr>"
    ]
    for r in task_rows(summary):
        label = LABELS.get(r["best_sim"], r["best_sim"])
        sim = f"{_pct(r['sim'])} ({_pct(r['sim_grasp'])}), {label}" if r["best_sim"] else "-"
        p = "-" if r["p_value"] is None else f"{r['p_value']:.3g}"
        before, after = (f"{v} %" for v in r["paper"]) if r["paper"] else ("-", "-")
        out.append(
            f"<tr><td>{r['task']}</td><td>{_pct(r['expert'])}</td>"
            f"<td>{_pct(r['stand_in'])} ({_pct(r['stand_in_grasp'])})</td><td>{html.escape(sim)}</td>"
            f"<td>{r['episodes'] or '-'}</td><td>{p}</td><td>{before}</td><td>{after}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _label(name: str, entry: dict) -> str:
    """A policy's label; the expert's bar may come from its recorded demonstrations (demo ``evaluate.expert``)."""
    return LABELS.get(name, name) + (" (recorded demos)" if entry.get("source") else "")


def _img(path: str | Path, width: int | None = None) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    w = f' width="{width}"' if width else ""
    return f'<img src="data:image/png;base64,{data}"{w}>'


def _video(path: str | Path, width: int = 320) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<video width="{width}" controls loop muted><source src="data:video/mp4;base64,{data}" type="video/mp4"></video>'


def _png_of(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def success_chart(task: str, evaluation: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in LABELS if n in evaluation]
    rates = [100 * evaluation[n]["success_rate"] for n in names]
    lo = [100 * (evaluation[n]["success_rate"] - evaluation[n]["ci95"][0]) for n in names]
    hi = [100 * (evaluation[n]["ci95"][1] - evaluation[n]["success_rate"]) for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    x = range(len(names))
    ax.bar(x, rates, yerr=[lo, hi], capsize=4, color="tab:blue", label="stand-in robot (this run, Wilson 95 % CI)")
    for i, r, h in zip(x, rates, hi):
        ax.text(i, r + h + 1, f"{r:.0f} %", ha="center", va="bottom", fontsize=8)  # above the interval
    if task in PAPER:
        before, after = PAPER[task]
        ax.axhline(before, color="tab:red", ls="--", lw=1, label=f"paper, real robot: real-data ACT {before} %")
        ax.axhline(after, color="tab:green", ls="--", lw=1, label=f"paper, real robot: after RL {after} %")
    ax.set_xticks(
        list(x),
        [textwrap.fill(_label(n, evaluation[n]), 18) + f"\n(n={evaluation[n]['episodes']})" for n in names],
        fontsize=8,
    )
    ax.set(ylim=(0, 112), ylabel="task success (%)", title=f"{task}: success on the stand-in robot")
    # below the axes: inside, it would cover the bars (the expert's is near 100 %)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
    fig.tight_layout()
    return _png_of(fig)


def _calibration_table(result_path: str) -> str:
    r = json.loads(Path(result_path).read_text())
    b, a = r["held_out_errors"]["before"], r["held_out_errors"]["after"]
    rows = [("nominal", b), (f"calibrated ({r['method']})", a)]
    out = [
        "<table><tr><th>held-out replay (stand-in)</th><th>TCP translation (cm)</th><th>rotation (rad)</th>"
        "<th>joint RMSE (rad)</th></tr>"
    ]
    for name, e in rows:
        out.append(
            f"<tr><td>{name}</td><td>{e['translation_error_m'] * 100:.2f}</td>"
            f"<td>{e['rotation_error_rad']:.4f}</td><td>{e['joint_rmse_rad']:.4f}</td></tr>"
        )
    out.append(
        "</table><details><summary>calibrated parameters</summary><table><tr><th>parameter</th>"
        "<th>nominal</th><th>calibrated</th><th>bounds</th></tr>"
    )
    for n, v in r["calibrated"].items():
        lo, hi = r["bounds"][n]
        out.append(f"<tr><td>{n}</td><td>{r['nominal'][n]:.4g}</td><td>{v:.4g}</td><td>[{lo:.4g}, {hi:.4g}]</td></tr>")
    out.append("</table></details>")
    if r.get("unconstrained"):
        out.append(f"<p>Not constrained by these demonstrations: {html.escape(', '.join(r['unconstrained']))}.</p>")
    return "".join(out)


def _latest(folder: str | Path, pattern: str) -> Path | None:
    found = sorted(Path(folder).rglob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _tpo_choice(tpo: dict, config: dict) -> str:
    """A sentence on which policy the TPO stage returned, from its log (empty without one)."""
    from embodied_gym.policies.tpo import selected_iteration

    log = tpo.get("log") or []
    rule = (config.get("tpo") or {}).get("select", "best")
    rates = {r["iteration"]: r["eval_success_rate"] for r in log if "eval_success_rate" in r}
    chosen = selected_iteration(log, rule) if log else None
    if chosen is None or not rates:
        return ""
    listed = ", ".join(f"{'the aligned-sim policy' if i == 0 else f'iteration {i}'} {r:.0%}" for i, r in rates.items())
    which = (
        "the aligned-sim policy itself (no TPO iteration did better there)"
        if chosen == 0
        else f"TPO iteration {chosen}"
    )
    return (
        f"<p>TPO returned {which}: greedy success in the calibrated sim, the choice's measure, {listed} "
        f"({html.escape(str(rule))} of them; ties go to the earlier).</p>"
    )


def _perception_section(st: dict) -> list[str]:
    """The pose estimator every policy reads, when the loop trained one."""
    parts: list[str] = []
    per = st.get("perception", {}).get("outputs", {})
    if per.get("model"):
        parts.append("<h3>0. Perception: the pose estimator every policy reads</h3>")
        errs = per.get("val_errors") or {}
        cells = "; ".join(
            f"{html.escape(o)}: {e.get('xy_cm', float('nan')):.2f} cm in xy"
            + (f", {e['z_cm']:.2f} cm in z" if "z_cm" in e else "")
            for o, e in errs.items()
            if isinstance(e, dict)
        )
        parts.append(
            f"<p>Trained in the sim on frames with domain-randomised looks (never the stand-in's); "
            f"held-out sim error: {cells or 'n/a'}. Policies read its estimate of the stand-in's "
            f"camera frames.</p>"
        )
        if per.get("loss_png") and Path(per["loss_png"]).exists():
            parts.append(_img(per["loss_png"], 500))
    return parts


def _record_and_calibration_section(st: dict) -> list[str]:
    """The stand-in demonstrations and the calibration fitted to them."""
    parts: list[str] = []
    parts.append("<h3>1-2. Stand-in demonstrations and physics calibration</h3>")
    rec = st["record"]["outputs"]
    if rec.get("imported_from"):
        parts.append(
            f"<p>{rec['episodes']} demonstrations imported from {html.escape(rec['imported_from'])} "
            f"(recorded with LeRobot's tools).</p>"
        )
    else:
        parts.append(
            f"<p>{rec['episodes']} scripted-expert demonstrations on the stand-in "
            f"({rec['expert_success']:.0%} successful).</p>"
        )
    cal = st["calibrate"]["outputs"]
    parts.append(_calibration_table(cal["result"]))
    if Path(cal["paths_png"]).exists():
        parts.append(
            "<p>End-effector paths of held-out episodes: stand-in (black) vs nominal sim (red) vs "
            "calibrated sim (green).</p>" + _img(cal["paths_png"], 900)
        )
    return parts


def _visaligner_section(st: dict) -> list[str]:
    """VisAligner's held-out sample, or why the stage was skipped."""
    parts: list[str] = []
    vis = st["visaligner"]["outputs"]
    if vis.get("skipped"):
        parts.append(f"<h3>3. VisAligner</h3><p>Skipped: {html.escape(vis['skipped'])}.</p>")
    else:
        parts.append("<h3>3-4. VisAligner: stand-in | sim condition | generated</h3>")
        grid = _latest(vis["samples"], "*.png")
        mp4 = _latest(vis["samples"], "*.mp4")
        if grid is not None:
            parts.append(
                f"<p>Held-out sample ({html.escape(grid.name)}), columns: stand-in camera (ground truth) | "
                f"condition (sim render + object masks, frame 0 = real reference) | VisAligner.</p>"
            )
            parts.append(_img(grid, 900))
        if mp4 is not None:
            parts.append(_video(mp4, 600))
    return parts


def _generate_and_offset_section(st: dict) -> list[str]:
    """The aligned-sim training data and the estimator's bias on the robot's camera."""
    parts: list[str] = []
    gen = st["generate"]["outputs"]
    parts.append(
        f"<p>Aligned-sim training data: {gen.get('episodes', '')} demonstrations in "
        f"{html.escape(gen['dataset'])} (expert success in the calibrated sim "
        f"{gen['sim_expert_success']:.0%}).</p>"
    )
    off = st.get("perception_offset", {}).get("outputs", {})
    if off.get("model"):
        corrections = off.get("corrections_cm") or {off.get("object", "cup"): off["correction_cm"]}
        listed = ", ".join(f"{html.escape(o)} ({dx:+.2f}, {dy:+.2f}) cm" for o, (dx, dy) in corrections.items())
        not_corrected = "".join(
            f" {html.escape(o)} not corrected: {html.escape(why)}." for o, why in (off.get("uncorrected") or {}).items()
        )
        parts.append(
            f"<p>The estimator's bias on the stand-in's camera, measured on the {off['robot_episodes']} "
            f"recorded demonstrations (where the gripper closed on the object, and released it on its target, "
            f"from the joint encoders, against the sim's offsets there): corrected in (x, y) by {listed}."
            f"{not_corrected} The sim-trained policies read the corrected estimate; ACT on the stand-in demos "
            f"reads the estimate its demonstrations were recorded with.</p>"
        )
    elif off.get("skipped"):
        parts.append(
            f"<p>The estimator's bias on the stand-in's camera was not corrected: {html.escape(off['skipped'])}.</p>"
        )
    sim = st.get("perception_sim_offset", {}).get("outputs", {})
    if sim.get("model"):
        listed = ", ".join(
            f"{html.escape(o)} ({dx:+.2f}, {dy:+.2f}) cm (spread {sx:.2f}, {sy:.2f})"
            for (o, (dx, dy)), (sx, sy) in zip(sim["corrections_cm"].items(), sim["spread_cm"].values())
        )
        parts.append(
            f"<p>The estimator's bias on the sim's own renders, measured against the sim's true poses on "
            f"{sim['episodes']} reset frames: corrected in (x, y) by {listed}. In the sim the sim-trained policies "
            f"read this corrected estimate (TPO, the residual, in-sim evaluation).</p>"
        )
    return parts


def _policies_section(task: str, t: dict, config: dict) -> list[str]:
    """Every policy on the stand-in: the chart, the table, the paired tests, TPO's choice, videos."""
    st = t["stages"]
    parts: list[str] = []
    parts.append("<h3>5-7. Policies on the stand-in robot</h3>")
    parts.append(success_chart(task, t["evaluation"]))
    parts.append(
        "<table><tr><th>policy</th><th>success</th><th>95 % CI</th><th>episodes</th>"
        "<th>grasped</th><th>reset-frame estimate off by (cm, mean)</th></tr>"
    )
    for name, e in t["evaluation"].items():
        err = e.get("mean_reset_pose_error_cm")  # absent from evaluations cached before it existed
        parts.append(
            f"<tr><td>{_label(name, e)}</td><td>{e['success_rate']:.0%}</td>"
            f"<td>{e['ci95'][0]:.0%}-{e['ci95'][1]:.0%}</td><td>{e['episodes']}</td>"
            f"<td>{_pct(e.get('grasp_rate'))}</td><td>{'-' if err is None else f'{err:.2f}'}</td></tr>"
        )
    parts.append("</table>")
    parts.append(
        "<p>The last column is how far the pose estimate each policy started from was from the stand-in's "
        "reported cup position (its motion-capture truth, read for this report only, never by a policy): "
        "the grasp tolerates about 1 cm, so a policy that fails where this is large failed on perception.</p>"
    )
    if t.get("paired"):
        parts.append(
            "<table><tr><th>paired comparison (same seeds)</th><th>success rates</th>"
            "<th>seeds only the first / only the second succeeded on</th><th>exact McNemar p</th></tr>"
        )
        for c in t["paired"]:
            parts.append(
                f"<tr><td>{LABELS.get(c['a'], c['a'])} vs {LABELS.get(c['b'], c['b'])}</td>"
                f"<td>{c['rate_a']:.0%} vs {c['rate_b']:.0%} (n = {c['n']})</td>"
                f"<td>{c['only_a']} / {c['only_b']}</td><td>{c['p_value']:.3g}</td></tr>"
            )
        parts.append("</table>")
    parts.append(_tpo_choice(st.get("tpo", {}).get("outputs", {}), config))
    videos = [(n, _latest(Path(st["evaluate"]["folder"]) / f"{n}_videos", "*.mp4")) for n in t["evaluation"]]
    parts.append(
        "<p>"
        + " ".join(f"<span>{LABELS.get(n, n)}<br>{_video(v, 260)}</span>" for n, v in videos if v is not None)
        + "</p>"
    )
    return parts


def _wall_time_section(st: dict) -> list[str]:
    """Each stage's wall time, cached or in a background process."""
    parts: list[str] = []
    parts.append("<h3>Wall time per stage</h3><table><tr><th>stage</th><th>seconds</th><th></th></tr>")
    for name, s in st.items():
        parts.append(
            f"<tr><td>{name}</td><td>{s['wall_time_s']:.0f}</td>"
            f"<td>{'cached (from an earlier run)' if s['cached'] else ''}"
            f"{'in a background process, beside the stages after record' if s.get('background') else ''}"
            f"</td></tr>"
        )
    parts.append("</table>")
    return parts


def write_report(summary: dict, path: str | os.PathLike) -> Path:
    """The run's HTML report: per task, each stage's outputs in the loop's order, then the wall times."""
    path = Path(path)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>embodied-gym demo</title><style>",
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}"
        "h2{border-bottom:2px solid #ddd}.note{color:#a33}",
        "</style></head><body>",
        "<h1>embodied-gym demo: Real2Sim2Real on the stand-in robot</h1>",
        "<p class='note'>Every figure here is measured against the <b>stand-in</b> robot (a second MuJoCo "
        "world with hidden physics, latency, backlash, noise and its own camera look), never a real one. "
        "The paper's real-robot numbers are shown for orientation only.</p>",
        f"<p>Total wall time {summary['wall_time_s'] / 60:.1f} min. Settings: <code>"
        f"{html.escape(json.dumps(summary['config']))}</code></p>",
        "<h2>Every task</h2>",
        _task_table_html(summary),
        "<p>Success on the stand-in over the same seeds for every policy; grasped: the episodes in which "
        "the task's object was held at some step (the paper's intermediate step). The paper's columns are "
        "its real-robot results (arXiv 2507.05198), for orientation only.</p>",
    ]
    for task, t in summary["tasks"].items():
        st = t["stages"]
        parts.append(f"<h2>{task}</h2>")
        parts += _perception_section(st)
        parts += _record_and_calibration_section(st)
        parts += _visaligner_section(st)
        parts += _generate_and_offset_section(st)
        parts += _policies_section(task, t, summary["config"])
        parts += _wall_time_section(st)
    parts.append("</body></html>")
    write_text(path, "\n".join(parts))
    return path
