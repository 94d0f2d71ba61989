#!/usr/bin/env python3
"""scripts/plot_metrics.py on synthetic metrics files.

The script needs Debian's matplotlib, hence runs under /usr/bin/python3 (a
subprocess here: the python3 running the tests may lack matplotlib). The
tests that draw a PNG are skipped when /usr/bin/python3 has no matplotlib;
the error cases, which fail before drawing, and the reading of the files
(imported here, standard library only) are always tested.

    python3 tests/plot_test.py [--bin_dir build] [-k pattern]

(--bin_dir is accepted, as ctest passes it, and ignored: no binary runs.)
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "plot_metrics.py")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(REPO, "scripts"))
import plot_metrics  # noqa: E402  (standard library only at import)

MISSING = ("plot_metrics: matplotlib is missing (apt-get install "
           "python3-matplotlib)")


def has_matplotlib():
    if not os.access(PYTHON, os.X_OK):
        return False
    return subprocess.run([PYTHON, "-c", "import matplotlib"],
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


HAS_MATPLOTLIB = has_matplotlib()
NEEDS_MATPLOTLIB = unittest.skipUnless(
    HAS_MATPLOTLIB, "%s cannot import matplotlib (apt-get install "
    "python3-matplotlib)" % PYTHON)


def step_line(k, step, window=10, **over):
    line = {"event": "step", "trainer_id": k, "pass": step // 40,
            "step": step, "train_loss": 2.0 / (1 + step / 20.0),
            "samples_per_s": 5000.0 + 100 * k, "data_s": 0.001 * window,
            "compute_s": 0.004 * window, "pull_s": 0.002 * window,
            "push_s": 0.002 * window, "wait_s": 0.001 * window,
            "push_bytes": 1000 * step, "pull_bytes": 1000 * step}
    line.update(over)
    return line


def eval_line(k, p, step, final=False, auc=None):
    line = {"event": "eval", "trainer_id": k, "pass": p, "step": step,
            "final": int(final), "test_loss": 0.5 - 0.05 * p,
            "test_accuracy": 0.8 + 0.02 * p, "push_bytes": 1, "pull_bytes": 1,
            "train_seconds": 1.0 + p, "samples_per_s": 5000.0}
    if auc is not None:
        line.update(test_auc=auc, test_logloss=0.45)
    return line


def a_run(k, passes=3, auc=False):
    """Steps 10..40*passes every 10 steps, an eval after every 40."""
    lines = []
    for s in range(10, 40 * passes + 1, 10):
        lines.append(step_line(k, s))
        if s % 40 == 0:
            p = s // 40 - 1
            lines.append(eval_line(k, p, s, final=(p == passes - 1),
                                   auc=(0.7 + 0.03 * p) if auc else None))
    return lines


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)
    return path


def write(path, lines, tail=""):
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) +
                    "\n")
        f.write(tail)
    return path


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


class PlotTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="plot_test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def plot(self, *args, env=None):
        if not os.access(PYTHON, os.X_OK):
            self.skipTest("no %s" % PYTHON)
        return subprocess.run([PYTHON, SCRIPT] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, env=env)

    def cluster_folder(self):
        """Two trainers; trainer 0's file holds an earlier run, and the
        last run has a recovery from step 75 back to step 60."""
        run = self.dir + "/run-a"
        os.mkdir(run)
        earlier = a_run(0, passes=2)
        last = [l for l in a_run(0) if l["step"] <= 60]
        last.append(step_line(0, 70, train_loss=99.0))  # undone
        last.append({"event": "recovery", "trainer_id": 0, "from_step": 75,
                     "to_step": 60, "steps_lost": 15, "seconds": 0.2,
                     "stalled_seconds": 3.0, "generation": 2})
        last += [step_line(0, 70, window=15)]
        last += [l for l in a_run(0) if l["step"] > 70]
        write(run + "/trainer-0.jsonl", earlier + last)
        write(run + "/trainer-1.jsonl", a_run(1))
        return run

    # Reading (no matplotlib needed) ---------------------------------------

    def test_reads_the_last_run_and_drops_undone_steps(self):
        run = self.cluster_folder()
        trainers, files, folders = plot_metrics.load([run])
        self.assertEqual([t.label for t in trainers],
                         ["trainer 0", "trainer 1"])
        t0 = trainers[0]
        self.assertEqual(t0.recoveries, [60.0])
        steps = [s["step"] for s in t0.steps]
        self.assertEqual(steps, list(range(10, 121, 10)))
        self.assertNotIn(99.0, [s["train_loss"] for s in t0.steps])
        self.assertEqual([e["pass"] for e in t0.evals], [0, 1, 2])
        # Step 70 after the rollback to 60: its window holds the 5 steps
        # done after the line of step 70 before the failure at 75, and 10.
        s70 = [s for s in t0.steps if s["step"] == 70][0]
        self.assertEqual(s70["_steps"], 15)
        self.assertAlmostEqual(t0.mean_split()["compute_s"], 0.004, places=4)
        self.assertEqual(folders, [os.path.abspath(run)])

    def test_a_trainer_that_rejoined(self):
        lines = [step_line(0, s) for s in (10, 20, 30, 90, 100)]
        (t,), _, _ = plot_metrics.load([write(self.dir + "/t.jsonl", lines)])
        self.assertEqual([s["_steps"] for s in t.steps], [10] * 5)
        self.assertEqual(t.per_step("compute_s")[1], [0.004] * 5)

    def test_auc_and_missing_fields(self):
        path = write(self.dir + "/ctr.jsonl",
                     [{"event": "step", "trainer_id": 3, "step": 5},
                      {"event": "hello"}] + a_run(3, passes=1, auc=True))
        (t,), _, _ = plot_metrics.load([path])
        self.assertEqual(t.label, "trainer 3")
        self.assertEqual(t.series("test_auc", "evals")[1], [0.7])
        self.assertEqual(t.steps[0]["step"], 5)
        # The line without train_loss is left out of that curve only.
        x, y = t.series("train_loss")
        self.assertEqual(x, [10, 20, 30, 40])
        self.assertEqual(t.series("samples_per_s")[0], [10, 20, 30, 40])
        self.assertEqual(t.series("test_accuracy", "evals"), ([0], [0.8]))

    def test_title_names_the_config_or_the_python_script(self):
        run = self.cluster_folder()

        def details(extra):
            info = {"config": "/r/configs/fmnist_mlp.pbtxt",
                    "pservers": [{}],
                    "trainers": [{"argv": ["trainer", "--pservers=a:1",
                                           "--num_trainers=2",
                                           "--num_passes=3"]}, {}]}
            info.update(extra)
            write_json(run + "/cluster.json", info)
            return plot_metrics.cluster_details([run])

        self.assertEqual(details({}), "fmnist_mlp.pbtxt, 1 pserver, "
                         "2 trainers, --num_passes=3")
        self.assertEqual(
            details({"config": None, "python": "/r/examples/torch_mlp.py",
                     "trainers": [{"argv": ["python", "/r/torch_mlp.py",
                                            "--trainer_id=0",
                                            "--init=shardps"]}]}),
            "torch_mlp.py, 1 pserver, 1 trainer, --init=shardps")

    # The PNG ---------------------------------------------------------------

    @NEEDS_MATPLOTLIB
    def test_folder_of_two_trainers(self):
        run = self.cluster_folder()
        r = self.plot(run)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(run, "curves.png")
        self.assertEqual(r.stdout.strip(), out)
        self.assertEqual(png_size(out), (1400, 900))
        self.assertIn("trainer-0.jsonl: 2 runs", r.stderr)
        self.assertIn("plotting the last", r.stderr)
        self.assertFalse(os.path.exists(out + ".tmp"))

    @NEEDS_MATPLOTLIB
    def test_ctr_file_one_eval_and_a_cut_off_line(self):
        lines = a_run(0, passes=1, auc=True)
        lines[1] = {"event": "step", "step": 20}  # no times, no loss
        path = write(self.dir + "/trainer-0.jsonl", lines,
                     tail='{"event":"st')
        out = self.dir + "/sub dir.png"
        r = self.plot("--out", out, path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(png_size(out), (1400, 900))
        self.assertIn("trainer-0.jsonl:6: skipped a cut-off last line",
                      r.stderr)

    @NEEDS_MATPLOTLIB
    def test_unwritable_out(self):
        path = write(self.dir + "/trainer-0.jsonl", a_run(0, passes=1))
        r = self.plot("--out", self.dir + "/no/such/dir/c.png", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("plot_metrics: cannot write", r.stderr)

    # Errors ----------------------------------------------------------------

    def assert_refused(self, r, code, *fragments):
        self.assertEqual(r.returncode, code, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for f in fragments:
            self.assertIn(f, lines[0])
        self.assertTrue(lines[0].startswith("plot_metrics: "), lines[0])

    def test_errors(self):
        empty_dir = self.dir + "/empty"
        os.mkdir(empty_dir)
        self.assert_refused(self.plot(empty_dir), 1, empty_dir,
                            "no trainer-*.jsonl")
        self.assert_refused(self.plot(self.dir + "/nope"), 1,
                            self.dir + "/nope", "no such file")
        empty = write(self.dir + "/trainer-0.jsonl", [], tail="\n\n")
        self.assert_refused(self.plot(empty), 1, "no metrics lines", empty)
        bad = write(self.dir + "/bad.jsonl",
                    [step_line(0, 10), "{not json", step_line(0, 20)])
        self.assert_refused(self.plot(bad), 1, bad + ":2: bad JSON")
        arr = write(self.dir + "/arr.jsonl", [step_line(0, 10), "[1, 2]"])
        self.assert_refused(self.plot(arr), 1, arr + ":2: bad JSON",
                            "not an object")
        rec = write(self.dir + "/rec.jsonl",
                    [{"event": "recovery", "from_step": 5, "to_step": 0}])
        self.assert_refused(self.plot(rec), 1, "no step or eval lines")
        r = self.plot()
        self.assertEqual(r.returncode, 2)
        self.assertIn("FILE_OR_DIR", r.stderr)

    def test_matplotlib_missing(self):
        fake = self.dir + "/fake"
        os.makedirs(fake + "/matplotlib")
        write(fake + "/matplotlib/__init__.py",
              ["raise ImportError('no matplotlib here')"])
        path = write(self.dir + "/trainer-0.jsonl", a_run(0, passes=1))
        env = dict(os.environ, PYTHONPATH=fake)
        r = self.plot(path, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(), MISSING)
        self.assertFalse(os.path.exists(self.dir + "/curves.png"))


def main():
    argv = list(sys.argv)
    for i, a in enumerate(argv):
        if a == "--bin_dir" and i + 1 < len(argv):
            del argv[i:i + 2]
            break
        if a.startswith("--bin_dir="):
            del argv[i]
            break
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
