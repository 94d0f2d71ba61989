#!/usr/bin/env python3
"""Replication under network faults (issue 32, docs/replication.md,
"Faults"): 3 pservers with --replication=2 and 2 sync trainers, each in a
network namespace of its own on one bridge (tests/netns.py), values over
TCP. Each test makes one fault of the table in docs/replication.md while
the pass runs (cuts, cuts between pairs, packet loss with iptables,
SIGSTOP, repeated kill -9 with restarts) and checks that the job ends with
the test accuracy and loss of the fault-free run to the last digit; two
pservers killed at once must end with a clear error. Skipped, with the
reason, where namespaces or iptables rules cannot be made.

    python3 tests/replication_fault_test.py [--bin_dir build] [-v] [-k name]

The longer randomized soak is tests/replication_soak.py (by hand).
"""

import os
import re
import signal
import subprocess
import sys
import time
import unittest

import netns
import testlib
from testlib import final_eval, read_json_lines, wait_for

WHY_NOT = netns.unavailable(iptables=True)
PSERVERS = 3
TRAINERS = 2
# The lease of these runs (the default, 4 s, measured in docs/replication.md,
# is the same order; shorter keeps the suite quick).
LEASE_MS = 2000


class Job(object):
    """One job across namespaces: pserver i in namespace i, trainer k in
    namespace PSERVERS + k. start() runs it; the test makes faults; wait()
    returns each trainer's exit code."""

    def __init__(self, test, net, run, trainer_args=()):
        self.test, self.net, self.run = test, net, run
        self.trainer_args = list(trainer_args)
        self.ports = [0] * PSERVERS
        self.servers = [None] * PSERVERS
        self.trainers = []

    def path(self, name):
        return os.path.join(self.test.tmp, "%s-%s" % (self.run, name))

    def start_pserver(self, i):
        port_file = self.path("ps%d.port" % i)
        if os.path.exists(port_file):
            os.unlink(port_file)
        with open(self.path("ps%d.log" % i), "ab") as f:
            self.servers[i] = self.test.popen(self.net.prefix(i) + [
                testlib.pserver_bin(), "--port=%d" % self.ports[i],
                "--host=" + self.net.addrs[i], "--port_file=" + port_file,
                "--num_gradient_servers=%d" % TRAINERS], stdout=f,
                stderr=subprocess.STDOUT)
        got = wait_for(lambda: testlib.read_port(port_file), 30)
        self.test.assertTrue(got, "pserver %d did not come up" % i)
        self.ports[i] = got

    def start(self):
        for i in range(PSERVERS):
            self.start_pserver(i)
        pservers = ",".join("%s:%d" % (self.net.addrs[i], self.ports[i])
                            for i in range(PSERVERS))
        for k in range(TRAINERS):
            with open(self.path("trainer-%d.log" % k), "ab") as f:
                self.trainers.append(self.test.popen(
                    self.net.prefix(PSERVERS + k) + [
                        testlib.trainer_bin(), "--pservers=" + pservers,
                        "--trainer_id=%d" % k,
                        "--num_gradient_servers=%d" % TRAINERS,
                        "--config=" + testlib.CONFIG, "--num_passes=1",
                        "--shared_memory=false", "--progress=off",
                        "--replication=2", "--pserver_lease_ms=%d" % LEASE_MS,
                        "--log_every_steps=10",
                        "--metrics_file=" + self.path("%d.jsonl" % k)] +
                    self.trainer_args, stdout=f, stderr=subprocess.STDOUT))

    def step(self):
        steps = [l["step"] for l in read_json_lines(self.path("0.jsonl"))
                 if l.get("event") == "step"]
        return steps[-1] if steps else 0

    def wait_step(self, n):
        self.test.assertTrue(wait_for(lambda: self.step() >= n, 120),
                             self.log("trainer-0")[-3000:])

    def full_view(self):
        """Whether trainer 0's last view (its log) holds every pserver."""
        views = re.findall(r"pservers in view \d+: \{([0-9,]*)\}",
                           self.log("trainer-0"))
        return bool(views) and views[-1] == ",".join(
            str(i) for i in range(PSERVERS))

    def log(self, name):
        with open(self.path(name + ".log"), errors="replace") as f:
            return f.read()

    def wait(self, timeout=300):
        codes = []
        for t in self.trainers:
            try:
                codes.append(t.wait(timeout))
            except subprocess.TimeoutExpired:
                codes.append(None)
        for p in self.servers:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                p.wait(30)
        return codes

    def warnings(self, per_log=3000):
        """The warnings and errors of every process, each log's last
        `per_log` characters of them: what a failed run printed."""
        out = []
        names = ["ps%d" % i for i in range(PSERVERS)] + [
            "trainer-%d" % k for k in range(TRAINERS)]
        for name in names:
            try:
                lines = [l for l in self.log(name).splitlines()
                         if l[:1] in ("W", "E", "F")]
            except FileNotFoundError:
                continue
            out.append("--- %s (warnings and errors):\n%s" % (
                name, "\n".join(lines)[-per_log:]))
        return "\n".join(out)

    def longest_step(self):
        lines = [l for k in range(TRAINERS)
                 for l in read_json_lines(self.path("%d.jsonl" % k))
                 if l.get("event") == "step"][2:]
        return max(l["max_step_s"] for l in lines)

    def result(self):
        return final_eval(self.path("0.jsonl"), 0)

    def samples_per_s(self):
        """Trainer 0's samples per second over the job (its final eval)."""
        return self.result().get("samples_per_s")


