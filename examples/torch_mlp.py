#!/usr/bin/env python3
"""The canonical dense workload in PyTorch, trained on ShardPS pservers
(docs/python.md): Fashion-MNIST, MLP 784-256-128-10 with ReLU, softmax
cross-entropy, momentum 0.9 and learning rate 0.05 applied by the pservers
(configs/fmnist_mlp.pbtxt's model), batch 64 per trainer, records sharded
by trainer (record i to trainer i % N), no shuffling.

One trainer of a job (the pservers already running):

  ~/.cache/shardps/torch-venv/bin/python examples/torch_mlp.py \\
      --pservers=127.0.0.1:7164 --trainer_id=0 --num_trainers=2

or under torchrun (which sets RANK and WORLD_SIZE for each trainer):

  torchrun --nproc_per_node=2 examples/torch_mlp.py --pservers=...

The model and batches live on --device (default: the GPU of LOCAL_RANK
where there is one); the optimizer copies them through pinned host
buffers. --plain trains the same model in this one process with torch.optim.SGD
and no pservers (the reference). --init=shardps starts from the C++
trainer's initial values of the same config (seed 1) instead of
PyTorch's, so that the two trainers can be compared. Flags this script does
not know go to the job as trainer flags (--rpc_retry_s=120, ...).

Prints a line per pass (test accuracy, samples/s) and, at the end, one line
"RESULT " and JSON: per pass its test accuracy and loss, training seconds
and samples/s.
"""

import json
import os
import sys
import time

import torch
from torch import nn

import example_args
import fashion_mnist

CONFIG = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "configs", "fmnist_mlp.pbtxt")


def parse_args(argv):
    p = example_args.parser(__doc__, batch_size=64, num_passes=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--init", choices=["torch", "shardps"], default="torch",
                   help="initial values: PyTorch's from --seed, or the C++ "
                        "trainer's of configs/fmnist_mlp.pbtxt")
    p.add_argument("--push_in_backward", action="store_true",
                   help="push each layer's gradient as backward produces "
                        "it (DistributedOptimizer's push_in_backward)")
    p.add_argument("--save_params", default="",
                   help="write the final parameters here (torch.save)")
    p.add_argument("--data_dir", default=fashion_mnist.DATA_DIR)
    return example_args.parse(p, argv)


def make_model(a):
    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
                          nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if a.init == "shardps":
        import shardps.torch
        values = shardps.torch.initial_values(CONFIG, 784, 10)
        with torch.no_grad():
            for i, layer in enumerate((model[0], model[2], model[4])):
                w = values["fc%d.weight" % (i + 1)]
                b = values["fc%d.bias" % (i + 1)]
                # The C++ layers keep weights as [in, out].
                layer.weight.copy_(w.reshape(layer.in_features,
                                             layer.out_features).t())
                layer.bias.copy_(b.reshape(-1))
    return model


def evaluate(model, x, y):
    with torch.no_grad():
        out = model(x)
        loss = nn.functional.cross_entropy(out, y).item()
        acc = (out.argmax(1) == y).float().mean().item()
    return loss, acc


def start(a, flags, model, records):
    """(the job, None with --plain; the optimizer; steps a pass)."""
    if a.plain:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr,
                              momentum=a.momentum)
        return None, opt, records // a.batch_size
    import shardps
    import shardps.torch
    job = example_args.job_of(a, flags)
    # Every trainer takes as many steps: the fewest records' worth.
    steps_per_pass = (records // job.num_trainers) // a.batch_size
    opt = shardps.torch.DistributedOptimizer(
        model, job, shardps.optim.Momentum(lr=a.lr, momentum=a.momentum),
        steps_per_pass=steps_per_pass, stage_on_host=a.stage_on_host,
        push_in_backward=a.push_in_backward)
    return job, opt, steps_per_pass


def train_pass(a, model, opt, job, data, step, last, steps_per_pass):
    """Trains from `step` to the end of its pass, or to step `last`;
    returns (the step reached, samples trained). A rolled-back job's step
    goes back."""
    mine_x, mine_y = data
    p = step // steps_per_pass
    samples = 0
    while step < last and step // steps_per_pass == p:
        i = (step % steps_per_pass) * a.batch_size
        bx, by = mine_x[i:i + a.batch_size], mine_y[i:i + a.batch_size]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(bx), by)
        loss.backward()
        if job is None:
            opt.step()
            step += 1
        else:
            opt.step(loss=loss)
            step = job.step
        samples += a.batch_size
    return step, samples


def main(argv):
    a, flags = parse_args(argv)
    x, y, tx, ty = (t.to(a.device) for t in fashion_mnist.load(a.data_dir))
    model = make_model(a).to(a.device)
    job, opt, steps_per_pass = start(a, flags, model, x.shape[0])
    k, n = (job.trainer_id, job.num_trainers) if job else (0, 1)
    total = steps_per_pass * a.num_passes
    if a.max_steps:
        total = min(total, a.max_steps)
    mine = (x[k::n], y[k::n])
    step = job.step if job is not None else 0
    passes = []
    while step < total:
        p = step // steps_per_pass
        t0 = time.perf_counter()
        step, samples = train_pass(a, model, opt, job, mine, step, total,
                                   steps_per_pass)
        secs = time.perf_counter() - t0
        test_loss, test_acc = evaluate(model, tx, ty)
        if job is not None:
            job.evaluated(p, test_loss, test_acc, final=step >= total)
        passes.append({"pass": p, "step": step, "test_accuracy": test_acc,
                       "test_loss": test_loss, "train_seconds": secs,
                       "samples_per_s": samples / secs if secs else 0})
        example_args.say(
            "trainer %d pass %d step %d: test accuracy %.4f, loss %.4f, "
            "%.0f samples/s" %
            (k, p, step, test_acc, test_loss, passes[-1]["samples_per_s"]))
    if job is not None:
        job.finish()
    if a.save_params and k == 0:
        torch.save({n_: p_.detach().cpu().clone()
                    for n_, p_ in model.named_parameters()}, a.save_params)
    example_args.say("RESULT " + json.dumps(
        {"trainer_id": k, "passes": passes,
         "train_seconds": sum(q["train_seconds"] for q in passes)}))


if __name__ == "__main__":
    main(sys.argv[1:])
