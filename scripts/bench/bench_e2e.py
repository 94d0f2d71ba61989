#!/usr/bin/env python3
"""End-to-end benchmark of the canonical dense workload (docs/
benchmarks.md): Fashion-MNIST, MLP 784-256-128-10, momentum 0.9, lr 0.05,
batch 64 per trainer, 2 trainers, 3 passes.

Runs ShardPS (1 and 2 pservers, sync and async) and, when the interpreter
of --torch_python has torch (default: the virtualenv of
scripts/setup/python_venv.sh torch), the same model in PyTorch trained on
ShardPS (examples/torch_mlp.py, docs/python.md), PyTorch single-process and
DDP (scripts/bench/torch_fmnist.py) on the same machine, interleaved over
--repeats rounds, and prints the medians as a markdown table: samples/s over
the training loop (both trainers together) and the test accuracy after each
pass. With --baseline_bin_dir, every ShardPS run is also run with the
binaries there (another build, say of the commit before a change), in the
same rounds, so that before and after compare within one run (which of
the two goes first alternates from round to round).

    python3 scripts/bench/bench_e2e.py [--repeats 3] [--passes 3] \
        [--bin_dir build] [--baseline_bin_dir /tmp/before/build] \
        [--only sync] [--no_torch]
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TORCH_SCRIPT = os.path.join(REPO, "scripts", "bench", "torch_fmnist.py")
LOCAL_CLUSTER = os.path.join(REPO, "scripts", "cluster", "local_cluster.py")


def run_cluster(bin_dir, pservers, trainer_flags, tmp, timeout=900,
                steps=None, python=None):
    """Runs configs/fmnist_mlp.pbtxt on `pservers` pservers and 2 trainers
    with scripts/cluster/local_cluster.py; returns {trainer id: [eval
    lines]}, and appends the trainers' step lines to `steps` if given. With
    `python`, the trainers are that Python script (local_cluster.py
    --python).
    scripts/bench/compression_bytes_accuracy.py uses it too."""
    log_dir = tempfile.mkdtemp(dir=tmp)
    metrics = os.path.join(log_dir, "metrics")
    cmd = [sys.executable, LOCAL_CLUSTER,
           "--pservers", str(pservers), "--trainers", "2",
           "--config", os.path.join(REPO, "configs", "fmnist_mlp.pbtxt"),
           "--bin_dir", bin_dir, "--log_dir", log_dir,
           "--metrics_dir", metrics, "--timeout", str(timeout), "--quiet"] + (
               ["--python", python] if python else []) + [
           "--", "--progress=off"] + list(trainer_flags)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    evals = {}
    for path in glob.glob(os.path.join(metrics, "*.jsonl")):
        with open(path) as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("event") == "eval":
                    evals.setdefault(ev["trainer_id"], []).append(ev)
                elif ev.get("event") == "step" and steps is not None:
                    steps.append(ev)
    return evals


def exposed_comm(steps):
    """The share of the trainers' step time spent blocked on pulls, pushes
    and other trainers: the communication that overlap did not hide."""
    comm = sum(s["pull_s"] + s["push_s"] + s["wait_s"] for s in steps)
    total = sum(s["data_s"] + s["compute_s"] + s["pull_s"] + s["push_s"] +
                s["wait_s"] for s in steps)
    return comm / total if total > 0 else None


def run_shardps(bin_dir, args, pservers, mode, tmp, extra=(), python=None):
    steps = []
    evals = run_cluster(bin_dir, pservers,
                        ["--mode=" + mode, "--num_passes=%d" % args.passes] +
                        list(extra), tmp, steps=steps, python=python)
    # Samples/s of the job: both trainers' samples over the longer loop.
    last = [e[-1] for e in evals.values()]
    samples = sum(e["step"] * 64 for e in last)
    seconds = max(e["train_seconds"] for e in last)
    accs = [e["test_accuracy"] for e in evals[0]]
    return samples / seconds, accs, exposed_comm(steps)


def run_torch(args, mode):
    """PyTorch from scripts/bench/torch_fmnist.py: `ddp` (2 processes, gloo) or
    `single` (one process with one thread, the figure ShardPS aims at in the
    end)."""
    cmd = [args.torch_python, TORCH_SCRIPT, "--mode", mode,
           "--epochs", str(args.passes), "--port", "29517"]
    if mode == "single":
        cmd += ["--threads", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            epochs = r["epochs"]
            samples = sum(e["samples"] for e in epochs)
            seconds = sum(e["wall_s"] for e in epochs)
            return samples / seconds, [e["test_acc"] for e in epochs], None
    raise RuntimeError("no RESULT line from " + TORCH_SCRIPT)


SHARDPS_RUNS = [  # name, pservers, mode, trainer flags
    ("ShardPS sync, 1 pserver", 1, "sync", []),
    ("ShardPS sync, 1 pserver, TCP (--shared_memory=false)", 1, "sync",
     ["--shared_memory=false"]),
    ("ShardPS sync, 1 pserver, --layer_pipeline", 1, "sync",
     ["--layer_pipeline"]),
    ("ShardPS async, 1 pserver", 1, "async", []),
    ("ShardPS async, 1 pserver, --async_overlap", 1, "async",
     ["--async_overlap"]),
    ("ShardPS async, 1 pserver, --async_prefetch", 1, "async",
     ["--async_prefetch"]),
    ("ShardPS sync, 2 pservers", 2, "sync", []),
    ("ShardPS async, 2 pservers", 2, "async", []),
]


# The same job with PyTorch trainers (docs/python.md).
PYTHON_RUNS = [
    ("ShardPS from PyTorch (examples/torch_mlp.py), sync, 1 pserver", 1,
     "sync", []),
]
TORCH_MLP = os.path.join(REPO, "examples", "torch_mlp.py")
TORCH_VENV_PYTHON = os.path.join(
    os.environ.get("SHARDPS_TORCH_VENV",
                   os.path.expanduser("~/.cache/shardps/torch-venv")),
    "bin", "python")


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"))
    p.add_argument("--baseline_bin_dir", default=None,
                   help="a second build whose pserver and trainer run each "
                        "ShardPS row again, in the same rounds")
    p.add_argument("--only", default=None,
                   help="run only the ShardPS rows whose name contains this")
    p.add_argument("--torch_python",
                   default=TORCH_VENV_PYTHON if os.access(
                       TORCH_VENV_PYTHON, os.X_OK) else "/usr/bin/python3",
                   help="the interpreter that runs "
                   "scripts/bench/torch_fmnist.py")
    p.add_argument("--no_torch", action="store_true")
    args = p.parse_args()
    for d in [args.bin_dir] + ([args.baseline_bin_dir]
                               if args.baseline_bin_dir else []):
        for b in ("pserver/pserver", "trainer/trainer"):
            if not os.access(os.path.join(d, b), os.X_OK):
                p.error(f"no {b} in {d}")
    if args.repeats < 1 or args.passes < 1:
        p.error("--repeats and --passes must be at least 1")
    return args


def make_runs(args):
    """[(name, fn(tmp))] in the order each round runs them."""
    runs = []
    for name, pservers, mode, flags in SHARDPS_RUNS:
        if args.only and args.only not in name:
            continue
        runs.append((name, lambda t, p=pservers, m=mode, f=flags:
                     run_shardps(args.bin_dir, args, p, m, t, f)))
        if args.baseline_bin_dir:
            runs.append((name + " (baseline)",
                         lambda t, p=pservers, m=mode, f=flags:
                         run_shardps(args.baseline_bin_dir, args, p, m, t, f)))
    have_torch = (not args.no_torch and
                  subprocess.run([args.torch_python, "-c", "import torch"],
                                 capture_output=True).returncode == 0)
    if have_torch:
        for name, pservers, mode, flags in PYTHON_RUNS:
            if args.only and args.only not in name:
                continue
            runs.append((name, lambda t, p=pservers, m=mode, f=flags:
                         run_shardps(args.bin_dir, args, p, m, t, f,
                                     python=TORCH_MLP)))
        runs.append(("PyTorch, 1 process, 1 thread",
                     lambda t: run_torch(args, "single")))
        runs.append(("PyTorch DDP (gloo), 2 processes",
                     lambda t: run_torch(args, "ddp")))
    return runs, have_torch


def round_order(runs, r):
    """The runs of round `r`: on odd rounds each ShardPS row's baseline
    goes first, so that neither build always runs second (on a 2-core
    machine the second of two runs of a pair came out ~7% faster)."""
    if r % 2 == 0:
        return runs
    out = list(runs)
    for i in range(len(out) - 1):
        if out[i + 1][0] == out[i][0] + " (baseline)":
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def main():
    args = parse_args()
    runs, have_torch = make_runs(args)
    results = {name: [] for name, _ in runs}
    failed = {}
    with tempfile.TemporaryDirectory(prefix="shardps-bench-") as tmp:
        for r in range(args.repeats):
            for name, fn in round_order(runs, r):
                try:
                    sps, accs, comm = fn(tmp)
                except subprocess.CalledProcessError as e:
                    # A job that fails (a trainer refused for a NaN, say)
                    # is a result too: the row says how many did.
                    failed[name] = failed.get(name, 0) + 1
                    print("round %d %-34s FAILED (%s exited %d)" %
                          (r + 1, name, os.path.basename(e.cmd[1]),
                           e.returncode), file=sys.stderr, flush=True)
                    continue
                results[name].append((sps, accs, comm))
                print("round %d %-34s %8.0f samples/s  accuracy %s" %
                      (r + 1, name, sps, " ".join("%.4f" % a for a in accs)),
                      file=sys.stderr, flush=True)
    base = single = None
    if have_torch and results[runs[-1][0]] and results[runs[-2][0]]:
        base = statistics.median(r[0] for r in results[runs[-1][0]])
        single = statistics.median(r[0] for r in results[runs[-2][0]])
    print("| run | samples/s (median of %d) | vs DDP | vs 1 thread | "
          "exposed communication | test accuracy per pass (median run) |" %
          args.repeats)
    print("|---|---|---|---|---|---|")
    for name, _ in runs:
        if failed.get(name):
            name_cell = "%s (%d of %d failed)" % (name, failed[name],
                                                  args.repeats)
        else:
            name_cell = name
        rs = sorted(results[name], key=lambda x: x[0])
        if not rs:
            print("| %s | - | - | - | - | - |" % name_cell)
            continue
        sps, accs, comm = rs[len(rs) // 2]
        ratio = "%.2f" % (sps / base) if base else "-"
        ratio1 = "%.2f" % (sps / single) if single else "-"
        print("| %s | %.0f | %s | %s | %s | %s |" % (
            name_cell, sps, ratio, ratio1,
            "%.0f%%" % (100 * comm) if comm is not None else "-",
            " / ".join("%.3f" % a for a in accs if a is not None)))


if __name__ == "__main__":
    main()
