#!/usr/bin/env bash
# GPU check of `embodied-gym demo --full`: the full profile (paper-preset image ACT at 240x320, VisAligner
# at 240x320, TPO; ACT, VisAligner training and rendering, and TPO on cuda) run end to end at its smallest
# sizes, in a temporary run folder. Meant for a maintainer on a GPU machine, from the repository root:
#
#     scripts/gpu_check.sh              # < 10 minutes on one H200; prints PASS or FAIL, GPU memory, wall time
#     scripts/gpu_check.sh --cpu        # dry run of the same invocation with every device set to cpu
#
# Python: .venv/bin/python when .venv exists (used as it is, nothing reinstalled); otherwise .venv is created
# with scripts/setup.sh first (or always, with --setup). The ResNet-18 weights are a random-init torchvision
# resnet18 state dict written to safetensors here (enough to check the plumbing; real runs pass ImageNet
# weights, see docs/demo.md); --weights FILE uses a file of yours instead. Nothing is downloaded.
#
# Exit status: 0 PASS; 1 FAIL (no GPU, the demo failed or ran past --timeout, or an artefact is missing);
# 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/gpu_check.sh [--cpu] [--setup] [--weights FILE] [--run-dir DIR] [--timeout S] [--clean]
  --cpu          dry run on the CPU (every device cpu, even smaller ACT); no GPU needed
  --setup        run scripts/setup.sh even when .venv exists
  --weights FILE a local ResNet-18 state dict (.safetensors/.pth) instead of a random-init one
  --run-dir DIR  where the run goes (default: a new folder under ${TMPDIR:-/tmp})
  --timeout S    stop the demo after S seconds and FAIL (default 600; 3600 with --cpu)
  --clean        delete the run folder after a PASS (default: kept, its report.html to look at)
EOF
}

cpu=0 setup=0 weights="" run_dir="" timeout_s="" clean=0
while (($#)); do
  case $1 in
    --cpu) cpu=1 ;;
    --setup) setup=1 ;;
    --weights) weights=${2:?--weights needs a FILE}; shift ;;
    --run-dir) run_dir=${2:?--run-dir needs a DIR}; shift ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift ;;
    --clean) clean=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ -n $timeout_s ]] || timeout_s=$((cpu ? 3600 : 600))

