#!/usr/bin/env bash
# The device check of the CUDA backend: one command, on a machine with an
# NVIDIA GPU, of the bundle that scripts/gpu/gpu_bundle.sh built elsewhere.
#
#   bash scripts/gpu/gpu_check.sh [--bundle out/gpu/shardps-gpu.tar.xz]
#                             [--data out/gpu/fashion-mnist] [--out DIR]
#                             [--allow_cpu]
#
# Steps, each under a time limit; one that fails says what failed and the
# check goes on with the next (only a missing bundle, missing CUDA
# libraries or a missing GPU stop it, since everything after needs them):
#   1 preflight   the bundle, the data, python3, tar and xz are here
#   2 unpack      the bundle, into a fresh folder under $TMPDIR
#   3 cuda_libs   finds cudart, cuBLAS, cuBLASLt and cuDNN (PyTorch's nvidia/
#                 packages first, then CUDA's folders and ldconfig) and the
#                 driver's libcuda; says which files and versions
#   4 programs    every bundled program starts with the bundle's loader
#   5 gpu         nvidia-smi and step_timer --describe: the GPU, driver,
#                 CUDA, cuBLAS and cuDNN versions. Without a GPU the check
#                 stops here (exit 3), having checked steps 1 to 4, and
#                 step 9's probe and import (its runs say: no GPU).
#   6 tests       the CUDA tests (ctest -L cuda's programs)
#   7 train       configs/fmnist_mlp.pbtxt and fmnist_cnn.pbtxt, 1 pass,
#                 sync, 1 pserver on the CPU, 1 and 2 trainers, with
#                 --use_gpu (the trainers share the GPU) and on the CPU
#                 backend, and 1 trainer on the CPU with 4 threads (another
#                 rounding: the spread that rounding alone gives): loss
#                 over the first 100 steps, test accuracy, the whole step
#   8 timing      tools/step_timer (the compute step: parameters up,
#                 forward, backward, gradients down) on the GPU (then with
#                 --per_call: where the step goes) and the CPU, and
#                 scripts/bench/torch_step_bench.py (the same models in PyTorch
#                 on the same GPU)
#   9 python      scripts/gpu/gpu_check_python.py: probes the machine's
#                 python3 (or $GPU_CHECK_PYTHON) and its PyTorch, imports the
#                 bundle's shardps with its native module for that Python,
#                 and runs examples/torch_mlp.py and torch_deepfm.py, 1
#                 pass, through shardps (1 pserver of the bundle, 1 trainer)
#                 and as plain PyTorch on the same GPU, within
#                 GPU_CHECK_PY_BUDGET_S (default 200) seconds. What the
#                 machine lacks (PyTorch, CUDA in PyTorch, a module for its
#                 Python) is a SKIP row saying why, not a failure.
#                 --allow_cpu (tests only) runs it on the CPU without a GPU
#                 and then stops (exit 3).
# Then scripts/gpu/gpu_check_summary.py writes the table.
#
# Every step has its own time limit, and the whole check ends within
# GPU_CHECK_DEADLINE_S seconds (default 450; steps left then are recorded as
# not run), so that it fits one 8-minute command of the device tool.
#
# Writes to --out (default $OUT when set, else out/gpu-check): summary.md
# (the table), summary.json, console.log (everything printed) and
# logs.tar.gz (every step's log, the trainers' and pservers' logs and
# metrics). Exit status: 0 when every step passed or was skipped, 1 when
# some failed, 2 for a bad argument or a missing bundle, 3 without a usable
# GPU.
# GPU_CHECK_QUICK=1 trains and times fewer steps, and GPU_CHECK_GO_ON=1
# goes on past a missing GPU (its GPU steps then fail): both for testing the
# check itself on a machine without a GPU, not for figures.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$REPO/out/gpu/shardps-gpu.tar.xz"
DATA="$REPO/out/gpu/fashion-mnist"
OUT_DIR="${OUT:-$REPO/out/gpu-check}"
ALLOW_CPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --bundle=*) BUNDLE="${1#*=}"; shift ;;
    --data) DATA="$2"; shift 2 ;;
    --data=*) DATA="${1#*=}"; shift ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --out=*) OUT_DIR="${1#*=}"; shift ;;
    --allow_cpu) ALLOW_CPU=1; shift ;;
    -h|--help) sed -n "2,$(( $(grep -n '^set -uo pipefail' "$0" | cut -d: -f1) - 1 ))p" "$0" |
                 sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
