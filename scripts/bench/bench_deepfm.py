#!/usr/bin/env python3
"""DeepFM on ShardPS against plain PyTorch (docs/python.md): the test AUC
and samples/s of examples/torch_deepfm.py with 2 trainers (batch 256 each)
on 2 pservers, sync and async, with the next batch's rows fetched with
each push (the default) and without (--no_prefetch), and of the same model
in one plain PyTorch process
(torch.nn.Embedding(sparse=True), Adagrad and Adam) with batch 512, on 1
and on 2 threads, interleaved over --repeats rounds; prints the medians as
a markdown table. Makes the CTR data with build/tools/gen_ctr_data
--field_in_high_bits when --data has none.

    python3 scripts/bench/bench_deepfm.py [--repeats 3] [--passes 1]
        [--data /tmp/shardps-ctr-dnn] [--bin_dir build]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import bench_e2e

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(REPO, "examples", "torch_deepfm.py")
# The PyTorch virtualenv's interpreter, found as bench_e2e.py finds it.
VENV_PYTHON = bench_e2e.TORCH_VENV_PYTHON


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--data", default="/tmp/shardps-ctr-dnn")
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"))
    a = p.parse_args()
    if a.repeats < 1 or a.passes < 1:
        p.error("--repeats and --passes must be at least 1")
    if not os.access(VENV_PYTHON, os.X_OK):
        p.error("no PyTorch virtualenv at %s (bash "
                "scripts/setup/python_venv.sh torch)" % VENV_PYTHON)
    return a


def ensure_data(a):
    train, test = (os.path.join(a.data, n) for n in ("train", "test"))
    if os.path.exists(train) and os.path.exists(test):
        return
    os.makedirs(a.data, exist_ok=True)
    subprocess.run([os.path.join(a.bin_dir, "tools", "gen_ctr_data"),
                    "--field_in_high_bits", "--train_out=" + train,
                    "--test_out=" + test], check=True)


def results_of(text):
    return [json.loads(l[len("RESULT "):]) for l in text.splitlines()
            if l.startswith("RESULT ")]


def run_plain(a, threads):
    r = subprocess.run(
        [VENV_PYTHON, EXAMPLE, "--plain", "--batch_size=512",
         "--threads=%d" % threads, "--num_passes=%d" % a.passes,
         "--train=" + os.path.join(a.data, "train"),
         "--test=" + os.path.join(a.data, "test")],
        check=True, capture_output=True, text=True)
    last = results_of(r.stdout)[-1]
    samples = sum(p["samples_per_s"] * p["train_seconds"]
                  for p in last["passes"])
    return samples / last["train_seconds"], last["passes"][-1]["test_auc"]


def run_shardps(a, tmp, flags):
    log_dir = tempfile.mkdtemp(dir=tmp)
    subprocess.run(
        [sys.executable, bench_e2e.LOCAL_CLUSTER,
         "--pservers", "2", "--trainers", "2", "--bin_dir", a.bin_dir,
         "--log_dir", log_dir, "--quiet", "--python", EXAMPLE, "--",
         "--progress=off", "--num_passes=%d" % a.passes,
         "--train=" + os.path.join(a.data, "train"),
         "--test=" + os.path.join(a.data, "test")] + flags,
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = []
    for k in (0, 1):
        with open(os.path.join(log_dir, "trainer-%d.log" % k),
                  errors="replace") as f:
            results.append(results_of(f.read())[-1])
    # The job's samples over the longer of the two loops.
    samples = sum(p["samples_per_s"] * p["train_seconds"]
                  for r in results for p in r["passes"])
    seconds = max(r["train_seconds"] for r in results)
    return samples / seconds, results[0]["passes"][-1]["test_auc"]


def main():
    a = parse_args()
    ensure_data(a)
    runs = [("ShardPS, sync, 2 trainers of batch 256, 2 pservers",
             lambda t: run_shardps(a, t, [])),
            ("ShardPS, sync, --no_prefetch",
             lambda t: run_shardps(a, t, ["--no_prefetch"])),
            ("ShardPS, async, 2 trainers of batch 256, 2 pservers",
             lambda t: run_shardps(a, t, ["--mode=async"])),
            ("ShardPS, async, --no_prefetch",
             lambda t: run_shardps(a, t, ["--mode=async", "--no_prefetch"])),
            ("PyTorch, 1 process, batch 512, 1 thread",
             lambda t: run_plain(a, 1)),
            ("PyTorch, 1 process, batch 512, 2 threads",
             lambda t: run_plain(a, 2))]
    got = {name: [] for name, _ in runs}
    with tempfile.TemporaryDirectory(prefix="shardps-deepfm-") as tmp:
        for r in range(a.repeats):
            for name, fn in runs:
                sps, auc = fn(tmp)
                got[name].append((sps, auc))
                print("round %d %-44s %8.0f samples/s  AUC %.4f" % (
                    r + 1, name, sps, auc), file=sys.stderr, flush=True)
    print("| run | samples/s (median of %d) | test AUC (median run) |" %
          a.repeats)
    print("|---|---|---|")
    for name, _ in runs:
        rs = sorted(got[name])
        sps, auc = rs[len(rs) // 2]
        print("| %s | %.0f | %.4f |" % (name, sps, auc))


if __name__ == "__main__":
    main()
