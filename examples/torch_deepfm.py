#!/usr/bin/env python3
"""DeepFM (Guo et al. 2017) in PyTorch on ShardPS (docs/python.md): a
click-through-rate model whose embeddings are sharded tables on the
pservers and whose dense network is updated there too.

Data: the CTR generator's libsvm files with the field in the high bits,

  build/tools/gen_ctr_data --field_in_high_bits \\
      --train_out=/tmp/shardps-ctr-dnn/train --test_out=/tmp/shardps-ctr-dnn/test

one feature per field per record (id | field << 40). The model: per
feature an 8-float embedding (ShardedEmbedding "embeddings", Adagrad lr 0.1,
initial accumulator 0.01, as configs/ctr_dnn.pbtxt) and a weight
(ShardedEmbedding "linear", the same Adagrad); logit = bias + the weights'
sum + the factorisation machine's pairwise term 0.5 * ((sum v)^2 - sum v^2)
+ an MLP 160-64-1 with ReLU over the fields' embeddings side by side (Adam
lr 0.001); logistic loss, batch 256 per trainer, records sharded by trainer.

One trainer of a job (the pservers already running), or all of them:

  ~/.cache/shardps/torch-venv/bin/python examples/torch_deepfm.py \\
      --pservers=127.0.0.1:7164 --trainer_id=0 --num_trainers=2
  python3 scripts/cluster/local_cluster.py --python examples/torch_deepfm.py

--plain trains the same model in this one process with
torch.nn.Embedding(sparse=True), torch.optim.Adagrad and torch.optim.Adam
(the reference). Flags this script does not know go to the job as trainer
flags. Prints a line per pass (test AUC and logloss, samples/s) and one
"RESULT " line of JSON.
"""

import json
import os
import sys
import time

import torch
from torch import nn

import example_args

DATA = "/tmp/shardps-ctr-dnn"
FIELD_SHIFT = 40


def parse_args(argv):
    p = example_args.parser(__doc__, batch_size=256, num_passes=1)
    p.add_argument("--train", default=os.path.join(DATA, "train"))
    p.add_argument("--test", default=os.path.join(DATA, "test"))
    p.add_argument("--num_fields", type=int, default=20)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--emb_lr", type=float, default=0.1)
    p.add_argument("--emb_accumulator", type=float, default=0.01)
    p.add_argument("--dense_lr", type=float, default=0.001)
    p.add_argument("--no_prefetch", action="store_true",
                   help="pull each batch's rows in its forward, instead of "
                   "with the previous step's push (prefetch)")
    return example_args.parse(p, argv)


def read_libsvm(path, num_fields):
    """(ids [records, num_fields] int64, ordered by field; labels float)."""
    ids, labels = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            feats = sorted(int(p.split(":", 1)[0]) for p in parts[1:])
            if len(feats) != num_fields:
                sys.exit("%s:%d: %d features, not --num_fields=%d" % (
                    path, n, len(feats), num_fields))
            ids.append(feats)
            labels.append(float(parts[0]))
    return torch.tensor(ids, dtype=torch.int64), torch.tensor(labels)


