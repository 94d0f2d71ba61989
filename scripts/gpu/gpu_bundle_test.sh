#!/usr/bin/env bash
# Tests a bundle of scripts/gpu/gpu_bundle.sh on this machine, as far as a
# machine without a GPU allows (gpu_bundle.sh runs it after packing):
#
#   bash scripts/gpu/gpu_bundle_test.sh [out/gpu/shardps-gpu.tar.xz]
#
#  1. unpacks it into a fresh temporary folder;
#  2. every program starts there with an empty environment (no
#     LD_LIBRARY_PATH, PATH=/usr/bin:/bin);
#  3. a running pserver and trainer map no library from outside the bundle
#     but CUDA's (/proc/PID/maps): the bundle's loader, C library and
#     libstdc++, not the system's;
#  4. a short CPU job of the bundled programs (1 pserver, 2 sync trainers,
#     60 steps of configs/fmnist_mlp.pbtxt through
#     scripts/cluster/local_cluster.py)
#     ends with a test accuracy;
#  5. without a GPU, the bundled trainer's --use_gpu and step_timer's
#     --describe refuse with CUDA's reason, and the CUDA tests skip;
#  6. scripts/gpu/gpu_check.sh on this bundle checks steps 1 to 4 and stops at
#     the GPU step with status 3 and its message, its Python rows saying
#     that they did not run for want of a GPU;
#  7. gpu_check.sh --allow_cpu with PyTorch's virtualenv
#     (scripts/setup/python_venv.sh torch; skipped without it) runs its
#     Python path on the CPU: the bundle's shardps imported from the
#     bundle, examples/torch_mlp.py and torch_deepfm.py against the
#     bundle's pserver and as plain PyTorch, 120 steps each, all agreeing.
# Where this machine has a GPU, 5 to 7 are left to gpu_check.sh. Exit
# status 0 when every check passed, 1 otherwise.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ARCHIVE="${1:-$REPO/out/gpu/shardps-gpu.tar.xz}"
DATA="$(dirname "$ARCHIVE")/fashion-mnist"
FAILS=0
say() { echo "gpu_bundle_test: $*" >&2; }
ok() { say "ok: $*"; }
bad() { say "FAILED: $*"; FAILS=$((FAILS + 1)); }