QUICK="${GPU_CHECK_QUICK:-0}"
DEADLINE="${GPU_CHECK_DEADLINE_S:-450}"
PY="${GPU_CHECK_PYTHON:-python3}"
PY_BUDGET="${GPU_CHECK_PY_BUDGET_S:-200}"

mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot make $OUT_DIR" >&2; exit 2; }
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardps-gpu-check-XXXX")"
LOGS="$WORK/logs"
mkdir -p "$LOGS"
exec > >(tee "$OUT_DIR/console.log") 2>&1
STEPS="$LOGS/steps.tsv"
: >"$STEPS"
CHECK_START=$(date +%s)
FAILED=0
NOT_RUN=0

say() { echo "gpu_check: $*"; }
# record NAME STATUS SECONDS NOTE: one row of the summary's step table.
record() {
  if [ "$2" = FAIL ] && [ "$NOT_RUN" = 1 ]; then
    set -- "$1" "NOT RUN" "$3" "the check's deadline came first"
  fi
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"
  [ "$2" = FAIL ] && FAILED=1
  say "[$2] $1 (${3}s)${4:+: $4}"
}

# run NAME LIMIT_S CMD...: runs CMD with its output in $LOGS/NAME.log;
# prints the log's tail when it fails. Returns CMD's status (124: timed out).
run() {
  local name="$1" limit="$2"; shift 2
  local log="$LOGS/$name.log" start rc left
  # Within the whole check's deadline, keeping 20 s for the summary.
  left=$(( CHECK_START + DEADLINE - 20 - $(date +%s) ))
  if [ "$left" -lt 5 ]; then
    echo "not run: the check's ${DEADLINE}s deadline (GPU_CHECK_DEADLINE_S) is near" >"$log"
    LAST_SECS=0
    NOT_RUN=1
    say "$name not run: out of time"
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  NOT_RUN=0
  start=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  LAST_SECS=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  if [ $rc -ne 0 ]; then
    say "$name failed (status $rc$([ $rc = 124 ] && echo ", over its ${limit}s limit")); its log ends:"
    tail -n 15 "$log" | sed 's/^/    /'
  fi
  return $rc
}

# python_step [REASON]: step 9 (gpu_check_python.py), whose rows are
# recorded here; with REASON (no GPU) it probes and imports, and says why
# it runs nothing.
python_step() {
  local left budget rc name status secs note flags=()
  left=$(( CHECK_START + DEADLINE - 30 - $(date +%s) ))
  budget=$(( PY_BUDGET < left ? PY_BUDGET : left ))
  NOT_RUN=0
  if [ "$budget" -lt 20 ]; then
    record python "NOT RUN" 0 "the check's ${DEADLINE}s deadline (GPU_CHECK_DEADLINE_S) is near"
    return
  fi
  [ -n "${1:-}" ] && flags+=(--skip "$1")
  [ "$ALLOW_CPU" = 1 ] && flags+=(--allow_cpu)
  [ "$QUICK" = 1 ] && flags+=(--quick)
  timeout --kill-after=10 $(( budget + 30 )) python3 "$REPO/scripts/gpu/gpu_check_python.py" \
    --bundle_dir "$B" --data "$DATA" --logs "$LOGS" --python "$PY" \
    --budget_s "$budget" "${flags[@]}"
  rc=$?
  # It printed each row; record them quietly.
  if [ -f "$LOGS/python/steps.tsv" ]; then
    while IFS=$'\t' read -r name status secs note; do
      record "$name" "$status" "$secs" "$note" >/dev/null
    done <"$LOGS/python/steps.tsv"
  fi
  [ $rc -eq 0 ] || record python FAIL 0 "gpu_check_python.py ended with status $rc$([ $rc = 124 ] && echo ", over its $(( budget + 30 ))s limit") (logs/python/)"
}