def auc(scores, labels):
    """The area under the ROC curve (ties count half)."""
    order = torch.argsort(scores)
    s, y = scores[order], labels[order]
    ranks = torch.empty_like(s, dtype=torch.float64)
    _, inverse, counts = torch.unique_consecutive(
        s, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    mean_rank = ends - (counts.double() - 1) / 2
    ranks = mean_rank[inverse]
    pos = y.sum().item()
    neg = y.numel() - pos
    return ((ranks[y > 0.5].sum().item() - pos * (pos + 1) / 2) /
            (pos * neg))


class DeepFM(nn.Module):
    """`embeddings` and `linear`: id tensors [B, F] -> [B, F, dim], [B, F, 1]."""

    def __init__(self, embeddings, linear, num_fields, dim, hidden):
        super().__init__()
        self.embeddings, self.linear = embeddings, linear
        self.bias = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(num_fields * dim, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, ids):
        v = self.embeddings(ids)
        first = self.linear(ids).sum(dim=(1, 2))
        fm = 0.5 * (v.sum(1) ** 2 - (v ** 2).sum(1)).sum(1)
        deep = self.mlp(v.flatten(1)).squeeze(1)
        return self.bias + first + fm + deep


class PlainRows(nn.Module):
    """The reference's table: a torch.nn.Embedding over the ids of the
    data (dense indices), rows drawn U(-0.05, 0.05) (the sharded table's
    init) or zero."""

    def __init__(self, vocab, dim, uniform):
        super().__init__()
        self.vocab = vocab
        self.table = nn.Embedding(vocab.numel(), dim, sparse=True)
        with torch.no_grad():
            if uniform:
                self.table.weight.uniform_(-0.05, 0.05)
            else:
                self.table.weight.zero_()

    def forward(self, ids):
        return self.table(torch.searchsorted(self.vocab, ids))


def build(a, job):
    torch.manual_seed(a.seed)
    if job is None:
        vocab = torch.unique(torch.cat([a.x.flatten(), a.tx.flatten()]))
        emb = PlainRows(vocab, a.dim, True)
        lin = PlainRows(vocab, 1, False)
        model = DeepFM(emb, lin, a.num_fields, a.dim, a.hidden).to(a.device)
        sparse_opt = torch.optim.Adagrad(
            list(emb.parameters()) + list(lin.parameters()), lr=a.emb_lr,
            initial_accumulator_value=a.emb_accumulator)
        dense_opt = torch.optim.Adam(
            [p for n, p in model.named_parameters()
             if not n.startswith(("embeddings", "linear"))], lr=a.dense_lr)
        return model, [sparse_opt, dense_opt]
    import shardps
    import shardps.torch
    adagrad = shardps.optim.Adagrad(
        lr=a.emb_lr, initial_accumulator_value=a.emb_accumulator)
    emb = shardps.torch.ShardedEmbedding(job, "embeddings", a.dim, adagrad,
                                         init=("uniform", 0.05), seed=3)
    lin = shardps.torch.ShardedEmbedding(job, "linear", 1, adagrad,
                                         init="zeros")
    model = DeepFM(emb, lin, a.num_fields, a.dim, a.hidden)
    steps = (a.x.shape[0] // job.num_trainers) // a.batch_size
    model.to(a.device)
    opt = shardps.torch.DistributedOptimizer(
        model, job, shardps.optim.Adam(lr=a.dense_lr), steps_per_pass=steps,
        stage_on_host=a.stage_on_host)
    return model, [opt]


def evaluate(model, tx, ty):
    with torch.no_grad():
        logits = torch.cat([model(tx[i:i + 4096])
                            for i in range(0, tx.shape[0], 4096)])
        loss = nn.functional.binary_cross_entropy_with_logits(logits,
                                                              ty).item()
        accuracy = ((logits > 0).float() == ty).float().mean().item()
    return loss, accuracy, auc(logits, ty)


def main(argv):
    a, flags = parse_args(argv)
    a.x, a.y = (t.to(a.device) for t in read_libsvm(a.train, a.num_fields))
    a.tx, a.ty = (t.to(a.device) for t in read_libsvm(a.test, a.num_fields))
    job = None
    k, n = 0, 1
    if not a.plain:
        job = example_args.job_of(a, flags)
        k, n = job.trainer_id, job.num_trainers
    model, opts = build(a, job)
    x, y = a.x[k::n], a.y[k::n]
    steps_per_pass = (a.x.shape[0] // n) // a.batch_size
    total = steps_per_pass * a.num_passes
    if a.max_steps:
        total = min(total, a.max_steps)
    step = job.step if job else 0
    passes, train_s = [], 0.0
    while step < total:
        p = step // steps_per_pass
        t0, samples = time.perf_counter(), 0
        while step < total and step // steps_per_pass == p:
            i = (step % steps_per_pass) * a.batch_size
            bx, by = x[i:i + a.batch_size], y[i:i + a.batch_size]
            for o in opts:
                o.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(bx),
                                                                  by)
            loss.backward()
            if job is None:
                for o in opts:
                    o.step()
                step += 1
            else:
                if step + 1 < total and not a.no_prefetch:
                    # The next batch's rows come back with this step's push.
                    j = ((step + 1) % steps_per_pass) * a.batch_size
                    model.embeddings.prefetch(x[j:j + a.batch_size])
                    model.linear.prefetch(x[j:j + a.batch_size])
                opts[0].step(loss=loss)
                step = job.step
            samples += a.batch_size
        secs = time.perf_counter() - t0
        train_s += secs
        test_loss, test_acc, test_auc = evaluate(model, a.tx, a.ty)
        if job is not None:
            job.evaluated(p, test_loss, test_acc, auc=test_auc,
                          final=step >= total)
        passes.append({"pass": p, "step": step, "test_auc": test_auc,
                       "test_logloss": test_loss, "train_seconds": secs,
                       "samples_per_s": samples / secs if secs else 0})
        example_args.say(
            "trainer %d pass %d step %d: test AUC %.4f, logloss %.4f, "
            "%.0f samples/s" %
            (k, p, step, test_auc, test_loss, passes[-1]["samples_per_s"]))
    if job is not None:
        job.finish()
    example_args.say("RESULT " + json.dumps(
        {"trainer_id": k, "passes": passes, "train_seconds": train_s}))


if __name__ == "__main__":
    main(sys.argv[1:])
