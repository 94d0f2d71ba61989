#!/usr/bin/env bash
# Builds and runs the transport and optimizer benchmarks and prints them as
# markdown tables. ShardPS's push and pull are divided by plain gRPC's,
# measured in the same run and processes (BM_PlainGrpc* in
# push_pull_benchmark); the figures of docs/benchmarks.md, taken on
# another day and machine, are shown only as a reference.
#
#   scripts/bench/microbench.sh       # build dir ./build, 3 repetitions
#   BUILD_DIR=out BENCH_REPS=1 scripts/bench/microbench.sh
#
# Environment:
#   BUILD_DIR   CMake build directory (default: build)
#   BENCH_REPS  repetitions per benchmark; the tables show the median
#               (default: 3)
#   BENCH_OUT   where the JSON results go, one file per program run
#               (default: $BUILD_DIR/bench)
#
# Repetitions run interleaved in random order, as the peers' medians were,
# because these machines drift by tens of percent within a minute; the plain
# gRPC baseline is interleaved with ShardPS's runs of the same payload. Takes
# about 2 to 3 minutes on the project's 2-core machines. The JSON of
# both programs stays in $BENCH_OUT for later comparison.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
case "${BUILD_DIR}" in
  /*) ;;
  *) BUILD_DIR="${ROOT}/${BUILD_DIR}" ;;
esac
BENCH_REPS="${BENCH_REPS:-3}"
BENCH_OUT="${BENCH_OUT:-${BUILD_DIR}/bench}"
TARGETS=(push_pull_benchmark optimizer_benchmark)

PYTHON=/usr/bin/python3
if [ ! -x "${PYTHON}" ]; then PYTHON="$(command -v python3)"; fi

# Configure (a no-op when up to date) so that new targets are known, then
# build only the benchmark programs.
cmake -S "${ROOT}" -B "${BUILD_DIR}" -DPS_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "${BUILD_DIR}" -j2 --target "${TARGETS[@]}" >/dev/null

mkdir -p "${BENCH_OUT}"
rm -f "${BENCH_OUT}"/*.json "${BENCH_OUT}"/*.log
export OPENBLAS_NUM_THREADS=1
aggregates_only=false
if [ "${BENCH_REPS}" -gt 1 ]; then aggregates_only=true; fi

# run NAME PROGRAM [FLAGS...]: JSON to $BENCH_OUT/NAME.json.
run() {
  local name="$1" prog="$2"
  shift 2
  "${BUILD_DIR}/benchmarks/${prog}" --benchmark_format=json \
    --benchmark_repetitions="${BENCH_REPS}" \
    --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only="${aggregates_only}" "$@" \
    >"${BENCH_OUT}/${name}.json" 2>"${BENCH_OUT}/${name}.log" || {
    echo "${prog} $* failed; see ${BENCH_OUT}/${name}.log" >&2
    exit 1
  }
}

start=$(date +%s)
# One process per payload size, like a trainer with one model size: glibc's
# malloc adapts its mmap and trim thresholds to the largest buffers freed so
# far, so a 4 MiB push measured after 64 MiB transfers in the same process
# page-faults less and runs about twice as fast as in a fresh one.
PAYLOADS=(65536 262144 1048576 4194304 16777216 67108864)
for bytes in "${PAYLOADS[@]}"; do
  echo "running push_pull_benchmark, ${bytes} bytes (${BENCH_REPS} repetitions)..." >&2
  run "push_pull_${bytes}" push_pull_benchmark \
    --benchmark_filter="/bytes:${bytes}/"
done
echo "running optimizer_benchmark (${BENCH_REPS} repetitions)..." >&2
run optimizer optimizer_benchmark
echo "benchmarks took $(($(date +%s) - start)) s" >&2

"${PYTHON}" - "${BENCH_OUT}/optimizer.json" "${BENCH_OUT}"/push_pull_*.json <<'EOF'
import json
import re
import sys

# Reference only: peer figures, MiB/s of payload, copied from
# docs/benchmarks.md ("Transport ceilings and a peer parameter
# server"), measured 2026-11-21 on another machine of this kind, not side by
# side with this run. The ratios use plain gRPC measured in this run
# (BM_PlainGrpcPush / BM_PlainGrpcPull). Absent: not measured there.
REF_PLAIN_GRPC = {  # synchronous unary, one protobuf `bytes` field, loopback
    64 << 10: (470, 370),
    1 << 20: (810, 910),
    4 << 20: (930, 860),
    16 << 20: (900, 830),
    64 << 20: (350, 350),
}
REF_PS_LITE = {  # ZeroMQ over TCP, empty server handler, 1 worker
    1 << 20: (2640, 2130),
    16 << 20: (2520, 1700),
    64 << 20: (1210, 1080),
}
MEMCPY_PEER_GIBS = 8.2  # memcpy, one core, 256 MiB (docs/benchmarks.md)


def load(*paths):
    """Returns {run_name: entry}, the median when repetitions were run, and
    the first file's context."""
    runs, singles, ctx = {}, {}, None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if ctx is None:
            ctx = data.get("context", {})
        for b in data["benchmarks"]:
            add(path, b, runs, singles)
    for name, b in singles.items():
        runs.setdefault(name, b)
    return runs, ctx


def add(path, b, runs, singles):
    name = b.get("run_name", b["name"])
    if b.get("error_occurred"):
        sys.exit(f"{path}: {name}: {b.get('error_message')}")
    if b.get("run_type") == "aggregate":
        if b.get("aggregate_name") == "median":
            runs[name] = b
    else:
        singles.setdefault(name, b)


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


opt, _ = load(sys.argv[1])
gbs = {}  # (kernel, floats) -> GB/s
for name, b in opt.items():
    m = re.match(r"BM_(\w+)/floats:(\d+)", name)
    if m:
        gbs[(m.group(1), int(m.group(2)))] = b["GB/s"]
# memcpy of 256 MiB here against docs/benchmarks.md's figure: the peers' numbers
# were not measured side by side with these, so say how the machines differ.
calib = gbs.get(("Memcpy", 64 << 20))
calib_gibs = None if calib is None else calib * 1e9 / 2 / (1 << 30)
calib_note = (
    "memcpy of 256 MiB runs at " + fmt(calib_gibs, 1) + " GiB/s copied here, "
    f"{MEMCPY_PEER_GIBS} GiB/s in docs/benchmarks.md"
    + ("" if calib_gibs is None else
       f" ({calib_gibs / MEMCPY_PEER_GIBS:.1f}x)")
    + "; docs/benchmarks.md's figures were measured on another day and machine, "
    "not side by side with this run.")

transfer, ctx = load(*sys.argv[2:])
mibs = {}  # (op, bytes, (pservers, shared memory)) -> MiB/s
grpc_mibs = {}  # (op, bytes) -> MiB/s, plain gRPC in this run
raw_mibs = {}  # (op, bytes) -> MiB/s, one raw TCP connection in this run
for name, b in transfer.items():
    m = re.match(r"BM_(Push|Pull|PushPull)/bytes:(\d+)/pservers:(\d+)"
                 r"(?:/shm:(\d+))?", name)
    if m:
        lane = (int(m.group(3)), int(m.group(4) or 0))
        mibs[(m.group(1), int(m.group(2)), lane)] = b["MiB/s"]
    m = re.match(r"BM_PlainGrpc(Push|Pull)/bytes:(\d+)/", name)
    if m:
        grpc_mibs[(m.group(1), int(m.group(2)))] = b["MiB/s"]
    m = re.match(r"BM_RawTcp(Push|Pull)/bytes:(\d+)/", name)
    if m:
        raw_mibs[(m.group(1), int(m.group(2)))] = b["MiB/s"]

load_avg = ", ".join(f"{x:.2f}" for x in ctx.get("load_avg", []))
print(f"## Dense push/pull over loopback TCP, MiB/s of payload "
      f"({ctx.get('num_cpus', '?')} CPUs, load average {load_avg} at start)")
print()
print("ShardPS: in-process pservers and one ASYNC trainer over 127.0.0.1, "
      "block 65536 floats, SGD applied on the pserver; round = one push and "
      "one pull of the payload, payload / round time. Plain gRPC: measured "
      "in this run, in the same processes, interleaved with ShardPS: sync "
      "unary calls carrying one protobuf `bytes` field of the payload to a "
      "server that answers at once (no store, optimizer or chunking). "
      "÷ gRPC: ShardPS / plain gRPC of this run. Reference columns: "
      "docs/benchmarks.md's figures (plain gRPC unary `bytes`; ps-lite 1 worker, "
      "empty handler), push / pull, from another day and machine; do not "
      "divide by them. \"shared memory\": the values go through a region "
      "the trainer and the pserver map (--shared_memory, trainers on the "
      "pserver's host) and so do the calls (slots and a futex doorbell), "
      "as trainers do; \"shared memory, gRPC calls\": the values through "
      "the region, the calls (offsets) over gRPC; \"TCP lane\": the "
      "trainer's dense calls over connections of their own "
      "(docs/wire_protocol.md, \"TCP lane\"), as trainers on other hosts "
      "do. Raw TCP: one loopback connection of this run carrying the payload "
      "one way and a byte back, nothing else (the ceiling of a lane's "
      "single call).")
print()
print("Calibration: " + calib_note)
print()
print("| payload | pservers | push | pull | round | plain gRPC push "
      "| plain gRPC pull | push ÷ gRPC | pull ÷ gRPC | raw TCP push / pull "
      "| ref. plain gRPC, docs/benchmarks.md | ref. ps-lite, docs/benchmarks.md |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")


def ratio(a, b):
    return None if a is None or b is None else a / b


def pair(p):
    return "—" if p is None else f"{fmt(p[0])} / {fmt(p[1])}"


for size in sorted({k[1] for k in mibs} | {k[1] for k in grpc_mibs}):
    g_push = grpc_mibs.get(("Push", size))
    g_pull = grpc_mibs.get(("Pull", size))
    ref_grpc = pair(REF_PLAIN_GRPC.get(size))
    ref_lite = pair(REF_PS_LITE.get(size))
    raw = ("—" if ("Push", size) not in raw_mibs else
           pair((raw_mibs.get(("Push", size)), raw_mibs.get(("Pull", size)))))
    for servers in sorted({k[2] for k in mibs}) or [None]:
        push = mibs.get(("Push", size, servers))
        pull = mibs.get(("Pull", size, servers))
        rnd = mibs.get(("PushPull", size, servers))
        lanes = {0: "", 1: ", shared memory",
                 2: ", shared memory, gRPC calls", 3: ", TCP lane"}
        where = ("—" if servers is None else
                 f"{servers[0]}" + lanes.get(servers[1], f", shm {servers[1]}"))
        print(f"| {size_name(size)} | {where} | {fmt(push)} "
              f"| {fmt(pull)} | {fmt(rnd)} | {fmt(g_push)} | {fmt(g_pull)} "
              f"| {fmt(ratio(push, g_push), 2)} "
              f"| {fmt(ratio(pull, g_pull), 2)} | {raw} | {ref_grpc} "
              f"| {ref_lite} |")

print()
print("## Optimizer update throughput (CPU functors), GB/s of memory touched")
print()
print("Bytes per element: SGD 12, momentum 20, Adagrad 20, Adam 28 (gradient "
      "read, value and state read and written); memcpy 8 (read + write). "
      "Single-threaded. Calibration: " + calib_note)
print()
print("| kernel | floats | GB/s | memcpy GB/s | % of memcpy |")
print("|---|---|---|---|---|")
for kernel in ("Sgd", "Momentum", "Adagrad", "Adam"):
    for n in sorted({k[1] for k in gbs if k[0] == kernel}):
        v, base = gbs.get((kernel, n)), gbs.get(("Memcpy", n))
        pct = None if v is None or not base else 100 * v / base
        label = f"{n >> 20}M"
        print(f"| {kernel} | {label} | {fmt(v, 1)} | {fmt(base, 1)} "
              f"| {fmt(pct)}% |")
EOF
