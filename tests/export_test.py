#!/usr/bin/env python3
"""The exported model (docs/saved_model.md): configs/ctr_dnn.pbtxt trained on
2 pservers, its final checkpoint exported by `ps_checkpoint export`, and
scored by examples/serve_ctr.py with numpy only: the same test AUC as the
trainer's own evaluation, and the damage the readers refuse.

    python3 tests/export_test.py [--bin_dir build] [-v] [-k name]
"""

import json
import os
import signal
import subprocess
import sys

import testlib
from testlib import final_eval

CTR_CONFIG = os.path.join(testlib.REPO, "configs", "ctr_dnn.pbtxt")
SERVE = os.path.join(testlib.REPO, "examples", "serve_ctr.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else \
    sys.executable


class ExportTest(testlib.ProcessTestCase):

    def ps_checkpoint(self, *args):
        return subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_checkpoint")] +
            list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=300)

    def serve(self, model, data, *extra):
        r = subprocess.run([PYTHON, SERVE, "--model", model, "--data", data] +
                           list(extra), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def saved(self):
        """Where trainer 0 saves the model (--save_dir)."""
        return os.path.join(self.tmp, "saved")

    def train_ctr_dnn(self):
        """2 pservers with checkpoints, 2 trainers, 1 pass, trainer 0 with
        --save_dir; returns (checkpoint folder, test file, trainer 0's final
        eval)."""
        train = os.path.join(self.tmp, "train")
        test = os.path.join(self.tmp, "test")
        subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "gen_ctr_data"),
             "--field_in_high_bits", "--train_out=" + train,
             "--test_out=" + test, "--num_train=40000", "--num_test=10000"],
            stdout=subprocess.DEVNULL, check=True, timeout=120)
        ckpt = os.path.join(self.tmp, "ckpt")
        pservers = [self.start_pserver(
            "ps%d" % i, ["--checkpoint_dir=%s/ps-%d" % (ckpt, i)],
            num_trainers=2)[:2] for i in range(2)]
        ports = ",".join("127.0.0.1:%d" % port for _, port in pservers)
        metrics = os.path.join(self.tmp, "metrics-0.jsonl")
        trainers = []
        for k in range(2):
            log = os.path.join(self.tmp, "trainer-%d.log" % k)
            with open(log, "wb") as f:
                trainers.append((self.popen(
                    [testlib.trainer_bin(), "--pservers=" + ports,
                     "--trainer_id=%d" % k, "--num_gradient_servers=2",
                     "--config=" + CTR_CONFIG, "--train_data=" + train,
                     "--test_data=" + test, "--progress=off",
                     "--metrics_file=" + os.path.join(
                         self.tmp, "metrics-%d.jsonl" % k)] +
                    (["--save_dir=" + self.saved()] if k == 0 else []),
                    stdout=f, stderr=subprocess.STDOUT), log))
        for t, log in trainers:
            rc = t.wait(300)
            with open(log, errors="replace") as f:
                self.assertEqual(rc, 0, f.read()[-3000:])
        for p, _ in pservers:  # final checkpoints
            p.send_signal(signal.SIGTERM)
        for p, _ in pservers:
            self.assertEqual(p.wait(60), 0)
        return ckpt, test, final_eval(metrics, 0)

    def test_exported_ctr_dnn_scores_as_the_trainer_evaluates(self):
        ckpt, test, ev = self.train_ctr_dnn()
        out = os.path.join(self.tmp, "model")
        r = self.ps_checkpoint("export", "--from", ckpt, "--out", out,
                               "--config", CTR_CONFIG)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"4 dense table\(s\), 10369 values; "
                         r"1 sparse table\(s\), \d+ rows")
        self.assertEqual(sorted(os.listdir(out)),
                         ["model.pbtxt", "params.bin",
                          "sparse-embeddings.bin"])
        got = self.serve(out, test)
        sys.stderr.write("[trainer AUC %.7f, exported %.7f; log loss %.6f, "
                         "%.6f] " % (ev["test_auc"], got["auc"],
                                     ev["test_logloss"], got["logloss"]))
        self.assertEqual(got["records"], 10000)
        self.assertAlmostEqual(got["auc"], ev["test_auc"], delta=1e-6)
        self.assertAlmostEqual(got["logloss"], ev["test_logloss"], delta=1e-5)

        # trainer --save_dir wrote the same model, sparse table included,
        # from the pservers' rows at the last step.
        self.assertEqual(sorted(os.listdir(self.saved())),
                         ["model.pbtxt", "params.bin",
                          "sparse-embeddings.bin"])
        for name in ("params.bin", "sparse-embeddings.bin"):
            with open(os.path.join(out, name), "rb") as a, \
                    open(os.path.join(self.saved(), name), "rb") as b:
                self.assertTrue(a.read() == b.read(), name)
        saved = self.serve(self.saved(), test)
        self.assertAlmostEqual(saved["auc"], ev["test_auc"], delta=1e-6)

        # Half precision: half the bytes of each value (keys stay 8),
        # nearly the same AUC.
        half = os.path.join(self.tmp, "model16")
        r = self.ps_checkpoint("export", "--from", ckpt, "--out", half,
                               "--fp16")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertLess(
            os.path.getsize(os.path.join(half, "sparse-embeddings.bin")),
            0.61 * os.path.getsize(os.path.join(out, "sparse-embeddings.bin")))
        got16 = self.serve(half, test)
        self.assertAlmostEqual(got16["auc"], ev["test_auc"], delta=2e-3)

        # Refused: an existing folder; a damaged table, naming the file.
        r = self.ps_checkpoint("export", "--from", ckpt, "--out", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists", r.stderr)
        table = os.path.join(out, "sparse-embeddings.bin")
        with open(table, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 1]))
        r = subprocess.run([PYTHON, SERVE, "--model", out, "--data", test],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(table + ": checksum mismatch", r.stderr)


if __name__ == "__main__":
    testlib.main()