say() { printf '[gpu_check] %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }

if ((setup)) || [[ ! -x .venv/bin/python ]]; then
  say "setting up .venv with scripts/setup.sh"
  bash scripts/setup.sh
fi
PY=.venv/bin/python
export MUJOCO_GL=${MUJOCO_GL:-egl} HF_HUB_OFFLINE=1

# `python -m` from the repository root imports this checkout's embodied_gym
"$PY" -c "import torch; print('[gpu_check] torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
if ((!cpu)); then
  "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" ||
    fail "torch.cuda.is_available() is False (no GPU, no driver, or a CPU build of torch); --cpu for a dry run"
  command -v nvidia-smi >/dev/null || fail "nvidia-smi not found (the NVIDIA driver's tools)"
fi

if [[ -z $run_dir ]]; then
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/embodied-gym-gpu-check.XXXXXX")
fi
mkdir -p "$run_dir"
say "run folder: $run_dir"

if [[ -z $weights ]]; then
  weights=$run_dir/resnet18_random.safetensors
  "$PY" - "$weights" <<'EOF'
import sys

import torch
import torchvision
from safetensors.torch import save_file

torch.manual_seed(0)
save_file(torchvision.models.resnet18(weights=None).state_dict(), sys.argv[1])  # random init: a plumbing check
EOF
  say "random-init ResNet-18 weights: $weights"
fi

# --visaligner.model replaces the profile's model overrides, so it repeats image_size.
if ((cpu)); then
  # The dry run's one change of size: VisAligner's model at 120x160 (frames resized in and out). On a CPU
  # torch's attention materialises the 240x320 model's 4800-token maps: over 12 GB for one 2-frame clip.
  device=cpu
  sizes=(--act.steps 2 --act.batch-size 2 --act.save-every 2 --act.log-every 1 --visaligner.batch-size 1
    --visaligner.model "image_size=[120, 160]" num_frames=2 num_inference_steps=2)
else
  device=cuda
  sizes=(--act.steps 20 --act.save-every 20 --act.log-every 10  # the preset's batch of 8
    --visaligner.batch-size 1 --visaligner.model "image_size=[240, 320]" num_frames=4 num_inference_steps=2)
fi
# The full profile at its smallest sizes: one task, short episodes, a few steps of every trainer; every
# other setting (paper preset, 240x320 frames, VisAligner's model size on a GPU) is the profile's.
args=(demo --full --runs "$run_dir" --name full
  --tasks PickCup --max-episode-steps 64
  --act.backbone-weights "$weights"
  --act.device "$device" --visaligner.device "$device" --generate.device "$device" --tpo.device "$device"
  --record.episodes 3
  --calibrate.surrogate-epochs 1 --calibrate.refine-steps 10
  --calibrate.tr-iterations 2 --calibrate.budget-s 60 --calibrate.free kp.right_shoulder kp.right_elbow
  --visaligner.vae-steps 5 --visaligner.vae-batch-size 4 --visaligner.steps 4 --visaligner.sample-every 4
  --visaligner.sample-steps 2 --visaligner.checkpoint-every 4
  --generate.episodes 2 --generate.num-inference-steps 2
  "${sizes[@]}"
  --tpo.iterations 1 --tpo.pairs 1 --tpo.rollouts 2 --tpo.epochs 1 --tpo.visaligner-steps 2
  --evaluate.episodes 2 --no-evaluate.expert)

mem_log=$run_dir/gpu_memory.csv
sampler=""
if ((!cpu)); then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$mem_log" 2>/dev/null &
  sampler=$!
  trap '[[ -n $sampler ]] && kill "$sampler" 2>/dev/null || true' EXIT
fi

say "running: python -m embodied_gym.cli ${args[*]}"
t0=$(date +%s)
rc=0
timeout "$timeout_s" "$PY" -m embodied_gym.cli "${args[@]}" 2>&1 | tee "$run_dir/gpu_check.log" || rc=${PIPESTATUS[0]}
wall=$(($(date +%s) - t0))

memory="n/a (--cpu)"
if [[ -n $sampler ]]; then
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sampler=""
  peak=$(sort -n "$mem_log" | tail -1)
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  memory="peak ${peak:-?} MiB of ${total:-?} MiB (nvidia-smi, whole GPU, every 0.5 s)"
  nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv
fi

problems=()
if ((rc == 124)); then
  problems+=("the demo ran past --timeout ${timeout_s} s")
elif ((rc != 0)); then
  problems+=("the demo exited with status $rc (log: $run_dir/gpu_check.log)")
fi
summary=$run_dir/full/summary.json
if ((rc == 0)); then
  [[ -f $run_dir/full/report.html ]] || problems+=("no report.html in $run_dir/full")
  if [[ -f $summary ]]; then
    check=$("$PY" - "$summary" "$device" <<'EOF'
import json
import sys

s = json.load(open(sys.argv[1]))
c, want, bad = s["config"], sys.argv[2], []
if c["act"]["preset"] != "paper":
    bad.append(f"act.preset {c['act']['preset']}")
h, w = c["record"]["image_size"]
if h < 240 or w < 320:
    bad.append(f"record.image_size {c['record']['image_size']}")
for k in ("act", "visaligner", "generate", "tpo"):
    if c[k]["device"] != want:
        bad.append(f"{k}.device {c[k]['device']} (wanted {want})")
ev = s["tasks"]["PickCup"]["evaluation"]
missing = {"act_stand_in", "act_aligned", "tpo"} - set(ev)
if missing:
    bad.append(f"no evaluation of {sorted(missing)}")
print("; ".join(bad))
EOF
) || check="summary.json unreadable"
    [[ -z $check ]] || problems+=("$check")
  else
    problems+=("no summary.json in $run_dir/full")
  fi
fi

say "wall time: ${wall} s; GPU memory: $memory"
if ((${#problems[@]})); then
  printf -v why '%s; ' "${problems[@]}"
  say "FAIL (${device}): ${why%; }"
  exit 1
fi
say "PASS (${device}): demo --full at its smallest sizes, in ${wall} s; report: $run_dir/full/report.html"
if ((clean)); then
  rm -rf -- "$run_dir"
fi
