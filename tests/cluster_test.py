#!/usr/bin/env python3
"""2 pservers + 2 trainers on Fashion-MNIST through scripts/cluster/local_cluster.py.

    python3 tests/cluster_test.py [--bin_dir build] [-k pattern]

Every test checks at the end that no pserver or trainer it started is still
running (testlib.ProcessTestCase). About 30 s on 2 cores.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import testlib
from testlib import Collector, clean_env, pid_alive, wait_for


WAITING_FOR_TRAINER_1 = re.compile(
    r"pull from trainer 0 has waited .* waiting for the pushes of "
    r"step (\d+) from trainer\(s\) 1\)")


def read_cluster_json(log_dir):
    """local_cluster.py's cluster.json in `log_dir`; None until written."""
    try:
        with open(os.path.join(log_dir, "cluster.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def waits_for_trainer_1(pservers):
    """The step of trainer 1's pushes each of `pservers` (cluster.json's)
    has logged a pull waiting for, for those that have."""
    found = []
    for p in pservers:
        with open(p["log"]) as f:
            m = WAITING_FOR_TRAINER_1.search(f.read())
        if m:
            found.append(int(m.group(1)))
    return found


class ClusterTest(testlib.ProcessTestCase):

    def assertRanWell(self, r, summary, trainers=2, pservers=2):
        self.assertEqual(r.returncode, 0,
                         "local_cluster failed:\n" + r.stdout + r.stderr)
        self.assertIsNotNone(summary, r.stderr)
        self.assertEqual(summary["exit_code"], 0)
        self.assertEqual([t["exit_code"] for t in summary["trainers"]],
                         [0] * trainers)
        self.assertEqual([p["exit_code"] for p in summary["pservers"]],
                         [0] * pservers, "pservers stop cleanly on SIGTERM")
        for t in summary["trainers"]:
            self.assertIn("trainer %d: exit 0" % t["id"], r.stdout)
            self.assertFalse(pid_alive(t["pid"]))
        for p in summary["pservers"]:
            self.assertFalse(pid_alive(p["pid"]))

    def final_evals(self, summary):
        """Each trainer's final eval line, read from its metrics file."""
        out = []
        for t in summary["trainers"]:
            ev = testlib.final_eval(t["metrics_file"], t["id"])
            self.assertIsNotNone(ev, "no eval line in " + t["metrics_file"])
            self.assertEqual(ev["final"], 1)
            self.assertAlmostEqual(ev["test_accuracy"], t["test_accuracy"])
            out.append(ev)
        return out

    def test_sync_full_pass(self):
        """Sync: every trainer ends with the same parameters, hence the same
        test accuracy and loss."""
        start = time.monotonic()
        r, summary = self.run_cluster(
            ["--pservers", "2", "--trainers", "2"], ["--mode=sync"])
        self.assertRanWell(r, summary)
        evals = self.final_evals(summary)
        for ev in evals:
            self.assertEqual(ev["pass"], 0)
            self.assertEqual(ev["step"], 468)  # 30,000 records / 64
            self.assertGreaterEqual(ev["test_accuracy"], 0.80)
            self.assertGreater(ev["push_bytes"], 0)
            self.assertGreater(ev["pull_bytes"], 0)
        self.assertEqual(evals[0]["test_accuracy"], evals[1]["test_accuracy"])
        self.assertEqual(evals[0]["test_loss"], evals[1]["test_loss"])
        sys.stderr.write("[sync: accuracy %.4f, %.1f s] " %
                         (evals[0]["test_accuracy"], time.monotonic() - start))

    def test_cnn_sync_full_pass(self):
        """configs/fmnist_cnn.pbtxt (convolutions, max pooling) on the CPU
        backend: 2 trainers, 1 pass reach a test accuracy of at least 0.85
        (0.87 measured)."""
        start = time.monotonic()
        config = os.path.join(testlib.REPO, "configs", "fmnist_cnn.pbtxt")
        r, summary = self.run_cluster(
            ["--pservers", "2", "--trainers", "2", "--config", config],
            ["--mode=sync"])
        self.assertRanWell(r, summary)
        evals = self.final_evals(summary)
        for ev in evals:
            self.assertEqual(ev["step"], 937)  # 30,000 records / 32
            self.assertGreaterEqual(ev["test_accuracy"], 0.85)
        self.assertEqual(evals[0]["test_accuracy"], evals[1]["test_accuracy"])
        sys.stderr.write("[cnn: accuracy %.4f, %.1f s] " %
                         (evals[0]["test_accuracy"], time.monotonic() - start))

    def test_async_full_pass(self):
        """Async: updates are applied on arrival; the final evaluation waits
        until every trainer has pushed its last step, so both trainers
        evaluate the same final parameters."""
        start = time.monotonic()
        r, summary = self.run_cluster(
            ["--pservers", "2", "--trainers", "2"], ["--mode=async"])
        self.assertRanWell(r, summary)
        evals = self.final_evals(summary)
        for ev in evals:
            self.assertEqual(ev["step"], 468)
            # The accuracy of one final iterate at learning rate 0.05 and
            # momentum 0.9 is a noisy figure: one trainer alone moves by
            # 3 points between processors, and one async pass of two ended
            # between 0.709 and 0.833 (16 runs alone, 8 beside a CPU hog,
            # and a CI run at 0.7098). Chance is 0.10 and the untrained
            # loss 2.3: the bounds say it learned, nothing finer.
            self.assertGreaterEqual(ev["test_accuracy"], 0.65, summary)
            self.assertLess(ev["test_loss"], 0.8, summary)
        self.assertEqual(evals[0]["test_accuracy"], evals[1]["test_accuracy"])
        sys.stderr.write("[async: accuracy %.4f, %.1f s] " % (
            evals[0]["test_accuracy"], time.monotonic() - start))

    def test_pservers_beside(self):
        """--pservers beside starts one pserver per trainer (docs/deploy.md,
        "A pserver beside each trainer"); each trainer moves its dense
        values through shared memory with all of them on this machine.
        With --wait_for_trainers_s (configs/k8s/beside) each waits, after
        its final evaluation, until both have finished."""
        r, summary = self.run_cluster(["--pservers", "beside", "--trainers",
                                       "2"], ["--max_steps=20",
                                              "--wait_for_trainers_s=120"])
        self.assertRanWell(r, summary)
        self.assertEqual(len(summary["pservers"]), 2)
        for t in summary["trainers"]:
            with open(os.path.join(self.tmp, "logs",
                                   "trainer-%d.log" % t["id"])) as f:
                log = f.read()
            self.assertIn("shared memory with 2 of 2 pservers", log)
            self.assertIn("trainer %d: every trainer of the job has finished"
                          % t["id"], log)
        for i in range(2):
            with open(os.path.join(self.tmp, "logs",
                                   "pserver-%d.log" % i)) as f:
                log = f.read()
            for k in range(2):
                self.assertIn("trainer %d has finished" % k, log)

    def test_tcp_lane(self):
        """Without shared memory (as between hosts) dense values go over the
        TCP lane (docs/wire_protocol.md, "TCP lane"), float32 and bf16: the
        same parameters as through gRPC alone, bit for bit."""
        for compression in ("none", "bf16"):
            self.check_tcp_lane(compression)

    def check_tcp_lane(self, compression):
        results = {}
        for lane in ("true", "false"):
            log_dir = os.path.join(self.tmp, "logs-%s-%s" % (compression, lane))
            r, summary = self.run_cluster(
                ["--pservers", "2", "--trainers", "2"],
                ["--mode=sync", "--max_steps=120", "--shared_memory=false",
                 "--compression=" + compression, "--tcp_lane=" + lane],
                log_dir=log_dir)
            self.assertRanWell(r, summary)
            evals = self.final_evals(summary)
            results[lane] = evals[0]
            for t in summary["trainers"]:
                with open(t["log"]) as f:
                    log = f.read()
                if lane == "true":
                    self.assertIn("shared memory with 0 of 2 pservers, over "
                                  "the TCP lane with 2\n", log)
                else:
                    self.assertIn("over gRPC with 2", log)
        self.assertEqual(results["true"]["test_loss"],
                         results["false"]["test_loss"])
        self.assertGreater(results["true"]["test_accuracy"], 0.6)

    def test_compression(self):
        """fp16 halves the bytes both ways at dense accuracy;
        --compression=threshold with nothing else (the defaults chosen in
        docs/tuning.md: a fixed threshold of 3e-2 on the MLP's momentum
        updates) pushes over 100 times fewer bytes than dense within a
        point of its accuracy (and half a point for the processor's
        rounding, below)."""
        results = {}
        for c in ("none", "fp16", "threshold"):
            r, summary = self.run_cluster(
                ["--pservers", "2", "--trainers", "2"],
                ["--compression=" + c],
                log_dir=os.path.join(self.tmp, "logs-" + c))
            self.assertRanWell(r, summary)
            results[c] = self.final_evals(summary)
        thr1 = results["threshold"][1]
        dense, fp16, thr = [results[c][0] for c in ("none", "fp16",
                                                    "threshold")]
        sys.stderr.write("[push MB: dense %.1f, fp16 %.1f, threshold %.1f; "
                         "accuracy %.4f / %.4f / %.4f] " % (
                             dense["push_bytes"] / 1e6, fp16["push_bytes"] / 1e6,
                             thr["push_bytes"] / 1e6, dense["test_accuracy"],
                             fp16["test_accuracy"], thr["test_accuracy"]))
        self.assertLess(fp16["push_bytes"], 0.51 * dense["push_bytes"])
        self.assertLess(fp16["pull_bytes"], 0.51 * dense["pull_bytes"])
        self.assertGreaterEqual(fp16["test_accuracy"],
                                dense["test_accuracy"] - 0.01)
        # Measured (docs/tuning.md): 619 times fewer bytes and 0.51 points
        # below dense at this seed (config seed 1) on an AMD EPYC with
        # AVX-512, the same in 3 runs (the mean of 2 trainers does not
        # depend on which push came first); 1.03 points below on an AMD
        # EPYC without AVX-512 (family 25 model 1, 2026-11-26), every run:
        # the processor's rounding moves one seed's figure by half a point.
        # Over 19 seeds not used to choose the threshold, 0.67 points below
        # on average, -2.6 to +1.1. The bound is the claim (within a point)
        # plus that half point; a broken codec costs far more.
        self.assertLess(thr["push_bytes"] * 100, dense["push_bytes"])
        # Compressed pulls (docs/compression.md): measured 2.1 MB pulled
        # against 441 MB dense, 0.3 points below threshold pushes with
        # dense pulls, 1.34 below dense (AMD EPYC without AVX-512,
        # 2026-11-27); the bound below is that and the half point the
        # processor's rounding moves it. Both trainers hold the pservers'
        # shadows bit for bit, so they evaluate the same model.
        self.assertLess(thr["pull_bytes"] * 50, dense["pull_bytes"])
        self.assertEqual(thr["test_loss"], thr1["test_loss"])
        self.assertGreaterEqual(thr["test_accuracy"],
                                dense["test_accuracy"] - 0.02)

    def test_lars(self):
        """LARS (docs/tuning.md): the norms of tables whose blocks live on
        both pservers meet through the trainers every step; both trainers
        end with the same parameters and a model that learned. Async is
        refused, naming the table and the flag."""
        lars = ("--config_set=optimizer.type=LARS,optimizer.learning_rate=1,"
                "optimizer.momentum=0.9,optimizer.trust_coefficient=0.001")
        r, summary = self.run_cluster(["--pservers", "2", "--trainers", "2"],
                                      [lars, "--batch_size=32"])
        self.assertRanWell(r, summary)
        evals = self.final_evals(summary)
        # Measured: 0.842 (1 pass; momentum 0.05 without LARS: 0.83-0.84).
        self.assertGreaterEqual(evals[0]["test_accuracy"], 0.80)
        self.assertEqual(evals[0]["test_loss"], evals[1]["test_loss"])
        log_dir = os.path.join(self.tmp, "logs-async")
        r, summary = self.run_cluster(["--pservers", "2", "--trainers", "2"],
                                      [lars, "--mode=async"], log_dir=log_dir)
        self.assertNotEqual(r.returncode, 0)
        with open(os.path.join(log_dir, "trainer-0.log")) as f:
            self.assertIn("has LARS, which does not work with --mode=async",
                          f.read())

    def start_cluster_to_kill(self, log_dir):
        """local_cluster.py with 2 pservers and 2 sync trainers of 5 passes,
        --keep_going, logs in `log_dir`; returns (the launcher, collectors
        of its stdout and stderr, its cluster.json once written)."""
        launcher = self.popen(
            [sys.executable, testlib.LOCAL_CLUSTER, "--bin_dir",
             testlib.BIN_DIR, "--log_dir", log_dir, "--timeout", "120",
             "--pservers", "2", "--trainers", "2", "--keep_going", "--",
             "--mode=sync",
             "--num_passes=5", "--log_every_steps=10"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True)
        out, err = Collector(launcher.stdout), Collector(launcher.stderr)
        info = wait_for(lambda: read_cluster_json(log_dir), 60)
        self.assertIsNotNone(info, "no cluster.json; stderr:\n" + err.text())
        return launcher, out, err, info

    def kill_trainer_1_past_step_20(self, t1, err):
        """Waits for trainer 1 (cluster.json's `t1`) to log step 20, kills
        it with SIGKILL; returns when (time.monotonic())."""
        def trainer1_step():
            steps = [m["step"] for m in testlib.read_json_lines(
                t1["metrics_file"]) if m.get("event") == "step"]
            return steps and steps[-1] >= 20

        self.assertTrue(wait_for(trainer1_step, 60, 0.01),
                        "trainer 1 made no progress:\n" + err.text())
        os.kill(t1["pid"], signal.SIGKILL)
        return time.monotonic()

    def check_ctrl_c_stops_everything(self, launcher, out, err, log_dir,
                                      info):
        """SIGINT to the launcher: it exits 130, its summary and stdout
        tell of the killed trainer, and no process of `info` is left."""
        launcher.send_signal(signal.SIGINT)  # Ctrl-C
        rc = launcher.wait(30)
        out.join()
        err.join()
        self.assertEqual(rc, 130, err.text())
        with open(os.path.join(log_dir, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["trainers"][1]["exit_code"], -9)
        self.assertIn("killed by SIGKILL", out.text())
        for c in info["trainers"] + info["pservers"]:
            self.assertFalse(pid_alive(c["pid"]), c)

    def test_sync_trainer_killed(self):
        """A sync trainer killed mid-run: the pservers say which trainer the
        survivor waits for (after 5 s), the launcher shows it, and Ctrl-C
        stops everything. (Recovery is not tested here.)"""
        log_dir = os.path.join(self.tmp, "logs")
        launcher, out, err, info = self.start_cluster_to_kill(log_dir)
        t0, t1 = info["trainers"]
        killed_at = self.kill_trainer_1_past_step_20(t1, err)

        steps = wait_for(lambda: waits_for_trainer_1(info["pservers"]), 30,
                         0.2)
        waited = time.monotonic() - killed_at
        self.assertTrue(steps, "no pserver log names trainer 1 within 30 s "
                        "of its death; launcher stderr:\n" + err.text())
        self.assertGreaterEqual(min(steps), 20)
        self.assertGreaterEqual(waited, 4.0, "reported after about 5 s")
        # The survivor is still there, waiting, and so is the launcher.
        self.assertIsNone(launcher.poll(), err.text())
        self.assertTrue(pid_alive(t0["pid"]))
        # The launcher shows the death and the pservers' warnings.
        self.assertTrue(wait_for(
            lambda: "has waited" in err.text() and "[pserver" in err.text(),
            5), err.text())
        self.assertIn("trainer 1 was killed by SIGKILL", err.text())
        self.check_ctrl_c_stops_everything(launcher, out, err, log_dir, info)

    def test_save_then_load(self):
        """A model saved by one job and loaded by the next: the new job's
        first evaluation (after one more step) is close to the saved one.

        Regression: the chief once sent freed memory as initial values
        after loading (the loader replaced the buffers it had pointers to)."""
        model = os.path.join(self.tmp, "model")
        r, summary = self.run_cluster(
            log_dir=os.path.join(self.tmp, "save"),
            trainer_args=["--max_steps=200", "--save_dir=" + model])
        self.assertRanWell(r, summary)
        saved = self.final_evals(summary)[0]["test_accuracy"]
        self.assertGreaterEqual(saved, 0.70)
        self.assertTrue(os.listdir(model), "nothing saved in " + model)

        r, summary = self.run_cluster(
            log_dir=os.path.join(self.tmp, "load"),
            trainer_args=["--max_steps=1", "--load_dir=" + model])
        self.assertRanWell(r, summary)
        evals = self.final_evals(summary)
        for ev in evals:
            self.assertEqual(ev["step"], 1)
            self.assertAlmostEqual(ev["test_accuracy"], saved, delta=0.03)
        # Sync: both trainers hold the same parameters.
        self.assertEqual(evals[0]["test_loss"], evals[1]["test_loss"])

        # Without --load_dir, one step from scratch is far worse: the load
        # made the difference.
        r, summary = self.run_cluster(
            log_dir=os.path.join(self.tmp, "fresh"),
            trainer_args=["--max_steps=1"])
        self.assertRanWell(r, summary)
        fresh = self.final_evals(summary)[0]["test_accuracy"]
        self.assertLess(fresh, saved - 0.1)

    # The launcher's own promises ---------------------------------------------

    def test_timeout_names_running_processes(self):
        r, summary = self.run_cluster(["--timeout", "3"],
                                      ["--num_passes=100"], timeout=3)
        self.assertEqual(r.returncode, 124, r.stderr)
        line = [l for l in r.stderr.splitlines() if "--timeout" in l]
        self.assertTrue(line, r.stderr)
        for name in ("trainer 0", "trainer 1", "pserver 0", "pserver 1"):
            self.assertIn(name, line[0])
        for c in summary["trainers"] + summary["pservers"]:
            self.assertFalse(pid_alive(c["pid"]))

    def test_pserver_that_fails_to_start(self):
        r, summary = self.run_cluster(
            ["--pserver_args=--max_pull_wait_s=0"], [])
        self.assertNotEqual(r.returncode, 0)
        log = os.path.join(self.tmp, "logs", "pserver-0.log")
        self.assertIn("pserver 0 exited with status 2 before serving; see " +
                      log, r.stderr)
        self.assertEqual(summary["trainers"], [])

    def test_failing_trainer_stops_everything(self):
        # {k} becomes the trainer id: trainer 0 refuses --log_every_steps=0
        # (status 2); trainer 1 starts and would wait for the chief forever.
        r, summary = self.run_cluster([], ["--log_every_steps={k}"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual([t["exit_code"] for t in summary["trainers"]],
                         [2, -signal.SIGTERM])
        self.assertIn("trainer: --log_every_steps must be positive", r.stderr)
        self.assertIn("trainer 0 exited with status 2", r.stderr)
        self.assertIn("stopping everything", r.stderr)

    def test_keep_going_and_metrics_dir(self):
        r, summary = self.run_cluster(
            ["--keep_going", "--metrics_dir", os.path.join(self.tmp, "m")],
            ["--batch_size=40000"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual([t["exit_code"] for t in summary["trainers"]], [1, 1])
        self.assertEqual(summary["trainers"][1]["metrics_file"],
                         os.path.join(self.tmp, "m", "trainer-1.jsonl"))

    def test_bad_launcher_arguments(self):
        for args in (["--trainers", "0"], ["--", "--trainer_id=1"],
                     ["--config", os.path.join(self.tmp, "none.pbtxt")],
                     ["--bin_dir", self.tmp]):
            r = subprocess.run(
                [sys.executable, testlib.LOCAL_CLUSTER, "--log_dir",
                 os.path.join(self.tmp, "logs")] + args,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                universal_newlines=True, env=clean_env(), timeout=30)
            self.assertEqual(r.returncode, 2, (args, r.stderr))


if __name__ == "__main__":
    testlib.main()
