#!/usr/bin/env bash
# Create .venv (Python 3.12) with the pinned stack; install system libraries when root.
# Idempotent: a stamp of pyproject.toml + constraints.txt (+ the plugin's) skips pip when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- system packages: EGL (rendering), OSMesa (fallback), FFmpeg ------------------------------
# FFmpeg's libraries serve LeRobot's default video decoder (torchcodec); embodied-gym itself
# encodes and decodes through PyAV, which bundles FFmpeg, so a failed FFmpeg install only warns.
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
need=()
ldconfig -p 2>/dev/null | grep -q 'libEGL.so.1' || need+=(libegl1)
ldconfig -p 2>/dev/null | grep -q 'libOSMesa' || need+=(libosmesa6)
ldconfig -p 2>/dev/null | grep -q 'libGL.so.1' || need+=(libgl1)
if ((${#need[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    say "installing system packages: ${need[*]}"
    apt_install "${need[@]}"
  else
    say "missing system libraries for headless rendering: ${need[*]}"
    say "install them with: sudo apt-get install ${need[*]}   (then rerun this script)"
    [[ " ${need[*]} " == *" libegl1 "* && " ${need[*]} " == *" libosmesa6 "* ]] && exit 1
  fi
fi

if ! command -v ffmpeg >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    say "installing ffmpeg (for LeRobot's default video decoder)"
    apt_install ffmpeg || say "warning: could not install ffmpeg; use video_backend='pyav' with LeRobotDataset"
  else
    say "note: ffmpeg is missing (sudo apt-get install ffmpeg); LeRobotDataset then needs video_backend='pyav'"
  fi
fi

# --- Python 3.12 --------------------------------------------------------------------------
# Python 3.12 exactly: lerobot 0.6 needs >= 3.12, and gym-aloha's dm-control needs labmaze,
# which has no wheel for 3.13 (building it needs bazel).
find_python() {
  for cand in python3.12 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      command -v "$cand"; return
    fi
  done
  if command -v pyenv >/dev/null; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.12\.' | sort -V -r); do
      p="$(pyenv root)/versions/$v/bin/python3"
      [[ -x $p ]] && { echo "$p"; return; }
    done
  fi
  return 1
}

if [[ ! -x .venv/bin/python ]]; then
  PY=$(find_python) || { say "Python 3.12 not found: install python3.12 (apt, or pyenv install 3.12) and rerun"; exit 1; }
  say "creating .venv with $PY"
  "$PY" -m venv .venv
fi

stamp=.venv/.embodied-gym-installed
want=$(cat pyproject.toml constraints.txt plugins/*/pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  say "environment up to date (.venv)"
else
  # PyPI's Linux PyTorch wheels bring CUDA's libraries: the first install fills about 6.5 GiB of .venv, plus
  # pip's unpacked downloads in TMPDIR. Stop before pip does, with the numbers, rather than midway on ENOSPC.
  if [[ ! -d .venv/lib/python3.12/site-packages/torch && -z ${EMBODIED_GYM_SKIP_DISK_CHECK:-} ]]; then
    need_gib=8
    free_gib=$(df -Pk .venv | awk 'NR==2 {print int($4 / 1048576)}')
    if ((free_gib < need_gib)); then
      say "not enough disk for the first install: $(cd .venv && pwd) has ${free_gib} GiB free, it needs about ${need_gib} GiB"
      say "free some space (or set TMPDIR to a larger disk for pip's downloads) and rerun;"
      say "EMBODIED_GYM_SKIP_DISK_CHECK=1 skips this check"
      exit 1
    fi
  fi
  say "installing the pinned stack into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install -q --upgrade pip
  # A machine-wide pip constraint (e.g. /etc/xdg/pip) must not fight our pins: ours are exact.
  PIP_CONSTRAINT= .venv/bin/python -m pip install -q -c constraints.txt -e '.[test]'
  # LeRobot finds third-party robots, teleoperators and envs only in installed distributions named
  # lerobot_robot_* (see plugins/): this one makes lerobot-record & co. see embodied-gym's.
  PIP_CONSTRAINT= .venv/bin/python -m pip install -q --no-deps -e ./plugins/lerobot_robot_embodied_gym
  echo "$want" > "$stamp"
fi
