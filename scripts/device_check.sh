#!/usr/bin/env bash
# Run scripts/gpu_check.sh on a lent device machine (one GPU, its own python3 with torch, no network),
# with the packages embodied-gym needs beyond that image carried along from here. Two modes:
#
#     scripts/device_check.sh --pack   # here, with network: download the pinned wheels to .whl/, pack them
#                                      # into .devsite/site.tar.xz
#     scripts/device_check.sh          # there, from the repository root: unpack, shim .venv, run gpu_check.sh
#
# Carried packages (constraints.txt versions, no deps pulled): gymnasium, Farama-Notifications, mujoco,
# PyOpenGL, gym-aloha (only its arm meshes; dm_control is never imported), lerobot, draccus, mergedeep,
# toml, termcolor, datasets, dill, multiprocess, jsonlines, fsspec 2026.2.0 (datasets wants <=2026.2.0),
# pandas 2.3.3 + pytz + tzdata (lerobot wants pandas<3), diffusers, av, cma, stable-baselines3,
# segment-anything. Everything else (torch, numpy, pyarrow, transformers, ...) is the image's.
# The wheels as they are (~74 MB) would not fit the 64 MiB that travels; one xz tarball of them installed
# with pip --target is ~44 MB. Without the tarball the device mode falls back to installing .whl/*.whl.
#
# Device mode: environment variables OUT (folder whose files come back; default /tmp/device_check_out),
# GPU_CHECK_TIMEOUT (seconds for the demo; default 420), SITE (default /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# The packages the device image lacks; their versions are constraints.txt's.
CARRIED=(av cma datasets diffusers dill draccus Farama-Notifications fsspec gym-aloha gymnasium jsonlines lerobot
  mergedeep mujoco multiprocess pandas PyOpenGL pytz segment-anything stable_baselines3 termcolor toml tzdata)

