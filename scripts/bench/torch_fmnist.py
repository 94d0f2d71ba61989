#!/usr/bin/python3
"""The PyTorch baseline of the canonical dense workload (docs/benchmarks.md,
"Canonical dense workload"): Fashion-MNIST, MLP 784-256-128-10 with ReLU,
SGD with momentum 0.9 and learning rate 0.05, a global batch of 128 (64 per
process with DDP), PyTorch's default initialisation from --seed, the last
partial batch of each epoch dropped.

  single: one process with --threads intra-op threads (default 2).
  ddp:    DistributedDataParallel over gloo, 2 processes on 127.0.0.1,
          1 thread each; gradients are averaged by the all-reduce.
          With --rank, this process is that one rank only, and meets the
          others at --master_addr:--port (one rank per host; rank 0 prints
          the RESULT line, the others print theirs too).

Prints one line, "RESULT " and JSON: per epoch its wall seconds (training
loop only), samples, mean training loss and test accuracy.
scripts/bench/bench_e2e.py runs it beside ShardPS. Needs PyTorch: the
virtualenv of scripts/setup/python_venv.sh torch (PY below), or Debian's
python3-torch with /usr/bin/python3. The data is read by
examples/fashion_mnist.py, as for examples/torch_mlp.py.

  PY=~/.cache/shardps/torch-venv/bin/python
  $PY scripts/bench/torch_fmnist.py --mode single
  $PY scripts/bench/torch_fmnist.py --mode ddp --port 29517
  $PY scripts/bench/torch_fmnist.py --mode ddp --rank 1 \
      --master_addr 10.0.0.1 --port 29517     # on the second host

scripts/bench/bench_hosts.py runs the last form, a rank in each trainer's
network namespace.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "examples"))
import fashion_mnist  # noqa: E402

GLOBAL_BATCH = 128
LR = 0.05
MOMENTUM = 0.9
WORKERS = 2


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["single", "ddp"], required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads per process (default: 2 for "
                        "single, 1 for ddp)")
    p.add_argument("--port", type=int, default=29511,
                   help="the gloo rendezvous port (ddp)")
    p.add_argument("--rank", type=int, default=None,
                   help="ddp: run this rank only (0 or 1), meeting the "
                        "other at --master_addr; default: both ranks here")
    p.add_argument("--master_addr", default="127.0.0.1",
                   help="ddp: the address of rank 0 (default 127.0.0.1)")
    p.add_argument("--data_dir", default=fashion_mnist.DATA_DIR,
                   help="the folder of the four IDX files (gzip)")
    a = p.parse_args(argv)
    if a.epochs < 1:
        p.error("--epochs must be at least 1")
    if a.rank is not None and (a.mode != "ddp" or
                               not 0 <= a.rank < WORKERS):
        p.error("--rank needs --mode ddp and is 0 to %d" % (WORKERS - 1))
    if a.threads is None:
        a.threads = 2 if a.mode == "single" else 1
    return a


def epoch_batches(n, seed, epoch):
    """The global batches of an epoch: a permutation seeded by
    seed * 1000 + epoch, cut into full batches of GLOBAL_BATCH."""
    import torch
    g = torch.Generator()
    g.manual_seed(seed * 1000 + epoch)
    perm = torch.randperm(n, generator=g)
    return [perm[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH]
            for i in range(n // GLOBAL_BATCH)]


def make_model(seed):
    import torch
    from torch import nn
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def accuracy(model, x, y):
    import torch
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000])
                      .sum().item() for i in range(0, x.shape[0], 1000))
    return correct / x.shape[0]


def train(a, rank, barrier):
    """Trains `a.epochs` epochs as process `rank` of WORKERS (rank None: one
    process takes whole batches); returns the epochs' figures."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    xtr, ytr, xte, yte = fashion_mnist.load(a.data_dir)
    model = make_model(a.seed)
    if rank is not None:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    local = GLOBAL_BATCH if rank is None else GLOBAL_BATCH // WORKERS
    epochs = []
    for ep in range(a.epochs):
        batches = epoch_batches(xtr.shape[0], a.seed, ep)
        loss_sum = 0.0
        barrier()
        t0 = time.perf_counter()
        for idx in batches:
            mine = idx if rank is None else idx[rank * local:(rank + 1) * local]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[mine]), ytr[mine])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
        barrier()
        wall = time.perf_counter() - t0
        plain = model if rank is None else model.module
        epochs.append(dict(epoch=ep, wall_s=wall,
                           samples=len(batches) * GLOBAL_BATCH,
                           train_loss=loss_sum / len(batches),
                           test_acc=accuracy(plain, xte, yte)))
    return epochs


def ddp_worker(rank, a, queue):
    queue.put((rank, run_rank(a, rank)))


def run_rank(a, rank):
    """This process as DDP rank `rank`, meeting the others at
    a.master_addr:a.port; returns its epochs' figures."""
    import torch.distributed as dist
    dist.init_process_group("gloo",
                            init_method=f"tcp://{a.master_addr}:{a.port}",
                            rank=rank, world_size=WORKERS)
    try:
        return train(a, rank, dist.barrier)
    finally:
        dist.destroy_process_group()


def run_ddp(a):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=ddp_worker, args=(r, a, queue))
             for r in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=3600)
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        sys.exit(f"torch_fmnist: a DDP process failed (exit codes {failed})")
    results = dict(queue.get() for _ in procs)
    return results[0]


def main(argv):
    a = parse_args(argv)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = str(a.threads)
    if not fashion_mnist.present(a.data_dir):
        sys.exit(f"torch_fmnist: no Fashion-MNIST IDX files in {a.data_dir} "
                 "(Debian's dataset-fashion-mnist, or --data_dir)")
    import torch
    t0 = time.perf_counter()
    if a.mode == "single":
        epochs = train(a, None, lambda: None)
    elif a.rank is not None:
        epochs = run_rank(a, a.rank)
    else:
        epochs = run_ddp(a)
    for e in epochs:
        e["samples_per_s"] = e["samples"] / e["wall_s"]
    print("RESULT " + json.dumps(dict(
        mode=a.mode, rank=a.rank, threads=a.threads, epochs=epochs,
        final_test_acc=epochs[-1]["test_acc"], torch=torch.__version__,
        total_wall_s=time.perf_counter() - t0)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
