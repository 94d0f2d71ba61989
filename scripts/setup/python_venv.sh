#!/usr/bin/env bash
# Makes one of the project's two Python virtualenvs from Debian's
# /usr/bin/python3, with PyPI packages at pinned versions (every dependency
# is pinned here: pip resolves nothing else). Returns at once (no network)
# when the virtualenv is there with these pins.
#
#   python_venv.sh torch   the Python package's (python/, docs/python.md):
#                          PyTorch 2.15.0, Debian's packages visible (numpy,
#                          matplotlib), python/ of this repository on its
#                          path (a .pth file). About 5 GB: PyPI's Linux torch
#                          brings CUDA's libraries, and the same virtualenv
#                          runs on a CPU-only machine and on a GPU one.
#                          Where: SHARDPS_TORCH_VENV
#                          (default ~/.cache/shardps/torch-venv)
#   python_venv.sh k8s     tests/k8s_test.py's: kubernetes-validate 1.37.0
#                          (the Kubernetes JSON schemas of 1.25 to 1.37) and
#                          PyYAML. Where: SHARDPS_VENV
#                          (default ~/.cache/shardps/venv)
#
#   SHARDPS_SKIP_PYTHON_SETUP=1    do nothing
#
# scripts/setup/setup.sh (the full set-up of scripts/test.sh) makes both;
# scripts/cluster/local_cluster.py --python makes the torch one the first
# time it is needed. Says before a download what it fetches and why, and
# after, in one line, what it did. Installs python3-venv with apt-get when
# /usr/bin/python3 cannot make a virtualenv.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PROG="python_venv"
case "${1:-}" in
  torch)
    VENV="${SHARDPS_TORCH_VENV:-$HOME/.cache/shardps/torch-venv}"
    WHAT="torch 2.15.0"
    WHY="PyTorch 2.15.0 and CUDA's libraries from PyPI (about 5 GB, a few"
    WHY+=" minutes): the Python package (python/) and examples/ run in it"
    SYSTEM_SITE=1
    CHECK='import torch; torch.zeros(1)'
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
    ;;
  k8s)
    VENV="${SHARDPS_VENV:-$HOME/.cache/shardps/venv}"
    WHAT="kubernetes-validate 1.37.0, PyYAML 6.0.3"
    WHY="kubernetes-validate and PyYAML from PyPI (a few MB):"
    WHY+=" tests/k8s_test.py checks configs/k8s/ against Kubernetes' schemas"
    SYSTEM_SITE=0
    CHECK='import kubernetes_validate, yaml'
    # kubernetes-validate 1.37.0 and what it pulls in, as installed and tested.
    REQUIREMENTS=(
      kubernetes-validate==1.37.0
      PyYAML==6.0.3
      jsonschema==4.26.0
      jsonschema-specifications==2025.9.1
      referencing==0.37.0
      rpds-py==2026.9.1
      attrs==26.1.0
      importlib_resources==7.1.0
      packaging==26.3
      typing_extensions==4.16.0
    )
    ;;
  *)
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
STAMP="$VENV/.shardps-requirements"
WANT="${REQUIREMENTS[*]}"

if [ "${SHARDPS_SKIP_PYTHON_SETUP:-}" = 1 ]; then
  echo "$PROG: $1 skipped (SHARDPS_SKIP_PYTHON_SETUP=1)"
  exit 0
fi

# python/ of this repository on the torch virtualenv's path.
link_source() {
  if [ "$SYSTEM_SITE" = 1 ]; then
    local site
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$REPO/python" >"$site/shardps-source.pth"
    echo "; python/ of $REPO on its path"
  fi
}

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "$PROG: $VENV ready ($WHAT)$(link_source)"
  exit 0
fi

PY=/usr/bin/python3
note=""
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  note=" (installed python3-venv with apt-get)"
fi

echo "$PROG: downloading $WHY; into $VENV" >&2
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  if [ "$SYSTEM_SITE" = 1 ]; then
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
rm -f "$STAMP"
start=$(date +%s)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-input "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c "$CHECK"
linked="$(link_source)"
printf '%s' "$WANT" >"$STAMP"
echo "$PROG: made $VENV with $WHAT in $(( $(date +%s) - start )) s" \
  "($(du -sh "$VENV" | cut -f1))$note$linked"
