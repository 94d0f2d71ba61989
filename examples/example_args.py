"""What examples/torch_mlp.py and examples/torch_deepfm.py share: the job's
command line (the arguments a trainer of a job takes, and trainer flags
passed through as --name=value) and the device the model lives on."""

import argparse
import os
import sys

import torch


def parser(description, batch_size, num_passes):
    """An argument parser with the job's arguments, the device's and
    --plain; the example adds its own."""
    p = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pservers", help="host:port,... (or SHARDPS_PSERVERS)")
    p.add_argument("--trainer_id", type=int, default=None,
                   help="this trainer (default: from the scheduler, e.g. "
                        "torchrun's RANK)")
    p.add_argument("--num_trainers", type=int, default=None,
                   help="trainers of the job (default: from the scheduler)")
    p.add_argument("--mode", choices=["sync", "async"], default="sync")
    p.add_argument("--batch_size", type=int, default=batch_size,
                   help="examples per step per trainer (default %d)" %
                        batch_size)
    p.add_argument("--num_passes", type=int, default=num_passes)
    p.add_argument("--max_steps", type=int, default=0,
                   help="stop after this many steps (0: all passes)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1)")
    p.add_argument("--device", default=None,
                   help="where the model and batches live (default: "
                        "cuda:LOCAL_RANK where there is a GPU, else cpu)")
    p.add_argument("--stage_on_host", action="store_true",
                   help="copy CPU parameters through host buffers as a "
                        "GPU's are (the GPU's path without one; tests)")
    p.add_argument("--plain", action="store_true",
                   help="one plain PyTorch process, no pservers (the "
                        "reference)")
    return p


def parse(p, argv):
    """(the example's arguments, {trainer flag: value} of the others),
    with a.device resolved and the torch threads set."""
    a, rest = p.parse_known_args(argv)
    flags = {}
    for r in rest:
        if not r.startswith("--") or "=" not in r:
            p.error("unrecognised argument %r (trainer flags go as "
                    "--name=value)" % r)
        k, v = r[2:].split("=", 1)
        flags[k] = v
    if a.batch_size < 1 or a.num_passes < 1 or a.max_steps < 0:
        p.error("--batch_size and --num_passes must be positive, "
                "--max_steps >= 0")
    a.device = torch.device(a.device or default_device())
    torch.set_num_threads(a.threads)
    return a, flags


def default_device():
    """cuda:LOCAL_RANK (torchrun's; 0 without) where there is a GPU."""
    if torch.cuda.is_available():
        return "cuda:%d" % int(os.environ.get("LOCAL_RANK", "0"))
    return "cpu"


def job_of(a, flags):
    """The job of this trainer (shardps.Job) from the arguments."""
    import shardps
    return shardps.Job(pservers=a.pservers, trainer_id=a.trainer_id,
                       num_trainers=a.num_trainers, mode=a.mode,
                       batch_size=a.batch_size, num_passes=a.num_passes,
                       max_steps=a.max_steps or None, **flags)


def say(line):
    """Writes a line to stdout in one write: the trainers torchrun starts
    share its stdout, and print()'s separate newline lets another
    trainer's line in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
