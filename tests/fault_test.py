#!/usr/bin/env python3
"""Fault tolerance, with real processes on loopback (docs/fault_tolerance.md):
a pserver killed with SIGKILL and restarted from its checkpoints, a pserver
killed in the middle of writing a checkpoint, a corrupted checkpoint, a
trainer killed and dropped by --trainer_timeout, a trainer killed and
restarted, SIGTERM on a pserver (final checkpoint) and on a trainer (it
leaves the job).

    python3 tests/fault_test.py [--bin_dir build] [-v] [-k name]
"""

import errno
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import testlib
from testlib import final_eval, read_json_lines, wait_for

STEPS_PER_PASS = 468  # 60000 records / 2 trainers / batch 64


def ckpt_dir_name(step):
    return "ckpt-%012d" % step


class FaultTest(testlib.ProcessTestCase):

    # Helpers ------------------------------------------------------------

    def start_ps(self, i, port=0, extra=(), env=None):
        """Starts pserver i of 2 (checkpoints in tmp/ckpt-i, log tmp/psI.log)
        on `port` (0: a free one); returns (popen, port)."""
        p, got, _ = self.start_pserver(
            "ps%d" % i, ["--checkpoint_dir=" + self.ckpt(i)] + list(extra),
            num_trainers=2, port=port, env=env)
        return p, got

    def kill_ps1_after_checkpoint(self, ps1, port, step=200, extra=()):
        """Waits until pserver 1 has its checkpoint of `step`, kills it with
        SIGKILL and starts it again 1 s later on `port` with the same
        directory. Returns (the new popen, seconds it was away, trainer 0's
        last logged step at the kill)."""
        self.assertTrue(wait_for(lambda: os.path.isdir(
            os.path.join(self.job_ckpt(1), ckpt_dir_name(step))), 120),
            self.trainer_log(0))
        at = self.last_step(0)
        t_kill = time.monotonic()
        ps1.kill()
        ps1.wait()
        time.sleep(1)  # down for a second: the trainers' calls fail and retry
        ps1, _ = self.start_ps(1, port=port, extra=extra)
        return ps1, time.monotonic() - t_kill, at

    def ckpt(self, i):
        return os.path.join(self.tmp, "ckpt-%d" % i)

    def job_ckpt(self, i):
        """The default job's checkpoints of pserver i."""
        return os.path.join(self.ckpt(i), "default")

    def log(self, i):
        with open(os.path.join(self.tmp, "ps%d.log" % i),
                  errors="replace") as f:
            return f.read()

    def metrics(self, k):
        return os.path.join(self.tmp, "trainer-%d.jsonl" % k)

    def start_trainer(self, k, ports, extra=(), log_suffix=""):
        log = os.path.join(self.tmp, "trainer-%d%s.log" % (k, log_suffix))
        with open(log, "ab") as f:
            return self.popen(
                [testlib.trainer_bin(),
                 "--pservers=" + ",".join("127.0.0.1:%d" % p for p in ports),
                 "--trainer_id=%d" % k, "--num_gradient_servers=2",
                 "--config=" + testlib.CONFIG, "--progress=off",
                 "--log_every_steps=10", "--rpc_retry_s=120",
                 "--metrics_file=" + self.metrics(k)] + list(extra),
                stdout=f, stderr=subprocess.STDOUT)

    def trainer_log(self, k, suffix=""):
        with open(os.path.join(self.tmp, "trainer-%d%s.log" % (k, suffix)),
                  errors="replace") as f:
            return f.read()

    def last_step(self, k):
        steps = [l["step"] for l in read_json_lines(self.metrics(k))
                 if l.get("event") == "step"]
        return steps[-1] if steps else 0

    def step_after_recovery(self, k):
        """Trainer k's last logged step after its last recovery, or 0."""
        step = 0
        for l in read_json_lines(self.metrics(k)):
            if l.get("event") == "recovery":
                step = 0
            elif l.get("event") == "step":
                step = l["step"]
        return step

    def wait_exit(self, p, timeout, what):
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("%s still running after %d s" % (what, timeout))

    def small_disk(self, size):
        """A tmpfs of `size` (mount's syntax) of this test's own, in tmp."""
        if os.geteuid() != 0:
            self.skipTest("not root: the test mounts a tmpfs of its own")
        disk = os.path.join(self.tmp, "disk")
        os.makedirs(disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size,
                        "shardps-fault-test", disk], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", disk])
        return disk

    def start_monitored_ps(self, ckpt, env=None):
        """Starts pserver ps0 checkpointing to `ckpt`, its /metrics on a
        free port written to tmp/ps.mport; returns (popen, port, that
        file)."""
        mport = os.path.join(self.tmp, "ps.mport")
        ps, port, _ = self.start_pserver(
            "ps0", ["--checkpoint_dir=" + ckpt, "--monitoring_port=0",
                    "--monitoring_port_file=" + mport], env=env)
        return ps, port, mport

    def metrics_page(self, port_file):
        """The /metrics page at the port in `port_file`."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                    testlib.read_port(port_file),
                                    timeout=10) as u:
            return u.read().decode()

    def metric(self, port_file, name):
        """The value of series `name` on the /metrics at `port_file`."""
        page = self.metrics_page(port_file)
        m = re.search(r"^%s (\S+)$" % re.escape(name), page, re.M)
        self.assertTrue(m, "%s not in\n%s" % (name, page))
        return float(m.group(1))

    def recoveries(self, k):
        return [l for l in read_json_lines(self.metrics(k))
                if l.get("event") == "recovery"]

    def stop(self, *procs):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            self.wait_exit(p, 30, "pserver")

    # Tests --------------------------------------------------------------

    def test_pserver_killed_and_restarted(self):
        """Sync, 2 pservers, 2 trainers, a checkpoint every 100 steps: kill
        -9 pserver 1 in the first pass and restart it on the same port with
        the same directory. The job rolls back to the newest checkpoint both
        pservers hold and finishes 2 passes above 0.80."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        args = ["--num_passes=2", "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        ps1, down, killed_at = self.kill_ps1_after_checkpoint(ps1, p1)
        killed_at = max(killed_at, 200)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
        for k in (0, 1):
            ev = final_eval(self.metrics(k), k)
            self.assertEqual(ev["step"], 2 * STEPS_PER_PASS)
            self.assertGreaterEqual(ev["test_accuracy"], 0.80)
            rec = self.recoveries(k)
            self.assertEqual(len(rec), 1, rec)
            self.assertEqual(rec[0]["to_step"] % 100, 0)
            self.assertGreaterEqual(rec[0]["to_step"], 200)
        rec = self.recoveries(0)[0]
        sys.stderr.write(
            "[killed near step %d; rolled back from step %d to %d (%d steps "
            "lost); training stalled %.2f s, of which %.1f s with the "
            "pserver down; accuracy %.4f] " % (
                killed_at, rec["from_step"], rec["to_step"],
                rec["steps_lost"], rec["stalled_seconds"], down,
                final_eval(self.metrics(0), 0)["test_accuracy"]))
        self.assertIn("restored step", self.log(1))
        self.assertIn("rolled back", self.log(0))
        self.stop(ps0, ps1)

    def test_pserver_killed_twice(self):
        """A pserver that crashes again before the next checkpoint reloads
        the same one; it starts a new generation each time, so the job rolls
        back again instead of mixing steps."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        args = ["--num_passes=2", "--checkpoint_every_steps=300"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        ps1, _, _ = self.kill_ps1_after_checkpoint(ps1, p1, step=300)
        # Both trainers back at 300 and stepping again (a step line written
        # after the recovery), well before the checkpoint of 600.
        self.assertTrue(wait_for(
            lambda: all(len(self.recoveries(k)) == 1 and
                        self.step_after_recovery(k) >= 320 for k in (0, 1)),
            120), self.trainer_log(0))
        self.assertFalse(os.path.isdir(
            os.path.join(self.job_ckpt(1), ckpt_dir_name(600))))
        ps1.kill()
        ps1.wait()
        time.sleep(1)  # down for a second: the trainers' calls fail and retry
        ps1, _ = self.start_ps(1, port=p1)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
            rec = self.recoveries(k)
            self.assertEqual([r["to_step"] for r in rec], [300, 300], rec)
            self.assertEqual(len(set(r["generation"] for r in rec)), 2)
            ev = final_eval(self.metrics(k), k)
            self.assertEqual(ev["step"], 2 * STEPS_PER_PASS)
            self.assertGreaterEqual(ev["test_accuracy"], 0.80)
        with open(os.path.join(self.job_ckpt(1), "GENERATION")) as f:
            self.assertEqual(int(f.read()), 2)
        self.stop(ps0, ps1)

    def test_async_pserver_killed_and_restarted(self):
        """Async: a pserver killed with SIGKILL and restarted resumes from
        its own newest checkpoint; the trainers never roll back."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        args = ["--mode=async", "--num_passes=2",
                "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        ps1, _, _ = self.kill_ps1_after_checkpoint(ps1, p1)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
            self.assertEqual(self.recoveries(k), [])
            ev = final_eval(self.metrics(k), k)
            self.assertEqual(ev["step"], 2 * STEPS_PER_PASS)
            self.assertGreaterEqual(ev["test_accuracy"], 0.78)
        self.assertIn("restored step", self.log(1))
        self.stop(ps0, ps1)

    def ctr_data(self):
        """gen_ctr_data's 200,000 training and 20,000 test records in tmp:
        (train path, test path, its summary with the true model's AUC)."""
        train = os.path.join(self.tmp, "train")
        test = os.path.join(self.tmp, "test")
        r = subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "gen_ctr_data"),
             "--train_out=" + train, "--test_out=" + test,
             "--num_train=200000", "--num_test=20000"],
            stdout=subprocess.PIPE, universal_newlines=True, check=True,
            timeout=120)
        return train, test, json.loads(r.stdout.strip().splitlines()[-1])

    def end_restored_ctr_job(self, trainers, truth, exact_recoveries):
        """Waits for the CTR job's trainers after pserver 1's restart: each
        recovered once (at least once unless `exact_recoveries`), and the
        job ends within 0.07 of the true model's AUC."""
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
            if exact_recoveries:
                self.assertEqual(len(self.recoveries(k)), 1)
            else:
                self.assertGreaterEqual(len(self.recoveries(k)), 1)
        ev = final_eval(self.metrics(0), 0)
        sys.stderr.write("[AUC %.4f after the restart, true model %.4f] " % (
            ev["test_auc"], truth["true_test_auc"]))
        self.assertGreaterEqual(ev["test_auc"], truth["true_test_auc"] - 0.07)
        self.assertRegex(self.log(1), r"restored step [1-9]")

    def test_sparse_pserver_killed_and_restarted(self):
        """A sparse CTR model (configs/ctr_lr.pbtxt, rows of a sparse
        table on the pservers): the restarted pserver restores its rows and
        their Adagrad state, the job rolls back and ends near the true
        model's AUC."""
        train, test, truth = self.ctr_data()
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        args = ["--config=" + os.path.join(testlib.REPO, "configs",
                                           "ctr_lr.pbtxt"),
                "--train_data=" + train, "--test_data=" + test,
                "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        ps1, _, _ = self.kill_ps1_after_checkpoint(ps1, p1)
        self.end_restored_ctr_job(trainers, truth, exact_recoveries=True)
        self.stop(ps0, ps1)

    def test_disk_tier_pserver_killed_and_restarted(self):
        """configs/ctr_lr.pbtxt with a disk tier of a 4 MiB cache
        (docs/sparse_memory.md, "Disk tier"): most rows live in RocksDB
        under --sparse_store_dir. Pserver 1 is killed with SIGKILL while it
        moves rows to and from disk; restarted with the same directory, it
        removes what its first life left there, restores its rows from the
        checkpoint onto disk, the job rolls back and ends near the true
        model's AUC."""
        train, test, truth = self.ctr_data()
        with open(os.path.join(testlib.REPO, "configs", "ctr_lr.pbtxt")) as f:
            config = f.read().replace(
                "sparse_input {", "sparse_input {\n  disk { cache_mb: 4 }", 1)
        config_path = os.path.join(self.tmp, "ctr_lr_disk.pbtxt")
        with open(config_path, "w") as f:
            f.write(config)
        store = os.path.join(self.tmp, "rows")
        extra = ["--sparse_store_dir=" + store]
        ps0, p0 = self.start_ps(0, extra=extra)
        ps1, p1 = self.start_ps(1, extra=extra)
        args = ["--config=" + config_path, "--train_data=" + train,
                "--test_data=" + test, "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        first = "pserver-%d" % ps1.pid
        self.assertTrue(wait_for(
            lambda: os.path.isdir(os.path.join(store, first)), 30))
        ps1, _, _ = self.kill_ps1_after_checkpoint(ps1, p1, extra=extra)
        self.end_restored_ctr_job(trainers, truth, exact_recoveries=False)
        self.assertIn("removed " + os.path.join(store, first), self.log(1))
        self.assertFalse(os.path.exists(os.path.join(store, first)))
        self.stop(ps0, ps1)
        written = [int(n) for n in re.findall(
            r"on disk \((\d+) written there", self.log(0))]
        self.assertTrue(written and written[-1] > 10000, self.log(0)[-3000:])
        self.assertNotRegex(self.log(0), r"[1-9]\d* disk errors")
        # Each pserver removes its own directory when it stops.
        self.assertEqual(os.listdir(store), [])

    def test_pserver_killed_while_writing_a_checkpoint(self):
        """Pserver 1 dies halfway through writing its second checkpoint
        (fault injection through the Env seam). The torn one is never
        loaded: after the restart the job goes back to step 100."""
        env = testlib.clean_env(SHARDPS_TEST_CHECKPOINT_FAULT="crash_mid_write:2")
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1, env=env)
        args = ["--num_passes=1", "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        self.assertEqual(self.wait_exit(ps1, 120, "pserver 1"), 1)
        leftovers = os.listdir(self.job_ckpt(1))
        self.assertIn(ckpt_dir_name(100), leftovers)
        self.assertIn(ckpt_dir_name(200) + ".tmp", leftovers)
        ps1, _ = self.start_ps(1, port=p1)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
            rec = self.recoveries(k)
            self.assertEqual([r["to_step"] for r in rec], [100])
            self.assertEqual(final_eval(self.metrics(k), k)["step"],
                             STEPS_PER_PASS)
        self.assertIn("restored step 100", self.log(1))
        self.stop(ps0, ps1)

    def test_pserver_killed_while_writing_a_delta(self):
        """With --full_checkpoint_every=3 the second checkpoint (step 200)
        is a delta on the first; pserver 1 dies halfway through writing it.
        After the restart the job goes back to the full checkpoint of step
        100, and its next checkpoint is full again."""
        env = testlib.clean_env(SHARDPS_TEST_CHECKPOINT_FAULT="crash_mid_write:2")
        extra = ["--full_checkpoint_every=3"]
        ps0, p0 = self.start_ps(0, extra=extra)
        ps1, p1 = self.start_ps(1, extra=extra, env=env)
        args = ["--num_passes=1", "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        self.assertEqual(self.wait_exit(ps1, 120, "pserver 1"), 1)
        leftovers = os.listdir(self.job_ckpt(1))
        self.assertIn(ckpt_dir_name(100), leftovers)
        self.assertIn(ckpt_dir_name(200) + ".tmp", leftovers)
        ps1, _ = self.start_ps(1, port=p1, extra=extra)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
            self.assertEqual([r["to_step"] for r in self.recoveries(k)],
                             [100])
            self.assertEqual(final_eval(self.metrics(k), k)["step"],
                             STEPS_PER_PASS)
        self.stop(ps0, ps1)
        r = subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_checkpoint"), "info",
             "--from", self.tmp], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        # Pserver 0's chain went on; pserver 1's started again with a full
        # checkpoint after the restart.
        self.assertIn("restored step 100", self.log(1))
        self.assertRegex(r.stdout, r"step %d: complete, 2 pserver\(s\)" %
                         STEPS_PER_PASS)

    def test_corrupted_checkpoint_and_final_checkpoint(self):
        """SIGTERM on a pserver writes a final checkpoint. A flipped byte in
        the newest checkpoint makes the restarted pserver skip it and load
        the one before, saying why."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        args = ["--max_steps=250", "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1)]
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 120, "trainer %d" % k), 0,
                             self.trainer_log(k))
        self.stop(ps0, ps1)
        self.assertIn("final checkpoint written", self.log(0))
        self.assertEqual(
            sorted(os.listdir(self.job_ckpt(0))),
            [ckpt_dir_name(200), ckpt_dir_name(250)])  # 2 kept
        blob = sorted(glob.glob(os.path.join(
            self.job_ckpt(0), ckpt_dir_name(250), "table-*.bin")))[0]
        with open(blob, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0x40]))
        ps0, p0 = self.start_ps(0)
        log = self.log(0)
        self.assertIn("restored step 200", log)
        self.assertIn("crc32", log)
        # tools/ps_status shows where it stands.
        r = subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_status"),
             "--pservers=127.0.0.1:%d" % p0], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("127.0.0.1:%d: sync, 2 trainers (live: 0,1), versions "
                      "200-200, generation 1 from step 200, checkpoints "
                      "[200]" % p0, r.stdout)
        self.assertIn(ckpt_dir_name(250) + ".damaged", os.listdir(self.job_ckpt(0)))
        self.stop(ps0)
        r = subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_status"),
             "--pservers=127.0.0.1:%d" % p0, "--timeout_s=1"],
            stdout=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unreachable", r.stdout)

    def test_trainer_killed_is_dropped(self):
        """Kill -9 one of two sync trainers with --trainer_timeout=5: the
        pservers drop it, name it in their logs, and the other one finishes
        its pass with accuracy above 0.78 and exits 0."""
        ps0, p0 = self.start_ps(0, extra=["--trainer_timeout=5"])
        ps1, p1 = self.start_ps(1, extra=["--trainer_timeout=5"])
        trainers = [self.start_trainer(k, [p0, p1], ["--num_passes=1"])
                    for k in (0, 1)]
        self.assertTrue(wait_for(lambda: self.last_step(1) >= 100, 60))
        trainers[1].kill()
        trainers[1].wait()
        start = time.monotonic()
        self.assertEqual(self.wait_exit(trainers[0], 120, "trainer 0"), 0,
                         self.trainer_log(0))
        ev = final_eval(self.metrics(0), 0)
        self.assertGreaterEqual(ev["test_accuracy"], 0.78)
        for i in (0, 1):
            self.assertRegex(self.log(i),
                             r"trainer 1 \(incarnation \d+\) said nothing for "
                             r"\d+s \(--trainer_timeout=5\): dropped")
        sys.stderr.write("[survivor finished %.1f s after the kill, accuracy "
                         "%.4f] " % (time.monotonic() - start,
                                     ev["test_accuracy"]))
        self.stop(ps0, ps1)

    def test_trainer_killed_and_restarted_rejoins(self):
        """A trainer killed and started again (a new incarnation) rejoins at
        the step the job has reached; both finish the pass."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        trainers = [self.start_trainer(k, [p0, p1], ["--num_passes=1"])
                    for k in (0, 1)]
        self.assertTrue(wait_for(lambda: self.last_step(1) >= 100, 60))
        trainers[1].kill()
        trainers[1].wait()
        time.sleep(0.5)  # away for a moment before it comes back
        trainers[1] = self.start_trainer(1, [p0, p1], ["--num_passes=1"],
                                         log_suffix="-again")
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 120, "trainer %d" % k), 0,
                             self.trainer_log(k))
        self.assertIn("rejoined", self.log(0))
        self.assertRegex(self.trainer_log(1, "-again"),
                         r"trainer 1 joins the job at step [1-9]\d*")
        self.assertEqual(final_eval(self.metrics(0), 0)["step"],
                         STEPS_PER_PASS)
        self.assertGreaterEqual(
            final_eval(self.metrics(0), 0)["test_accuracy"], 0.78)
        self.stop(ps0, ps1)

    def test_straggler_with_replicas_to_aggregate(self):
        """3 sync trainers with --replicas_to_aggregate=2: while trainer 2
        is stopped (SIGSTOP), the other two keep stepping; resumed, it
        catches up, its late pushes are dropped and counted, and all three
        finish."""
        extra = ["--num_gradient_servers=3"]
        ps0, p0 = self.start_ps(0, extra=extra)
        ps1, p1 = self.start_ps(1, extra=extra)
        # 2 passes: the other two cannot finish while trainer 2 is stopped.
        args = ["--num_gradient_servers=3", "--replicas_to_aggregate=2",
                "--num_passes=2"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1, 2)]
        self.assertTrue(wait_for(lambda: self.last_step(2) >= 50, 60))
        trainers[2].send_signal(signal.SIGSTOP)
        before = self.last_step(0)
        # No waiting for trainer 2: the others go on while it is stopped.
        self.assertTrue(wait_for(lambda: self.last_step(0) > before + 20, 60),
                        self.trainer_log(0))
        trainers[2].send_signal(signal.SIGCONT)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 120, "trainer %d" % k), 0,
                             self.trainer_log(k))
        self.stop(ps0, ps1)
        late = [int(x) for x in re.findall(
            r"(\d+) late block pushes dropped", self.log(0) + self.log(1))]
        self.assertTrue(late and sum(late) > 0, self.log(0)[-2000:])
        self.assertGreaterEqual(
            final_eval(self.metrics(0), 0)["test_accuracy"], 0.78)

    def checkpoint_steps(self, i):
        """Steps of pserver i's complete checkpoints of the default job."""
        try:
            names = os.listdir(self.job_ckpt(i))
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for m in
                      (re.fullmatch(r"ckpt-(\d{12})", n) for n in names) if m)

    def test_kofn_pserver_killed_and_restarted(self):
        """3 sync trainers with --replicas_to_aggregate=2 and a checkpoint
        every 100 steps: the units are at different versions, so the chief
        asks for one a little past the newest, and each pserver takes each
        unit when it gets there. Kill -9 pserver 1 after its second
        checkpoint and restart it: the job rolls back to a checkpoint both
        pservers hold, and all three trainers finish."""
        extra = ["--num_gradient_servers=3"]
        ps0, p0 = self.start_ps(0, extra=extra)
        ps1, p1 = self.start_ps(1, extra=extra)
        args = ["--num_gradient_servers=3", "--replicas_to_aggregate=2",
                "--num_passes=2", "--checkpoint_every_steps=100"]
        trainers = [self.start_trainer(k, [p0, p1], args) for k in (0, 1, 2)]
        self.assertTrue(wait_for(lambda: len(self.checkpoint_steps(1)) >= 2,
                                 120), self.trainer_log(0))
        ps1.kill()
        ps1.wait()
        time.sleep(1)
        ps1, _ = self.start_ps(1, port=p1, extra=extra)
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 240, "trainer %d" % k), 0,
                             self.trainer_log(k))
        self.stop(ps0, ps1)
        rec = self.recoveries(0)
        self.assertGreaterEqual(len(rec), 1, rec)
        # Rolled back to a checkpoint both pservers wrote, of a version
        # past the chief's step 100.
        to = rec[0]["to_step"]
        self.assertGreater(to, 100)
        self.assertIn("rolled back to step %d " % to, self.log(0))
        for i in (0, 1):
            self.assertIn("checkpoint of step %d written" % to, self.log(i))
        self.assertIn("restored step", self.log(1))
        self.assertNotIn("not a step boundary", self.log(0) + self.log(1))
        self.assertNotRegex(self.trainer_log(0),
                            r"checkpoint of step \d+ (failed|not taken)")
        for k in (0, 1, 2):
            self.assertGreaterEqual(
                final_eval(self.metrics(k), k)["test_accuracy"], 0.78)

    def test_a_finished_job_started_again_reports_its_parameters(self):
        """Trainers started again on the checkpoints of a job that ran all its
        steps train nothing and report the final parameters, with a line
        saying why, instead of an accuracy of 0."""
        ps = [self.start_ps(i) for i in range(2)]
        ports = [port for _, port in ps]
        trainers = [self.start_trainer(k, ports, ["--max_steps=60"])
                    for k in range(2)]
        for k, t in enumerate(trainers):
            self.assertEqual(self.wait_exit(t, 120, "trainer %d" % k), 0,
                             self.trainer_log(k))
        first = testlib.final_eval(self.metrics(0), 0)
        for p, _ in ps:  # final checkpoints at step 60
            p.send_signal(signal.SIGTERM)
            self.assertEqual(self.wait_exit(p, 30, "pserver"), 0)
        ps = [self.start_ps(i, port=ports[i]) for i in range(2)]
        again = [self.start_trainer(k, ports, ["--max_steps=60"], ".again")
                 for k in range(2)]
        for k, t in enumerate(again):
            self.assertEqual(self.wait_exit(t, 120, "trainer %d" % k), 0,
                             self.trainer_log(k, ".again"))
            self.assertIn("the job has run all its 60 steps already",
                          self.trainer_log(k, ".again"))
            last = testlib.final_eval(self.metrics(k), k)
            self.assertEqual((last["step"], last["final"]), (60, 1))
            self.assertEqual(last["test_loss"], first["test_loss"])
            self.assertEqual(last["test_accuracy"], first["test_accuracy"])

    def test_checkpoints_need_a_checkpoint_dir(self):
        """--checkpoint_every_steps against pservers without
        --checkpoint_dir stops the chief at start with one clear line."""
        ps0, port, _ = self.start_pserver("plain")
        r = subprocess.run(
            [testlib.trainer_bin(), "--pservers=127.0.0.1:%d" % int(port),
             "--config=" + testlib.CONFIG, "--max_steps=10",
             "--checkpoint_every_steps=5", "--progress=off",
             "--metrics_file=" + self.metrics(0)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, env=testlib.clean_env(), timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--checkpoint_every_steps needs every pserver started "
                      "with --checkpoint_dir; pserver 127.0.0.1:%d has none"
                      % int(port), r.stderr)
        self.stop(ps0)

    def test_a_failed_checkpoint_write_reaches_the_chief(self):
        """A checkpoint write that fails after the chief's request was taken
        (an injected EIO on the pserver's fsync, as a full or failing disk
        gives) is said in the chief's log at its next request, naming the
        pserver, the step and the folder, and in the pserver's /metrics;
        training goes on, and the next writes succeed."""
        env = testlib.clean_env(SHARDPS_TEST_CHECKPOINT_FAULT="fail_sync:2")
        ps, port, mport = self.start_monitored_ps(self.ckpt(0), env=env)
        r = subprocess.run(
            [testlib.trainer_bin(), "--pservers=127.0.0.1:%d" % port,
             "--num_gradient_servers=1", "--config=" + testlib.CONFIG,
             "--max_steps=60", "--checkpoint_every_steps=20",
             "--progress=off", "--metrics_file=" + self.metrics(0)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, env=testlib.clean_env(), timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:])
        self.assertRegex(
            r.stdout, r"a checkpoint was not written: pserver "
            r"127\.0\.0\.1:%d: .*checkpoint of step \d+ to %s.*injected "
            r"fault" % (port, re.escape(self.job_ckpt(0))))
        page = self.metrics_page(mport)
        self.assertIn('shardps_pserver_checkpoints_total{job_id="default",'
                      'result="failed"} 1', page)
        self.assertRegex(page, r'shardps_pserver_checkpoints_total\{'
                         r'job_id="default",result="ok"\} [1-9]')
        self.stop(ps)

    def fill(self, disk):
        """Writes a file on `disk` until the disk is full; returns its
        path."""
        filler = os.path.join(disk, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC, e)
        return filler

    def trainer_said(self, pattern):
        """The first match of `pattern` in trainer 0's log, or None."""
        return re.search(pattern, self.trainer_log(0))

    def check_the_failed_write_told(self, port, job, filled_at):
        """Waits for trainer 0 (the chief) to say that a checkpoint request
        was refused for want of room on pserver `port`, after the write
        that failed; checks which steps those were."""
        refused = (r"checkpoint of step (\d+) not taken: RESOURCE_EXHAUSTED: "
                   r"Checkpoint to pserver 127\.0\.0\.1:%d: %s has "
                   r"0\.\d\d MB free, and the last write "
                   r"needed \d+\.\d\d MB \(checkpoint of step (\d+) to "
                   r"%s: .*No space left on device\)" % (
                       port, re.escape(job), re.escape(job)))
        self.assertTrue(wait_for(lambda: self.trainer_said(refused), 60),
                        self.trainer_log(0))
        # The first request after the disk filled wrote and failed; a later
        # one says so: the next, or (a write still under way when the next
        # request came, on a loaded machine) the one after. The metrics
        # file the step is read from lags the trainer by a few steps: the
        # failed write may be the second or third interval after the step
        # read.
        first = self.trainer_said(refused)
        failed_write, told = int(first.group(2)), int(first.group(1))
        self.assertLessEqual(failed_write, filled_at + 75)
        self.assertIn(told - failed_write, (25, 50), first.group(0))

    def check_the_full_disk_counted(self, ps_metrics, trainer_metrics):
        """The failed write and the refusals on the pserver's /metrics, the
        failures on the trainer's."""
        self.assertGreaterEqual(self.metric(
            ps_metrics, 'shardps_pserver_checkpoints_total{job_id="default",'
            'result="failed"}'), 1)
        self.assertGreaterEqual(self.metric(
            ps_metrics, 'shardps_pserver_checkpoints_total{job_id="default",'
            'result="no_room"}'), 1)
        self.assertGreaterEqual(self.metric(
            trainer_metrics, 'shardps_trainer_checkpoint_failures_total'
            '{job_id="default",trainer_id="0"}'), 1)

    def check_checkpoints_taken_again(self, job):
        """Waits for the chief to say the pservers have room again, and for
        the checkpoint it names to be written under `job`."""
        self.assertTrue(wait_for(lambda: self.trainer_said(
            r"checkpoint of step \d+ taken: the pservers have room again"),
            60), self.trainer_log(0))
        taken = int(re.search(r"checkpoint of step (\d+) taken: the "
                              r"pservers have room again",
                              self.trainer_log(0)).group(1))
        self.assertTrue(wait_for(lambda: os.path.isdir(
            os.path.join(job, ckpt_dir_name(taken))), 60), os.listdir(job))

    def test_a_full_checkpoint_disk_reaches_the_chief(self):
        """A real full disk: the pserver's --checkpoint_dir on a tmpfs of
        its own, filled mid-job by another file. The failed write is said in
        the chief's log at its next request and counted on both /metrics;
        while the disk stays full each request is refused at once (nothing
        copied, nothing written) and said; training goes on; once the file
        is gone, checkpoints are taken again."""
        disk = self.small_disk("32m")
        ckpt = os.path.join(disk, "ckpt")
        trainer_metrics = os.path.join(self.tmp, "trainer.mport")
        ps, port, ps_metrics = self.start_monitored_ps(ckpt)
        trainer = self.start_trainer(
            0, [port], ["--num_gradient_servers=1", "--num_passes=100",
                        "--checkpoint_every_steps=25", "--monitoring_port=0",
                        "--monitoring_port_file=" + trainer_metrics])
        job = os.path.join(ckpt, "default")
        self.assertTrue(wait_for(lambda: os.path.isdir(
            os.path.join(job, ckpt_dir_name(50))), 120), self.trainer_log(0))

        filler = self.fill(disk)
        self.check_the_failed_write_told(port, job, self.last_step(0))
        self.check_the_full_disk_counted(ps_metrics, trainer_metrics)
        # Refused requests write nothing: the failed write's temporary
        # folder is gone, the older checkpoints stay.
        self.assertFalse([n for n in os.listdir(job) if "tmp" in n],
                         os.listdir(job))

        os.unlink(filler)
        self.check_checkpoints_taken_again(job)
        self.assertIsNone(trainer.poll(), self.trainer_log(0))
        self.stop(trainer, ps)

    def test_sigterm_on_trainer_leaves_the_job(self):
        """SIGTERM on a sync trainer: it leaves the job (the pservers say
        so) and the other trainer finishes without waiting for a timeout."""
        ps0, p0 = self.start_ps(0)
        ps1, p1 = self.start_ps(1)
        trainers = [self.start_trainer(k, [p0, p1], ["--num_passes=1"])
                    for k in (0, 1)]
        self.assertTrue(wait_for(lambda: self.last_step(1) >= 50, 60))
        trainers[1].send_signal(signal.SIGTERM)
        self.assertEqual(self.wait_exit(trainers[1], 10, "trainer 1"),
                         -signal.SIGTERM)
        self.assertEqual(self.wait_exit(trainers[0], 60, "trainer 0"), 0,
                         self.trainer_log(0))
        self.assertIn("trainer 1 left the job", self.log(0))
        self.assertIn("stopped by a signal", self.trainer_log(1))
        self.stop(ps0, ps1)


if __name__ == "__main__":
    testlib.main()
