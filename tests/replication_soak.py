#!/usr/bin/env python3
"""A randomized soak of replication under faults, run by hand (issue 32;
docs/replication.md, "Faults"): jobs of 3 pservers with --replication=2
and 2 sync trainers, each in a network namespace of its own
(tests/replication_fault_test.py), one after another for --minutes, while
a nemesis makes a fault every few seconds: kill -9 of a pserver and its
restart, SIGSTOP/SIGCONT, a pserver cut off, cuts between pairs, packet
loss on every link. At most one pserver is harmed at a time, so a majority
is always alive: every job must end, with the test accuracy and loss of
the fault-free run to the last digit. The seed is printed first; --seed
replays the same choices (the timing of faults against steps still
varies).

    sudo python3 tests/replication_soak.py --bin_dir build --minutes 30 \\
        [--seed N] [--passes 5] [--keep DIR]

Exits 0 when every job matched, 1 at the first that did not (its logs are
kept and named), 77 where namespaces cannot be made.
"""

import argparse
import os
import random
import re
import signal
import sys
import tempfile
import time

import netns
import testlib
from replication_fault_test import Job, PSERVERS, TRAINERS
from testlib import final_eval


class Shim(object):
    """What Job needs of a test case, outside unittest."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.popens = []

    def popen(self, argv, **kwargs):
        kwargs.setdefault("env", testlib.clean_env())
        kwargs.setdefault("start_new_session", True)
        import subprocess
        p = subprocess.Popen(argv, **kwargs)
        self.popens.append(p)
        return p

    def assertTrue(self, ok, msg=""):
        if not ok:
            raise AssertionError(msg)

    def kill_all(self):
        for p in self.popens:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()


VIEW = re.compile(r"(?:learned|agreed) view (\d+) \{([\d,]*)\}( joining)?")


def whole(job):
    """Whether the newest view any pserver of `job` logged has every
    pserver as a member and none joining: the last one harmed is back."""
    newest, members, joining = -1, "", False
    for i in range(PSERVERS):
        try:
            with open(job.path("ps%d.log" % i), errors="replace") as f:
                for m in VIEW.finditer(f.read()):
                    if int(m.group(1)) > newest:
                        newest, members = int(m.group(1)), m.group(2)
                        joining = bool(m.group(3))
        except OSError:
            pass
    return newest < 0 or (
        members == ",".join(str(i) for i in range(PSERVERS)) and not joining)


class Nemesis(object):
    """Chooses and makes faults; each returns after healing."""

    def __init__(self, rng, net, job, log):
        self.rng, self.net, self.job, self.log = rng, net, job, log

    def kill(self):
        i = self.rng.randrange(PSERVERS)
        self.log("kill -9 pserver %d, restart after 1 s" % i)
        self.job.servers[i].send_signal(signal.SIGKILL)
        self.job.servers[i].wait()
        time.sleep(1)
        self.job.start_pserver(i)

    def pause(self):
        i = self.rng.randrange(PSERVERS)
        s = self.rng.uniform(1, 8)
        self.log("SIGSTOP pserver %d for %.1f s" % (i, s))
        self.job.servers[i].send_signal(signal.SIGSTOP)
        time.sleep(s)
        self.job.servers[i].send_signal(signal.SIGCONT)

    def cut(self):
        i = self.rng.randrange(PSERVERS)
        s = self.rng.uniform(2, 12)
        self.log("pserver %d cut from everyone for %.1f s" % (i, s))
        self.net.cut(i)
        time.sleep(s)
        self.net.heal(i)

    def pairs(self):
        i = self.rng.randrange(PSERVERS)
        others = [j for j in range(PSERVERS + TRAINERS) if j != i]
        cut = self.rng.sample(others, self.rng.randint(1, 3))
        s = self.rng.uniform(2, 15)
        self.log("pserver %d cut from %s for %.1f s" % (i, cut, s))
        for j in cut:
            self.net.block(i, j)
        time.sleep(s)
        for j in cut:
            self.net.unblock(i, j)

    def loss(self):
        p = self.rng.choice([0.05, 0.1, 0.2, 0.3])
        s = self.rng.uniform(3, 15)
        self.log("%d%% loss on every link for %.1f s" % (p * 100, s))
        for i in range(PSERVERS + TRAINERS):
            self.net.loss(i, p)
        time.sleep(s)
        for i in range(PSERVERS + TRAINERS):
            self.net.loss(i, 0)

    def one(self):
        getattr(self, self.rng.choice(
            ["kill", "pause", "cut", "pairs", "pairs", "loss"]))()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin_dir", default="build")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--passes", type=int, default=5,
                    help="passes per job (about 6 s each without faults)")
    ap.add_argument("--keep", default=None,
                    help="folder for the logs (default: a new one in /tmp)")
    return ap.parse_args()


def logger(tmp):
    """A function that prints a line of the soak, timed, and appends it to
    tmp/nemesis.log."""
    def log(msg):
        line = "[soak %s] %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, flush=True)
        with open(os.path.join(tmp, "nemesis.log"), "a") as f:
            f.write(line + "\n")
    return log


def fault_free_end(shim, net, passes, tmp, log):
    """Runs the job without faults; returns trainer 0's final eval, or None
    (logged) if the job failed."""
    base = Job(shim, net, "base", passes)
    base.start()
    if base.wait() != [0] * TRAINERS:
        log("the fault-free job failed: see %s" % tmp)
        return None
    want = final_eval(base.path("0.jsonl"), 0)
    log("fault-free: test accuracy %.4f, loss %r" % (
        want["test_accuracy"], want["test_loss"]))
    return want


def faulted_job(n, shim, net, passes, rng, log):
    """Starts job n and has the nemesis make a fault every 3 to 6 s until
    its trainers end; returns (the job, the number of faults made)."""
    job = Job(shim, net, "job%d" % n, passes)
    job.start()
    nemesis = Nemesis(rng, net, job, log)
    faults = 0
    while all(t.poll() is None for t in job.trainers):
        # One pserver at a time: the last one harmed has rejoined
        # (every pserver a member again) before the next fault.
        time.sleep(rng.uniform(3, 6))
        testlib.wait_for(lambda: whole(job) or any(
            t.poll() is not None for t in job.trainers), 60)
        if any(t.poll() is not None for t in job.trainers):
            break
        nemesis.one()
        faults += 1
    return job, faults


def ended_as_fault_free(job, n, want, tmp, log):
    """Waits for job n to end; logs and returns whether it ended with the
    test accuracy and loss `want` of the fault-free run."""
    codes = job.wait(600)
    if codes != [0] * TRAINERS:
        log("job %d FAILED (exit codes %s) with a majority alive: "
            "logs %s/job%d-*" % (n, codes, tmp, n))
        return False
    got = final_eval(job.path("0.jsonl"), 0)
    same = (got["test_accuracy"] == want["test_accuracy"] and
            got["test_loss"] == want["test_loss"])
    log("job %d: accuracy %.4f loss %r, longest step %.1f s: %s" % (
        n, got["test_accuracy"], got["test_loss"], job.longest_step(),
        "identical" if same else "DIVERGED"))
    return same


def soak(args, seed, rng, tmp, log):
    """The fault-free job, then faulted jobs for args.minutes; returns the
    exit status."""
    net = netns.Net(PSERVERS + TRAINERS)
    shim = Shim(tmp)
    try:
        passes = ["--num_passes=%d" % args.passes]
        want = fault_free_end(shim, net, passes, tmp, log)
        if want is None:
            return 1
        end = time.time() + args.minutes * 60
        n = faults = 0
        while time.time() < end:
            n += 1
            job, made = faulted_job(n, shim, net, passes, rng, log)
            faults += made
            if not ended_as_fault_free(job, n, want, tmp, log):
                return 1
        log("done: %d jobs, %d faults, every job identical to the "
            "fault-free run (seed %d)" % (n, faults, seed))
        return 0
    finally:
        shim.kill_all()
        net.close()
        if not args.keep:
            sys.stdout.flush()


def main():
    args = parse_args()
    testlib.BIN_DIR = os.path.abspath(args.bin_dir)
    why = netns.unavailable(iptables=True)
    if why:
        print("replication_soak: skipped: " + why)
        return 77
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    tmp = args.keep or tempfile.mkdtemp(prefix="shardps-soak-")
    os.makedirs(tmp, exist_ok=True)
    log = logger(tmp)
    log("seed %d (replay: --seed %d); logs in %s" % (seed, seed, tmp))
    return soak(args, seed, rng, tmp, log)


if __name__ == "__main__":
    sys.exit(main())
