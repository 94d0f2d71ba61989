#!/usr/bin/env bash
# Makes the Python virtualenv that tests/k8s_test.py validates the Kubernetes
# manifests (configs/k8s/) with: PyPI's kubernetes-validate (the Kubernetes
# JSON schemas of 1.25 to 1.37, and jsonschema) and PyYAML, at pinned
# versions, with Debian's /usr/bin/python3. Called by scripts/setup.sh;
# returns at once (no Python, no network) when the virtualenv is there with
# these pins.
#
#   SHARDPS_VENV=DIR               where (default ~/.cache/shardps/venv)
#   SHARDPS_SKIP_PYTHON_SETUP=1    do nothing (the container image build)
#
# Prints one line saying what it did. Installs python3-venv with apt-get when
# /usr/bin/python3 cannot make a virtualenv.
set -euo pipefail

VENV="${SHARDPS_VENV:-$HOME/.cache/shardps/venv}"
# kubernetes-validate 1.37.0 and what it pulls in, as installed and tested
# (pip resolves nothing else: every dependency is pinned here).
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
STAMP="$VENV/.shardps-requirements"
WANT="${REQUIREMENTS[*]}"

if [ "${SHARDPS_SKIP_PYTHON_SETUP:-}" = 1 ]; then
  echo "setup_python: skipped (SHARDPS_SKIP_PYTHON_SETUP=1)"
  exit 0
fi
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "setup_python: $VENV ready (kubernetes-validate 1.37.0)"
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

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-input "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import kubernetes_validate, yaml'
printf '%s' "$WANT" >"$STAMP"
echo "setup_python: made $VENV with kubernetes-validate 1.37.0, PyYAML 6.0.3$note"
