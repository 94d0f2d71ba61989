#!/usr/bin/env python3
"""configs/mpi/shardps_mpi.sh (scripts/cluster/scheduler_launch.py's
`task mpi`) under Open MPI's mpirun, on loopback:
pservers and trainers of one job as the ranks of one mpirun, trainer ids
from the rank; a full sync pass of Fashion-MNIST; a trainer that fails at
start, a pserver that cannot start, a pserver killed mid-run (mpirun exits
non-zero, soon, saying why); mpirun killed with SIGKILL (every rank stops).

    python3 tests/mpi_test.py [--bin_dir build] [-k pattern]

Skipped when there is no Open MPI mpirun (Debian: apt-get install
openmpi-bin). Open MPI is kept to loopback (--mca btl self,tcp, and
btl_tcp_if_include / oob_tcp_if_include lo); as root, the test sets
OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM for mpirun.
Besides the pservers and trainers (testlib.ProcessTestCase), every test
checks that no process whose command line or environment names its folder
(mpirun, the ranks' shells) is left. About 25 s on 2 cores.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest

import testlib
from testlib import Collector, clean_env, pid_alive, wait_for

SCRIPT = os.path.join(testlib.REPO, "configs", "mpi", "shardps_mpi.sh")
MPIRUN = shutil.which("mpirun")
# More ranks than cores, no core binding (the binaries are multi-threaded),
# and nothing but loopback for Open MPI's own traffic.
MPIRUN_OPTIONS = ["--oversubscribe", "--bind-to", "none",
                  "--mca", "btl", "self,tcp",
                  "--mca", "btl_tcp_if_include", "lo",
                  "--mca", "oob_tcp_if_include", "lo"]


def open_mpi_version():
    """'4.1.4' when `mpirun` is Open MPI's, else None."""
    if not MPIRUN:
        return None
    try:
        out = subprocess.run([MPIRUN, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\(Open MPI\) (\S+)", out)
    return m.group(1) if m else None


def mpirun_env():
    """The tests' clean environment, without anything of an enclosing MPI
    job; as root, with Open MPI's consent to run as root."""
    env = {k: v for k, v in clean_env().items()
           if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "ORTE_"))}
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


