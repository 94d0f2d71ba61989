#!/usr/bin/env python3
"""Sparse CTR models end to end: generated click data with a planted logistic
model (tools/gen_ctr_data: Zipf ids over 2^40, over a million distinct ids
in 300k samples), trained with configs/ctr_lr.pbtxt on 2 pservers and 2
trainers, and compared with the true model and with a plain single-process
Adagrad logistic regression (tools/lr_baseline); and the real heart_scale
file of Debian's liblinear-tools.

    python3 tests/ctr_test.py [--bin_dir build] [-k pattern]
"""

import json
import math
import os
import re
import subprocess
import sys

import testlib

REPO = testlib.REPO
CTR_LR = os.path.join(REPO, "configs", "ctr_lr.pbtxt")
HEART_SCALE = "/usr/share/doc/liblinear-tools/examples/heart_scale"


def tool(name):
    return os.path.join(testlib.BIN_DIR, "tools", name)


class CtrTest(testlib.ProcessTestCase):

    def generate(self):
        train = os.path.join(self.tmp, "train")
        test = os.path.join(self.tmp, "test")
        r = subprocess.run([tool("gen_ctr_data"), "--train_out=" + train,
                            "--test_out=" + test], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True, timeout=120)
        truth = json.loads(r.stdout.strip().splitlines()[-1])
        return train, test, truth

    def train(self, train, test, mode, extra=(), config=CTR_LR):
        r, summary = self.run_cluster(
            ["--pservers", "2", "--trainers", "2", "--config", config],
            ["--mode=" + mode, "--train_data=" + train,
             "--test_data=" + test] + list(extra), timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        evals = [testlib.final_eval(t["metrics_file"], t["id"])
                 for t in summary["trainers"]]
        for ev in evals:
            self.assertIn("test_auc", ev)
            self.assertIn("test_logloss", ev)
        self.assertEqual(evals[0]["test_auc"], evals[1]["test_auc"])
        # The optimizer settings each trainer adapted to the data
        # (sparse_input.adapt_optimizer_to_data): the same on both.
        adapted = []
        for t in summary["trainers"]:
            with open(t["log"]) as f:
                m = re.search(r"optimizer adapted to the training data "
                              r"\((\S+) features a record, click rate "
                              r"(\S+), (\S+) of features distinct\): "
                              r"learning rate \S+ -> (\S+), initial "
                              r"accumulator \S+ -> (\S+)", f.read())
            adapted.append(m.groups() if m else None)
        self.assertEqual(adapted[0], adapted[1])
        # None for a config without the option (ctr_dnn).
        self.statistics = adapted[0] and tuple(map(float, adapted[0][:3]))
        self.adapted = adapted[0] and adapted[0][3:]
        return evals[0]

    def baseline(self, train, test, batch_size):
        """tools/lr_baseline with the optimizer settings the last train()
        adapted configs/ctr_lr.pbtxt's to."""
        self.assertIsNotNone(self.adapted)
        lr, acc = self.adapted
        r = subprocess.run([tool("lr_baseline"), "--train=" + train,
                            "--test=" + test, "--batch_size=%d" % batch_size,
                            "--learning_rate=" + lr,
                            "--initial_accumulator=" + acc],
                           stdout=subprocess.PIPE, universal_newlines=True,
                           check=True, timeout=120)
        return json.loads(r.stdout)

    def test_ctr_lr_matches_truth_and_single_process_lr(self):
        train, test, truth = self.generate()
        self.assertGreaterEqual(truth["train_distinct_ids"], 1000000)
        self.assertEqual(truth["num_train"], 300000)
        sync = self.train(train, test, "sync")
        # The rule (trainer/optimizer_adaptation.h) on the statistics the
        # trainers logged (6 significant digits), which match the data's.
        f, c, u = self.statistics
        self.assertEqual(f, 20)  # the generator's default field count
        self.assertAlmostEqual(c, truth["train_ctr"], delta=1e-4)
        exact_u = truth["train_distinct_ids"] / (f * truth["num_train"])
        self.assertAlmostEqual(u / exact_u, 1, delta=0.03)  # the sketch's
        lr, acc = map(float, self.adapted)
        self.assertAlmostEqual(lr / (0.22 * math.sqrt(20 * 0.15 / (f * c))),
                               1, delta=1e-4)
        self.assertAlmostEqual(acc / (2e-5 * (u / 0.2) * (0.15 / c)), 1,
                               delta=1e-4)
        # gradient_mean STEP_TRAINERS (the config's): 2 trainers of 256
        # train as one process with batch 512, to float rounding (measured:
        # equal to 1e-7).
        one = self.baseline(train, test, 512)
        # KEY_PUSHERS (docs/design.md's mean): a key pushed by one trainer gets
        # that trainer's gradient, so the nearest single-process run is the
        # per-trainer batch.
        per_key = self.train(
            train, test, "sync",
            ["--config_set=sparse_input.gradient_mean=KEY_PUSHERS"])
        per_trainer = self.baseline(train, test, 256)
        async_ = self.train(train, test, "async")
        sys.stderr.write(
            "[true AUC %.4f; sync %.6f, single-process LR at 512 %.6f; "
            "per-key mean %.4f, at 256 %.4f; async %.4f; %d distinct ids] " %
            (truth["true_test_auc"], sync["test_auc"], one["test_auc"],
             per_key["test_auc"], per_trainer["test_auc"], async_["test_auc"],
             truth["train_distinct_ids"]))
        self.assertAlmostEqual(sync["test_auc"], one["test_auc"], delta=1e-5)
        self.assertGreaterEqual(sync["test_auc"],
                                truth["true_test_auc"] - 0.06)
        self.assertNotEqual(per_key["test_auc"], sync["test_auc"])
        self.assertLessEqual(
            abs(per_key["test_auc"] - per_trainer["test_auc"]), 0.01)
        self.assertGreaterEqual(async_["test_auc"],
                                truth["true_test_auc"] - 0.06)

    def test_ctr_dnn_per_field_embeddings(self):
        train = os.path.join(self.tmp, "dnn_train")
        test = os.path.join(self.tmp, "dnn_test")
        r = subprocess.run([tool("gen_ctr_data"), "--field_in_high_bits",
                            "--train_out=" + train, "--test_out=" + test],
                           stdout=subprocess.PIPE, universal_newlines=True,
                           check=True, timeout=120)
        truth = json.loads(r.stdout.strip().splitlines()[-1])
        ev = self.train(train, test, "sync",
                        config=os.path.join(REPO, "configs", "ctr_dnn.pbtxt"))
        sys.stderr.write("[ctr_dnn: AUC %.4f, true %.4f] " %
                         (ev["test_auc"], truth["true_test_auc"]))
        self.assertGreaterEqual(ev["test_auc"], truth["true_test_auc"] - 0.07)

    def test_heart_scale(self):
        if not os.path.exists(HEART_SCALE):
            self.skipTest(HEART_SCALE + " missing (apt-get install "
                          "liblinear-tools)")
        with open(HEART_SCALE) as f:
            lines = [l for l in f if l.strip()]
        self.assertEqual(len(lines), 270)
        train = os.path.join(self.tmp, "heart_train")
        test = os.path.join(self.tmp, "heart_test")
        with open(train, "w") as f:
            f.writelines(lines[:200])
        with open(test, "w") as f:
            f.writelines(lines[200:])
        ev = self.train(train, test, "sync",
                        ["--batch_size=10", "--num_passes=30"])
        sys.stderr.write("[heart_scale: accuracy %.3f, AUC %.3f] " %
                         (ev["test_accuracy"], ev["test_auc"]))
        self.assertGreaterEqual(ev["test_accuracy"], 0.75)
        self.assertGreaterEqual(ev["test_auc"], 0.85)


if __name__ == "__main__":
    testlib.main()
