#!/usr/bin/env bash
# One command on a new machine: installs what the demo needs and is missing
# (scripts/setup/setup.sh --demo: the build's libraries, the Fashion-MNIST
# data, python3, matplotlib; not the tests' packages nor PyTorch), builds
# pserver and trainer, then trains the Fashion-MNIST MLP for one pass on 2
# pservers and 2 synchronous trainers on this machine, prints the test
# accuracy and draws the curves. Works from any directory:
#
#   bash scripts/demo.sh [extra trainer flags, e.g. --num_passes=3]
#
# BUILD_DIR (default build/ of this repository) picks the build folder: a
# new one is configured without tests and benchmarks (scripts/test.sh turns
# them on in the same folder), an existing one keeps its settings.
# LOG_DIR (default a fresh /tmp/shardps-demo-XXXX) the folder for the logs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
cd "$REPO"

say() { echo "demo: $*" >&2; }
start=$(date +%s)

bash "$REPO/scripts/setup/setup.sh" --demo

PYTHON="$(command -v python3 || true)"
if [ -z "$PYTHON" ] && [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; fi
if [ -z "$PYTHON" ]; then
  say "python3 is needed to run the local cluster (apt-get install python3)"
  exit 1
fi

# A new folder: Release (optimised as RelWithDebInfo, without the debug
# information the demo does not need: a shorter build), without tests
# and benchmarks (GoogleTest and Google Benchmark are not installed by
# --demo). An existing folder keeps its settings (scripts/test.sh then
# builds the tests in it, at its build type).
options=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  options+=(-DCMAKE_BUILD_TYPE=Release -DPS_BUILD_TESTS=OFF
            -DPS_BUILD_BENCHMARKS=OFF)
fi
say "configuring $BUILD_DIR"
if ! out="$(cmake -S "$REPO" -B "$BUILD_DIR" "${options[@]}" 2>&1)"; then
  echo "$out" >&2
  say "cmake could not configure $BUILD_DIR"
  exit 1
fi
say "building pserver and trainer (cmake --build $BUILD_DIR -j2)"
cmake --build "$BUILD_DIR" -j2 --target pserver trainer

LOG_DIR="${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/shardps-demo-XXXX")}"
say "training: 2 pservers, 2 sync trainers, 1 pass of configs/fmnist_mlp.pbtxt"
status=0
"$PYTHON" "$REPO/scripts/cluster/local_cluster.py" \
  --pservers 2 --trainers 2 \
  --config "$REPO/configs/fmnist_mlp.pbtxt" \
  --bin_dir "$BUILD_DIR" --log_dir "$LOG_DIR" --timeout 1200 \
  -- --mode=sync --num_passes=1 "$@" || status=$?

if [ "$status" -ne 0 ]; then
  say "the job failed (status $status); logs in $LOG_DIR"
  exit "$status"
fi
"$PYTHON" - "$LOG_DIR/summary.json" <<'EOF'
import json, sys
with open(sys.argv[1]) as f:
    summary = json.load(f)
t = summary["trainers"][0]
print("demo: test accuracy %.4f after %s steps (trainer 0; logs in %s)" %
      (t["test_accuracy"], t["step"], summary["log_dir"]))
EOF

# The curves: test loss and accuracy per pass, training loss, samples/s and
# where the step time goes (scripts/plot_metrics.py, with Debian's
# matplotlib, which setup.sh --demo installs). The training result is printed
# above whatever happens here; a plot that fails says so on one line and the
# demo exits 1, since with setup.sh done a missing picture is a defect.
if ! compgen -G "$LOG_DIR/trainer-*.jsonl" >/dev/null; then
  say "no curves: no trainer-*.jsonl in $LOG_DIR (--metrics_file given?)"
elif /usr/bin/python3 "$REPO/scripts/plot_metrics.py" \
    --out "$LOG_DIR/curves.png" "$LOG_DIR" >/dev/null; then
  echo "demo: curves in $LOG_DIR/curves.png" \
    "($(( $(date +%s) - start )) s in all)"
else
  plot_status=$?
  say "training succeeded (above), but no curves: scripts/plot_metrics.py" \
      "exited $plot_status (its message is above)"
  exit 1
fi
