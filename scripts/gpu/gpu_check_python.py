#!/usr/bin/env python3
"""The Python path of the device check (scripts/gpu/gpu_check.sh, step 9):
examples/torch_mlp.py and examples/torch_deepfm.py, one pass each, trained
through the bundle's shardps package (its native module, 1 pserver of the
bundle, 1 sync trainer) and as plain PyTorch (--plain: one process,
torch.optim, no pservers), on the same device, with the machine's own
Python and PyTorch.

    python3 scripts/gpu/gpu_check_python.py --bundle_dir B --data DATA \\
        --logs LOGS [--python PYTHON] [--budget_s 200] [--quick]
        [--skip REASON] [--allow_cpu]

Steps, each a row of LOGS/python/steps.tsv (name, PASS/FAIL/SKIP/NOT RUN,
seconds, note), which gpu_check.sh records in its table:

  python:probe      the interpreter (--python, else python3 on PATH): its
                    path, version and glibc; PyTorch's version, its CUDA,
                    and torch.cuda.is_available()
  python:import     shardps and shardps._native from B/python, after torch
                    (as the examples import them), with LD_LIBRARY_PATH =
                    B/python/lib (and B/python/lib-cxx, the bundle's
                    libstdc++, only when the machine's own is too old) and
                    $BUNDLE_CUDA_LIBS; the module is the bundle's
                    _native<the interpreter's extension suffix>
  python:ctr_data   B/bin/gen_ctr_data writes DeepFM's records
  python:EXAMPLE-plain, python:EXAMPLE-shardps: the runs

What the machine lacks (no usable GPU, --skip; no PyTorch; CUDA not
available to PyTorch; no native module for this Python) makes each
example's row a SKIP that says why, naming both Python versions where the
module is missing; the check's status does not change. A module that is
there and does not import is a FAIL with the loader's message. Every run
has its own time limit within --budget_s. --allow_cpu (tests only) runs
on the CPU where PyTorch sees no GPU.

LOGS/python/ gets probe.json, results.jsonl (a line per run: its RESULT
line's figures, or why it did not run; gpu_check_summary.py compares
them), and each run's log or local_cluster.py folder. Standard library
only; exit status 0 unless the arguments are bad.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PROG = "gpu_check_python"

# What each example trains (its own defaults, written out), the same for
# the shardps and the plain run; data_args adds its data.
EXAMPLES = [
    ("torch_mlp", ["--batch_size=64", "--num_passes=1", "--seed=1"]),
    ("torch_deepfm", ["--batch_size=256", "--num_passes=1", "--seed=1"]),
]
QUICK_STEPS = 120
# (the figure compared, the loss beside it, its name) in a RESULT pass.
METRICS = {"torch_mlp": ("test_accuracy", "test_loss", "test accuracy"),
           "torch_deepfm": ("test_auc", "test_logloss", "test AUC")}
# DeepFM's records (gen_ctr_data, seed 1): 781 steps of 256.
CTR_RECORDS = ("--num_train=200000", "--num_test=20000")
# Each run's limit; the budget caps them all.
LIMITS = {"probe": 90, "import": 90, "ctr_data": 60, "plain": 120,
          "shardps": 150}

PROBE = r"""
import importlib.machinery, json, platform, sys
out = {"executable": sys.executable, "version": list(sys.version_info[:3]),
       "glibc": platform.libc_ver()[1],
       "suffixes": importlib.machinery.EXTENSION_SUFFIXES}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        out["device_name"] = torch.cuda.get_device_name(0)
except Exception as e:
    out["torch_error"] = "%s: %s" % (type(e).__name__, e)
print("PROBE " + json.dumps(out))
"""

IMPORT = r"""
import json
try:
    import torch  # first, as the examples do
except Exception:
    pass
import shardps, shardps._native as native
print("IMPORTED " + json.dumps({"shardps": shardps.__file__,
                                "native": native.__file__}))
