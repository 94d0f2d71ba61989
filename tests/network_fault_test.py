#!/usr/bin/env python3
"""Jobs across network namespaces, as between hosts (tests/netns.py): a
pserver and two sync trainers each in a namespace of their own on one
bridge, values over TCP (--shared_memory=false: the namespaces share this
host's processes, hosts would not), and a trainer cut off the network in
the middle of a pass. The start of issue 32's fault harness; skipped, with
the reason, where namespaces cannot be made (not root, a container that
forbids them).

    python3 tests/network_fault_test.py [--bin_dir build] [-v]
"""

import os
import re
import subprocess
import sys
import time
import unittest

import netns
import testlib
from testlib import final_eval, read_json_lines, wait_for

WHY_NOT = netns.unavailable()


@unittest.skipIf(WHY_NOT, WHY_NOT)
class NetworkFaultTest(testlib.ProcessTestCase):

    def setUp(self):
        super().setUp()
        self.net = netns.Net(3)
        self.addCleanup(self.net.close)

    def connects(self, frm, to, port, timeout=1.0):
        """Whether a TCP connection from namespace `frm` to a listener in
        namespace `to` on `port` is made within `timeout`."""
        code = ("import socket,sys\n"
                "try:\n"
                "  socket.create_connection((%r, %d), timeout=%f).close()\n"
                "except OSError:\n"
                "  sys.exit(1)\n" % (self.net.addrs[to], port, timeout))
        r = subprocess.run(self.net.prefix(frm) + [sys.executable, "-c", code],
                           timeout=timeout + 10)
        return r.returncode == 0

    def test_namespaces_talk_over_the_bridge_until_cut(self):
        port = 20000 + os.getpid() % 20000
        listener = self.popen(self.net.prefix(1) + [
            sys.executable, "-c",
            "import socket,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
            "socket.SO_REUSEADDR, 1)\n"
            "s.bind((%r, %d)); s.listen(16)\n"
            "while True:\n"
            "  c,_=s.accept(); c.close()\n  # %s\n"
            % (self.net.addrs[1], port, self.tmp)])
        self.assertTrue(wait_for(lambda: self.connects(0, 1, port), 10))
        self.net.cut(1)
        self.assertFalse(self.connects(0, 1, port, timeout=0.5))
        self.assertFalse(self.connects(2, 1, port, timeout=0.5))
        self.net.heal(1)
        self.assertTrue(wait_for(lambda: self.connects(0, 1, port), 10))
        listener.kill()

    def start_pserver_in_namespace_0(self, run):
        """A pserver for 2 trainers on namespace 0's address (log
        tmp/RUN-ps.log); returns (popen, port)."""
        port_file = os.path.join(self.tmp, run + "-ps.port")
        with open(os.path.join(self.tmp, run + "-ps.log"), "ab") as f:
            ps = self.popen(self.net.prefix(0) + [
                testlib.pserver_bin(), "--port=0",
                "--host=" + self.net.addrs[0], "--port_file=" + port_file,
                "--num_gradient_servers=2"], stdout=f,
                stderr=subprocess.STDOUT)
        self.assertTrue(wait_for(lambda: testlib.read_port(port_file), 30),
                        "pserver did not come up")
        return ps, testlib.read_port(port_file)

    # A sync job across namespaces ---------------------------------------

    def run_job(self, run, cut_trainer_at=None, cut_s=0):
        """Pserver in namespace 0, trainer k in namespace k + 1; with
        cut_trainer_at, trainer 1's namespace is cut off once trainer 0
        has logged that step, for cut_s seconds. Returns trainer 0's
        final eval line and trainer 1's longest step."""
        ps, port = self.start_pserver_in_namespace_0(run)
        metrics = [os.path.join(self.tmp, "%s-%d.jsonl" % (run, k))
                   for k in (0, 1)]
        trainers = []
        for k in (0, 1):
            log = os.path.join(self.tmp, "%s-trainer-%d.log" % (run, k))
            with open(log, "ab") as f:
                trainers.append(self.popen(self.net.prefix(k + 1) + [
                    testlib.trainer_bin(),
                    "--pservers=%s:%d" % (self.net.addrs[0], port),
                    "--trainer_id=%d" % k, "--num_gradient_servers=2",
                    "--config=" + testlib.CONFIG, "--num_passes=1",
                    "--shared_memory=false", "--progress=off",
                    "--log_every_steps=10", "--metrics_file=" + metrics[k]],
                    stdout=f, stderr=subprocess.STDOUT))
        if cut_trainer_at is not None:
            def step():
                steps = [l["step"] for l in read_json_lines(metrics[0])
                         if l.get("event") == "step"]
                return steps[-1] if steps else 0
            self.assertTrue(wait_for(lambda: step() >= cut_trainer_at, 120))
            self.net.cut(2)
            time.sleep(cut_s)
            self.net.heal(2)
        for k, t in enumerate(trainers):
            code = t.wait(180)
            with open(os.path.join(self.tmp, "%s-trainer-%d.log" % (run, k)),
                      errors="replace") as f:
                self.assertEqual(code, 0, f.read()[-3000:])
        ps.terminate()
        ps.wait(30)
        lines = [l for l in read_json_lines(metrics[1])
                 if l.get("event") == "step"][1:]
        longest = max(l["max_step_s"] for l in lines)
        return final_eval(metrics[0], 0), longest

    def test_shared_memory_only_for_trainers_on_the_pservers_host(self):
        """Namespaces share this host's /proc, so a trainer in another one
        could map the pserver's region; the pserver gives one only to a
        caller whose address is its own (here trainer 0, in its namespace),
        and the other trainer's values go over TCP."""
        ps, port = self.start_pserver_in_namespace_0("shm")
        address = "%s:%d" % (self.net.addrs[0], port)
        trainers = [self.popen(
            self.net.prefix(k) + [
                testlib.trainer_bin(), "--pservers=" + address,
                "--trainer_id=%d" % k, "--num_gradient_servers=2",
                "--config=" + testlib.CONFIG, "--max_steps=30",
                "--progress=off"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True) for k in (0, 1)]
        logs = [t.communicate(timeout=120)[0] for t in trainers]
        for t, log in zip(trainers, logs):
            self.assertEqual(t.returncode, 0, log[-3000:])
        self.assertIn("dense values through shared memory with 1 of 1 "
                      "pservers", logs[0])
        self.assertRegex(
            logs[1], r"pserver %s: dense values go over TCP, not shared "
            r"memory \(OpenSharedMemory to pserver %s: shared memory is for "
            r"trainers on this pserver's host; this call came from "
            r"ipv4:%s:\d+\)" % (re.escape(address), re.escape(address),
                                  re.escape(self.net.addrs[1])))
        self.assertIn("dense values through shared memory with 0 of 1 "
                      "pservers", logs[1])
        ps.terminate()
        ps.wait(30)

    def test_a_trainer_cut_off_for_3_s_changes_nothing(self):
        base, _ = self.run_job("base")
        cut, longest = self.run_job("cut", cut_trainer_at=100, cut_s=3)
        self.assertEqual(cut["test_accuracy"], base["test_accuracy"])
        self.assertEqual(cut["test_loss"], base["test_loss"])
        # Measured: 0.8341 or 0.8267, as on loopback (scripts/demo.sh):
        # the figure depends on the processor (OpenBLAS picks its kernels
        # by the instructions it has), not on the network.
        self.assertGreaterEqual(base["test_accuracy"], 0.82)
        self.assertGreaterEqual(longest, 2.5)  # the cut did stall it
        sys.stderr.write("[accuracy %.4f both; longest step with the cut "
                         "%.1f s] " % (base["test_accuracy"], longest))


if __name__ == "__main__":
    testlib.main()
