#!/usr/bin/env bash
# Builds every target (libraries, binaries, tests) with clang and
# -Wthread-safety -Wthread-safety-beta -Werror, so that the lock
# annotations (docs/architecture.md, "Locks") are checked by the compiler:
# a field read without its mutex, a function called without the lock it
# requires, two mutexes taken against their declared order, all stop the
# build. CUDA is off here (nvcc compiles the device code with its own host
# compiler; the host code is the same). Run by scripts/test.sh.
#   scripts/check_thread_safety.sh [BUILD_DIR]   (default: build-clang)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-clang}
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "check_thread_safety: clang is missing" \
    "(bash scripts/setup/setup.sh installs clang-14)" >&2
  exit 1
fi
start=$(date +%s)
CC="$cc" CXX="$cxx" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug \
  -DSHARDPS_WITH_CUDA=OFF -DPS_BUILD_BENCHMARKS=ON -DPS_WERROR=ON >/dev/null
if ! cmake --build "$BUILD_DIR" -j"$(nproc)" >"$BUILD_DIR/build.log" 2>&1; then
  grep -E "error|warning" "$BUILD_DIR/build.log" | head -40 >&2
  echo "check_thread_safety: FAILED (full log: $BUILD_DIR/build.log)" >&2
  exit 1
fi
warnings=$(grep -c "warning:" "$BUILD_DIR/build.log" || true)
echo "check_thread_safety: clang -Wthread-safety -Wthread-safety-beta -Werror: ${warnings} warnings, $(($(date +%s) - start)) s"
