#!/usr/bin/env python3
"""The device check's parts that run without a GPU (docs/cuda.md):

- scripts/gpu/gpu_check_summary.py on synthetic logs folders: the agreement
  verdicts, the ratios against PyTorch, the per-call table, --one_run;
- scripts/gpu/gpu_check.sh's refusals: an unknown argument, a missing bundle or
  data (status 2, saying what is missing, console.log written);
- scripts/bench/torch_step_bench.py's config reader on the shipped configs, and
  its refusal without PyTorch;
- the Python path (scripts/gpu/gpu_check_python.py): its table's verdicts
  on synthetic results; rows that say why nothing ran (no native module
  for this Python, naming both versions; a module that does not import;
  no GPU; no interpreter), on a fake bundle;
- and, where --bin_dir is a CUDA build with shardps._native and PyTorch's
  virtualenv exists (scripts/setup/python_venv.sh torch), the Python path
  for real on the CPU: a bundle packed from --bin_dir (gpu_bundle.sh
  --no-build), gpu_check.sh --allow_cpu with GPU_CHECK_QUICK=1: the
  bundle's shardps imported from the bundle, both examples against the
  bundle's pserver and as plain PyTorch, the table's rows filled.

The bundle itself is tested by scripts/gpu/gpu_bundle_test.sh (gpu_bundle.sh
runs it), which needs the CUDA build.

    python3 tests/gpu_check_test.py [--bin_dir build]
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_SCRIPTS = os.path.join(REPO, "scripts", "gpu")
BENCH_SCRIPTS = os.path.join(REPO, "scripts", "bench")
sys.path[:0] = [GPU_SCRIPTS, BENCH_SCRIPTS]
import gpu_check_summary  # noqa: E402
import torch_step_bench  # noqa: E402

BIN_DIR = os.path.join(REPO, "build")
TORCH_VENV = os.environ.get("SHARDPS_TORCH_VENV", os.path.expanduser(
    "~/.cache/shardps/torch-venv"))


def write_run(logs, name, losses, accuracy, exit_code=0, step_s=0.001):
    """A local_cluster.py log folder: trainer 0's step lines every 100
    steps with the given window losses, a final eval, summary.json."""
    d = os.path.join(logs, "train", name)
    os.makedirs(d)
    with open(os.path.join(d, "trainer-0.jsonl"), "w") as f:
        for i, loss in enumerate(losses):
            f.write(json.dumps({"event": "step", "step": 100 * (i + 1),
                                "train_loss": loss,
                                "median_step_s": step_s}) + "\n")
        f.write(json.dumps({"event": "eval", "step": 100 * len(losses),
                            "final": 1, "test_accuracy": accuracy,
                            "samples_per_s": 64 / step_s}) + "\n")
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"exit_code": exit_code,
                   "trainers": [{"test_accuracy": accuracy}]}, f)


class SummaryTest(unittest.TestCase):
    def setUp(self):
        self.logs = tempfile.mkdtemp(prefix="gpu-check-test-")
        self.addCleanup(shutil.rmtree, self.logs)
        with open(os.path.join(self.logs, "steps.tsv"), "w") as f:
            f.write("preflight\tPASS\t0\tbundle 14M\n")
            f.write("gpu\tPASS\t1\tcuda:0 Test GPU | odd note\n")
            f.write("test:x\tFAIL\t2\t[  FAILED  ] X.Y\n")
        with open(os.path.join(self.logs, "gpu-describe.log"), "w") as f:
            f.write("cuda:0 Test GPU (sm_90, 132 SMs, 79.2 GiB)\n")

    def rows(self):
        return {(r["config"], r["trainers"]): r
                for r in gpu_check_summary.training_rows(self.logs)}

    def test_verdicts(self):
        # 1 trainer: GPU within every tolerance, its accuracy 2 points off.
        write_run(self.logs, "fmnist_mlp-cpu-1", [0.8654, 0.6, 0.5], 0.8331)
        write_run(self.logs, "fmnist_mlp-cpu4-1", [0.8654, 0.6, 0.5], 0.8331)
        write_run(self.logs, "fmnist_mlp-gpu-1", [0.8653, 0.598, 0.502],
                  0.8139)
        # 2 trainers: the early loss 1% off (an arithmetic difference).
        write_run(self.logs, "fmnist_mlp-cpu-2", [0.80, 0.5], 0.82)
        write_run(self.logs, "fmnist_mlp-gpu-2", [0.808, 0.5], 0.82)
        # CNN, 1 trainer: the GPU run failed.
        write_run(self.logs, "fmnist_cnn-cpu-1", [0.8], 0.87)
        write_run(self.logs, "fmnist_cnn-gpu-1", [0.8], 0.87, exit_code=1)
        # CNN, 2 trainers: the pass loss 3% off though the start agrees.
        write_run(self.logs, "fmnist_cnn-cpu-2", [0.73, 0.4, 0.4], 0.87)
        write_run(self.logs, "fmnist_cnn-gpu-2", [0.73, 0.43, 0.43], 0.87)
        rows = self.rows()
        one = rows[("fmnist_mlp", 1)]
        self.assertEqual(one["verdict"], "agree")
        self.assertAlmostEqual(one["accuracy_diff_points"], -1.92, places=6)
        self.assertAlmostEqual(one["loss_rel_diff"], 0.0001 / 0.8654)
        self.assertEqual(one["cpu_spread_points"], 0.0)
        self.assertEqual(rows[("fmnist_mlp", 2)]["verdict"], "DIFFER")
        self.assertEqual(rows[("fmnist_cnn", 1)]["verdict"], "a run failed")
        self.assertEqual(rows[("fmnist_cnn", 2)]["verdict"], "DIFFER")
        self.assertGreater(rows[("fmnist_cnn", 2)]["pass_loss_rel_diff"],
                           0.01)

    def test_accuracy_bound_follows_the_cpu_spread(self):
        write_run(self.logs, "fmnist_cnn-cpu-1", [0.8, 0.4], 0.80)
        write_run(self.logs, "fmnist_cnn-cpu4-1", [0.8, 0.4], 0.85)
        write_run(self.logs, "fmnist_cnn-gpu-1", [0.8, 0.4], 0.84)
        row = self.rows()[("fmnist_cnn", 1)]
        self.assertAlmostEqual(row["cpu_spread_points"], 5.0)
        self.assertEqual(row["verdict"], "agree")  # 4 points, spread 5
        write_run(self.logs, "fmnist_cnn-cpu-2", [0.8, 0.4], 0.80)
        write_run(self.logs, "fmnist_cnn-gpu-2", [0.8, 0.4], 0.76)
        self.assertEqual(self.rows()[("fmnist_cnn", 2)]["verdict"],
                         "DIFFER")  # 4 points, no spread measured: 3

    def test_missing_runs_are_left_out_or_incomplete(self):
        self.assertEqual(self.rows(), {})
        write_run(self.logs, "fmnist_mlp-cpu-1", [0.8], 0.8)
        row = self.rows()[("fmnist_mlp", 1)]
        self.assertEqual(row["verdict"], "a run failed")
        self.assertIsNone(row["gpu"])

    def test_timing_ratios_and_tables(self):
        write_run(self.logs, "fmnist_cnn-cpu-1", [0.8], 0.87)
        write_run(self.logs, "fmnist_cnn-gpu-1", [0.8], 0.87, step_s=0.0006)
        os.makedirs(os.path.join(self.logs, "timing"))
        with open(os.path.join(self.logs, "timing", "step_timer.jsonl"),
                  "w") as f:
            for line in [
                    {"event": "step_timer", "config": "fmnist_cnn",
                     "backend": "cuda:0", "batch": 32, "median_ms": 0.4},
                    {"event": "step_timer_call", "config": "fmnist_cnn",
                     "backend": "cuda:0", "call": "Conv2dBackward",
                     "calls_per_step": 2, "ms_per_step": 0.2},
                    {"event": "step_timer", "config": "fmnist_cnn",
                     "backend": "cpu", "batch": 32, "median_ms": 5.6}]:
                f.write(json.dumps(line) + "\n")
        with open(os.path.join(self.logs, "timing", "torch.jsonl"),
                  "w") as f:
            for kind, ms in (("compute", 0.8), ("compute_host", 1.6),
                             ("train", 1.0)):
                f.write(json.dumps({"event": "torch_step",
                                    "config": "fmnist_cnn", "kind": kind,
                                    "batch": 32, "median_ms": ms}) + "\n")
        md_path = os.path.join(self.logs, "summary.md")
        json_path = os.path.join(self.logs, "summary.json")
        out = subprocess.run(
            [sys.executable,
             os.path.join(GPU_SCRIPTS, "gpu_check_summary.py"),
             self.logs, "--md", md_path, "--json", json_path],
            capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(json_path) as f:
            summary = json.load(f)
        (t,) = summary["timing"]
        self.assertEqual(t["shardps_gpu_ms"], 0.4)
        self.assertEqual(t["shardps_cpu_ms"], 5.6)
        self.assertAlmostEqual(t["ratio_vs_torch_compute"], 0.5)
        self.assertAlmostEqual(t["ratio_vs_torch_compute_host"], 0.25)
        self.assertAlmostEqual(t["shardps_whole_step_gpu_ms"], 0.6)
        with open(md_path) as f:
            md = f.read()
        self.assertIn("- GPU: cuda:0 Test GPU", md)
        self.assertIn("| fmnist_cnn | 32 | 0.400 | 5.600 | 0.800 | 1.600 | "
                      "1.000 | 0.50x | 0.25x | 0.600 |", md)
        self.assertIn("| fmnist_cnn | Conv2dBackward | 2 | 0.200 |", md)
        self.assertIn("cuda:0 Test GPU / odd note", md)  # no table break
        self.assertIn("2 of 3 steps passed.", md)

    def test_one_run_line(self):
        write_run(self.logs, "fmnist_mlp-gpu-1", [0.9, 0.5], 0.81)
        line = gpu_check_summary.one_run_line(
            os.path.join(self.logs, "train", "fmnist_mlp-gpu-1"))
        self.assertEqual(line, "accuracy 0.8100 after 200 steps, loss over "
                         "steps 1-100 0.9000, median step 1.000 ms, 64000 "
                         "samples/s")
        self.assertIn("no logs", gpu_check_summary.one_run_line(
            os.path.join(self.logs, "nothing")))


class CheckScriptTest(unittest.TestCase):
    def run_check(self, *args):
        return subprocess.run(
            ["bash", os.path.join(GPU_SCRIPTS, "gpu_check.sh")] + list(args),
            capture_output=True, text=True, timeout=60)

    def test_unknown_argument(self):
        out = self.run_check("--frobnicate")
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown argument --frobnicate", out.stderr)

    def test_missing_bundle_and_data(self):
        tmp = tempfile.mkdtemp(prefix="gpu-check-test-")
        self.addCleanup(shutil.rmtree, tmp)
        out = self.run_check("--bundle", os.path.join(tmp, "none.tar.xz"),
                             "--data", os.path.join(tmp, "nodata"),
                             "--out", os.path.join(tmp, "out"))
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("[FAIL] preflight", out.stdout)
        self.assertIn("the bundle %s/none.tar.xz (build it with bash "
                      "scripts/gpu/gpu_bundle.sh" % tmp, out.stdout)
        self.assertIn("%s/nodata/train-images-idx3-ubyte.gz" % tmp,
                      out.stdout)
        for f in ("console.log", "summary.md", "summary.json",
                  "logs.tar.gz"):
            self.assertTrue(os.path.exists(os.path.join(tmp, "out", f)), f)

    def test_help(self):
        out = self.run_check("--help")
        self.assertEqual(out.returncode, 0)
        self.assertIn("GPU_CHECK_DEADLINE_S", out.stdout)
        self.assertNotIn("set -uo pipefail", out.stdout)


class TorchBenchTest(unittest.TestCase):
    def read(self, name):
        with open(os.path.join(REPO, "configs", name)) as f:
            return torch_step_bench.parse_pbtxt(f.read())

    def test_reads_the_shipped_configs(self):
        cnn = self.read("fmnist_cnn.pbtxt")
        self.assertEqual(cnn["input_shape"],
                         {"channels": 1, "height": 28, "width": 28})
        self.assertEqual([l["type"] for l in cnn["layers"]],
                         ["CONV2D", "RELU", "MAX_POOL", "CONV2D", "RELU",
                          "MAX_POOL", "FULLY_CONNECTED"])
        self.assertEqual(cnn["layers"][3]["filters"], 16)
        self.assertEqual(cnn["optimizer"]["type"], "ADAM")
        self.assertEqual(cnn["batch_size"], 32)
        mlp = self.read("fmnist_mlp.pbtxt")
        self.assertEqual([l.get("output_dim") for l in mlp["layers"]],
                         [256, None, 128, None, 10])
        self.assertEqual(mlp["optimizer"]["momentum"], 0.9)
        self.assertEqual(mlp["data"]["scale"], 0.00392156862745098)

    def test_without_pytorch_it_says_so(self):
        try:
            import torch  # noqa: F401
            self.skipTest("PyTorch is installed here")
        except ImportError:
            pass
        out = subprocess.run(
            [sys.executable,
             os.path.join(BENCH_SCRIPTS, "torch_step_bench.py"),
             "--config", os.path.join(REPO, "configs", "fmnist_mlp.pbtxt")],
            capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("torch_step_bench: no PyTorch", out.stderr)


def write_python_results(logs, runs):
    """LOGS/python/results.jsonl and probe.json as gpu_check_python.py
    writes them; runs: (example, kind, status, metric)."""
    d = os.path.join(logs, "python")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "results.jsonl"), "w") as f:
        for example, kind, status, metric in runs:
            line = {"example": example, "status": status}
            if kind:
                line["kind"] = kind
            if status == "PASS":
                line.update(device="cuda:0", metric=metric, loss=0.5,
                            steps=937, train_seconds=2.0,
                            samples_per_s=30000.0, wall_s=12.0)
            else:
                line["reason"] = "why %s %s" % (example, status)
            f.write(json.dumps(line) + "\n")
    with open(os.path.join(d, "probe.json"), "w") as f:
        json.dump({"which": "/usr/bin/python3", "version": [3, 12, 3],
                   "glibc": "2.39", "torch": "2.11.0+cu130",
                   "torch_cuda": "13.0", "cuda_available": True,
                   "device_name": "NVIDIA H200"}, f)


class PythonSummaryTest(unittest.TestCase):
    def setUp(self):
        self.logs = tempfile.mkdtemp(prefix="gpu-check-test-")
        self.addCleanup(shutil.rmtree, self.logs)

    def test_verdicts(self):
        write_python_results(self.logs, [
            ("torch_mlp", "plain", "PASS", 0.8117),
            ("torch_mlp", "shardps", "PASS", 0.8051),
            ("torch_deepfm", "plain", "PASS", 0.84),
            ("torch_deepfm", "shardps", "PASS", 0.82)])
        mlp, deepfm = gpu_check_summary.python_rows(self.logs)
        self.assertEqual(mlp["verdict"], "agree")
        self.assertAlmostEqual(mlp["diff"], -0.0066)
        self.assertEqual(deepfm["verdict"], "DIFFER")  # 0.02 > 0.01
        write_python_results(self.logs, [
            ("torch_mlp", "plain", "PASS", 0.8117),
            ("torch_mlp", "shardps", "FAIL", None),
            ("torch_deepfm", "plain", "PASS", 0.84),
            ("torch_deepfm", "shardps", "NOT RUN", None)])
        mlp, deepfm = gpu_check_summary.python_rows(self.logs)
        self.assertEqual(mlp["verdict"], "a run failed")
        self.assertEqual(deepfm["verdict"],
                         "not run: why torch_deepfm NOT RUN")

    def test_skipped_rows_and_table(self):
        write_python_results(self.logs, [
            ("torch_mlp", None, "SKIP", None),
            ("torch_deepfm", None, "SKIP", None)])
        rows = gpu_check_summary.python_rows(self.logs)
        self.assertEqual([r["verdict"] for r in rows],
                         ["skipped: why torch_mlp SKIP",
                          "skipped: why torch_deepfm SKIP"])
        md = gpu_check_summary.markdown(self.logs, [], [], [], rows)
        self.assertIn("- Python (the Python rows): /usr/bin/python3: Python "
                      "3.12.3, glibc 2.39, PyTorch 2.11.0+cu130 (CUDA 13.0), "
                      "CUDA available: True (NVIDIA H200)", md)
        self.assertIn("## Python: shardps against plain PyTorch", md)
        self.assertIn("| torch_mlp | – | test accuracy | – | – | – | ±0.03 |",
                      md)
        self.assertIn("| skipped: why torch_deepfm SKIP |", md)

    def test_passing_row(self):
        write_python_results(self.logs, [
            ("torch_mlp", "plain", "PASS", 0.8117),
            ("torch_mlp", "shardps", "PASS", 0.8051)])
        md = gpu_check_summary.markdown(
            self.logs, [], [], [], gpu_check_summary.python_rows(self.logs))
        self.assertIn("| torch_mlp | cuda:0 | test accuracy | 0.8051 | "
                      "0.8117 | -0.0066 | ±0.03 | 0.5000 | 0.5000 | 2.0 | "
                      "2.0 | 30000 | 30000 | 12.0 | 12.0 | agree |", md)


class PythonHelperTest(unittest.TestCase):
    """gpu_check_python.py on a fake bundle: rows that say why."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpu-check-test-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.bundle = os.path.join(self.tmp, "shardps-gpu")
        os.makedirs(os.path.join(self.bundle, "python", "shardps"))
        self.logs = os.path.join(self.tmp, "logs")

    def module(self, suffix):
        with open(os.path.join(self.bundle, "python", "shardps",
                               "_native" + suffix), "w") as f:
            f.write("not a shared library\n")

    def run_helper(self, *extra, **kw):
        out = subprocess.run(
            [sys.executable, os.path.join(GPU_SCRIPTS, "gpu_check_python.py"),
             "--bundle_dir", self.bundle, "--data", self.tmp,
             "--logs", self.logs, "--python", kw.get("python",
                                                     sys.executable),
             "--budget_s", "60"] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout)
        rows = {}
        with open(os.path.join(self.logs, "python", "steps.tsv")) as f:
            for line in f:
                name, status, _, note = line.rstrip("\n").split("\t")
                rows[name] = (status, note)
        return rows, out.stdout

    def test_no_module_for_this_python_names_both_versions(self):
        self.module(".cpython-39-x86_64-linux-gnu.so")
        rows, _ = self.run_helper()
        mine = "3.%d" % sys.version_info[1]
        status, note = rows["python:import"]
        self.assertEqual(status, "SKIP")
        self.assertIn("no shardps native module for this Python %s" % mine,
                      note)
        self.assertIn("the bundle has Python 3.9's", note)
        self.assertEqual(rows["python:probe"][0], "PASS")
        self.assertIn("Python %d.%d." % sys.version_info[:2],
                      rows["python:probe"][1])
        for example in ("torch_mlp", "torch_deepfm"):
            status, note = rows["python:" + example]
            self.assertEqual(status, "SKIP")
            self.assertIn("not run: no shardps native module for this "
                          "Python %s" % mine, note)
        rows = gpu_check_summary.python_rows(self.logs)
        self.assertTrue(rows[0]["verdict"].startswith(
            "skipped: no shardps native module"))

    def test_no_gpu_and_a_module_that_does_not_import(self):
        import importlib.machinery
        self.module(importlib.machinery.EXTENSION_SUFFIXES[0])
        rows, out = self.run_helper("--skip", "no usable GPU here (step gpu)")
        status, note = rows["python:import"]
        self.assertEqual(status, "FAIL")
        self.assertIn("does not import the bundle's shardps._native", note)
        self.assertIn("ImportError", note)
        status, note = rows["python:torch_mlp"]
        self.assertEqual(status, "SKIP")
        self.assertIn("not run: no usable GPU here (step gpu); the bundle's "
                      "shardps does not import (python:import)", note)
        self.assertIn("[SKIP] python:torch_deepfm", out)

    def test_no_interpreter(self):
        rows, _ = self.run_helper(python=os.path.join(self.tmp, "python9"))
        self.assertEqual(rows["python:probe"][0], "SKIP")
        self.assertIn("no usable Python", rows["python:probe"][1])
        self.assertIn("no Python to run them", rows["python:torch_mlp"][1])


