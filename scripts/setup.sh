#!/usr/bin/env bash
# Installs what ShardPS needs to build, test and run its demo, from Debian's
# packages only. Fast (a dpkg query, no network) when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libopenblas-dev libeigen3-dev
  dataset-fashion-mnist
  liblinear-tools  # examples/heart_scale for libsvm_reader_test
  clang-14 libclang-rt-14-dev  # libFuzzer for tests/fuzz_codec.sh
  prometheus-cpp-dev  # /metrics of pserver and trainer
  prometheus  # tests/monitoring_test.py scrapes a local cluster, promtool
  slurm-wlm munge  # tests/slurm_test.py: a one-node Slurm cluster
  openmpi-bin  # tests/mpi_test.py: the mpirun recipe
  python3-matplotlib  # scripts/plot_metrics.py
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
