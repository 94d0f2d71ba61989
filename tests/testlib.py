"""Helpers shared by the multi-process tests in this folder (stdlib only).

Each test file runs as

    python3 tests/cli_test.py [--bin_dir BUILD_DIR] [unittest arguments]

where BUILD_DIR holds pserver/pserver and trainer/trainer (default: build/
of this repository). ctest passes --bin_dir ${CMAKE_BINARY_DIR}.
"""

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_CLUSTER = os.path.join(REPO, "scripts", "cluster", "local_cluster.py")
CONFIG = os.path.join(REPO, "configs", "fmnist_mlp.pbtxt")
DATA_DIR = "/usr/share/datasets/fashion-mnist"

BIN_DIR = os.path.join(REPO, "build")

# Variables that would change what the binaries do: our flags, the
# schedulers' (and torchrun's) rank and size, and the launch variables of
# Kubeflow and PaddlePaddle. Tests start from an environment without them.
_SCRUBBED = re.compile(r"^(SHARDPS_|OMPI_COMM_WORLD_|PMI_|SLURM_|"
                       r"JOB_COMPLETION_INDEX$|TF_CONFIG$|PADDLE_INIT_|"
                       r"RANK$|WORLD_SIZE$|LOCAL_RANK$)")


def _die_with_parent():
    """A preexec_fn: the child gets SIGKILL when the test process dies, so a
    killed test (ctest's TIMEOUT) leaves no launcher behind."""
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def pserver_bin():
    return os.path.join(BIN_DIR, "pserver", "pserver")


def trainer_bin():
    return os.path.join(BIN_DIR, "trainer", "trainer")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not _SCRUBBED.match(k)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def processes_matching(binary, marker):
    """[(pid, cmdline)] of live processes running `binary` whose command line
    contains `marker` (a folder only this test uses, so that tests running
    in parallel do not see each other's processes). Uses pgrep -f; reads
    /proc where pgrep is missing."""
    found = []
    pgrep = shutil.which("pgrep")
    if pgrep:
        out = subprocess.run([pgrep, "-a", "-f", re.escape(binary)],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL,
                             universal_newlines=True).stdout
        for line in out.splitlines():
            pid, _, cmd = line.partition(" ")
            if binary in cmd and marker in cmd:
                found.append((int(pid), cmd))
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if binary in cmd and marker in cmd:
            found.append((int(entry), cmd))
    return found


def processes_naming(marker):
    """[(pid, command line)] of live processes, this one excepted, whose
    command line or environment contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        texts = []
        for name in ("cmdline", "environ"):
            try:
                with open("/proc/%s/%s" % (entry, name), "rb") as f:
                    texts.append(f.read().replace(b"\0", b" ").decode(
                        "utf-8", "replace"))
            except OSError:
                texts.append("")
        if any(marker in t for t in texts) and pid_alive(int(entry)):
            found.append((int(entry), texts[0]))
    return found


def pid_alive(pid):
    """True if `pid` runs and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def vm_hwm_kib(pid):
    """Peak resident memory of a live process, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def read_json_lines(path):
    """The complete lines of a JSON-lines file. A last line without its
    newline is one the writer has not finished (the file may be read while
    a trainer writes it) and is left out; any other bad line raises."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def final_eval(path, trainer_id=None):
    """The last eval line (of `trainer_id`, if given) of a metrics file."""
    evals = [m for m in read_json_lines(path) if m.get("event") == "eval" and
             (trainer_id is None or m.get("trainer_id") == trainer_id)]
    return evals[-1] if evals else None


def read_port(path):
    """The port a server wrote to `path` (--port_file), or None while the
    file is missing or not yet whole."""
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def wait_for(predicate, timeout, interval=0.05):
    """Polls predicate() until it returns a true value or `timeout` passes;
    returns the last value."""
    limit = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > limit:
            return value
        time.sleep(interval)


class Collector(object):
    """Reads a pipe in a thread, keeping everything."""

    def __init__(self, pipe):
        self._chunks = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(pipe,))
        self._thread.daemon = True
        self._thread.start()

    def _run(self, pipe):
        for line in iter(pipe.readline, ""):
            with self._lock:
                self._chunks.append(line)
        pipe.close()

    def text(self):
        with self._lock:
            return "".join(self._chunks)

    def join(self, timeout=10):
        self._thread.join(timeout)
        return self.text()


