#!/usr/bin/env bash
# Makes the virtualenv the Python package (python/, docs/python.md) runs in:
# Debian's /usr/bin/python3 (the interpreter shardps._native is built for,
# with its system packages: numpy, matplotlib), PyTorch from PyPI at a
# pinned version, and python/ on its path (a .pth file), so that
#   ~/.cache/shardps/torch-venv/bin/python -c 'import shardps.torch'
# works once the build has made shardps._native. Called by scripts/setup.sh;
# returns at once (no network) when the virtualenv is there with these pins.
#
#   SHARDPS_TORCH_VENV=DIR         where (default ~/.cache/shardps/torch-venv)
#   SHARDPS_SKIP_PYTHON_SETUP=1    do nothing
#
# PyPI's torch for Linux brings CUDA's libraries (about 5 GB in all); the
# same virtualenv runs on a CPU-only machine and on a GPU one.
set -euo pipefail

VENV="${SHARDPS_TORCH_VENV:-$HOME/.cache/shardps/torch-venv}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# torch and what it pulls in besides CUDA's packages (which torch pins
# exactly itself), as installed and tested.
REQUIREMENTS=(
  torch==2.15.0
  filelock==4.3.1
  fsspec==2026.9.0
  Jinja2==3.1.6
  MarkupSafe==3.0.4
  mpmath==1.3.0
  networkx==3.6.1
  setuptools==84.2.1
  sympy==1.14.0
  triton==3.9.0
  typing_extensions==4.16.0
)
STAMP="$VENV/.shardps-requirements"
WANT="${REQUIREMENTS[*]}"

if [ "${SHARDPS_SKIP_PYTHON_SETUP:-}" = 1 ]; then
  echo "setup_torch: skipped (SHARDPS_SKIP_PYTHON_SETUP=1)"
  exit 0
fi
site_path() {
  "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "$REPO/python" >"$(site_path)/shardps-source.pth"
  echo "setup_torch: $VENV ready (torch 2.15.0; python/ of $REPO on its path)"
  exit 0
fi

PY=/usr/bin/python3
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv --system-site-packages "$VENV"
fi
rm -f "$STAMP"
start=$(date +%s)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-input "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import torch; torch.zeros(1)'
echo "$REPO/python" >"$(site_path)/shardps-source.pth"
printf '%s' "$WANT" >"$STAMP"
echo "setup_torch: made $VENV with torch 2.15.0 in $(( $(date +%s) - start )) s" \
  "($(du -sh "$VENV" | cut -f1)); python/ of $REPO on its path"