@unittest.skipIf(WHY_NOT, WHY_NOT)
class ReplicationFaultTest(testlib.ProcessTestCase):
    # The fault-free run, made once for all tests.
    baseline = None

    def setUp(self):
        super().setUp()
        self.net = netns.Net(PSERVERS + TRAINERS)
        self.addCleanup(self.net.close)
        if ReplicationFaultTest.baseline is None:
            job = self.job("base")
            job.start()
            self.check_ok(job, job.wait())
            ReplicationFaultTest.baseline = (job.result(),
                                             job.samples_per_s())

    def job(self, run, trainer_args=()):
        return Job(self, self.net, run, trainer_args)

    def check_ok(self, job, codes):
        for k, code in enumerate(codes):
            self.assertEqual(code, 0, "trainer %d: %s\n%s" % (
                k, job.log("trainer-%d" % k)[-4000:], job.warnings()))

    def check_same(self, job, codes, what):
        self.check_ok(job, codes)
        base, _ = ReplicationFaultTest.baseline
        got = job.result()
        self.assertEqual(got["test_accuracy"], base["test_accuracy"])
        self.assertEqual(got["test_loss"], base["test_loss"])
        # 0.8341 or 0.8267, by the processor's BLAS kernels.
        self.assertGreaterEqual(base["test_accuracy"], 0.82)
        sys.stderr.write("[%s: accuracy %.4f as without it; longest step "
                         "%.1f s] " % (what, got["test_accuracy"],
                                       job.longest_step()))

    def fault_at(self, job, step, make, heal, seconds):
        job.start()
        job.wait_step(step)
        make()
        time.sleep(seconds)
        heal()
        return job.wait()

    # The table's rows ---------------------------------------------------

    def test_pserver_cut_from_everyone_5s(self):
        job = self.job("cut")
        codes = self.fault_at(job, 100, lambda: self.net.cut(1),
                              lambda: self.net.heal(1), 5)
        self.check_same(job, codes, "pserver 1 cut off 5 s")

    def test_trainer_cut_from_one_pserver_25s(self):
        job = self.job("pair")
        t1 = PSERVERS + 1
        codes = self.fault_at(job, 100, lambda: self.net.block(t1, 1),
                              lambda: self.net.unblock(t1, 1), 25)
        self.check_same(job, codes, "trainer 1 cut from pserver 1 25 s")

    def test_pservers_cut_from_each_other_15s(self):
        job = self.job("mesh")
        pairs = [(0, 1), (0, 2), (1, 2)]

        def make():
            for i, j in pairs:
                self.net.block(i, j)

        def heal():
            for i, j in pairs:
                self.net.unblock(i, j)
        codes = self.fault_at(job, 100, make, heal, 15)
        self.check_same(job, codes, "pservers cut from each other 15 s")

    def test_one_pserver_cut_from_the_others_15s(self):
        job = self.job("minority")

        def make():
            self.net.block(1, 0)
            self.net.block(1, 2)

        def heal():
            self.net.unblock(1, 0)
            self.net.unblock(1, 2)
        codes = self.fault_at(job, 100, make, heal, 15)
        self.check_same(job, codes, "pserver 1 cut from pservers 15 s")

    def test_ten_percent_loss_on_every_link(self):
        """10% of the packets on every link dropped for 30 s mid-pass (the
        whole pass with SHARDPS_FULL_LOSS=1: about 8 minutes on the 2-core
        machine, TCP's retransmissions make each step about 1 s)."""
        job = self.job("loss", ["--pserver_lease_ms=4000"])
        everyone = range(PSERVERS + TRAINERS)

        def make():
            for i in everyone:
                self.net.loss(i, 0.10)

        def heal():
            for i in everyone:
                self.net.loss(i, 0)
        if os.environ.get("SHARDPS_FULL_LOSS"):
            make()
            job.start()
            codes = job.wait(1800)
        else:
            codes = self.fault_at(job, 100, make, heal, 30)
        self.check_same(job, codes, "10% loss on every link")
        _, base_rate = ReplicationFaultTest.baseline
        sys.stderr.write("[samples/s %.0f with the loss, %.0f without] " % (
            job.samples_per_s(), base_rate))

    def test_pserver_paused_6s(self):
        job = self.job("pause")

        def make():
            job.servers[1].send_signal(signal.SIGSTOP)

        def heal():
            job.servers[1].send_signal(signal.SIGCONT)
        codes = self.fault_at(job, 100, make, heal, 6)
        self.check_same(job, codes, "pserver 1 paused 6 s")

    def test_kill_every_3s_with_restarts(self):
        """5 passes (a pass lasts 2 to 6 s, by the machine), a pserver
        killed with SIGKILL every 3 s in turn and restarted on its address
        1 s later, against the same 5 passes without faults. At least 4
        kills: a pserver that came back is killed again (3 passes left
        room for only 3 kills on a fast machine). The next kill waits until
        the trainers' view holds every pserver again: killing a second one
        while the first still catches up leaves a shard with no replica,
        which ends the job with a clear error (as
        test_two_pservers_killed_end_with_a_clear_error shows), not what
        this test is about; on a loaded machine a rejoin can take over the
        2 s the schedule leaves."""
        passes = ["--num_passes=5"]
        base = self.job("flapbase", passes)
        base.start()
        self.check_ok(base, base.wait())
        job = self.job("flap", passes)
        job.start()
        job.wait_step(60)
        kills = 0
        for i in [1, 2, 0] * 10:
            if job.trainers[0].poll() is not None:
                break
            job.servers[i].send_signal(signal.SIGKILL)
            job.servers[i].wait()
            kills += 1
            time.sleep(1)
            job.start_pserver(i)
            time.sleep(2)
            wait_for(lambda: job.trainers[0].poll() is not None or
                     job.full_view(), 60)
        codes = job.wait()
        self.check_ok(job, codes)
        want, got = base.result(), job.result()
        self.assertEqual(got["test_accuracy"], want["test_accuracy"])
        self.assertEqual(got["test_loss"], want["test_loss"])
        self.assertGreaterEqual(kills, 4)
        sys.stderr.write("[%d kills, one every 3 s: accuracy %.4f as without "
                         "them; longest step %.1f s] " % (
                             kills, got["test_accuracy"], job.longest_step()))

    def test_two_pservers_killed_end_with_a_clear_error(self):
        job = self.job("two")
        job.start()
        job.wait_step(100)
        t0 = time.monotonic()
        for i in (1, 2):
            job.servers[i].send_signal(signal.SIGKILL)
        codes = job.wait(180)
        took = time.monotonic() - t0
        self.assertTrue(all(c not in (0, None) for c in codes), codes)
        log = job.log("trainer-0") + job.log("trainer-1")
        self.assertRegex(log, r"pservers \{1,2\} refuse connections|"
                         r"would leave shard")
        sys.stderr.write("[two pservers killed: error after %.1f s] " % took)


if __name__ == "__main__":
    testlib.main()