class ProcessTestCase(unittest.TestCase):
    """Gives each test a fresh folder (self.tmp) and checks afterwards that
    no pserver or trainer started with that folder in its command line is
    still running. Every process a test starts must mention self.tmp (a
    port file, log or metrics path in it)."""

    maxDiff = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="shardps-test-")
        self._popens = []

    def tearDown(self):
        for p in self._popens:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
                p.wait()
        leftovers = []
        for binary in (pserver_bin(), trainer_bin()):
            leftovers += processes_matching(binary, self.tmp)
        if leftovers:
            # A process may be between SIGTERM and exit: give it a second.
            wait_for(lambda: not any(pid_alive(pid) for pid, _ in leftovers),
                     1)
            leftovers = [(pid, cmd) for pid, cmd in leftovers
                         if pid_alive(pid)]
        for pid, _ in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if leftovers:
            self.fail("processes left behind:\n" + "\n".join(
                "  %d %s" % (pid, cmd) for pid, cmd in leftovers))
        if os.environ.get("SHARDPS_TEST_KEEP_TMP"):
            sys.stderr.write("kept %s\n" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def popen(self, argv, **kwargs):
        """Starts a process in its own process group, killed at tearDown."""
        kwargs.setdefault("env", clean_env())
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("preexec_fn", _die_with_parent)
        p = subprocess.Popen(argv, **kwargs)
        self._popens.append(p)
        return p

    def start_pserver(self, name="ps", extra=(), num_trainers=1, port=0,
                      env=None, max_open_files=None):
        """Starts a pserver on `port` (0: a free one), appending to
        tmp/NAME.log, under an open-file limit of `max_open_files` (soft
        and hard) when given; returns (popen, port, log)."""
        port_file = os.path.join(self.tmp, name + ".port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        log = os.path.join(self.tmp, name + ".log")
        with open(log, "ab") as f:
            limit = ([] if max_open_files is None else
                     ["prlimit", "--nofile=%d:%d" % (max_open_files,
                                                     max_open_files), "--"])
            p = self.popen(limit + [pserver_bin(), "--port=%d" % port,
                            "--host=127.0.0.1", "--port_file=" + port_file,
                            "--num_gradient_servers=%d" % num_trainers] +
                           list(extra), stdout=f, stderr=subprocess.STDOUT,
                           env=env or clean_env())

        def port():
            if p.poll() is not None:
                return -1
            return read_port(port_file)

        got = wait_for(port, 30)
        if not got or got < 0:
            with open(log) as f:
                self.fail("pserver did not come up (%r):\n%s" % (got, f.read()))
        return p, got, log

    def run_cluster(self, own_args=(), trainer_args=(), timeout=120,
                    log_dir=None):
        """Runs scripts/cluster/local_cluster.py to the end. Returns (completed
        process, summary dict)."""
        log_dir = log_dir or os.path.join(self.tmp, "logs")
        argv = [sys.executable, LOCAL_CLUSTER, "--bin_dir", BIN_DIR,
                "--log_dir", log_dir, "--timeout", str(timeout)
                ] + list(own_args) + ["--"] + list(trainer_args)
        r = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           env=clean_env(), timeout=timeout + 30,
                           preexec_fn=_die_with_parent)
        summary_path = os.path.join(log_dir, "summary.json")
        summary = None
        if os.path.exists(summary_path):
            with open(summary_path) as f:
                summary = json.load(f)
        return r, summary


# The exit status of a test program all of whose tests were skipped; ctest
# lists it as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt) rather
# than passed.
SKIPPED_ALL = 77


def main():
    """unittest.main(), after taking --bin_dir DIR off the command line.
    Exits SKIPPED_ALL when every test was skipped."""
    global BIN_DIR
    argv = list(sys.argv)
    for i, a in enumerate(argv):
        if a == "--bin_dir" and i + 1 < len(argv):
            BIN_DIR = argv[i + 1]
            del argv[i:i + 2]
            break
        if a.startswith("--bin_dir="):
            BIN_DIR = a.split("=", 1)[1]
            del argv[i]
            break
    BIN_DIR = os.path.abspath(BIN_DIR)
    for b in (pserver_bin(), trainer_bin()):
        if not os.access(b, os.X_OK):
            sys.stderr.write("missing %s: build with cmake --build %s "
                             "--target pserver trainer\n" % (b, BIN_DIR))
            sys.exit(2)
    program = unittest.main(argv=argv, verbosity=2, exit=False)
    result = program.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(SKIPPED_ALL)
    sys.exit(0)
