#!/usr/bin/env python3
"""scripts/sweep/sweep.py: its search space, stopping rule and leaderboard
(scripts/sweep/sweep_space.py, imported), and whole sweeps of short
Fashion-MNIST trials on pservers it starts: a diverging trial stopped early,
the outputs, an interrupted sweep resumed, another sweep refused in the same
folder, bad arguments, trials that all fail.

    python3 tests/sweep_test.py [--bin_dir build] [-k pattern]

The sweeps run under /usr/bin/python3 (Debian's matplotlib draws
curves.png); without matplotlib there, the PNG is not checked. About 30 s
on 2 cores.
"""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import testlib
from testlib import clean_env, wait_for

sys.path.insert(0, os.path.join(testlib.REPO, "scripts", "sweep"))
import sweep_space  # noqa: E402
from sweep_space import SpaceError  # noqa: E402

SCRIPT = os.path.join(testlib.REPO, "scripts", "sweep", "sweep.py")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) \
    else sys.executable
HAS_MATPLOTLIB = subprocess.run(
    [PYTHON, "-c", "import matplotlib"], stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL).returncode == 0
MLP = os.path.join(testlib.REPO, "configs", "fmnist_mlp.pbtxt")


class SpaceTest(unittest.TestCase):
    def test_grid_names_values_and_kinds(self):
        p = sweep_space.parse_grid("optimizer.learning_rate=0.1, 0.2")
        self.assertEqual((p.kind, p.target, p.values),
                         ("config", "optimizer.learning_rate", ["0.1", "0.2"]))
        p = sweep_space.parse_grid("--batch_size=32,64")
        self.assertEqual((p.kind, p.target), ("flag", "batch_size"))
        p = sweep_space.parse_grid("config:batch_size=32")
        self.assertEqual((p.kind, p.target), ("config", "batch_size"))
        p = sweep_space.parse_grid("flag:compression=none,threshold")
        self.assertEqual((p.kind, p.target), ("flag", "compression"))

    def test_bad_dimensions_are_refused(self):
        for text, error in [
                ("learning_rate", "not NAME=VALUES"),
                ("lr=", "not NAME=VALUES"),
                ("lr=1,,2", "an empty value"),
                ("lr=1,1", "a value given twice"),
                ("job_id=a,b", "the sweep sets --job_id itself"),
                ("config_set=a,b", "the sweep sets --config_set itself"),
                ("bad name!=1", "not a trainer flag name or a config path")]:
            with self.assertRaisesRegex(SpaceError, error, msg=text):
                sweep_space.parse_grid(text)
        for text, error in [
                ("lr=normal:0:1", "must be one of uniform, loguniform"),
                ("lr=uniform:1", "two numbers"),
                ("lr=uniform:2:1", "LOW < HIGH"),
                ("lr=uniform:0:inf", "LOW < HIGH, both finite"),
                ("lr=loguniform:0:1", "LOW > 0"),
                ("lr=choice:", "needs values")]:
            with self.assertRaisesRegex(SpaceError, error, msg=text):
                sweep_space.parse_sample(text)

    def test_trials_are_the_grid_times_the_samples_in_a_seeded_order(self):
        grid = [sweep_space.parse_grid("a.x=1,2,3"),
                sweep_space.parse_grid("b=p,q")]
        samples = [sweep_space.parse_sample("c.y=loguniform:1e-3:1"),
                   sweep_space.parse_sample("n=intuniform:1:5")]
        trials = sweep_space.make_trials(grid, samples, 2, seed=7)
        self.assertEqual(len(trials), 12)
        self.assertEqual(trials, sweep_space.make_trials(grid, samples, 2, 7))
        self.assertNotEqual(trials,
                            sweep_space.make_trials(grid, samples, 2, 8))
        self.assertEqual(sorted({(t["a.x"], t["b"]) for t in trials}),
                         [(x, y) for x in "123" for y in "pq"])
        for t in trials:
            self.assertTrue(1e-3 <= float(t["c.y"]) <= 1)
            self.assertIn(t["n"], ["1", "2", "3", "4", "5"])
        with self.assertRaisesRegex(SpaceError, "needs a --sample"):
            sweep_space.make_trials(grid, [], 2, 1)
        self.assertEqual(sweep_space.make_trials([], [], 1, 1), [{}])
        with self.assertRaisesRegex(SpaceError, "given twice"):
            sweep_space.make_trials(grid + grid[:1], [], 1, 1)

    def test_trial_arguments(self):
        space = [sweep_space.parse_grid("batch_size=32"),
                 sweep_space.parse_grid("optimizer.learning_rate=0.1"),
                 sweep_space.parse_grid("layers[0].output_dim+layers[2]."
                                        "output_dim=64")]
        args = sweep_space.trial_args(space, {
            "batch_size": "32", "optimizer.learning_rate": "0.1",
            "layers[0].output_dim+layers[2].output_dim": "64"})
        self.assertEqual(args, [
            "--batch_size=32",
            "--config_set=layers[0].output_dim=64,layers[2].output_dim=64,"
            "optimizer.learning_rate=0.1"])
        with self.assertRaisesRegex(SpaceError, "cannot hold a comma"):
            sweep_space.trial_args(
                [sweep_space.parse_sample("data.train_images=choice:a,b")],
                {"data.train_images": "a,b"})

    def test_median_stopping_rule(self):
        good = [(100, 2.0), (200, 1.0), (300, 0.5)]
        fair = [(100, 2.0), (200, 1.5), (300, 1.2)]
        bad = [(100, 2.3), (200, 2.3)]
        stop = sweep_space.should_stop
        # Worse than the median of the others at 200 samples (1.0, 1.5).
        self.assertIn("worse than the median 1.25 of 2 other trials",
                      stop(bad, [good, fair], 0.5, 0.1, 2))
        self.assertIsNone(stop(bad, [good, fair], 0.05, 0.1, 2))  # grace
        self.assertIsNone(stop(bad, [good], 0.5, 0.1, 2))  # one reference
        self.assertIsNone(stop(bad, [good, [(100, 0.1)]], 0.5, 0.1, 2),
                          "a trial behind this one is no reference")
        self.assertIsNone(stop(good[:2], [fair, bad], 0.5, 0.1, 2))
        # Its best counts, not its last value.
        self.assertIsNone(stop([(100, 1.0), (200, 2.3)], [good, fair], 0.5,
                               0.1, 2))
        # A diverged trial is worse than anything, even a diverged median.
        self.assertIsNotNone(stop([(100, float("nan")), (200, math.inf)],
                                  [good, fair], 0.5, 0.1, 2))
        # The others' first window diverging does not shield it.
        spiky = [(100, 1e9), (200, 1.1)]
        self.assertIsNotNone(stop(bad, [spiky, fair], 0.5, 0.1, 2))

    def test_training_note_flags_runs_that_did_not_learn(self):
        note = sweep_space.training_note
        self.assertIsNone(note([(10, 2.3), (20, 1.0), (30, 0.6)]))
        self.assertIsNone(note([]))
        self.assertIsNone(note([(10, 2.3)]))  # one window says nothing
        # Noise around a low loss is not divergence.
        self.assertIsNone(note([(10, 2.3), (20, 0.3), (30, 0.5)]))
        self.assertRegex(note([(10, 2.1), (20, 2.3), (30, 2.3026)]),
                         r"^no progress: train loss 2\.303 at the end, 2\.1 ")
        self.assertRegex(note([(10, 2.3), (20, 0.4), (30, 1.5)]),
                         r"^diverged: train loss 1\.5 at the end, 0\.4 at ")
        self.assertRegex(note([(10, 2.3), (20, float("nan"))]),
                         r"^diverged: train loss nan at the end")
        # Not caught: a first window that blew up, then a loss stuck at a
        # constant guess's (the rule knows no chance level).
        self.assertIsNone(note([(10, 1e9), (20, 2.3), (30, 2.31)]))
        board = sweep_space.leaderboard([
            {"id": 0, "params": {"lr": "9"}, "status": "done", "steps": 3,
             "why": note([(10, 2.1), (20, 2.3)]),
             "final": {"test_accuracy": 0.1}}], "test_accuracy")
        self.assertTrue(board[1].endswith("lr=9  [no progress]"), board[1])

    def test_rank_and_leaderboard(self):
        trials = [
            {"id": 0, "params": {"lr": "1"}, "status": "done", "steps": 5,
             "final": {"test_accuracy": 0.5, "test_loss": 0.9}},
            {"id": 1, "params": {"lr": "2"}, "status": "stopped", "steps": 1,
             "final": {"test_accuracy": 0.9, "test_loss": 0.1}},
            {"id": 2, "params": {"lr": "3"}, "status": "done", "steps": 5,
             "final": {"test_accuracy": 0.8, "test_loss": 0.3}},
            {"id": 3, "params": {"lr": "4"}, "status": "failed", "steps": 0},
        ]
        self.assertEqual([t["id"] for t in sweep_space.rank(
            trials, "test_accuracy")], [2, 0, 1, 3])
        self.assertEqual([t["id"] for t in sweep_space.rank(
            trials, "test_loss")], [2, 0, 1, 3])
        board = sweep_space.leaderboard(trials, "test_accuracy")
        self.assertIn("rank", board[0])
        self.assertRegex(board[1], r"^1 +2 +done +0\.8000 +5/\? +lr=3$")


