#!/usr/bin/env bash
# Installs what ShardPS needs from Debian's packages only, for one of three
# uses. Fast (a dpkg query, no network) when everything is present.
#
#   setup.sh [--all]   everything (scripts/test.sh): the demo's packages, the
#                      tests' (GoogleTest, Google Benchmark, clang, Slurm,
#                      Open MPI, Prometheus, iptables, pybind11, ...) and the
#                      two Python virtualenvs (scripts/setup/python_venv.sh:
#                      PyTorch's, about 5 GB, and tests/k8s_test.py's)
#   setup.sh --demo    what scripts/demo.sh needs: --build's packages, the
#                      Fashion-MNIST data, python3 and matplotlib (the curves)
#   setup.sh --build   what building pserver, trainer and tools/ needs with
#                      -DPS_BUILD_TESTS=OFF -DPS_BUILD_BENCHMARKS=OFF
#                      (configs/k8s/Dockerfile)
set -euo pipefail

HERE="$(dirname "${BASH_SOURCE[0]}")"

# CMakeLists.txt's REQUIRED find_package and pkg-config modules.
BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgflags-dev libgoogle-glog-dev
  zlib1g-dev libopenblas-dev
  libssl-dev  # common/tls: checks certificates and keys at start
  prometheus-cpp-dev  # /metrics of pserver and trainer
  librocksdb-dev  # the disk tier of sparse tables (--sparse_store_dir)
)
DEMO_PACKAGES=(
  python3  # scripts/cluster/local_cluster.py
  dataset-fashion-mnist  # configs/fmnist_*.pbtxt read it
  python3-matplotlib  # scripts/plot_metrics.py, scripts/sweep/sweep.py
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  libeigen3-dev  # benchmarks/gemm_benchmark.cc
  liblinear-tools  # examples/heart_scale for libsvm_reader_test
  # scripts/check_thread_safety.sh; libFuzzer for tests/fuzz_codec.sh
  clang-14 libclang-rt-14-dev
  prometheus  # tests/monitoring_test.py scrapes a local cluster, promtool
  slurm-wlm munge  # tests/slurm_test.py: a one-node Slurm cluster
  openmpi-bin  # tests/mpi_test.py: the mpirun recipe
  python3-yaml  # scripts/sweep/sweep.py --launcher=k8s reads the Job template
  iptables  # tests/netns.py: cuts between pairs and packet loss (issue 32)
  iproute2  # tests/netns.py: network namespaces on a bridge
  pybind11-dev python3-dev python3-venv  # python/: shardps._native (issue 35)
)

profile=all
case "${1:-}" in
  ""|--all) ;;
  --demo) profile=demo ;;
  --build) profile=build ;;
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown argument $1 (--demo, --build, --all)" >&2; exit 2 ;;
esac
PACKAGES=("${BUILD_PACKAGES[@]}")
if [ "$profile" != build ]; then PACKAGES+=("${DEMO_PACKAGES[@]}"); fi
if [ "$profile" = all ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

# apt-get install, with no service started by the install (prometheus,
# munge and slurm-wlm come with services; the tests start their own, on
# loopback).
apt_install() {
  local SUDO="" policy=/usr/sbin/policy-rc.d made_policy=0 status=0
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
  fi
  $SUDO apt-get update -qq &&
    $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    status=$?
  if [ "$made_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
  return "$status"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages of --$profile present"
else
  echo "setup: installing ${missing[*]}"
  status=0
  apt_install "${missing[@]}" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "setup: apt-get failed (status $status)" >&2
    exit "$status"
  fi
  echo "setup: done"
fi

if [ "$profile" = all ]; then
  bash "$HERE/python_venv.sh" torch ||
    echo "setup: no PyTorch virtualenv; the Python package's tests fail" >&2
  bash "$HERE/python_venv.sh" k8s ||
    echo "setup: no Python virtualenv; tests/k8s_test.py will skip" >&2
fi
