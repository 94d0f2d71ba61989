#!/usr/bin/env python3
"""Replication (docs/replication.md), with real processes on loopback: 3
pservers and 2 trainers with --replication=2; a pserver killed with SIGKILL
in the middle of a pass, in sync and async mode; the refusals of settings
replication cannot serve.

    python3 tests/replication_test.py [--bin_dir build] [-v] [-k name]
"""

import os
import signal
import subprocess
import sys
import time

import testlib
from testlib import final_eval, read_json_lines, wait_for

STEPS_PER_PASS = 468  # 60000 records / 2 trainers / batch 64
# A kill -9 costs --failover_after_ms (150 ms), the view agreement and the
# step sent again: 0.2 to 0.5 s here, up to 0.64 s with another test beside
# it (ctest -j2). A kill that is waited for as silence costs the lease (4 s).
MAX_KILL_STALL_S = 1.0
CTR_LR = os.path.join(testlib.REPO, "configs", "ctr_lr.pbtxt")


class ReplicationTest(testlib.ProcessTestCase):

    # Helpers ------------------------------------------------------------

    def start_pservers(self, run, n=3, extra=()):
        """n pservers for 2 trainers; returns [(popen, port)]."""
        out = []
        for i in range(n):
            p, port, _ = self.start_pserver("%s-ps%d" % (run, i), list(extra),
                                            num_trainers=2)
            out.append((p, port))
        return out

    def metrics(self, run, k):
        return os.path.join(self.tmp, "%s-trainer-%d.jsonl" % (run, k))

    def trainer_log(self, run, k):
        with open(os.path.join(self.tmp, "%s-trainer-%d.log" % (run, k)),
                  errors="replace") as f:
            return f.read()

    def ps_log(self, run, i):
        with open(os.path.join(self.tmp, "%s-ps%s.log" % (run, i)),
                  errors="replace") as f:
            return f.read()

    def start_trainers(self, run, ports, extra=(), config=testlib.CONFIG):
        procs = []
        for k in (0, 1):
            log = os.path.join(self.tmp, "%s-trainer-%d.log" % (run, k))
            with open(log, "ab") as f:
                procs.append(self.popen(
                    [testlib.trainer_bin(),
                     "--pservers=" + ",".join("127.0.0.1:%d" % p
                                              for p in ports),
                     "--trainer_id=%d" % k, "--num_gradient_servers=2",
                     "--config=" + config, "--progress=off",
                     "--log_every_steps=10",
                     "--metrics_file=" + self.metrics(run, k)] + list(extra),
                    stdout=f, stderr=subprocess.STDOUT))
        return procs

    def last_step(self, run, k):
        steps = [l["step"] for l in read_json_lines(self.metrics(run, k))
                 if l.get("event") == "step"]
        return steps[-1] if steps else 0

    def wait_trainers(self, run, procs, timeout=180):
        for k, t in enumerate(procs):
            try:
                code = t.wait(timeout)
            except subprocess.TimeoutExpired:
                self.fail("trainer %d still running after %d s:\n%s" % (
                    k, timeout, self.trainer_log(run, k)[-3000:]))
            self.assertEqual(code, 0, self.trainer_log(run, k)[-3000:])

    def stall(self, run, k):
        """(longest step, median step) in seconds of trainer k, from its
        step lines after the first (which includes the start)."""
        lines = [l for l in read_json_lines(self.metrics(run, k))
                 if l.get("event") == "step"][1:]
        longest = max(l["max_step_s"] for l in lines)
        medians = sorted(l["median_step_s"] for l in lines)
        return longest, medians[len(medians) // 2]

    def run_job(self, run, args, kill_at_step=None, victim=1,
                config=testlib.CONFIG):
        """3 pservers, 2 trainers with `args`; with kill_at_step, SIGKILL
        pserver `victim` once trainer 0 has logged that step. Returns the
        time of the kill (or None)."""
        servers = self.start_pservers(run)
        trainers = self.start_trainers(run, [p for _, p in servers], args,
                                       config)
        killed = None
        if kill_at_step is not None:
            self.assertTrue(wait_for(
                lambda: self.last_step(run, 0) >= kill_at_step, 120),
                self.trainer_log(run, 0)[-2000:])
            servers[victim][0].send_signal(signal.SIGKILL)
            killed = time.monotonic()
        self.wait_trainers(run, trainers)
        for i, (p, _) in enumerate(servers):
            if i != victim or kill_at_step is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        return killed

    # Tests --------------------------------------------------------------

    def test_sync_primary_killed_mid_pass(self):
        """Sync: kill -9 pserver 1 (primary of shard 1, backup of shard 0)
        at step 150 of 468 and never restart it. The job ends with the test
        accuracy and loss, to the last digit, of the same job without the
        failure, and the longest step is under MAX_KILL_STALL_S above the
        median."""
        args = ["--num_passes=1", "--replication=2"]
        self.run_job("base", args)
        self.run_job("kill", args, kill_at_step=150)
        base = final_eval(self.metrics("base", 0), 0)
        for k in (0, 1):
            ev = final_eval(self.metrics("kill", k), k)
            self.assertEqual(ev["step"], STEPS_PER_PASS)
            self.assertEqual(ev["test_accuracy"], base["test_accuracy"])
            self.assertEqual(ev["test_loss"], base["test_loss"])
            longest, median = self.stall("kill", k)
            self.assertLess(longest - median, MAX_KILL_STALL_S, (longest, median))
            self.assertIn("failover from pserver 1", self.trainer_log(
                "kill", k))
        longest, median = self.stall("kill", 0)
        sys.stderr.write(
            "[accuracy %.4f both; longest step %.3f s, median %.4f s] " % (
                base["test_accuracy"], longest, median))
        # Pserver 0 backed shard 0 on pserver 1: it took it out of the view,
        # or learned the view the trainers agreed without it.
        self.assertRegex(self.ps_log("kill", 0) + self.ps_log("kill", 2),
                         r"view 1 \{0,2\}")

    def test_sync_lars_primary_killed_mid_pass(self):
        """LARS (docs/tuning.md), whose steps wait for the trainers to bring
        the whole table's norms: kill -9 pserver 1 at step 150 of 468. The
        backup that takes its shard was forwarded each applied step with
        its trust ratio and kept the step's norms; a step caught half-way
        is assembled again from the pushes the trainers send again, and a
        trainer whose norms reach the new primary before that waits for it.
        The job ends with the accuracy and loss, to the last digit, of the
        same job without the failure."""
        args = ["--num_passes=1", "--replication=2",
                "--config_set=optimizer.type=LARS,optimizer.learning_rate=1,"
                "optimizer.momentum=0.9,optimizer.trust_coefficient=0.001"]
        self.run_job("lbase", args)
        self.run_job("lkill", args, kill_at_step=150)
        base = final_eval(self.metrics("lbase", 0), 0)
        for k in (0, 1):
            ev = final_eval(self.metrics("lkill", k), k)
            self.assertEqual(ev["step"], STEPS_PER_PASS)
            self.assertEqual(ev["test_accuracy"], base["test_accuracy"])
            self.assertEqual(ev["test_loss"], base["test_loss"])
            self.assertIn("failover from pserver 1", self.trainer_log(
                "lkill", k))
        # Measured: 0.8282 (1 pass, 2 trainers of 64).
        self.assertGreaterEqual(base["test_accuracy"], 0.80)
        sys.stderr.write("[LARS accuracy %.4f both] " % base["test_accuracy"])

    def test_async_primary_killed_mid_pass(self):
        """Async: a kill -9 mid-pass is survived; the final accuracy is
        within run-to-run noise of the run without it. 1 pass of async on
        3 pservers ends between 0.72 and 0.84, with or without the kill
        (some 30 runs on the 2-core machine, 2026-11-24 to 11-26, two
        builds; 0.777 to 0.835 in the first 10), and two runs of one test
        differed by up to 0.098 (0.7227 with the kill, 0.8204 without):
        0.12 apart at most, and neither below 0.70. A shard whose updates
        were lost at the failover would end far lower."""
        args = ["--num_passes=1", "--replication=2", "--mode=async"]
        self.run_job("abase", args)
        self.run_job("akill", args, kill_at_step=150, victim=2)
        base = final_eval(self.metrics("abase", 0), 0)["test_accuracy"]
        self.assertGreaterEqual(base, 0.70)
        for k in (0, 1):
            ev = final_eval(self.metrics("akill", k), k)
            self.assertEqual(ev["step"], STEPS_PER_PASS)
            self.assertAlmostEqual(ev["test_accuracy"], base, delta=0.12)
            self.assertGreaterEqual(ev["test_accuracy"], 0.70)
            self.assertIn("failover from pserver 2",
                          self.trainer_log("akill", k))
        sys.stderr.write("[async accuracy %.4f without, %.4f with the kill] "
                         % (base, final_eval(self.metrics("akill", 0),
                                             0)["test_accuracy"]))

    def test_restart_catch_up_then_second_kill(self):
        """Sync, 2 passes: kill -9 pserver 1 at step 100, restart it on its
        port without its state; the chief sends it the job, it catches up
        from the primaries while training goes on and becomes a full
        backup again; then kill -9 pserver 2 (primary of shard 1 since the
        first kill, so shard 1 comes back to pserver 1). The job ends with
        the accuracy and loss of the same job without failures."""
        args = ["--num_passes=2", "--replication=2"]
        self.run_job("rbase", args)
        servers = self.start_pservers("rkill")
        ports = [p for _, p in servers]
        trainers = self.start_trainers("rkill", ports, args)
        self.assertTrue(wait_for(lambda: self.last_step("rkill", 0) >= 100,
                                 120))
        servers[1][0].send_signal(signal.SIGKILL)
        servers[1][0].wait(10)
        self.assertTrue(wait_for(
            lambda: "failover from pserver 1" in self.trainer_log("rkill", 0),
            30))
        ps1, _, _ = self.start_pserver("rkill-ps1b", num_trainers=2,
                                       port=ports[1])
        self.assertTrue(wait_for(
            lambda: "a full backup again" in self.ps_log("rkill", "1b"), 60),
            self.ps_log("rkill", "1b")[-3000:])
        caught_up_at = self.last_step("rkill", 0)
        self.assertLess(caught_up_at, 2 * STEPS_PER_PASS - 50,
                        "caught up too late to test a second kill")
        servers[2][0].send_signal(signal.SIGKILL)
        self.wait_trainers("rkill", trainers)
        base = final_eval(self.metrics("rbase", 0), 0)
        for k in (0, 1):
            ev = final_eval(self.metrics("rkill", k), k)
            self.assertEqual(ev["step"], 2 * STEPS_PER_PASS)
            self.assertEqual(ev["test_accuracy"], base["test_accuracy"])
            self.assertEqual(ev["test_loss"], base["test_loss"])
            self.assertIn("failover from pserver 2",
                          self.trainer_log("rkill", k))
            longest, median = self.stall("rkill", k)
            self.assertLess(longest - median, MAX_KILL_STALL_S, (longest, median))
        sys.stderr.write(
            "[caught up by step %d; accuracy %.4f both; longest step %.3f s] "
            % (caught_up_at, base["test_accuracy"],
               self.stall("rkill", 0)[0]))
        for p in (servers[0][0], ps1):
            p.send_signal(signal.SIGTERM)
            p.wait(30)

    def ctr_data(self):
        train = os.path.join(self.tmp, "ctr-train")
        test = os.path.join(self.tmp, "ctr-test")
        subprocess.run([os.path.join(testlib.BIN_DIR, "tools", "gen_ctr_data"),
                        "--train_out=" + train, "--test_out=" + test],
                       stdout=subprocess.DEVNULL, check=True, timeout=120)
        return ["--train_data=" + train, "--test_data=" + test]

    def test_sparse_ctr_primary_killed(self):
        """The sparse CTR model (configs/ctr_lr.pbtxt, keys over 2^40): each
        pserver holds its shard of the table and backs the one before. Sync:
        a kill -9 at step 200 of 585 ends with the AUC and log loss, to the
        last digit, of the run without it; async: within 0.005 AUC."""
        data = self.ctr_data()
        for mode in ("sync", "async"):
            args = data + ["--replication=2", "--mode=" + mode]
            self.run_job("c%sbase" % mode, args, config=CTR_LR)
            self.run_job("c%skill" % mode, args, kill_at_step=200, victim=1,
                         config=CTR_LR)
            base = final_eval(self.metrics("c%sbase" % mode, 0), 0)
            for k in (0, 1):
                ev = final_eval(self.metrics("c%skill" % mode, k), k)
                self.assertEqual(ev["step"], base["step"])
                if mode == "sync":
                    self.assertEqual(ev["test_auc"], base["test_auc"])
                    self.assertEqual(ev["test_logloss"], base["test_logloss"])
                else:
                    self.assertAlmostEqual(ev["test_auc"], base["test_auc"],
                                           delta=0.005)
                self.assertIn("failover from pserver 1",
                              self.trainer_log("c%skill" % mode, k))
            sys.stderr.write("[%s AUC %.5f without, %.5f with the kill] " % (
                mode, base["test_auc"],
                final_eval(self.metrics("c%skill" % mode, 0), 0)["test_auc"]))

    def test_sparse_checkpoints_export_and_reshard(self):
        """Checkpoints of a replicated job with a sparse table
        (configs/ctr_lr.pbtxt, sync, 3 pservers, --replication=2): each
        pserver's checkpoint holds the rows of both shards it holds. The
        job's final checkpoint exported, the same resharded onto 2
        pservers and exported, and the chief's --save_dir all hold the
        same sparse table, byte for byte (each row once, from its
        primary)."""
        ckpt = os.path.join(self.tmp, "ckpt")
        saved = os.path.join(self.tmp, "saved")
        servers = []
        for i in range(3):
            p, port, _ = self.start_pserver(
                "ck-ps%d" % i, ["--checkpoint_dir=%s/ps-%d" % (ckpt, i)],
                num_trainers=2)
            servers.append((p, port))
        args = self.ctr_data() + ["--replication=2", "--mode=sync",
                                  "--checkpoint_every_steps=200"]
        # --save_dir: only the chief saves.
        trainers = self.start_trainers("ck", [p for _, p in servers],
                                       args + ["--save_dir=" + saved],
                                       config=CTR_LR)
        self.wait_trainers("ck", trainers)
        for p, _ in servers:  # final checkpoints
            p.send_signal(signal.SIGTERM)
        for p, _ in servers:
            self.assertEqual(p.wait(60), 0)
        for i in range(3):
            self.assertIn("checkpoint of step 200 written",
                          self.ps_log("ck", i))

        def tool(*a):
            r = subprocess.run(
                [os.path.join(testlib.BIN_DIR, "tools", "ps_checkpoint")] +
                list(a), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                universal_newlines=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout)
            return r.stdout

        tool("export", "--from", ckpt, "--out", os.path.join(self.tmp, "m3"))
        tool("reshard", "--from", ckpt, "--to", os.path.join(self.tmp, "two"),
             "--pservers", "2")
        tool("export", "--from", os.path.join(self.tmp, "two"), "--out",
             os.path.join(self.tmp, "m2"))
        tables = sorted(f for f in os.listdir(saved) if f.startswith("sparse-"))
        self.assertEqual(len(tables), 1, os.listdir(saved))
        with open(os.path.join(saved, tables[0]), "rb") as f:
            want = f.read()
        for m in ("m3", "m2"):
            with open(os.path.join(self.tmp, m, tables[0]), "rb") as f:
                self.assertTrue(f.read() == want, m)

    def test_refusals(self):
        """More copies than pservers, and no copy at all, are refused with
        messages that say so."""
        servers = self.start_pservers("bad", n=2)
        ports = ",".join("127.0.0.1:%d" % p for _, p in servers)
        r = subprocess.run(
            [testlib.trainer_bin(), "--pservers=" + ports, "--trainer_id=0",
             "--num_gradient_servers=2", "--config=" + testlib.CONFIG,
             "--replication=3", "--progress=off"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, env=testlib.clean_env(), timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--replication=3 needs at least as many pservers",
                      r.stderr)
        r = subprocess.run(
            [testlib.trainer_bin(), "--pservers=" + ports, "--trainer_id=0",
             "--num_gradient_servers=2", "--config=" + testlib.CONFIG,
             "--replication=0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, env=testlib.clean_env(), timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--replication must be >= 1", r.stderr)


if __name__ == "__main__":
    testlib.main()
