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
  libssl-dev  # common/tls: checks certificates and keys at start
  dataset-fashion-mnist
  liblinear-tools  # examples/heart_scale for libsvm_reader_test
  clang-14 libclang-rt-14-dev  # libFuzzer for tests/fuzz_codec.sh
  prometheus-cpp-dev  # /metrics of pserver and trainer
  prometheus  # tests/monitoring_test.py scrapes a local cluster, promtool
  slurm-wlm munge  # tests/slurm_test.py: a one-node Slurm cluster
  openmpi-bin  # tests/mpi_test.py: the mpirun recipe
  python3-matplotlib  # scripts/plot_metrics.py, scripts/sweep.py
  python3-yaml  # scripts/sweep.py --launcher=k8s reads the Job template
  iptables  # tests/netns.py: cuts between pairs and packet loss (issue 32)
  iproute2  # tests/netns.py: network namespaces on a bridge
  pybind11-dev python3-dev python3-venv  # python/: shardps._native (issue 35)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # prometheus, munge and slurm-wlm come with services: none is started by
  # the install (the tests start their own, on loopback).
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
  fi
  status=0
  $SUDO apt-get update -qq &&
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >/dev/null || status=$?
  if [ "$made_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
  if [ "$status" -ne 0 ]; then
    echo "setup: apt-get failed (status $status)" >&2
    exit "$status"
  fi
  echo "setup: done"
fi

# The virtualenv of the Python package (python/, docs/python.md): PyTorch.
bash "$(dirname "${BASH_SOURCE[0]}")/setup_torch.sh" ||
  echo "setup: no PyTorch virtualenv; the Python package's tests fail" >&2

# The virtualenv of tests/k8s_test.py (PyPI's kubernetes-validate).
bash "$(dirname "${BASH_SOURCE[0]}")/setup_python.sh" ||
  echo "setup: no Python virtualenv; tests/k8s_test.py will skip" >&2