"""


def say(msg):
    sys.stdout.write("%s: %s\n" % (PROG, msg))
    sys.stdout.flush()


class Check(object):
    """The arguments, the time left and the rows written so far."""

    def __init__(self, a):
        self.a = a
        self.out = os.path.join(a.logs, "python")
        os.makedirs(self.out, exist_ok=True)
        self.end = time.monotonic() + a.budget_s
        self.steps = os.path.join(self.out, "steps.tsv")
        open(self.steps, "w").close()
        self.results = os.path.join(self.out, "results.jsonl")
        open(self.results, "w").close()
        self.device = None  # where the examples train: cuda:0 or cpu
        self.ctr = None  # DeepFM's data folder, made on first use
        self.ctr_tried = False

    def row(self, name, status, secs, note):
        note = " ".join(str(note).split())
        with open(self.steps, "a") as f:
            f.write("%s\t%s\t%.1f\t%s\n" % (name, status, secs, note))
        say("[%s] %s (%.1fs): %s" % (status, name, secs, note))

    def result(self, **fields):
        with open(self.results, "a") as f:
            f.write(json.dumps(fields) + "\n")

    def limit(self, kind):
        """The seconds a run of this kind may take now: its own limit, or
        what is left of the budget."""
        return min(LIMITS[kind], self.end - time.monotonic())


def run_logged(argv, log, limit, env=None):
    """Runs argv with stdout and stderr into `log`, killing its process
    group after `limit` s. (status, seconds, the log's text); 124: timed
    out, 127: did not start."""
    start = time.monotonic()
    with open(log, "w") as f:
        try:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                 env=env, cwd=REPO, start_new_session=True)
        except OSError as e:
            f.write("%s: cannot start %s: %s\n" % (PROG, argv[0], e))
            f.flush()
            return 127, time.monotonic() - start, "cannot start %s: %s" % (
                argv[0], e.strerror or e)
        try:
            code = p.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
                time.sleep(2 if sig == signal.SIGTERM else 0)
            p.wait()
            code = 124
    with open(log, errors="replace") as f:
        text = f.read()
    if code == 124:
        text += "\n%s: killed after its %.0f s limit\n" % (PROG, limit)
    return code, time.monotonic() - start, text


def tagged(text, tag):
    """The JSON after the last line starting with `tag `, or None."""
    lines = [l for l in text.splitlines() if l.startswith(tag + " ")]
    try:
        return json.loads(lines[-1][len(tag) + 1:]) if lines else None
    except ValueError:
        return None


def last_words(text, n=2):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return " / ".join(lines[-n:])[:400] or "no output"


def version_of(suffix):
    """'.cpython-311-x86_64-linux-gnu.so' -> '3.11' (else the suffix)."""
    tag = suffix.split(".")[1] if suffix.count(".") >= 2 else suffix
    if tag.startswith("cpython-3") and tag[9:].split("-")[0].isdigit():
        return "3." + tag[9:].split("-")[0]
    return suffix


def probe(c):
    """The interpreter and its PyTorch: a python:probe row; the probe's
    dict, or None without an interpreter."""
    python = shutil.which(c.a.python) or c.a.python
    code, secs, text = run_logged([python, "-c", PROBE],
                                  os.path.join(c.out, "probe.log"),
                                  c.limit("probe"))
    info = tagged(text, "PROBE")
    if info is None:
        c.row("python:probe", "SKIP", secs, "no usable Python: %s -c ... "
              "(status %d): %s" % (python, code, last_words(text)))
        return None
    info["which"] = python
    with open(os.path.join(c.out, "probe.json"), "w") as f:
        json.dump(info, f, indent=1)
    note = "%s: Python %s, glibc %s; " % (
        python, ".".join(map(str, info["version"])), info["glibc"] or "?")
    if "torch" in info:
        note += "PyTorch %s (CUDA %s), torch.cuda.is_available() %s%s" % (
            info["torch"], info["torch_cuda"], info["cuda_available"],
            " (%s)" % info["device_name"] if info.get("device_name") else "")
    else:
        note += "no PyTorch (%s)" % info["torch_error"]
    c.row("python:probe", "PASS", secs, note)
    return info


def bundled_module(c, info):
    """(the bundle's native module for this interpreter, or None; why
    not)."""
    folder = os.path.join(c.a.bundle_dir, "python", "shardps")
    have = sorted(glob.glob(os.path.join(folder, "_native.*.so")))
    for suffix in info["suffixes"]:
        path = os.path.join(folder, "_native" + suffix)
        if path in have:
            return path, None
    mine = version_of(info["suffixes"][0]) if info["suffixes"] else "?"
    theirs = ", ".join(version_of(os.path.basename(h)[len("_native"):])
                       for h in have) or "none"
    return None, ("no shardps native module for this Python %s (it loads "
                  "_native%s); the bundle has Python %s's: build "
                  "shardps._native for %s (docs/cuda.md)" % (
                      mine, info["suffixes"][0] if info["suffixes"] else "?",
                      theirs, mine))


def python_env(c, cxx):
    """The environment of every Python run: the bundle's package first on
    the path and its libraries (with its libstdc++ when `cxx`) on the
    loader's."""
    env = dict(os.environ)
    py = os.path.join(c.a.bundle_dir, "python")
    env["PYTHONPATH"] = os.pathsep.join(
        [py] + [p for p in [env.get("PYTHONPATH")] if p])
    libs = [os.path.join(py, "lib")] + ([os.path.join(py, "lib-cxx")]
                                        if cxx else [])
    libs += [p for p in (env.get("BUNDLE_CUDA_LIBS"),
                         env.get("LD_LIBRARY_PATH")) if p]
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def import_check(c, info, module):
    """Imports the bundle's shardps: a python:import row; the environment
    the runs get, or None (then a FAIL says why)."""
    secs = 0.0
    for cxx in (False, True):
        code, s, text = run_logged(
            [info["which"], "-c", IMPORT],
            os.path.join(c.out, "import%s.log" % ("-cxx" if cxx else "")),
            c.limit("import"), python_env(c, cxx))
        secs += s
        got = tagged(text, "IMPORTED")
        if got is not None:
            break
        if cxx or not any(v in text for v in ("GLIBCXX_", "CXXABI_",
                                               "GCC_")):
            c.row("python:import", "FAIL", secs, "%s does not import the "
                  "bundle's shardps._native (status %d): %s" % (
                      info["which"], code, last_words(text)))
            return None
    bundle = os.path.realpath(c.a.bundle_dir) + os.sep
    where = [os.path.realpath(got[k]) for k in ("shardps", "native")]
    if not all(w.startswith(bundle) for w in where):
        c.row("python:import", "FAIL", secs, "shardps came from %s, not "
              "the bundle %s" % (" and ".join(where), bundle))
        return None
    c.row("python:import", "PASS", secs, "%s from %s; libstdc++: %s" % (
        os.path.basename(module), os.path.dirname(where[1]),
        "the bundle's (python/lib-cxx: the machine's is older)" if cxx
        else "the machine's"))
    return python_env(c, cxx)


def ctr_data(c):
    """DeepFM's records from the bundle's gen_ctr_data (beside the
    bundle, not among the logs: 70 MB): their folder, or None (then a FAIL
    says why)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(c.a.bundle_dir)),
                          "ctr-data")
    os.makedirs(folder, exist_ok=True)
    argv = [os.path.join(c.a.bundle_dir, "bin", "gen_ctr_data"),
            "--field_in_high_bits", "--train_out=" + folder + "/train",
            "--test_out=" + folder + "/test"] + list(CTR_RECORDS)
    code, secs, text = run_logged(argv, os.path.join(c.out, "ctr_data.log"),
                                  c.limit("ctr_data"))
    if code != 0:
        c.row("python:ctr_data", "FAIL", secs, "gen_ctr_data (status %d): "
              "%s" % (code, last_words(text)))
        return None
    truth = {}
    for line in text.splitlines():
        if line.startswith('{"event":"ctr_truth"'):
            truth = json.loads(line)
    c.row("python:ctr_data", "PASS", secs, "%s training and %s test "
          "records; the planted model's test AUC %s" % (
              truth.get("num_train", "?"), truth.get("num_test", "?"),
              "%.4f" % truth["true_test_auc"] if "true_test_auc" in truth
              else "?"))
    return folder


def data_args(c, name):
    """The example's data flags, or None (a FAIL row said why)."""
    if name == "torch_mlp":
        return ["--data_dir=" + c.a.data]
    if not c.ctr_tried:
        c.ctr_tried = True
        c.ctr = ctr_data(c)
    if c.ctr is None:
        return None
    return ["--train=" + c.ctr + "/train", "--test=" + c.ctr + "/test"]


def example_argv(c, info, name, kind, flags, limit):
    """(argv, its log, the log holding the example's RESULT line) of one
    run."""
    script = os.path.join(REPO, "examples", name + ".py")
    log = os.path.join(c.out, "%s-%s.log" % (name, kind))
    if kind == "plain":
        return [info["which"], script, "--plain"] + flags, log, log
    folder = os.path.join(c.out, "%s-shardps" % name)
    argv = [sys.executable,
            os.path.join(REPO, "scripts", "cluster", "local_cluster.py"),
            "--pservers", "1", "--trainers", "1",
            "--bin_dir", c.a.bundle_dir, "--python", script,
            "--python_bin", info["which"],
            "--python_path", os.path.join(c.a.bundle_dir, "python"),
            "--log_dir", folder, "--timeout", "%d" % max(5, limit - 10),
            "--quiet", "--", "--progress=off"] + flags
    return argv, log, os.path.join(folder, "trainer-0.log")


def run_example(c, info, env, name, kind, flags):
    """One run of an example: a row and a results line."""
    step = "python:%s-%s" % (name, kind)
    limit = c.limit(kind)
    if limit < 15:
        why = "the Python part's budget (%d s) was spent" % c.a.budget_s
        c.row(step, "NOT RUN", 0, why)
        c.result(example=name, kind=kind, status="NOT RUN", reason=why)
        return
    argv, log, result_log = example_argv(c, info, name, kind, flags, limit)
    code, secs, text = run_logged(argv, log, limit, env)
    try:
        with open(result_log, errors="replace") as f:
            found = tagged(f.read(), "RESULT")
    except OSError:
        found = None
    if code != 0 or not found or not found.get("passes"):
        why = "status %d: %s" % (code, last_words(text, 3))
        c.row(step, "FAIL", secs, why)
        c.result(example=name, kind=kind, status="FAIL", reason=why,
                 wall_s=round(secs, 2))
        return
    last = found["passes"][-1]
    key, loss_key, label = METRICS[name]
    c.row(step, "PASS", secs, "%s %.4f, loss %.4f after %d steps on %s; "
          "training %.1f s, %.0f samples/s" % (
              label, last[key], last[loss_key], last["step"], c.device,
              found["train_seconds"], last["samples_per_s"]))
    c.result(example=name, kind=kind, status="PASS", device=c.device,
             wall_s=round(secs, 2), metric=last[key], loss=last[loss_key],
             steps=last["step"], train_seconds=found["train_seconds"],
             samples_per_s=last["samples_per_s"])


def torch_reasons(c, info):
    """Why PyTorch here cannot run the examples (empty: it can)."""
    if "torch" not in info:
        return ["no PyTorch in %s (%s)" % (info["which"],
                                          info["torch_error"])]
    if not info["cuda_available"] and not c.a.allow_cpu:
        return ["PyTorch %s here sees no GPU (torch.cuda.is_available() "
                "is False)" % info["torch"]]
    return []


def prepare(c):
    """Probe and import: (the probe, the runs' environment), or the
    reasons the runs cannot happen."""
    reasons = [c.a.skip] if c.a.skip else []
    info = probe(c)
    if info is None:
        return None, None, reasons + ["no Python to run them"]
    module, why = bundled_module(c, info)
    env = None
    if module is None:
        c.row("python:import", "SKIP", 0, why)
        reasons.append(why)
    else:
        env = import_check(c, info, module)
        if env is None:
            reasons.append("the bundle's shardps does not import "
                           "(python:import)")
    return info, env, reasons + torch_reasons(c, info)


def skip(c, name, why):
    """An example not run: its row and results line say why."""
    c.row("python:" + name, "SKIP", 0, "not run: " + why)
    c.result(example=name, status="SKIP", reason=why)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle_dir", required=True,
                   help="the unpacked bundle (shardps-gpu/)")
    p.add_argument("--data", required=True,
                   help="the Fashion-MNIST folder (out/gpu/fashion-mnist)")
    p.add_argument("--logs", required=True, help="gpu_check.sh's logs")
    p.add_argument("--python", default="python3",
                   help="the interpreter to probe and run (default python3)")
    p.add_argument("--budget_s", type=float, default=200,
                   help="all of it within this many seconds (default 200)")
    p.add_argument("--quick", action="store_true",
                   help="%d steps a run (testing the check)" % QUICK_STEPS)
    p.add_argument("--skip", default="", metavar="REASON",
                   help="probe and import, but run nothing, for REASON")
    p.add_argument("--allow_cpu", action="store_true",
                   help="run on the CPU where PyTorch sees no GPU (tests)")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    c = Check(a)
    say("the Python path: %s, within %d s" % (a.python, a.budget_s))
    info, env, reasons = prepare(c)
    if reasons:
        for name, _ in EXAMPLES:
            skip(c, name, "; ".join(reasons))
        return 0
    c.device = "cuda:0" if info["cuda_available"] else "cpu"
    for name, flags in EXAMPLES:
        data = data_args(c, name)
        if data is None:
            skip(c, name, "no data (python:ctr_data)")
            continue
        flags = flags + data + ["--device=" + c.device] + (
            ["--max_steps=%d" % QUICK_STEPS] if a.quick else [])
        for kind in ("plain", "shardps"):
            run_example(c, info, env, name, kind, flags)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