finish() {
  local code="$1"
  say "writing the summary ($(( $(date +%s) - CHECK_START )) s so far)"
  python3 "$REPO/scripts/gpu/gpu_check_summary.py" "$LOGS" \
      --md "$OUT_DIR/summary.md" --json "$OUT_DIR/summary.json" ||
    say "gpu_check_summary.py failed; the raw logs are in logs.tar.gz"
  [ -f "$OUT_DIR/summary.md" ] && cat "$OUT_DIR/summary.md"
  tar -C "$WORK" -czf "$OUT_DIR/logs.tar.gz" logs 2>/dev/null ||
    say "could not pack the logs"
  rm -rf "$WORK"  # the unpacked bundle and DeepFM's data
  say "done in $(( $(date +%s) - CHECK_START )) s: $OUT_DIR (summary.md," \
      "summary.json, console.log, logs.tar.gz)"
  exit "$code"
}

# ---- 1 preflight ----
s=$(date +%s)
# First of all, which Python and PyTorch this machine has (the bundle's
# native module must have been built for that Python; step 9 says more).
py_probe="$(timeout 60 "$PY" -c '
import sys
try:
    import torch
    t = "PyTorch %s, torch.cuda.is_available() %s" % (torch.__version__, torch.cuda.is_available())
except Exception as e:
    t = "no PyTorch (%s)" % e
print("%s: Python %d.%d.%d, %s" % ((sys.executable,) + tuple(sys.version_info[:3]) + (t,)))
' 2>&1 | tail -1)"
py_probe="$(command -v "$PY" || echo "$PY") -> ${py_probe:-no answer}"
echo "$py_probe" >"$LOGS/python-probe.log"
say "Python here: $py_probe"
missing=()
for tool in tar xz timeout python3 awk; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ -f "$BUNDLE" ] || missing+=("the bundle $BUNDLE (build it with bash scripts/gpu/gpu_bundle.sh on the CPU machine and carry out/gpu)")
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
         t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$DATA/$f" ] || missing+=("$DATA/$f")
done
if [ ${#missing[@]} -gt 0 ]; then
  record preflight FAIL $(( $(date +%s) - s )) "missing: ${missing[*]}; python: $py_probe"
  finish 2
fi
cpu_model="$(lscpu 2>/dev/null | awk -F: '/^Model name/ {sub(/^ +/, "", $2); print $2; exit}')"
echo "${cpu_model:-unknown CPU}, $(nproc) cores, $(uname -r)" >"$LOGS/host.log"
record preflight PASS $(( $(date +%s) - s )) "bundle $(du -h "$BUNDLE" | cut -f1), data in $DATA; python: $py_probe; host: $(cat "$LOGS/host.log")"

# ---- 2 unpack ----
if run unpack 120 tar -C "$WORK" -xJf "$BUNDLE"; then
  B="$WORK/shardps-gpu"
  record unpack PASS "$LAST_SECS" "$(sed -n 2,6p "$B/MANIFEST" | tr '\n' ';' | sed 's/;/; /g; s/; $//')"
  cp "$B/MANIFEST" "$LOGS/MANIFEST"
else
  record unpack FAIL "$LAST_SECS" "tar -xJf $BUNDLE failed"
  finish 1
fi

# ---- 3 cuda_libs ----
# Folders holding each library, first match wins: PyTorch's wheels (the
# nvidia/ namespace package), then CUDA's own folders, then ldconfig's.
s=$(date +%s)
candidates=()
nvidia_dirs="$(python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null || true)"
while read -r d; do
  [ -n "$d" ] && for l in "$d"/*/lib "$d"/*/lib64; do [ -d "$l" ] && candidates+=("$l"); done
done <<<"$nvidia_dirs"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
  [ -d "$d" ] && candidates+=("$d")
done
cuda_dirs=()
lib_notes=()
lib_missing=()
for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  found=""
  for d in "${candidates[@]}"; do
    if [ -e "$d/$lib" ]; then found="$d/$lib"; break; fi
  done
  if [ -z "$found" ]; then
    found="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
  fi
  if [ -z "$found" ]; then
    lib_missing+=("$lib")
    continue
  fi
  dir="$(dirname "$found")"
  case ":$(IFS=:; echo "${cuda_dirs[*]:-}"):" in
    *":$dir:"*) ;;
    *) cuda_dirs+=("$dir") ;;
  esac
  lib_notes+=("$lib -> $(readlink -f "$found")")
