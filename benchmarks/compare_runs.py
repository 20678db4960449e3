"""Whether two demo runs produced the same stage outputs: for each stage folder, how many files are
byte-identical, which differ, and which exist in one run only.

A refactoring that must not change results is checked by running the same profile before and after
it into two run folders and comparing them:

    git worktree add /tmp/before <commit>; (cd /tmp/before && MUJOCO_GL=egl \\
        /path/to/.venv/bin/python -m embodied_gym.cli demo --profile smoke --runs /tmp/cmp --name before)
    MUJOCO_GL=egl .venv/bin/embodied-gym demo --profile smoke --runs /tmp/cmp --name after
    .venv/bin/python benchmarks/compare_runs.py /tmp/cmp/before /tmp/cmp/after --rename act_real=act_stand_in

Logs, reports, figures, videos and training logs (wall times) are skipped; JSON files are compared
after dropping keys that hold wall times or absolute paths (``*time*``, ``*_s``, ``path``, ``dataset``,
``video``, ...) and the settings a stage records, so what is left is the results; a calibration's
search history still holds the elapsed seconds of each iteration, so compare its ``values`` by eye. A stage whose
calibration runs to a time budget (``calibrate.budget_s``) cannot be reproduced when the machine's
load differs, and then neither can anything downstream: the smoke profile stops by iterations.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

SKIPPED_SUFFIXES = {".log", ".html", ".png", ".mp4", ".jsonl", ".md"}
SKIPPED_NAMES = {"stage.json", "summary.json"}
#: JSON keys that hold run-specific values (wall times, absolute paths, the settings a stage records)
VOLATILE_KEYS = {
    "path",
    "dataset",
    "video",
    "videos",
    "out",
    "policy",
    "json",
    "model",
    "settings",
    "reference",
    "physics",
}


def _volatile(key: str) -> bool:
    return key in VOLATILE_KEYS or "time" in key or key.endswith("_s") or key == "total"


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in sorted(value.items()) if not _volatile(k)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def fingerprint(path: Path) -> str:
    if path.suffix == ".json":
        try:
            blob = json.dumps(_strip(json.loads(path.read_text())), sort_keys=True).encode()
        except ValueError:
            blob = path.read_bytes()
    else:
        blob = path.read_bytes()
    return hashlib.sha256(blob).hexdigest()


def stage_files(root: Path, rename: dict[str, str]) -> dict[str, Path]:
    files = {}
    for p in root.rglob("*"):
        if not p.is_file() or p.suffix in SKIPPED_SUFFIXES or p.name in SKIPPED_NAMES:
            continue
        rel = p.relative_to(root).as_posix()
        stage, _, rest = rel.partition("/")
        for old, new in rename.items():  # a stage renamed between the runs, in folder and file names
            stage, rest = (new if stage == old else stage), rest.replace(old, new)
        files[f"{stage}/{rest}"] = p
    return files


def compare(before: Path, after: Path, rename: dict[str, str]) -> dict[str, dict]:
    a, b = stage_files(before, rename), stage_files(after, rename)
    stages: dict[str, dict] = {}
    for rel in sorted(set(a) | set(b)):
        s = stages.setdefault(rel.split("/")[0], {"same": 0, "differ": [], "only_before": [], "only_after": []})
        if rel not in b:
            s["only_before"].append(rel)
        elif rel not in a:
            s["only_after"].append(rel)
        elif fingerprint(a[rel]) == fingerprint(b[rel]):
            s["same"] += 1
        else:
            s["differ"].append(rel)
    return stages


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="a stage renamed between runs")
    args = p.parse_args(argv)
    rename = dict(r.split("=", 1) for r in args.rename)
    stages = compare(args.before, args.after, rename)
    print("| stage | identical files | differing | only before | only after |")
    print("|---|---|---|---|---|")
    for name, s in stages.items():
        print(f"| {name} | {s['same']} | {len(s['differ'])} | {len(s['only_before'])} | {len(s['only_after'])} |")
    for s in stages.values():
        for key in ("differ", "only_before", "only_after"):
            for rel in s[key]:
                print(f"{key}: {rel}")
    return int(any(s["differ"] or s["only_before"] or s["only_after"] for s in stages.values()))


if __name__ == "__main__":
    sys.exit(main())
