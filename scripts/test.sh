#!/usr/bin/env bash
# Sets everything up on a fresh machine (scripts/setup/setup.sh: every
# package, and the Python virtualenvs, PyTorch's included), builds, runs
# every test, and checks the lock annotations with clang
# (scripts/check_thread_safety.sh).
#   scripts/test.sh            # all tests
#   BUILD_DIR=build-asan PS_SANITIZE=address scripts/test.sh
#   PS_SKIP_CLANG_CHECK=1 scripts/test.sh   # without the clang build
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
start=$(date +%s)
# Tests and benchmarks on, also in a folder scripts/demo.sh configured
# (which keeps its build type: Release); a new folder is RelWithDebInfo.
options=(-DPS_BUILD_TESTS=ON -DPS_BUILD_BENCHMARKS=ON
         -DPS_SANITIZE="${PS_SANITIZE:-}")
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  options+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
fi
cmake -S . -B "$BUILD_DIR" "${options[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
built=$(date +%s)
echo "build: $((built - start)) s"
# One BLAS thread per process: the tests run several processes on 2 cores.
export OPENBLAS_NUM_THREADS=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" \
  --timeout 600 "$@"
echo "tests: $(($(date +%s) - built)) s"
if [ -z "${PS_SKIP_CLANG_CHECK:-}" ]; then
  bash scripts/check_thread_safety.sh
fi
