#!/usr/bin/env python3
"""Checkpoints that move with the job (docs/fault_tolerance.md, "Restoring
onto other pservers"): a sync job stopped after some steps and started
again on another number of pservers, resharded offline (tools/ps_checkpoint
reshard) or at start (pserver --restore_from), ends exactly as a job that
was never stopped: the same final test AUC and log loss, or accuracy and
loss, to the last digit.

    python3 tests/reshard_test.py [--bin_dir build] [-v] [-k name]
"""

import os
import signal
import subprocess
import sys

import testlib
from testlib import final_eval

CTR_CONFIG = os.path.join(testlib.REPO, "configs", "ctr_dnn.pbtxt")


class ReshardTest(testlib.ProcessTestCase):

    def start_pservers(self, name, n, extra_of=lambda i: []):
        """Starts n pservers named NAME-i; returns [(popen, port)]."""
        out = []
        for i in range(n):
            p, port, _ = self.start_pserver("%s-%d" % (name, i),
                                            extra_of(i), num_trainers=2)
            out.append((p, port))
        return out

    def stop(self, pservers):
        """SIGTERM: each writes its final checkpoint."""
        for p, _ in pservers:
            p.send_signal(signal.SIGTERM)
        for p, _ in pservers:
            self.assertEqual(p.wait(60), 0)

    def train(self, name, pservers, args):
        """Runs 2 trainers against `pservers` to the end; returns trainer 0's
        final eval line."""
        ports = ",".join("127.0.0.1:%d" % port for _, port in pservers)
        trainers = []
        for k in range(2):
            log = os.path.join(self.tmp, "%s-trainer-%d.log" % (name, k))
            with open(log, "wb") as f:
                trainers.append((self.popen(
                    [testlib.trainer_bin(), "--pservers=" + ports,
                     "--trainer_id=%d" % k, "--num_gradient_servers=2",
                     "--progress=off", "--rpc_retry_s=60",
                     "--metrics_file=" + self.metrics(name, k)] + list(args),
                    stdout=f, stderr=subprocess.STDOUT), log))
        for t, log in trainers:
            rc = t.wait(600)
            with open(log, errors="replace") as f:
                self.assertEqual(rc, 0, f.read()[-4000:])
        return final_eval(self.metrics(name, 0), 0)

    def run_job(self, name, n, args, extra_of=lambda i: []):
        """Starts n pservers NAME-i (pserver i given extra_of(i)), trains 2
        trainers with `args` on them to the end and stops them; returns
        trainer 0's final eval line."""
        pservers = self.start_pservers(name, n, extra_of)
        end = self.train(name, pservers, args)
        self.stop(pservers)
        return end

    def metrics(self, name, k):
        return os.path.join(self.tmp, "%s-metrics-%d.jsonl" % (name, k))

    def ps_checkpoint(self, *args, env=None):
        r = subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_checkpoint")] +
            list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=300, env=env)
        return r

    def reshard_and_start(self, name, source, to, n, m):
        """Reshards the job checkpoint of n pservers in `source` onto m at
        `to` (ps_checkpoint reshard), and starts m pservers NAME-i on it;
        returns them."""
        r = self.ps_checkpoint("reshard", "--from", source, "--to", to,
                               "--pservers", str(m))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("from %d pserver(s) to %d" % (n, m), r.stdout)
        return self.start_pservers(
            name, m, lambda i: ["--checkpoint_dir=%s/pserver-%d" % (to, i)])

    def ctr_args(self):
        if not hasattr(self, "_ctr"):
            train = os.path.join(self.tmp, "train")
            test = os.path.join(self.tmp, "test")
            subprocess.run(
                [os.path.join(testlib.BIN_DIR, "tools", "gen_ctr_data"),
                 "--field_in_high_bits", "--train_out=" + train,
                 "--test_out=" + test, "--num_train=40000",
                 "--num_test=10000"], stdout=subprocess.DEVNULL, check=True,
                timeout=120)
            self._ctr = ["--config=" + CTR_CONFIG, "--train_data=" + train,
                         "--test_data=" + test]
        return self._ctr

    def assertSameEnd(self, got, want, keys):
        self.assertEqual(got["step"], want["step"])
        for k in keys:
            self.assertEqual(got[k], want[k], "%s: %r != %r" % (
                k, got[k], want[k]))

    def check_a_delta_chain(self, ckpt2):
        """Pserver two-0 wrote the final checkpoint, of step 156, and
        `ckpt2` holds a full checkpoint at step 50 and deltas on it."""
        with open(os.path.join(self.tmp, "two-0.log")) as f:
            self.assertIn("checkpoint of step 156 written", f.read())
        info = self.ps_checkpoint("info", "--from", ckpt2)
        self.assertEqual(info.returncode, 0, info.stdout + info.stderr)
        for step, kind in ((50, "full"), (100, "delta on step 50"),
                           (156, "delta on step 150")):
            self.assertRegex(info.stdout, r"step %d: complete, 2 pserver\(s\)"
                             r", [0-9.]+ MB, %s," % (step, kind))

    def check_job_manifests(self, ckpt3):
        """The last pserver to write each step wrote its job manifest;
        those of steps removed by retention went with them."""
        self.assertEqual(sorted(os.listdir(os.path.join(ckpt3, "default"))),
                         ["JOB-000000000150", "JOB-000000000156"])
        info = self.ps_checkpoint("info", "--from", ckpt3)
        self.assertIn("step 156: complete, 3 pserver(s)", info.stdout)
        self.assertIn(", full, ", info.stdout)
        self.assertIn("job manifest " + os.path.join(
            ckpt3, "default", "JOB-000000000156"), info.stdout)

    # Tests --------------------------------------------------------------

    def test_ctr_dnn_two_to_three_offline_and_three_to_two_at_start(self):
        """configs/ctr_dnn.pbtxt (a sparse table with Adagrad, an MLP with
        Adam): 2 passes, stop, the third pass on another number of pservers;
        the end equals 3 uninterrupted passes on 2 pservers."""
        args = self.ctr_args()
        ref = self.run_job("ref", 2, args + ["--num_passes=3"])
        keys = ("test_auc", "test_loss")
        sys.stderr.write("[3 passes: AUC %.6f, log loss %.6f] " % (
            ref["test_auc"], ref["test_loss"]))

        # 2 -> 3, offline, from a chain of deltas: checkpoints at steps 50
        # (full), 100, 150 and the final 156 (deltas).
        ckpt2 = os.path.join(self.tmp, "ckpt2")
        self.run_job("two", 2, args + ["--num_passes=2",
                                       "--checkpoint_every_steps=50"],
                     lambda i: ["--checkpoint_dir=%s/ps-%d" % (ckpt2, i),
                                "--full_checkpoint_every=4"])
        self.check_a_delta_chain(ckpt2)
        to3 = os.path.join(self.tmp, "to3")
        three = self.reshard_and_start("three", ckpt2, to3, 2, 3)
        end = self.train("three", three, args + ["--num_passes=3"])
        self.assertSameEnd(end, ref, keys)

        self.stop(three)

        # 3 -> 2, at start: a job of 3 pservers writing to one shared
        # folder, stopped after 2 passes, restored onto 2 new pservers by
        # --restore_from.
        ckpt3 = os.path.join(self.tmp, "ckpt3")
        self.run_job("first3", 3, args + ["--num_passes=2",
                                          "--checkpoint_every_steps=50"],
                     lambda i: ["--checkpoint_dir=%s/ps-%d" % (ckpt3, i),
                                "--shared_checkpoint_root=" + ckpt3])
        self.check_job_manifests(ckpt3)
        two = self.start_pservers(
            "again", 2, lambda i: [
                "--checkpoint_dir=%s/again-%d" % (self.tmp, i),
                "--restore_from=" + ckpt3])
        end = self.train("again", two, args + ["--num_passes=3"])
        self.assertSameEnd(end, ref, keys)
        with open(os.path.join(self.tmp, "again-1.log")) as f:
            self.assertRegex(f.read(), r"restored step 156 as pserver 1 of 2 "
                             r"from the checkpoint of 3 pserver\(s\)")
        self.stop(two)

    def test_mlp_three_to_two_at_start_and_two_to_three_offline(self):
        """The MLP (dense tables only): 3 pservers for 150 steps, then 2
        pservers from --restore_from to step 300; equals 300 steps on 2.
        Those 2 pservers' final checkpoint resharded offline onto 3, which
        go on to step 450: equals 450 steps on 2. The same checkpoints
        given in another order are refused."""
        refs = {}
        for steps in (300, 450):
            refs[steps] = self.run_job("ref%d" % steps, 2,
                                       ["--config=" + testlib.CONFIG,
                                        "--max_steps=%d" % steps])
        ref = refs[300]
        # A shared folder, and a job that ends on a checkpoint step: step
        # 150 is written again at the end (with the trainers gone), and its
        # job manifest with it.
        ckpt3 = os.path.join(self.tmp, "ckpt3")
        self.run_job("three", 3, ["--config=" + testlib.CONFIG,
                                  "--max_steps=150",
                                  "--checkpoint_every_steps=50"],
                     lambda i: ["--checkpoint_dir=%s/ps-%d" % (ckpt3, i),
                                "--shared_checkpoint_root=" + ckpt3])
        info = self.ps_checkpoint("info", "--from", ckpt3)
        self.assertIn("step 150: complete, 3 pserver(s)", info.stdout)
        self.assertIn("JOB-000000000150", info.stdout)
        ckpt2 = os.path.join(self.tmp, "ckpt2")
        two = self.start_pservers(
            "two", 2, lambda i: ["--checkpoint_dir=%s/two-%d" % (ckpt2, i),
                                 "--restore_from=" + ckpt3])
        end = self.train("two", two, ["--config=" + testlib.CONFIG,
                                      "--max_steps=300"])
        self.assertSameEnd(end, ref, ("test_accuracy", "test_loss"))
        self.stop(two)

        # 2 -> 3, offline, from the final checkpoint of step 300; a first
        # run killed (_exit) in the middle of writing its second pserver
        # leaves nothing that looks whole, and the next run replaces it.
        to3 = os.path.join(self.tmp, "to3")
        env = dict(testlib.clean_env(),
                   SHARDPS_TEST_CHECKPOINT_FAULT="crash_mid_write:2")
        r = self.ps_checkpoint("reshard", "--from", ckpt2, "--to", to3,
                               "--pservers", "3", env=env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(to3))
        info = self.ps_checkpoint("info", "--from", to3 + ".tmp")
        self.assertNotEqual(info.returncode, 0)
        self.assertIn("incomplete: step 300: no shard 1, 2 of 3\n"
                      "no complete checkpoint of job default under " + to3 +
                      ".tmp", info.stdout + info.stderr)
        three = self.reshard_and_start("again3", ckpt2, to3, 2, 3)
        end = self.train("again3", three, ["--config=" + testlib.CONFIG,
                                           "--max_steps=450"])
        self.assertSameEnd(end, refs[450], ("test_accuracy", "test_loss"))
        self.stop(three)

        self.check_swapped_order_refused(ckpt2)

    def check_swapped_order_refused(self, ckpt2):
        """The checkpoints of 2 pservers in `ckpt2` given to the trainers in
        the other order: the chief is told, rather than training on
        misplaced blocks."""
        swapped = self.start_pservers(
            "swapped", 2,
            lambda i: ["--checkpoint_dir=%s/two-%d" % (ckpt2, 1 - i)])
        r = subprocess.run(
            [testlib.trainer_bin(), "--pservers=" + ",".join(
                "127.0.0.1:%d" % port for _, port in swapped),
             "--trainer_id=0", "--num_gradient_servers=2",
             "--config=" + testlib.CONFIG, "--max_steps=310",
             "--rpc_retry_s=5", "--metrics_file=" + self.metrics("sw", 0)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=120, env=testlib.clean_env())
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("holds shard 1 of 2 of the job, and the chief places "
                      "it as pserver 0 of 2", r.stdout)
        self.stop(swapped)


if __name__ == "__main__":
    testlib.main()