done
# cuDNN 9 loads its sub-libraries, and cuBLAS/cuDNN load nvrtc, from the
# search path: the folders found above cover them.
export BUNDLE_CUDA_LIBS="$(IFS=:; echo "${cuda_dirs[*]:-}")"
printf '%s\n' "${lib_notes[@]:-}" >"$LOGS/cuda_libs.log"
echo "BUNDLE_CUDA_LIBS=$BUNDLE_CUDA_LIBS" >>"$LOGS/cuda_libs.log"
if [ ${#lib_missing[@]} -gt 0 ] && [ "${lib_missing[*]}" != libcuda.so.1 ]; then
  record cuda_libs FAIL $(( $(date +%s) - s )) "not found: ${lib_missing[*]} (looked in ${candidates[*]} and ldconfig -p)"
  finish 1
fi
note="$(printf '%s; ' "${lib_notes[@]}" | sed 's/; $//')"
if [ ${#lib_missing[@]} -gt 0 ]; then
  note="$note; no libcuda.so.1 (no NVIDIA driver)"
fi
record cuda_libs PASS $(( $(date +%s) - s )) "$note"

# ---- 4 programs ----
s=$(date +%s)
bad=()
for p in pserver trainer step_timer gen_ctr_data; do
  run "start-$p" 30 "$B/bin/$p" --version || bad+=("$p")
done
for p in cuda_backend_test model_cuda_test cuda_threshold_encoder_test; do
  run "start-$p" 30 "$B/bin/$p" --gtest_list_tests || bad+=("$p")
done
if [ ${#bad[@]} -gt 0 ]; then
  record programs FAIL $(( $(date +%s) - s )) "these did not start: ${bad[*]} (logs/start-*.log)"
  finish 1
fi
record programs PASS $(( $(date +%s) - s )) "7 programs start with the bundle's loader and libraries"

# ---- 5 gpu ----
s=$(date +%s)
smi=""
if command -v nvidia-smi >/dev/null; then
  smi="$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -4)"
  timeout 30 nvidia-smi >"$LOGS/nvidia-smi.log" 2>&1
fi
if run gpu-describe 60 "$B/bin/step_timer" --describe; then
  record gpu PASS $(( $(date +%s) - s )) "$(cat "$LOGS/gpu-describe.log" | tail -1)${smi:+; nvidia-smi: $smi}"
else
  why="$(tail -1 "$LOGS/gpu-describe.log")"
  record gpu FAIL $(( $(date +%s) - s )) "no usable GPU: ${why}${smi:+; nvidia-smi: $smi}${smi:-; no nvidia-smi}"
  say "no usable GPU here: steps 1 to 4 passed (the bundle unpacks, CUDA's libraries are found, every program starts); the rest needs a GPU"
  if [ "$ALLOW_CPU" = 1 ]; then
    say "--allow_cpu: the Python path (step 9) on the CPU, for testing the check"
    python_step
    finish 3
  fi
  if [ "${GPU_CHECK_GO_ON:-0}" != 1 ]; then
    python_step "no usable GPU here (step gpu)"
    finish 3
  fi
  say "GPU_CHECK_GO_ON=1: going on; every GPU step will fail"
fi

# ---- 6 tests ----
for t in cuda_backend_test model_cuda_test cuda_threshold_encoder_test; do
  if run "test-$t" 180 "$B/bin/$t"; then
    if grep -q '^\[  SKIPPED \]' "$LOGS/test-$t.log"; then
      # On the machine meant to run them, a skipped test is a failure.
      record "test:$t" FAIL "$LAST_SECS" "skipped: $(grep -m1 'no CUDA device' "$LOGS/test-$t.log" | cut -c1-200)"
    else
      record "test:$t" PASS "$LAST_SECS" "$(grep -E '^\[  PASSED  \]' "$LOGS/test-$t.log" | tail -1)"
    fi
  else
    record "test:$t" FAIL "$LAST_SECS" "$(grep -E '^\[  FAILED  \] [A-Za-z]' "$LOGS/test-$t.log" | sort -u | tr '\n' ' ' | cut -c1-300)"
  fi
done

# ---- 7 train ----
data_flags=(--train_data="$DATA/train-images-idx3-ubyte.gz"
            --train_labels="$DATA/train-labels-idx1-ubyte.gz"
            --test_data="$DATA/t10k-images-idx3-ubyte.gz"
            --test_labels="$DATA/t10k-labels-idx1-ubyte.gz")
steps_flags=()
[ "$QUICK" = 1 ] && steps_flags=(--max_steps=120)
mkdir -p "$LOGS/train"
# cpu4: the CPU backend with 4 threads, whose other summation order gives
# the spread that rounding alone causes (the GPU is held to it).
for config in fmnist_mlp fmnist_cnn; do
  for run_name in gpu-1 gpu-2 cpu-1 cpu-2 cpu4-1 cpu4-2; do
    backend="${run_name%-*}"
    n="${run_name##*-}"
    name="$config-$run_name"
    dev_flags=()
    [ "$backend" = gpu ] && dev_flags=(--use_gpu)
    [ "$backend" = cpu4 ] && dev_flags=(--num_threads=4)
    if run "train-$name" 240 python3 "$REPO/scripts/cluster/local_cluster.py" \
        --pservers 1 --trainers "$n" --config "$REPO/configs/$config.pbtxt" \
        --bin_dir "$B" --log_dir "$LOGS/train/$name" --timeout 220 \
        -- --mode=sync --num_passes=1 --log_every_steps=100 \
        --progress=off "${data_flags[@]}" "${steps_flags[@]}" \
        "${dev_flags[@]}"; then
      record "train:$name" PASS "$LAST_SECS" "$(python3 "$REPO/scripts/gpu/gpu_check_summary.py" --one_run "$LOGS/train/$name" 2>&1)"
    else
      record "train:$name" FAIL "$LAST_SECS" "$( (grep -hvE '^(warning|[IW][0-9]{4} )' "$LOGS/train/$name"/trainer-*.log 2>/dev/null || tail -2 "$LOGS/train-$name.log") | tail -3 | cut -c1-300 | tr '\n' ' ')"
    fi
  done
done

# ---- 8 timing ----
timed=300
[ "$QUICK" = 1 ] && timed=30
mkdir -p "$LOGS/timing"
for config in fmnist_mlp fmnist_cnn; do
  for backend in gpu cpu; do
    dev_flags=()
    [ "$backend" = gpu ] && dev_flags=(--use_gpu --per_call)
    if run "time-shardps-$config-$backend" 180 "$B/bin/step_timer" \
        --config="$REPO/configs/$config.pbtxt" "${dev_flags[@]}" \
        --train_images="$DATA/train-images-idx3-ubyte.gz" \
        --train_labels="$DATA/train-labels-idx1-ubyte.gz" \
        --test_images="$DATA/t10k-images-idx3-ubyte.gz" \
        --test_labels="$DATA/t10k-labels-idx1-ubyte.gz" \
        --steps="$timed" --warmup_steps=30; then
      grep '^{' "$LOGS/time-shardps-$config-$backend.log" >>"$LOGS/timing/step_timer.jsonl"
      record "time:shardps-$config-$backend" PASS "$LAST_SECS" "$(grep -E '^step_timer: [a-z_0-9]+ on ' "$LOGS/time-shardps-$config-$backend.log" | tail -1 | cut -c13-)"
    else
      record "time:shardps-$config-$backend" FAIL "$LAST_SECS" "$(tail -1 "$LOGS/time-shardps-$config-$backend.log" | cut -c1-300)"
    fi
  done
  if run "time-torch-$config" 240 env PYTHONUNBUFFERED=1 python3 \
      "$REPO/scripts/bench/torch_step_bench.py" --config "$REPO/configs/$config.pbtxt" \
      --device cuda --steps "$timed" --warmup_steps 30; then
    grep '^{' "$LOGS/time-torch-$config.log" >>"$LOGS/timing/torch.jsonl"
    record "time:torch-$config" PASS "$LAST_SECS" "$(grep -E '^torch_step_bench:' "$LOGS/time-torch-$config.log" | sed 's/^torch_step_bench: //' | tr '\n' ';' | sed 's/;$//')"
  else
    record "time:torch-$config" FAIL "$LAST_SECS" "$(tail -1 "$LOGS/time-torch-$config.log" | cut -c1-300)"
  fi
done

# ---- 9 python ----
python_step
finish "$FAILED"
