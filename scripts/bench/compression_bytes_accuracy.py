#!/usr/bin/env python3
"""Experiment E2 of docs/compression.md: bytes pushed and final test
accuracy of the canonical dense workload (configs/fmnist_mlp.pbtxt, 2
pservers, 2 sync trainers) under each push encoding.

Prints a markdown table with one row per setting: bytes pushed by both
trainers together, the reduction against the dense run of the same script,
test accuracy after every pass, and the difference from dense after the last.

    python3 scripts/bench/compression_bytes_accuracy.py [--passes 1] \
        [--bin_dir build] [--only dense,fixed-1e-3,...]
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e  # noqa: E402  (run_cluster)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

FIXED = ["--compression=threshold", "--adaptive_threshold=false"]
# DL4J's adaptive defaults (this project's until docs/tuning.md).
ADAPTIVE = ["--compression=threshold", "--adaptive_threshold=true",
            "--updates_threshold=1e-3"]

# (name, trainer flags). "dense" must come first: the others are compared
# with it.
SETTINGS = [
    ("dense", ["--compression=none"]),
    ("fp16", ["--compression=fp16"]),
    ("bf16", ["--compression=bf16"]),
    ("fixed-1e-4", FIXED + ["--updates_threshold=1e-4"]),
    ("fixed-1e-3", FIXED + ["--updates_threshold=1e-3"]),
    ("fixed-1e-2", FIXED + ["--updates_threshold=1e-2"]),
    ("adaptive", ADAPTIVE),
    ("adaptive-3%", ADAPTIVE + ["--threshold_max_sparsity=0.03"]),
    ("adaptive+clipping", ADAPTIVE + ["--residual_clipping=true"]),
    ("adaptive, no residual", ADAPTIVE + ["--residual=false"]),
    ("adaptive, no masking", ADAPTIVE + ["--momentum_masking=false"]),
]


def run(args, flags, tmp):
    evals = bench_e2e.run_cluster(
        args.bin_dir, 2, ["--num_passes=%d" % args.passes] + flags, tmp,
        timeout=1200)
    pushed = sum(e[-1]["push_bytes"] for e in evals.values())
    accs = [e["test_accuracy"] for e in evals[0]]
    return pushed, accs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"))
    p.add_argument("--only", default="",
                   help="comma-separated setting names (dense is always run)")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory(prefix="shardps-e2-") as tmp:
        dense_bytes = dense_acc = None
        for name, flags in SETTINGS:
            if only and name != "dense" and name not in only:
                continue
            pushed, accs = run(args, flags, tmp)
            if dense_bytes is None:
                dense_bytes, dense_acc = pushed, accs[-1]
            row = "| %s | %.2f MB | %.0fx | %s | %+.2f |" % (
                name, pushed / 1e6, dense_bytes / pushed,
                " / ".join("%.4f" % a for a in accs),
                100 * (accs[-1] - dense_acc))
            print(row, file=sys.stderr)
            rows.append(row)
    print("| setting | pushed | fewer bytes | test accuracy per pass "
          "| points vs dense |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
