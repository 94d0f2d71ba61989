#!/usr/bin/env python3
"""Scores a libsvm file with an exported CTR model, with numpy only: what a
serving process does with `ps_checkpoint export`'s output
(docs/saved_model.md).

The model is configs/ctr_dnn.pbtxt's shape: each record's features look up
rows of the sparse table, summed per field (a feature's field is
(id >> field_shift) % num_fields) and weighted by the feature's value; the
fields' sums side by side go through the fully connected layers of
params.bin in order (<layer>.weight of shape (in, out) and <layer>.bias),
with a ReLU between them, and a sigmoid gives the click probability.

    python3 examples/serve_ctr.py --model /models/ctr --data test.libsvm \\
        [--num_fields 20] [--field_shift 40] [--table embeddings]
        [--predictions out.txt]

Prints one JSON line: records, AUC and log loss.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from shardps import exported_model  # noqa: E402


def read_libsvm(path):
    """(labels int32, offsets, ids uint64, values float32) of a libsvm
    file, as trainer/data/libsvm_reader.h reads it."""
    labels, offsets, ids, values = [], [0], [], []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            labels.append(1 if float(line[0]) > 0 else 0)
            for tok in line[1:]:
                if tok.startswith("qid:"):
                    continue
                k, v = tok.split(":")
                ids.append(int(k))
                values.append(float(v))
            offsets.append(len(ids))
    return (np.array(labels, dtype=np.int32), np.array(offsets),
            np.array(ids, dtype=np.uint64), np.array(values, dtype=np.float32))


def auc(scores, labels):
    """ROC AUC from average ranks, ties counting one half."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = labels != 0
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def predict(model, data, table, num_fields, field_shift):
    """Click probabilities (float32) and logits of the records."""
    labels, offsets, ids, values = data
    t = model.sparse[table]
    rows = t.lookup(ids)
    n = len(labels)
    width = t.dim * max(1, num_fields)
    h = np.zeros((n, width), dtype=np.float32)
    record = np.repeat(np.arange(n), np.diff(offsets))
    field = ((ids >> np.uint64(field_shift)) % np.uint64(num_fields)).astype(
        np.int64) if num_fields > 0 else np.zeros(len(ids), dtype=np.int64)
    contrib = rows * values[:, None]
    for j in range(t.dim):
        np.add.at(h, (record, field * t.dim + j), contrib[:, j])
    layers = [name[:-len(".weight")] for name in model.dense
              if name.endswith(".weight")]
    x = h
    for i, layer in enumerate(layers):
        x = x @ model.dense[layer + ".weight"] + model.dense[layer + ".bias"]
        if i + 1 < len(layers):
            x = np.maximum(x, np.float32(0))
    logits = x[:, 0].astype(np.float32)
    return (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(
        np.float32), logits


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an exported model folder")
    p.add_argument("--data", required=True, help="a libsvm file to score")
    p.add_argument("--table", default="embeddings")
    p.add_argument("--num_fields", type=int, default=20)
    p.add_argument("--field_shift", type=int, default=40)
    p.add_argument("--predictions", help="write one probability a line here")
    a = p.parse_args()
    model = exported_model.load(a.model)
    if a.table not in model.sparse:
        sys.exit("serve_ctr: %s has no sparse table %r (it has %s)" % (
            a.model, a.table, sorted(model.sparse)))
    data = read_libsvm(a.data)
    probs, logits = predict(model, data, a.table, a.num_fields, a.field_shift)
    labels = data[0]
    p_clip = np.clip(probs.astype(np.float64), 1e-7, 1 - 1e-7)
    logloss = -np.mean(labels * np.log(p_clip) +
                       (1 - labels) * np.log(1 - p_clip))
    if a.predictions:
        np.savetxt(a.predictions, probs, fmt="%.7g")
    sys.stdout.write(json.dumps({"records": int(len(labels)),
                                 "auc": float(auc(logits, labels)),
                                 "logloss": float(logloss)}) + "\n")


if __name__ == "__main__":
    main()