if [[ ${1:-} == --pack ]]; then
  set -e
  shopt -s nullglob
  py=.venv/bin/python
  [[ -x $py ]] || py=python3
  mkdir -p .whl
  for name in "${CARRIED[@]}"; do  # x86-64 CPython 3.12 wheels, whatever this machine is
    pin=$(grep -i "^${name}==" constraints.txt) || { echo "device_check: $name is not in constraints.txt" >&2; exit 1; }
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pin"
  done
  whls=(.whl/*.whl)
  ((${#whls[@]})) || { echo "device_check: no wheels in .whl/" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$tmp/site" "${whls[@]}"
  mkdir -p .devsite
  tar -C "$tmp/site" -cf - . | xz -9 -T0 >.devsite/site.tar.xz.part
  mv .devsite/site.tar.xz.part .devsite/site.tar.xz
  ls -l .devsite/site.tar.xz
  exit 0
fi

OUT=${OUT:-/tmp/device_check_out}
SITE=${SITE:-/tmp/site}
timeout_s=${GPU_CHECK_TIMEOUT:-420}
run_dir=/tmp/gpu_check_run
mkdir -p "$OUT"
exec > >(tee "$OUT/device_check.log") 2>&1
say() { printf '[device_check] %s\n' "$*"; }
t0=$(date +%s)

# Device mode writes a .venv/bin/python shim: never over a real virtual environment (a developer's checkout).
if [[ -e .venv/pyvenv.cfg ]] || { [[ -e .venv/bin/python ]] && ! grep -qs 'device_check shim' .venv/bin/python; }; then
  say "FAIL: .venv here is a real virtual environment; device mode is for the device machine only"
  exit 1
fi

# --- Python: the image's python3 (torch there), plus the carried packages --------------------------
PY3=/opt/torch/.venv/bin/python3
[[ -x $PY3 ]] || PY3=$(command -v python3)
rm -rf "$SITE"
mkdir -p "$SITE"
if [[ -f .devsite/site.tar.xz ]]; then
  say "unpacking .devsite/site.tar.xz into $SITE"
  if command -v xz >/dev/null; then
    tar -xJf .devsite/site.tar.xz -C "$SITE" || { say "FAIL: could not unpack"; exit 1; }
  else
    "$PY3" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      .devsite/site.tar.xz "$SITE" || { say "FAIL: could not unpack"; exit 1; }
  fi
elif compgen -G '.whl/*.whl' >/dev/null; then
  say "installing .whl/*.whl into $SITE"
  "$PY3" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl ||
    { say "FAIL: pip install of .whl failed"; exit 1; }
else
  say "FAIL: neither .devsite/site.tar.xz nor .whl/*.whl is here (name one of them in carry)"
  exit 1
fi

# gpu_check.sh uses .venv/bin/python when it exists: a shim to the image's python (.venv never travels)
mkdir -p .venv/bin
cat >.venv/bin/python <<EOF
#!/bin/sh
# device_check shim
export PYTHONPATH="$repo:$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
exec "$PY3" "\$@"
EOF
chmod +x .venv/bin/python

# --- rendering: MuJoCo through EGL on the NVIDIA driver ----------------------------------------------
if ! ldconfig -p | grep -q 'libEGL.so.1' || ! ldconfig -p | grep -q 'libOpenGL.so.0'; then
  if compgen -G '.gl/*.deb' >/dev/null; then
    say "unpacking the GL loaders from .gl/"
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  else
    say "warning: libEGL.so.1/libOpenGL.so.0 missing and no .gl/*.deb carried"
  fi
fi
nv=/usr/local/nvidia
[[ -f $nv/share/glvnd/egl_vendor.d/10_nvidia.json ]] &&
  export __EGL_VENDOR_LIBRARY_FILENAMES=$nv/share/glvnd/egl_vendor.d/10_nvidia.json
[[ -f $nv/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=$nv/share/vulkan/icd.d/nvidia_icd.json
for d in $nv/lib64 $nv/lib; do
  [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl MPLBACKEND=Agg PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME=/tmp/hf TOKENIZERS_PARALLELISM=false \
  XLA_PYTHON_CLIENT_PREALLOCATE=false USE_TF=0 USE_JAX=0

# --- preflight (seconds): versions, and one offscreen MuJoCo frame through EGL -------------------------
.venv/bin/python - <<'EOF' 2>&1 | tee "$OUT/env.txt"
import importlib.metadata as md, platform, sys
print("python", platform.python_version(), sys.executable)
for n in ("torch", "torchvision", "numpy", "pandas", "pyarrow", "fsspec", "huggingface_hub", "transformers",
          "accelerate", "safetensors", "datasets", "diffusers", "lerobot", "gymnasium", "mujoco", "av",
          "PyOpenGL", "opencv-python-headless", "scipy", "scikit-image", "matplotlib", "pillow"):
    try:
        print(f"{n} {md.version(n)}")
    except md.PackageNotFoundError:
        print(f"{n} MISSING")
import mujoco, numpy as np
m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><light pos="0 0 1"/><geom type="sphere" size=".1"/>'
                                   '</worldbody></mujoco>')
d = mujoco.MjData(m)
r = mujoco.Renderer(m, 64, 64)
r.update_scene(d)
img = r.render()
print("mujoco EGL render ok:", img.shape, "mean", float(np.mean(img)))
r.close()
EOF
if ((PIPESTATUS[0] != 0)); then
  say "FAIL: preflight (MuJoCo EGL rendering or imports) failed; not running the demo"
  ldconfig -p | grep -E 'libEGL|libOpenGL|libGL' | tee -a "$OUT/env.txt"
  ls /usr/local/nvidia/share/glvnd/egl_vendor.d /usr/share/glvnd/egl_vendor.d 2>&1 | tee -a "$OUT/env.txt"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/env.txt"
say "setup done in $(($(date +%s) - t0)) s"

# --- the check ---------------------------------------------------------------------------------------
rm -rf "$run_dir"
rc=0
bash scripts/gpu_check.sh --timeout "$timeout_s" --run-dir "$run_dir" || rc=$?

# --- what comes back (at most 8 files, 16 MiB each) ----------------------------------------------------
copy() { [[ -f $1 ]] && (($(stat -c %s "$1") < 16000000)) && cp "$1" "$OUT/$2"; }
copy "$run_dir/gpu_check.log" gpu_check.log
copy "$run_dir/full/report.html" report.html
copy "$run_dir/full/summary.json" summary.json
copy "$run_dir/gpu_memory.csv" gpu_memory.csv
if [[ -d $run_dir ]]; then
  (cd "$run_dir" && find . \( -name '*.log' -o -name '*.json' -o -name '*.txt' -o -name '*.csv' \) -size -4M -print0 |
    tar --null -czf "$OUT/run_logs.tar.gz" -T - 2>/dev/null) || true
  [[ -f $OUT/run_logs.tar.gz ]] && (($(stat -c %s "$OUT/run_logs.tar.gz") >= 16000000)) && rm -f "$OUT/run_logs.tar.gz"
fi
say "gpu_check.sh exit status $rc; total $(($(date +%s) - t0)) s"
exit "$rc"
