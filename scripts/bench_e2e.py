#!/usr/bin/env python3
"""End-to-end benchmark of the canonical dense workload (../shared/
BENCHMARKS.md): Fashion-MNIST, MLP 784-256-128-10, momentum 0.9, lr 0.05,
batch 64 per trainer, 2 trainers, 3 passes.

Runs ShardPS (1 and 2 pservers, sync and async) and, when Debian's
python3-torch and the peer script are there, PyTorch DDP on the same machine,
interleaved over --repeats rounds, and prints the medians as a markdown table:
samples/s over the training loop (both trainers together) and the test
accuracy after each pass.

    python3 scripts/bench_e2e.py [--repeats 3] [--passes 3] [--bin_dir build]
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(os.path.dirname(REPO), "shared", "peers",
                    "torch_fmnist.py")


def run_cluster(bin_dir, pservers, trainer_flags, tmp, timeout=900,
                steps=None):
    """Runs configs/fmnist_mlp.pbtxt on `pservers` pservers and 2 trainers
    with scripts/local_cluster.py; returns {trainer id: [eval lines]}, and
    appends the trainers' step lines to `steps` if given.
    scripts/compression_e2.py uses it too."""
    log_dir = tempfile.mkdtemp(dir=tmp)
    metrics = os.path.join(log_dir, "metrics")
    cmd = [sys.executable, os.path.join(REPO, "scripts", "local_cluster.py"),
           "--pservers", str(pservers), "--trainers", "2",
           "--config", os.path.join(REPO, "configs", "fmnist_mlp.pbtxt"),
           "--bin_dir", bin_dir, "--log_dir", log_dir,
           "--metrics_dir", metrics, "--timeout", str(timeout), "--quiet",
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


def run_shardps(args, pservers, mode, tmp, extra=()):
    steps = []
    evals = run_cluster(args.bin_dir, pservers,
                        ["--mode=" + mode, "--num_passes=%d" % args.passes] +
                        list(extra), tmp, steps=steps)
    # Samples/s of the job: both trainers' samples over the longer loop.
    last = [e[-1] for e in evals.values()]
    samples = sum(e["step"] * 64 for e in last)
    seconds = max(e["train_seconds"] for e in last)
    accs = [e["test_accuracy"] for e in evals[0]]
    return samples / seconds, accs, exposed_comm(steps)


def run_torch(args, mode):
    """PyTorch from the peer script: `ddp` (2 processes, gloo) or `single`
    (one process with one thread, the figure ShardPS aims at in the end)."""
    cmd = ["/usr/bin/python3", PEER, "--mode", mode,
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
    raise RuntimeError("no RESULT line from " + PEER)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"))
    p.add_argument("--no_torch", action="store_true")
    args = p.parse_args()

    runs = [("ShardPS sync, 1 pserver", lambda t: run_shardps(args, 1, "sync", t)),
            ("ShardPS sync, 1 pserver, TCP (--shared_memory=false)",
             lambda t: run_shardps(args, 1, "sync", t,
                                   ["--shared_memory=false"])),
            ("ShardPS sync, 1 pserver, --layer_pipeline",
             lambda t: run_shardps(args, 1, "sync", t, ["--layer_pipeline"])),
            ("ShardPS async, 1 pserver", lambda t: run_shardps(args, 1, "async", t)),
            ("ShardPS async, 1 pserver, --async_overlap",
             lambda t: run_shardps(args, 1, "async", t, ["--async_overlap"])),
            ("ShardPS async, 1 pserver, --async_prefetch",
             lambda t: run_shardps(args, 1, "async", t, ["--async_prefetch"])),
            ("ShardPS sync, 2 pservers", lambda t: run_shardps(args, 2, "sync", t)),
            ("ShardPS async, 2 pservers", lambda t: run_shardps(args, 2, "async", t))]
    have_torch = (not args.no_torch and os.path.exists(PEER) and
                  subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                 capture_output=True).returncode == 0)
    if have_torch:
        runs.append(("PyTorch, 1 process, 1 thread",
                     lambda t: run_torch(args, "single")))
        runs.append(("PyTorch DDP (gloo), 2 processes",
                     lambda t: run_torch(args, "ddp")))
    results = {name: [] for name, _ in runs}
    with tempfile.TemporaryDirectory(prefix="shardps-bench-") as tmp:
        for r in range(args.repeats):
            for name, fn in runs:
                sps, accs, comm = fn(tmp)
                results[name].append((sps, accs, comm))
                print("round %d %-34s %8.0f samples/s  accuracy %s" %
                      (r + 1, name, sps, " ".join("%.4f" % a for a in accs)),
                      file=sys.stderr, flush=True)
    base = single = None
    if have_torch:
        base = statistics.median(r[0] for r in results[runs[-1][0]])
        single = statistics.median(r[0] for r in results[runs[-2][0]])
    print("| run | samples/s (median of %d) | vs DDP | vs 1 thread | "
          "exposed communication | test accuracy per pass (median run) |" %
          args.repeats)
    print("|---|---|---|---|---|---|")
    for name, _ in runs:
        rs = sorted(results[name], key=lambda x: x[0])
        sps, accs, comm = rs[len(rs) // 2]
        ratio = "%.2f" % (sps / base) if base else "-"
        ratio1 = "%.2f" % (sps / single) if single else "-"
        print("| %s | %.0f | %s | %s | %s | %s |" % (
            name, sps, ratio, ratio1,
            "%.0f%%" % (100 * comm) if comm is not None else "-",
            " / ".join("%.3f" % a for a in accs if a is not None)))


if __name__ == "__main__":
    main()