def cuda_build_with_module(bin_dir):
    """Why --bin_dir cannot make a bundle with shardps._native (None: it
    can)."""
    try:
        with open(os.path.join(bin_dir, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        return "no CMake build in %s" % bin_dir
    if "PS_CUDA_BUILT:INTERNAL=ON" not in cache:
        return "%s is not a CUDA build" % bin_dir
    module_dir = [l.split("=", 1)[1] for l in cache.splitlines()
                  if l.startswith("SHARDPS_PYTHON_MODULE_DIR:")]
    if not module_dir or not any(
            n.startswith("_native.") for n in os.listdir(module_dir[0])):
        return "no shardps._native built in %s" % bin_dir
    return None


class PythonOnCpuTest(unittest.TestCase):
    """The Python path for real, on the CPU (gpu_check.sh --allow_cpu)."""

    def test_python_path_on_the_cpu(self):
        why = cuda_build_with_module(BIN_DIR)
        if why is None and not os.access(
                os.path.join(TORCH_VENV, "bin", "python"), os.X_OK):
            why = "no PyTorch virtualenv at %s" % TORCH_VENV
        if why:
            self.skipTest(why)
        tmp = tempfile.mkdtemp(prefix="gpu-check-test-")
        self.addCleanup(shutil.rmtree, tmp)
        env = dict(os.environ, BUILD_DIR=BIN_DIR, OUT_DIR=tmp, XZ_LEVEL="0")
        packed = subprocess.run(
            ["bash", os.path.join(GPU_SCRIPTS, "gpu_bundle.sh"),
             "--no-build", "--no-test"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
        self.assertEqual(packed.returncode, 0, packed.stdout)
        env = dict(os.environ, GPU_CHECK_QUICK="1",
                   GPU_CHECK_PYTHON=os.path.join(TORCH_VENV, "bin", "python"))
        out = subprocess.run(
            ["bash", os.path.join(GPU_SCRIPTS, "gpu_check.sh"),
             "--bundle", os.path.join(tmp, "shardps-gpu.tar.xz"),
             "--data", os.path.join(tmp, "fashion-mnist"),
             "--out", os.path.join(tmp, "check"), "--allow_cpu"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=400)
        self.assertEqual(out.returncode, 3, out.stdout)  # no GPU
        self.assertRegex(out.stdout, r"\[PASS\] python:import .*: "
                         r"_native\.cpython-\d+-x86_64-linux-gnu\.so from "
                         r"/\S+/shardps-gpu/python/shardps;")
        for run in ("torch_mlp-plain", "torch_mlp-shardps",
                    "torch_deepfm-plain", "torch_deepfm-shardps"):
            self.assertRegex(out.stdout, r"\[PASS\] python:%s .* after 120 "
                             r"steps on cpu" % run)
        with open(os.path.join(tmp, "check", "summary.json")) as f:
            summary = json.load(f)
        rows = {r["example"]: r for r in summary["python"]}
        self.assertEqual(rows["torch_mlp"]["verdict"], "agree")
        self.assertEqual(rows["torch_deepfm"]["verdict"], "agree")
        self.assertEqual(summary["python_probe"]["cuda_available"], False)
        # The shardps runs' pserver was the bundle's.
        with tarfile.open(os.path.join(tmp, "check", "logs.tar.gz")) as t:
            cluster = json.loads(t.extractfile(
                "logs/python/torch_mlp-shardps/cluster.json").read())
        self.assertRegex(cluster["pservers"][0]["argv"][0],
                         r"/shardps-gpu/bin/pserver$")


if __name__ == "__main__":
    if "--bin_dir" in sys.argv:  # passed by ctest
        i = sys.argv.index("--bin_dir")
        BIN_DIR = os.path.abspath(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    unittest.main()