class SweepStateTest(unittest.TestCase):
    def test_a_changed_config_file_is_another_sweep(self):
        """Resuming compares the config file's contents, not only its
        path: a sweep folder never mixes trials of two configs."""
        import argparse
        import shutil
        import sweep
        from cluster_processes import UsageError
        tmp = tempfile.mkdtemp(prefix="shardps-sweep-state-")
        self.addCleanup(shutil.rmtree, tmp)
        config = os.path.join(tmp, "model.pbtxt")
        shutil.copy(MLP, config)
        args = argparse.Namespace(
            config=config, out_dir=os.path.join(tmp, "out"), grid=["a=1"],
            sample=[], samples=1, seed=1, extra=[], trainers_per_trial=1,
            params=[{"a": "1"}])
        sweep.Sweep(args).load_or_create()
        sweep.Sweep(args).load_or_create()  # the same: resumes
        with open(config, "a") as f:
            f.write("batch_size: 32\n")
        with self.assertRaisesRegex(UsageError, "holds another sweep"):
            sweep.Sweep(args).load_or_create()


class SweepRunTest(testlib.ProcessTestCase):
    def sweep(self, out, args, trainer_args=("--max_steps=150",),
              timeout=120, wait=True):
        argv = ([PYTHON, SCRIPT, "--bin_dir", testlib.BIN_DIR, "--config",
                 MLP, "--out_dir", out] + list(args) + ["--"] +
                list(trainer_args))
        p = self.popen(argv, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True,
                       env=clean_env())
        if not wait:
            return p
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err

    def state(self, out):
        with open(os.path.join(out, "sweep.json")) as f:
            return json.load(f)

    def test_a_diverging_trial_is_stopped_and_the_results_written(self):
        out = os.path.join(self.tmp, "lr")
        # One at a time, so that the trials after the first two always have
        # two references; learning rate 20 diverges.
        rc, stdout, err = self.sweep(out, [
            "--grid", "optimizer.learning_rate=0.02,0.05,0.1,20",
            "--parallel", "1", "--seed", "3"])
        self.assertEqual(rc, 0, err[-2000:])
        trials = {t["params"]["optimizer.learning_rate"]: t
                  for t in self.state(out)["trials"]}
        order = sorted(trials.values(), key=lambda t: t["id"])
        self.assertNotIn(trials["20"], order[:2],
                         "seed 3 must not put the diverging trial first")
        self.assertEqual(trials["20"]["status"], "stopped", stdout)
        self.assertLess(trials["20"]["steps"], 150)
        self.assertIn("worse than the median", trials["20"]["why"])
        for lr in ("0.02", "0.05", "0.1"):
            self.assertEqual(trials[lr]["status"], "done", stdout)
            self.assertGreater(trials[lr]["final"]["test_accuracy"], 0.6)
        self.assertRegex(stdout, r"sweep: 4 trials: 3 done, 1 stopped early, "
                         r"0 failed; \d+ of 600 trial-steps run \(\d+% saved\)")
        self.assertIn("sweep: best trial", stdout)
        self.assertIn("rank trial status", stdout)  # the leaderboard
        with open(os.path.join(out, "trials.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([r["status"] for r in rows],
                         ["done", "done", "done", "stopped"])
        best = max(trials[lr]["final"]["test_accuracy"]
                   for lr in ("0.02", "0.05", "0.1"))
        self.assertAlmostEqual(float(rows[0]["test_accuracy"]), best)
        with open(os.path.join(out, "evals.csv")) as f:
            evals = list(csv.DictReader(f))
        self.assertEqual(len([e for e in evals if e["final"] == "1"]), 3)
        self.assertEqual(evals[0]["optimizer.learning_rate"],
                         order[0]["params"]["optimizer.learning_rate"])
        if HAS_MATPLOTLIB:
            with open(os.path.join(out, "curves.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Its own pservers were given a token, and stopped at the end.
        self.assertTrue(os.path.exists(os.path.join(out, "pservers",
                                                    "auth_token")))
        self.assertNotIn("no --auth_token_file", err)

    def test_an_interrupted_sweep_resumes(self):
        out = os.path.join(self.tmp, "resume")
        args = ["--grid", "optimizer.learning_rate=0.02,0.05,0.1",
                "--parallel", "1", "--early_stopping", "none"]
        p = self.sweep(out, args, trainer_args=["--max_steps=400"],
                       wait=False)

        def first_done():
            try:
                trials = self.state(out)["trials"]
            except (OSError, ValueError):
                return False
            return (any(t["status"] == "done" for t in trials) and
                    any(t["status"] == "running" for t in trials))

        self.assertTrue(wait_for(first_done, 60))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err[-2000:])
        self.assertIn("run the same command to resume", err)
        before = {t["id"]: t for t in self.state(out)["trials"]}
        self.assertFalse(any(t["status"] == "running"
                             for t in before.values()))
        rc, stdout, err = self.sweep(out, args,
                                     trainer_args=["--max_steps=400"])
        self.assertEqual(rc, 0, err[-2000:])
        self.assertRegex(stdout, r"resuming: [12] of 3 trials ended before")
        after = {t["id"]: t for t in self.state(out)["trials"]}
        for tid, t in after.items():
            self.assertEqual(t["status"], "done")
            if before[tid]["status"] == "done":
                self.assertEqual(t["attempt"], 1, "kept, not run again")
                self.assertEqual(t["final"], before[tid]["final"])
        self.assertTrue(any(t["attempt"] == 2 for t in after.values()),
                        "the interrupted trial starts again")
        # Another sweep is refused in the same folder.
        rc, _, err = self.sweep(out, ["--grid",
                                      "optimizer.learning_rate=0.3"])
        self.assertEqual(rc, 2)
        self.assertIn("holds another sweep", err)

    def test_trials_wait_for_a_free_job_place(self):
        """Pservers that hold one job besides `default` at a time: a trial
        refused (RESOURCE_EXHAUSTED, --max_jobs) waits and runs once the
        other trial's job is freed."""
        out = os.path.join(self.tmp, "full")
        rc, stdout, err = self.sweep(out, [
            "--grid", "optimizer.learning_rate=0.02,0.05", "--parallel", "2",
            "--pserver_args=--max_jobs=2 --job_retention=1"],
            trainer_args=["--max_steps=50"])
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("waits for a free job place on the pservers", stdout)
        self.assertIn("sweep: 2 trials: 2 done", stdout)
        self.assertEqual([t["attempt"] for t in self.state(out)["trials"]],
                         [1, 1])

    def k8s_sweep(self, out, grid, trainer_args, extra=()):
        ports = [self.start_pserver("ps%d" % i, num_trainers=0)[1]
                 for i in range(2)]
        template = os.path.join(self.tmp, "job.yaml")
        with open(template, "w") as f:  # JSON is YAML
            json.dump({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "shardps-trainer"},
                "spec": {"completionMode": "Indexed", "completions": 2,
                         "parallelism": 2, "template": {"spec": {
                             "restartPolicy": "Never", "containers": [{
                                 "name": "trainer", "image": "shardps",
                                 "command": ["/usr/local/bin/trainer"],
                                 "args": ["--pservers=nowhere:1",
                                          "--config=" + MLP,
                                          "--log_dir=" + self.tmp],
                                 "env": [{"name": "SHARDPS_JOB_ID",
                                          "value": "x"}]}]}}}}, f)
        kube = os.path.join(self.tmp, "kube")
        os.makedirs(kube, exist_ok=True)
        argv = ([PYTHON, SCRIPT, "--bin_dir", testlib.BIN_DIR, "--config",
                 MLP, "--out_dir", out, "--launcher=k8s", "--kubectl",
                 os.path.join(testlib.REPO, "tests", "fake_kubectl.py"),
                 "--k8s_job_template", template, "--trainers_per_trial", "2",
                 "--pservers", ",".join("127.0.0.1:%d" % p for p in ports)] +
                grid + list(extra) + ["--"] + trainer_args)
        env = clean_env(FAKE_KUBE_DIR=kube,
                        FAKE_KUBE_TRAINER=testlib.trainer_bin())
        p = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=env)
        stdout, err = p.communicate(timeout=120)
        return p.returncode, stdout, err

    def test_kubernetes_jobs(self):
        """--launcher=k8s against a kubectl that runs each Job's pods
        locally (tests/fake_kubectl.py): each trial is an Indexed Job of 2
        trainers with its own name, job id, --pservers and flags; the sweep
        follows index 0's output; a trial past --trial_timeout has its Job
        deleted."""
        out = os.path.join(self.tmp, "k8s")
        rc, stdout, err = self.k8s_sweep(
            out, ["--grid", "optimizer.learning_rate=0.02,0.05",
                  "--parallel", "2"], ["--max_steps=100"])
        self.assertEqual(rc, 0, err[-2000:] + stdout[-2000:])
        self.assertIn("sweep: 2 trials: 2 done", stdout)
        for t in self.state(out)["trials"]:
            d = os.path.join(out, "trials", "%03d" % t["id"])
            with open(os.path.join(d, "job.json")) as f:
                job = json.load(f)
            self.assertEqual(job["metadata"]["name"], "shardps-k8s-t%da1" %
                             t["id"])
            self.assertEqual(job["spec"]["completions"], 2)
            c = job["spec"]["template"]["spec"]["containers"][0]
            self.assertEqual(
                {e["name"]: e["value"] for e in c["env"]},
                {"SHARDPS_JOB_ID": "k8s-t%da1" % t["id"],
                 "SHARDPS_NUM_GRADIENT_SERVERS": "2"})
            self.assertNotIn("--pservers=nowhere:1", c["args"])
            self.assertIn("--metrics_file=/dev/stdout", c["args"])
            self.assertIn("--config_set=optimizer.learning_rate=" +
                          t["params"]["optimizer.learning_rate"], c["args"])
            self.assertEqual(t["final"]["step"], 100)
            self.assertGreater(t["final"]["test_accuracy"], 0.5)
        out = os.path.join(self.tmp, "k8s-timeout")
        rc, stdout, err = self.k8s_sweep(
            out, ["--grid", "optimizer.learning_rate=0.05"],
            ["--num_passes=50"], extra=["--trial_timeout", "3"])
        self.assertEqual(rc, 1, err[-2000:])
        self.assertIn("no end after --trial_timeout", stdout)

    def test_bad_arguments_and_failing_trials(self):
        out = os.path.join(self.tmp, "bad")
        rc, _, err = self.sweep(out, ["--grid", "learning_rate"])
        self.assertEqual(rc, 2)
        self.assertIn("not NAME=VALUES", err)
        rc, _, err = self.sweep(out, ["--grid", "lr=1"],
                                trainer_args=["--job_id=x"])
        self.assertEqual(rc, 2)
        self.assertIn("the sweep sets --job_id itself", err)
        # A path the config lacks: every trial fails, saying why.
        rc, stdout, err = self.sweep(out, ["--grid", "optimizer.lr=1,2"])
        self.assertEqual(rc, 1, err[-2000:])
        self.assertIn("sweep: 2 trials: 0 done, 0 stopped early, 2 failed",
                      stdout)
        self.assertIn("OptimizerConfig has no field \"lr\"", stdout)
        self.assertIn("no trial finished", err)


if __name__ == "__main__":
    testlib.main()