[ -f "$ARCHIVE" ] || { say "no bundle at $ARCHIVE (bash scripts/gpu/gpu_bundle.sh)"; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/shardps-bundle-test-XXXX")"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
B="$TMP/shardps-gpu"
# A clean environment, run from the temporary folder.
# clean_exec replaces the (sub)shell that runs it: `clean_exec ... &` makes
# $! the program's own pid.
clean_exec() { cd "$TMP" && exec env -i PATH=/usr/bin:/bin HOME="$TMP" LD_LIBRARY_PATH= "$@"; }
clean() { (clean_exec "$@"); }

# 7: gpu_check.sh's Python path on the CPU (--allow_cpu).
python_on_cpu() {
  local venv="${SHARDPS_TORCH_VENV:-$HOME/.cache/shardps/torch-venv}" out rc rows
  if [ ! -x "$venv/bin/python" ]; then
    say "no PyTorch virtualenv at $venv: the Python path is not run on the CPU (bash scripts/setup/python_venv.sh torch)"
    return
  fi
  out="$(GPU_CHECK_QUICK=1 GPU_CHECK_PYTHON="$venv/bin/python" bash "$REPO/scripts/gpu/gpu_check.sh" \
    --bundle "$ARCHIVE" --data "$DATA" --out "$TMP/check-cpu" --allow_cpu 2>&1)"
  rc=$?
  rows="$(grep -E '^\| torch_(mlp|deepfm) \|' "$TMP/check-cpu/summary.md")"
  if [ $rc = 3 ] && [ "$(echo "$rows" | grep -c '| agree |$')" = 2 ] &&
      echo "$out" | grep -q "\[PASS\] python:import .* from /.*/shardps-gpu/python/shardps"; then
    ok "gpu_check.sh --allow_cpu: the Python path on the CPU agrees: $(echo "$rows" | cut -d'|' -f2,5,6 | tr '\n' ';' | tr -s ' ')"
  else
    bad "gpu_check.sh --allow_cpu (status $rc): $(echo "$out" | grep -E 'python:|FAIL' | tail -8)"
  fi
}

# 1
if tar -C "$TMP" -xJf "$ARCHIVE"; then
  ok "unpacked $(du -h "$ARCHIVE" | cut -f1) into $TMP ($(du -sh "$B" | cut -f1))"
else
  bad "tar -xJf $ARCHIVE"; exit 1
fi

# 2
for p in pserver trainer step_timer gen_ctr_data; do
  out="$(clean "$B/bin/$p" --version 2>&1)" && ok "$p --version: $out" ||
    bad "$p --version: $out"
done
for p in cuda_backend_test model_cuda_test cuda_threshold_encoder_test; do
  n="$(clean "$B/bin/$p" --gtest_list_tests 2>&1 | grep -c '^  ')" && [ "$n" -gt 0 ] &&
    ok "$p lists $n tests" || bad "$p --gtest_list_tests"
done

# 3: a pserver and a trainer that connects to it, their mapped files.
foreign() {  # the mapped .so files of PID outside the bundle, but CUDA's
  awk '{print $6}' "/proc/$1/maps" | grep '\.so' | sort -u |
    grep -v "^$B/lib/" | grep -vE '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[-a-z_.0-9]*)\.so' || true
}
clean_exec "$B/bin/pserver" --port=0 --port_file="$TMP/port" --num_gradient_servers=1 \
  >"$TMP/pserver.log" 2>&1 &
PIDS+=($!)
ps_pid=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
if [ -s "$TMP/port" ]; then
  f="$(foreign "$ps_pid")"
  [ -z "$f" ] && ok "pserver maps only the bundle's libraries ($(grep -c "$B/lib/" "/proc/$ps_pid/maps") mappings of $B/lib)" ||
    bad "pserver maps libraries from outside the bundle: $f"
  grep -q "$B/lib/libc.so.6" "/proc/$ps_pid/maps" && grep -q "$B/lib/ld-linux-x86-64.so.2" "/proc/$ps_pid/maps" &&
    ok "pserver runs on the bundle's loader and C library" || bad "pserver does not map the bundle's loader and libc"
  clean_exec "$B/bin/trainer" --pservers="127.0.0.1:$(cat "$TMP/port")" --trainer_id=0 \
    --num_gradient_servers=1 --config="$REPO/configs/fmnist_mlp.pbtxt" \
    --train_data="$DATA/train-images-idx3-ubyte.gz" --train_labels="$DATA/train-labels-idx1-ubyte.gz" \
    --test_data="$DATA/t10k-images-idx3-ubyte.gz" --test_labels="$DATA/t10k-labels-idx1-ubyte.gz" \
    --progress=off >"$TMP/trainer.log" 2>&1 &
  PIDS+=($!)
  tr_pid=$!
  sleep 2
  if kill -0 "$tr_pid" 2>/dev/null; then
    f="$(foreign "$tr_pid")"
    [ -z "$f" ] && ok "trainer maps only the bundle's libraries and CUDA's" ||
      bad "trainer maps libraries from outside the bundle: $f"
    kill "$tr_pid" 2>/dev/null
  else
    bad "the trainer ended early: $(tail -3 "$TMP/trainer.log")"
  fi
  kill "$ps_pid" 2>/dev/null
  wait "$ps_pid" "$tr_pid" 2>/dev/null
else
  bad "the bundled pserver wrote no port: $(tail -3 "$TMP/pserver.log")"
fi

# 4: a short job of the bundled programs.
PY="$(command -v python3 || echo /usr/bin/python3)"
if out="$(cd "$TMP" && env -i PATH=/usr/bin:/bin HOME="$TMP" "$PY" "$REPO/scripts/cluster/local_cluster.py" \
    --pservers 1 --trainers 2 --config "$REPO/configs/fmnist_mlp.pbtxt" \
    --bin_dir "$B" --log_dir "$TMP/job" --timeout 300 -- --mode=sync \
    --max_steps=60 --progress=off \
    --train_data="$DATA/train-images-idx3-ubyte.gz" --train_labels="$DATA/train-labels-idx1-ubyte.gz" \
    --test_data="$DATA/t10k-images-idx3-ubyte.gz" --test_labels="$DATA/t10k-labels-idx1-ubyte.gz" 2>&1)"; then
  acc="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["trainers"][0]["test_accuracy"])' "$TMP/job/summary.json")"
  ok "a 60-step CPU job of the bundled pserver and 2 trainers: test accuracy $acc"
else
  bad "the bundled CPU job failed: $(echo "$out" | tail -5)"
fi

# 5 and 6: no GPU here.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  say "this machine has a GPU: the refusals are not tested;" \
      "run scripts/gpu/gpu_check.sh"
else
  out="$(clean "$B/bin/trainer" --use_gpu --pservers=127.0.0.1:1 --trainer_id=0 \
    --num_gradient_servers=1 --config="$REPO/configs/fmnist_mlp.pbtxt" 2>&1)"
  rc=$?
  [ $rc -ne 0 ] && echo "$out" | grep -q -- "--use_gpu: no usable CUDA device" &&
    ok "trainer --use_gpu refuses (status $rc): $(echo "$out" | grep -- --use_gpu | tail -1 | cut -c1-160)" ||
    bad "trainer --use_gpu without a GPU (status $rc): $out"
  out="$(clean "$B/bin/step_timer" --describe 2>&1)"
  rc=$?
  [ $rc = 2 ] && ok "step_timer --describe refuses: $out" || bad "step_timer --describe (status $rc): $out"
  for t in cuda_backend_test model_cuda_test cuda_threshold_encoder_test; do
    out="$(clean "$B/bin/$t" 2>&1)"
    rc=$?
    [ $rc = 0 ] && echo "$out" | grep -q "no CUDA device, skipping" &&
      ok "$t skips: $(echo "$out" | grep -m1 'no CUDA device')" ||
      bad "$t without a GPU (status $rc): $(echo "$out" | tail -3)"
  done
  out="$(bash "$REPO/scripts/gpu/gpu_check.sh" --bundle "$ARCHIVE" --data "$DATA" --out "$TMP/check" 2>&1)"
  rc=$?
  rows="$(tar -xzOf "$TMP/check/logs.tar.gz" logs/steps.tsv)"
  if [ $rc = 3 ] && echo "$out" | grep -q "no usable GPU here: steps 1 to 4 passed" &&
      [ "$(echo "$rows" | head -4 | grep -c $'\tPASS\t')" = 4 ] &&
      [ "$(echo "$rows" | grep -cE $'^python:torch_(mlp|deepfm)\tSKIP\t.*no usable GPU here')" = 2 ]; then
    ok "gpu_check.sh stops at the GPU step (status 3): $(echo "$out" | grep '\[FAIL\] gpu' | cut -c1-200)"
    ok "its Python rows: $(echo "$rows" | grep '^python:torch_mlp' | cut -f2,4 | cut -c1-200)"
  else
    bad "gpu_check.sh without a GPU (status $rc): $(echo "$out" | tail -8)"
  fi
  python_on_cpu
fi

if [ $FAILS -gt 0 ]; then say "$FAILS checks FAILED"; exit 1; fi
say "every check passed"