class MpiTest(testlib.ProcessTestCase):

    @classmethod
    def setUpClass(cls):
        if not MPIRUN:
            raise unittest.SkipTest("no mpirun on PATH (Debian: apt-get "
                                    "install openmpi-bin)")
        if not open_mpi_version():
            raise unittest.SkipTest("%s is not Open MPI's mpirun" % MPIRUN)

    def setUp(self):
        super(MpiTest, self).setUp()
        self.dir = os.path.join(self.tmp, "run")

    def tearDown(self):
        """Stops an mpirun still running (a failed test) with SIGTERM; fails
        on (and kills) any process left that names self.tmp; then
        ProcessTestCase's checks."""
        for p in self._popens:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    pass
        left = []
        if not wait_for(lambda: not testlib.processes_naming(self.tmp), 5):
            left = testlib.processes_naming(self.tmp)
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        super(MpiTest, self).tearDown()
        if left:
            self.fail("processes left behind:\n" + "\n".join(
                "  %d %s" % (pid, cmd) for pid, cmd in left))

    # Helpers ------------------------------------------------------------

    def variables(self, **extra):
        """The script's variables for a test: its folder, the binaries,
        pservers on loopback, bounded trainer waits."""
        v = {"SHARDPS_MPI_DIR": self.dir,
             "SHARDPS_MPI_BIN_DIR": testlib.BIN_DIR,
             "SHARDPS_MPI_PSERVER_FLAGS": "--host=127.0.0.1",
             "SHARDPS_MPI_TRAINER_FLAGS":
                 "--rpc_retry_s=30 --ready_timeout_s=60",
             "SHARDPS_MPI_START_TIMEOUT_S": "30"}
        v.update({k: str(x) for k, x in extra.items()})
        return v

    def start_mpirun(self, apps, variables):
        """Starts mpirun with app contexts `apps` [(np, script arguments)],
        each given `variables` with -x (mpirun's -x is per app context).
        Returns (popen, stdout Collector, stderr Collector)."""
        # Open MPI's session folder in ours: removed with it, even after
        # an mpirun killed with SIGKILL.
        argv = [MPIRUN] + MPIRUN_OPTIONS + ["--mca", "orte_tmpdir_base",
                                            self.tmp]
        for i, (np, args) in enumerate(apps):
            if i:
                argv.append(":")
            argv += ["-np", str(np)]
            for k in sorted(variables):
                argv += ["-x", "%s=%s" % (k, variables[k])]
            argv += [SCRIPT] + list(args)
        p = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=mpirun_env())
        return p, Collector(p.stdout), Collector(p.stderr)

    def finish(self, started, timeout):
        """Waits for mpirun; returns (exit status, stdout, stderr,
        seconds). Past `timeout`, SIGTERM (mpirun stops the job), then
        SIGKILL, and the test fails."""
        p, out, err = started
        t0 = time.monotonic()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            self.fail("mpirun did not end within %d s:\n%s%s\n%s" % (
                timeout, out.join(), err.join(), self.logs()))
        return p.returncode, out.join(), err.join(), time.monotonic() - t0

    def run_mpirun(self, apps, variables, timeout):
        return self.finish(self.start_mpirun(apps, variables), timeout)

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read()

    def logs(self):
        """Every log of the run folder, for failure messages."""
        out = []
        for name in sorted(os.listdir(self.dir)) if os.path.isdir(
                self.dir) else []:
            if name.endswith(".log"):
                out.append("--- %s\n%s" % (name, self.read(name)[-3000:]))
        return "\n".join(out)

    def first_line(self, name):
        """The line the script writes first (the command, as printf %q
        quotes it: commas come as \\,)."""
        return self.read(name).split("\n", 1)[0].replace("\\,", ",")

    # Tests --------------------------------------------------------------

    def test_sync_pass_two_pservers_two_trainers(self):
        """mpirun -np 4 with SHARDPS_MPI_PSERVERS=2: ranks 0 and 1 serve,
        ranks 2 and 3 are trainers 0 and 1; one sync pass of the default
        config reaches 0.80; mpirun exits 0 once the pservers have stopped
        on SIGTERM."""
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("a-job-token-of-the-tests-own")
        code, out, err, seconds = self.run_mpirun(
            [(4, ["--mode=sync"])], self.variables(
                SHARDPS_MPI_PSERVERS=2, SHARDPS_MPI_AUTH_TOKEN_FILE=token),
            timeout=100)
        self.assertEqual(code, 0, out + err + self.logs())
        self.assertNotIn("shardps_mpi.sh", err)
        for r in (0, 1):
            name = "pserver-%d.log" % r
            self.assertIn("shardps_mpi.sh: rank %d of 4 " % r,
                          self.first_line(name))
            self.assertIn("--port_file=", self.first_line(name))
            log = self.read(name)
            for k in (0, 1):
                self.assertIn("trainer %d registered" % k, log)
            self.assertIn("signal 15: shutting down", log)
            self.assertIn("(token, ", log)  # "... on HOST:PORT (token, ..."
            self.assertNotIn("names no flag", log)
        addresses = self.read("pservers").strip().split(",")
        self.assertEqual(len(addresses), 2, addresses)
        for a in addresses:
            self.assertRegex(a, r"^127\.0\.0\.1:\d+$")
        evals = []
        for k in (0, 1):
            first = self.first_line("trainer-%d.log" % k)
            self.assertIn("shardps_mpi.sh: rank %d of 4 " % (k + 2), first)
            self.assertIn("--trainer_id=%d " % k, first)
            self.assertIn("--num_gradient_servers=2 ", first)
            self.assertIn("--pservers=" + ",".join(addresses), first)
            self.assertIn("fmnist_mlp.pbtxt", first)
            ev = testlib.final_eval(self.path("trainer-%d.jsonl" % k))
            self.assertIsNotNone(ev, self.logs())
            self.assertEqual(ev["trainer_id"], k)
            self.assertEqual(ev["final"], 1)
            self.assertEqual(ev["step"], 468)  # 30,000 records / 64
            self.assertGreaterEqual(ev["test_accuracy"], 0.80)
            evals.append(ev)
        self.assertEqual(evals[0]["test_accuracy"], evals[1]["test_accuracy"])
        self.assertEqual(
            [n for n in os.listdir(self.dir) if n.startswith(".rendezvous-")],
            [],
            "the rendezvous folder is removed at a clean end")
        sys.stderr.write("[accuracy %.4f, mpirun %.1f s] " %
                         (evals[0]["test_accuracy"], seconds))

    def test_trainer_fails_at_start_mpmd(self):
        """The MPMD form (first app context: the pservers, P from its size):
        a trainer refusing its flags stops the job; mpirun exits with the
        trainer's status, 2, and says why."""
        code, out, err, seconds = self.run_mpirun(
            [(1, []), (1, ["--mode=bogus"])], self.variables(), timeout=60)
        self.assertEqual(code, 2, out + err + self.logs())
        self.assertLess(seconds, 30)
        self.assertIn("trainer 0 exited with status 2", err)
        self.assertIn("--mode=bogus", err)
        self.assertIn("--mode", self.read("trainer-0.log").split("\n", 1)[1])
        self.assertIn("shardps_mpi.sh: rank 1 of 2 ",
                      self.first_line("trainer-0.log"))
        self.assertIn("shardps_mpi.sh: rank 0 of 2 ",
                      self.first_line("pserver-0.log"))

    def test_bad_settings(self):
        """Settings the launcher refuses: every rank says why, mpirun exits
        2 at once, and no binary starts."""
        cases = [
            ({"SHARDPS_MPI_PSERVERS": 2}, "SHARDPS_MPI_PSERVERS=2: need "
             "1 <= P < 2 (the job's tasks), so that there is at least one "
             "trainer"),
            ({"SHARDPS_MPI_START_TIMEOUT_S": "1m"},
             "SHARDPS_MPI_START_TIMEOUT_S=1m is not a whole number"),
            ({"SHARDPS_MPI_TRAINER_FLAGS": "--trainer_id=3"},
             "the trainer flags may not set --trainer_id: the launcher sets"
             " it"),
            ({"SHARDPS_MPI_BIN_DIR": self.tmp},
             "no executable %s/pserver/pserver (set SHARDPS_MPI_BIN_DIR"
             % self.tmp)]
        for extra, message in cases:
            code, out, err, _ = self.run_mpirun(
                [(2, [])], self.variables(**extra), timeout=30)
            self.assertEqual(code, 2, out + err)
            self.assertIn("shardps_mpi.sh: error: " + message, err)
            self.assertFalse(os.path.exists(self.path("pserver-0.log")))

    def test_pserver_cannot_listen(self):
        """SHARDPS_MPI_PORT names a port already taken: the pserver exits 1
        at start, so does mpirun, at once, naming the cause."""
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err, seconds = self.run_mpirun(
            [(2, [])], self.variables(SHARDPS_MPI_PORT=port), timeout=60)
        self.assertEqual(code, 1, out + err + self.logs())
        self.assertLess(seconds, 30)
        self.assertIn("pserver 0 exited with status 1 before serving", err)
        self.assertIn("cannot listen on 127.0.0.1:%d" % port, err)
        self.assertIn("cannot listen", self.read("pserver-0.log"))
        self.assertFalse(os.path.exists(self.path("trainer-0.jsonl")))

    def test_pserver_killed(self):
        """A pserver killed with SIGKILL while the trainers run: its rank
        exits with 137, mpirun stops the trainers and exits 137 within
        seconds (the trainers' --rpc_retry_s is not waited for)."""
        started = self.start_mpirun(
            [(3, ["--num_passes=20", "--log_every_steps=10"])],
            self.variables())

        def stepped():
            return [m for m in testlib.read_json_lines(
                self.path("trainer-1.jsonl")) if m.get("event") == "step"]

        self.assertTrue(wait_for(stepped, 60), started[2].text() + self.logs())
        pservers = testlib.processes_matching(testlib.pserver_bin(), self.tmp)
        self.assertEqual(len(pservers), 1, pservers)
        os.kill(pservers[0][0], signal.SIGKILL)
        code, out, err, seconds = self.finish(started, 60)
        self.assertEqual(code, 137, out + err + self.logs())
        self.assertLess(seconds, 15)
        self.assertRegex(err, r"pserver 0 \(127\.0\.0\.1:\d+\) exited with "
                         r"status 137 while the trainers ran")
        self.assertIsNone(testlib.final_eval(self.path("trainer-0.jsonl")))
        sys.stderr.write("[mpirun ended %.1f s after the kill] " % seconds)

    def test_mpirun_killed(self):
        """mpirun killed with SIGKILL: every rank notices its launcher is
        gone, stops its binary and exits (checked by tearDown)."""
        p, _, err = self.start_mpirun(
            [(3, ["--num_passes=20", "--log_every_steps=10"])],
            self.variables())
        self.assertTrue(wait_for(lambda: testlib.read_json_lines(
            self.path("trainer-1.jsonl")), 60), err.text() + self.logs())
        p.kill()
        p.wait()
        killed_at = time.monotonic()
        self.assertTrue(
            wait_for(lambda: not testlib.processes_naming(self.tmp), 10),
            testlib.processes_naming(self.tmp))
        sys.stderr.write("[all gone %.1f s after mpirun] " %
                         (time.monotonic() - killed_at))
        # (A trainer may fail on its stopped pserver before it notices.)
        self.assertIn("mpirun is gone: stopping pserver 0",
                      self.read("pserver-0.log"))


if __name__ == "__main__":
    testlib.main()
