#!/usr/bin/env python3
"""configs/slurm/shardps.sbatch (scripts/cluster/scheduler_launch.py's
`slurm-job`) under a real Slurm: a one-node cluster that
this test starts itself in a temporary folder (munged with its own key and
socket, slurmctld and slurmd in the foreground, a slurm.conf of its own on
free ports), then sbatch jobs of pservers and trainers: a full sync pass of
Fashion-MNIST on 2 pservers and 2 trainers; a trainer flag with a typo (the
job fails with the trainers' exit status 2 and the error in their logs); a
trainer flag given to the pservers (the job fails before any trainer
starts, showing the pserver's error); a pserver killed mid-run (the job
fails at once instead of waiting on it); scancel (final checkpoints).

    python3 tests/slurm_test.py [--bin_dir build] [-k pattern]

Skipped, saying why, when Slurm cannot run here: its programs are missing
(Debian: apt-get install slurm-wlm munge), the test does not run as root
(slurmd must), munged or a Slurm daemon does not start, or the node does not
register or run `srun true`. Every test checks that no pserver or trainer
it started is left (testlib.ProcessTestCase); at the end the daemons are
stopped and no process whose command line or environment names the
cluster's folder (slurmstepd, srun, the batch scripts) may be left. Where
`unshare` works (root, a kernel and container that allow PID namespaces),
each daemon is the first process of its own PID namespace, so a test
killed outright (ctest's TIMEOUT) takes slurmd and every process of its
jobs with it; elsewhere such a kill can leave a job's processes behind.
About 25 s on 2 cores.
"""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import testlib
from testlib import clean_env, final_eval, read_json_lines, wait_for

SCRIPT = os.path.join(testlib.REPO, "configs", "slurm", "shardps.sbatch")
SWEEP = os.path.join(testlib.REPO, "scripts", "sweep", "sweep.py")
MLP = os.path.join(testlib.REPO, "configs", "fmnist_mlp.pbtxt")
# The daemons live in sbin, which a user's PATH may lack.
SEARCH_PATH = os.pathsep.join(
    [os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin",
     "/usr/bin", "/usr/local/bin"])
PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun",
            "scontrol", "squeue", "scancel", "sinfo")
NODE = "localhost"
# Tasks the node offers (SlurmdParameters=config_overrides lets it claim
# more CPUs than the machine has): 2 pservers and 2 trainers at most here.
NODE_CPUS = max(4, os.cpu_count() or 1)
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY")
STEPS_PER_PASS = 468  # 60,000 records / 2 trainers / batch 64


def free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(%s)" % e


class SlurmCluster(object):
    """munged, slurmctld and slurmd for one node, everything in `root`."""

    def __init__(self, root):
        self.root = root
        self.conf = os.path.join(root, "slurm.conf")
        self.socket = os.path.join(root, "munge", "munge.socket")
        self.daemons = []  # (name, popen, output file)
        self.programs = {}
        self.namespace = []  # the unshare command that daemons run under

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def env(self, **extra):
        """The tests' clean environment, pointed at this cluster."""
        return clean_env(SLURM_CONF=self.conf, PATH=SEARCH_PATH, **extra)

    def command(self, argv, timeout=30):
        """Runs a Slurm client; returns (exit status, stdout + stderr)."""
        try:
            r = subprocess.run([self.programs[argv[0]]] + list(argv[1:]),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               universal_newlines=True, env=self.env(),
                               timeout=timeout,
                               preexec_fn=testlib._die_with_parent)
        except subprocess.TimeoutExpired:
            return -1, "%s: no answer within %d s" % (argv[0], timeout)
        return r.returncode, r.stdout

    # Start --------------------------------------------------------------

    def start(self):
        """Starts the cluster; raises unittest.SkipTest saying why when
        Slurm cannot run here."""
        for name in PROGRAMS:
            found = shutil.which(name, path=SEARCH_PATH)
            if not found:
                raise unittest.SkipTest(
                    "%s not found (on PATH, /usr/sbin, /sbin): install the "
                    "Debian packages slurm-wlm and munge" % name)
            self.programs[name] = found
        if os.geteuid() != 0:
            raise unittest.SkipTest(
                "not root: slurmd must run as root to start job steps")
        host = socket.gethostname()
        try:
            socket.gethostbyname(host)
        except OSError:
            raise unittest.SkipTest(
                "this machine's host name %r does not resolve, and the "
                "pservers publish it as their address" % host)
        unshare = shutil.which("unshare", path=SEARCH_PATH)
        if unshare:
            argv = [unshare, "--pid", "--fork", "--mount-proc",
                    "--kill-child=SIGKILL"]
            if subprocess.run(argv + ["true"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                self.namespace = argv
        # munged wants every folder on its socket's path searchable by all.
        os.chmod(self.root, 0o755)
        self.start_munged()
        self.write_conf()
        self.start_daemon("slurmctld", ["-D", "-i"])
        self.wait_controller()
        self.start_daemon("slurmd", ["-D", "-N", NODE])
        self.wait_node_idle()
        self.run_smoke_job()

    def start_daemon(self, name, args):
        """Starts a daemon in the foreground. Where unshare works, it runs
        as the first process of a PID namespace of its own, so that
        whatever it starts (slurmd: slurmstepd, the jobs' scripts, srun,
        pservers and trainers) is killed with it, even when this test is
        killed (ctest's TIMEOUT) and the daemon gets its SIGKILL."""
        out = self.path(name + ".out")
        with open(out, "ab") as f:
            p = subprocess.Popen(self.namespace + [self.programs[name]] + args,
                                 stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=self.env(),
                                 cwd=self.root, start_new_session=True,
                                 preexec_fn=testlib._die_with_parent)
        self.daemons.append((name, p, out))
        return p

    def check_daemons(self, doing):
        for name, p, out in self.daemons:
            if p.poll() is not None:
                raise unittest.SkipTest(
                    "%s exited with status %d while %s; its output:\n%s" %
                    (name, p.returncode, doing, tail(out)))

    def start_munged(self):
        os.mkdir(self.path("munge"), 0o755)
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, stat.S_IRUSR | stat.S_IWUSR)
        self.start_daemon("munged", [
            "--foreground", "--socket=" + self.socket, "--key-file=" + key,
            "--log-file=" + self.path("munge", "munged.log"),
            "--pid-file=" + self.path("munge", "munged.pid"),
            "--seed-file=" + self.path("munge", "munged.seed"),
            "--num-threads=2"])

        def works():
            self.check_daemons("starting")
            if not os.path.exists(self.socket):
                return False
            r = subprocess.run(
                [self.programs["munge"], "--socket=" + self.socket, "-n"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return r.returncode == 0

        if not wait_for(works, 15, 0.1):
            raise unittest.SkipTest(
                "munged does not answer on %s within 15 s; its output:\n%s" %
                (self.socket, tail(self.path("munged.out"))))

    def write_conf(self):
        for d in ("state", "spool", "log"):
            os.mkdir(self.path(d))
        user = subprocess.run(["id", "-un"], stdout=subprocess.PIPE,
                              universal_newlines=True).stdout.strip()
        lines = [
            "ClusterName=shardpstest",
            "SlurmctldHost=%s(127.0.0.1)" % NODE,
            "SlurmctldPort=%d" % free_port(),
            "SlurmdPort=%d" % free_port(),
            "SlurmUser=%s" % user,
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.socket,
            "StateSaveLocation=%s" % self.path("state"),
            "SlurmdSpoolDir=%s" % self.path("spool"),
            "SlurmctldPidFile=%s" % self.path("slurmctld.pid"),
            "SlurmdPidFile=%s" % self.path("slurmd.pid"),
            "SlurmctldLogFile=%s" % self.path("log", "slurmctld.log"),
            "SlurmdLogFile=%s" % self.path("log", "slurmd.log"),
            # Not /etc/slurm/plugstack.conf: no site plugins.
            "PlugStackConfig=%s" % self.path("plugstack.conf"),
            "MailProg=/bin/true",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=5",
            "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN" %
            (NODE, NODE_CPUS),
            "PartitionName=test Nodes=%s Default=YES MaxTime=10 State=UP" %
            NODE,
        ]
        with open(self.path("plugstack.conf"), "w"):
            pass
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def wait_controller(self):
        def up():
            self.check_daemons("starting")
            code, out = self.command(["scontrol", "ping"], timeout=10)
            return code == 0 and "UP" in out

        if not wait_for(up, 30, 0.2):
            raise unittest.SkipTest(
                "slurmctld does not answer within 30 s; its log:\n%s" %
                tail(self.path("log", "slurmctld.log")))

    def wait_node_idle(self):
        state = [""]

        def idle():
            self.check_daemons("waiting for the node")
            code, out = self.command(
                ["sinfo", "--noheader", "--Node", "--nodes=" + NODE,
                 "--format=%T"], timeout=10)
            state[0] = out.strip()
            return code == 0 and state[0] == "idle"

        if not wait_for(idle, 30, 0.2):
            raise unittest.SkipTest(
                "node %s not idle within 30 s of slurmd's start (state %r); "
                "slurmd's log:\n%s" % (NODE, state[0],
                                       tail(self.path("log", "slurmd.log"))))

    def run_smoke_job(self):
        """srun true: the node must run a job step, not just look idle."""
        code, out = self.command(
            ["srun", "--immediate=20", "--ntasks=1", "--time=1",
             "--job-name=smoke", "true"], timeout=40)
        self.check_daemons("running `srun true`")
        if code != 0:
            raise unittest.SkipTest(
                "`srun true` failed (%s): %s\nslurmd's log:\n%s" % (
                    "no answer within 40 s" if code < 0 else "exit %d" % code,
                    out.strip(), tail(self.path("log", "slurmd.log"))))

    # Stop ---------------------------------------------------------------

    def stop(self):
        """Cancels what runs, stops the daemons (SIGTERM, then SIGKILL after
        10 s), kills any process still naming the cluster's folder. Returns
        those processes, [(pid, command line)]."""
        if any(name == "slurmctld" and p.poll() is None
               for name, p, _ in self.daemons):
            self.command(["scancel", "--partition=test"], timeout=10)
            wait_for(lambda: not self.command(
                ["squeue", "--noheader"], timeout=10)[1].strip(), 20, 0.2)
        for _name, p, _out in reversed(self.daemons):
            # The group: unshare ignores SIGTERM, the daemon gets it.
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        left = []
        if not wait_for(lambda: not testlib.processes_naming(self.root), 5,
                        0.1):
            left = testlib.processes_naming(self.root)
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return left


class SlurmTest(testlib.ProcessTestCase):

    cluster = None

    @classmethod
    def setUpClass(cls):
        root = tempfile.mkdtemp(prefix="shardps-slurm-")
        cluster = SlurmCluster(root)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
            raise
        cls.cluster = cluster

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is None:
            return
        left = cls.cluster.stop()
        if os.environ.get("SHARDPS_TEST_KEEP_TMP"):
            sys.stderr.write("kept %s\n" % cls.cluster.root)
        else:
            shutil.rmtree(cls.cluster.root, ignore_errors=True)
        if left:
            raise AssertionError("processes left behind:\n" + "\n".join(
                "  %d %s" % (pid, cmd) for pid, cmd in left))

    def setUp(self):
        super(SlurmTest, self).setUp()
        self.dir = os.path.join(self.tmp, "job")
        self.job_out = os.path.join(self.tmp, "job.out")
        self.jobs = []

    def tearDown(self):
        """Cancels this test's jobs still running and waits for them to end
        (scancel); then ProcessTestCase's checks."""
        for job in self.jobs:
            if self.job_state(job)[0] not in FINAL_STATES:
                self.cluster.command(["scancel", job])
                wait_for(lambda: self.job_state(job)[0] in FINAL_STATES, 30,
                         0.2)
        super(SlurmTest, self).tearDown()

    # Helpers ------------------------------------------------------------

    def submit(self, pservers, trainers, args=(), tasks=None, **variables):
        """sbatch SCRIPT with SHARDPS_SLURM_<NAME>=value for each keyword
        argument (and `tasks`, sbatch's task options, instead of
        --ntasks=P+N); returns the job id."""
        env = self.cluster.env(SHARDPS_SLURM_BIN_DIR=testlib.BIN_DIR,
                               SHARDPS_SLURM_DIR=self.dir,
                               SHARDPS_SLURM_PSERVERS=pservers)
        env.update({"SHARDPS_SLURM_" + k.upper(): str(v)
                    for k, v in variables.items()})
        r = subprocess.run(
            [self.cluster.programs["sbatch"], "--parsable",
             ] + (tasks or ["--ntasks=%d" % (pservers + trainers)]) + [
             "--time=5",
             "--output=" + self.job_out, SCRIPT] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, env=env, cwd=self.tmp, timeout=60,
            preexec_fn=testlib._die_with_parent)
        self.assertEqual(r.returncode, 0, "sbatch failed:\n" + r.stdout)
        job = r.stdout.strip().split(";")[0]
        self.assertRegex(job, r"^\d+$", r.stdout)
        self.jobs.append(job)
        return job

    def job_state(self, job):
        """(JobState, ExitCode) of a job, e.g. ("COMPLETED", "0:0")."""
        _, out = self.cluster.command(["scontrol", "--oneliner", "show",
                                       "job", job], timeout=10)
        state = re.search(r"\bJobState=(\S+)", out)
        code = re.search(r"\bExitCode=(\S+)", out)
        return (state.group(1) if state else None,
                code.group(1) if code else None)

    def wait_job(self, job, timeout):
        """Waits for the job to end; returns (JobState, ExitCode)."""
        got = wait_for(lambda: self.job_state(job)[0] in FINAL_STATES,
                       timeout, 0.25)
        self.assertTrue(got, "job %s still %s after %d s:\n%s" % (
            job, self.job_state(job), timeout, self.describe()))
        return self.job_state(job)

    def log(self, name):
        return os.path.join(self.dir, name)

    def read(self, path):
        with open(path, errors="replace") as f:
            return f.read()

    def describe(self):
        """The job's output and the tails of its logs, for messages."""
        parts = ["--- job output:\n" + tail(self.job_out, 40)]
        if os.path.isdir(self.dir):
            for name in sorted(os.listdir(self.dir)):
                if name.endswith(".log"):
                    parts.append("--- %s:\n%s" % (name, tail(self.log(name))))
        return "\n".join(parts)

    # Tests --------------------------------------------------------------

    def test_sync_pass(self):
        """2 pservers and 2 trainers, one sync pass of
        configs/fmnist_mlp.pbtxt (the script's default config): the job
        exits 0, each trainer knows its id and the count from its step, both
        end with the same test accuracy of at least 0.80, and the pservers
        ran with the job's token and were stopped by a signal, not killed."""
        start = time.monotonic()
        job = self.submit(2, 2)
        state, code = self.wait_job(job, 150)
        self.assertEqual((state, code), ("COMPLETED", "0:0"), self.describe())
        out = self.read(self.job_out)
        self.assertIn("every trainer succeeded", out)
        self.assertNotIn("error", out)

        with open(self.log("pservers")) as f:
            addresses = f.read().strip().split(",")
        self.assertEqual(len(addresses), 2, addresses)
        for a in addresses:
            self.assertRegex(a, r"^[^:,\s]+:\d+$")
        self.assertEqual([n for n in os.listdir(self.dir)
                          if n.startswith(".rendezvous-")], [],
                         "the rendezvous folder is removed at the end")
        token = self.log("auth_token")
        self.assertEqual(stat.S_IMODE(os.stat(token).st_mode), 0o600)
        for i in range(2):
            ps_log = self.read(self.log("pserver-%d.log" % i))
            self.assertRegex(ps_log.split("\n", 1)[0],
                             r"^shardps.sbatch: rank %d of 4 on \S+ \(job "
                             r"%s\): \S+/pserver --port=0 " % (i, job))
            self.assertIn("(token, ", ps_log)  # "... on HOST:PORT (token, ..."
            self.assertRegex(ps_log, r"signal \d+: shutting down")
            self.assertNotIn("names no flag", ps_log)

        evals = []
        for k in range(2):
            t_log = self.read(self.log("trainer-%d.log" % k))
            self.assertIn("--pservers=%s --trainer_id=%d " %
                          (",".join(addresses), k), t_log.split("\n", 1)[0])
            self.assertIn('trainer %d: {"event":"eval"' % k, out)
            self.assertIn("trainer %d/2:" % k, t_log)
            self.assertNotIn("names no flag", t_log)
            ev = final_eval(self.log("trainer-%d.jsonl" % k), k)
            self.assertIsNotNone(ev, "no eval line for trainer %d:\n%s" %
                                 (k, self.describe()))
            self.assertEqual((ev["final"], ev["pass"], ev["step"]),
                             (1, 0, STEPS_PER_PASS))
            self.assertGreaterEqual(ev["test_accuracy"], 0.80)
            evals.append(ev)
        self.assertEqual(evals[0]["test_accuracy"], evals[1]["test_accuracy"])
        sys.stderr.write("[accuracy %.4f, job %.1f s] " % (
            evals[0]["test_accuracy"], time.monotonic() - start))

    def test_pserver_beside_each_trainer(self):
        """SHARDPS_SLURM_PSERVERS=beside (docs/performance.md, "Across
        hosts"): a pserver and a trainer on each node; on this one node, one
        of each, the trainer's dense values through shared memory with its
        pserver. A job whose tasks are not two per node is refused, saying
        how to submit it."""
        job = self.submit("beside", 0, ["--max_steps=100"],
                          tasks=["--nodes=1", "--ntasks-per-node=2"])
        state, code = self.wait_job(job, 120)
        self.assertEqual((state, code), ("COMPLETED", "0:0"), self.describe())
        out = self.read(self.job_out)
        self.assertIn("1 pserver(s) (one beside each trainer), 1 trainer(s)",
                      out)
        t_log = self.read(self.log("trainer-0.log"))
        self.assertIn("dense values through shared memory with 1 of 1 "
                      "pservers", t_log)
        ev = final_eval(self.log("trainer-0.jsonl"), 0)
        self.assertIsNotNone(ev, self.describe())
        self.assertEqual(ev["step"], 100)

        job = self.submit("beside", 0, tasks=["--ntasks=3"])
        state, code = self.wait_job(job, 60)
        self.assertEqual(state, "FAILED", self.describe())
        self.assertIn("runs a pserver and a trainer on each node: the job has "
                      "3 task(s) on 1 node(s); submit with sbatch --nodes=N "
                      "--ntasks-per-node=2", self.read(self.job_out))

    def test_trainer_flag_typo(self):
        """A misspelt trainer flag: the trainer that fails first stops the
        job (--kill-on-bad-exit), its log and the job's output name the
        flag; the job fails with the trainer's exit status (2), and the
        pserver is stopped by a signal, not killed."""
        job = self.submit(1, 2, ["--num_pass=2"])
        state, code = self.wait_job(job, 60)
        self.assertEqual((state, code), ("FAILED", "2:0"), self.describe())
        out = self.read(self.job_out)
        failed = re.search(r"error: trainer (\d) failed \(exit 2\); see "
                           r"\S+/trainer-\d.log", out)
        self.assertIsNotNone(failed, out)
        self.assertIn("unknown flag --num_pass", self.read(
            self.log("trainer-%s.log" % failed.group(1))))
        self.assertIn("trainer %s exited with status 2; the end of" %
                      failed.group(1), out)
        self.assertIn("unknown flag --num_pass", out)
        self.assertRegex(self.read(self.log("pserver-0.log")),
                         r"signal \d+: shutting down")

    def test_pserver_flag_for_the_trainers(self):
        """A trainer flag given to the pservers: the pserver stops at start;
        the job fails (1) without starting the trainers, and its output shows
        the pserver's error."""
        job = self.submit(1, 2, pserver_flags="--checkpoint_every_steps=10")
        state, code = self.wait_job(job, 60)
        self.assertEqual((state, code), ("FAILED", "1:0"), self.describe())
        out = self.read(self.job_out)
        self.assertIn("pserver 0 exited with status 2 before serving", out)
        self.assertIn("error: pserver 0 failed (exit 2)", out)
        self.assertIn("unknown flag --checkpoint_every_steps", out)
        self.assertFalse(os.path.exists(self.log("trainer-0.log")))

    def test_pserver_killed(self):
        """A pserver killed with SIGKILL mid-run ends its step
        (--kill-on-bad-exit); the script stops the trainers and the job
        fails at once, saying so, rather than waiting on a dead address."""
        job = self.submit(2, 2, ["--num_passes=20", "--log_every_steps=10"])
        metrics = self.log("trainer-0.jsonl")

        def training():
            steps = [m["step"] for m in read_json_lines(metrics)
                     if m.get("event") == "step"]
            return steps and steps[-1] >= 20

        self.assertTrue(wait_for(training, 90, 0.1),
                        "no progress:\n" + self.describe())
        binary = testlib.pserver_bin()
        victims = [pid for pid, cmd in testlib.processes_matching(
            binary, self.dir) if cmd.startswith(binary + " ") and
            "pserver-1.port" in cmd]
        self.assertEqual(len(victims), 1, testlib.processes_matching(
            binary, self.dir))
        os.kill(victims[0], signal.SIGKILL)
        killed = time.monotonic()
        state, code = self.wait_job(job, 60)
        took = time.monotonic() - killed
        self.assertEqual((state, code), ("FAILED", "1:0"), self.describe())
        self.assertLess(took, 20, "the job ended %.1f s after the kill" % took)
        out = self.read(self.job_out)
        self.assertRegex(out, r"pserver 1 \(\S+:\d+\) exited with status 137 "
                         r"while the trainers ran")
        self.assertIn("error: pserver 1 failed (exit 137)", out)
        steps = [m["step"] for m in read_json_lines(metrics)
                 if m.get("event") == "step"]
        self.assertLess(steps[-1], 20 * STEPS_PER_PASS)
        sys.stderr.write("[job ended %.1f s after the kill] " % took)

    def test_scancel(self):
        """scancel mid-run: Slurm signals every task, each pserver writes a
        final checkpoint into SHARDPS_SLURM_CHECKPOINT_DIR/pserver-<r> and
        stops, and the job ends CANCELLED well before KillWait's SIGKILL."""
        ckpt = os.path.join(self.tmp, "ckpt")
        job = self.submit(1, 1, ["--num_passes=20", "--log_every_steps=10",
                                 "--checkpoint_every_steps=100000"],
                          checkpoint_dir=ckpt)
        metrics = self.log("trainer-0.jsonl")
        self.assertTrue(wait_for(lambda: [
            m for m in read_json_lines(metrics) if m.get("event") == "step"],
            90, 0.1), "no progress:\n" + self.describe())
        self.cluster.command(["scancel", job])
        cancelled = time.monotonic()
        state, _ = self.wait_job(job, 60)
        self.assertEqual(state, "CANCELLED", self.describe())
        # Slurm reports the state after its own clean-up (srun waits up to
        # KillWait + 2 s); the final checkpoint below shows the stop was a
        # signal, not KillWait's SIGKILL.
        self.assertLess(time.monotonic() - cancelled, 20, self.describe())
        ps_log = self.read(self.log("pserver-0.log"))
        self.assertIn("final checkpoint written", ps_log)
        self.assertIn("--checkpoint_dir=%s/pserver-0" % ckpt,
                      ps_log.split("\n", 1)[0])
        self.assertTrue(os.listdir(os.path.join(ckpt, "pserver-0")))

    def test_sweep(self):
        """scripts/sweep/sweep.py --launcher=slurm: the pservers as one srun
        step, each trial's trainers as another (their id from SLURM_PROCID),
        two trials at once; every trial finishes, the trainers of a trial
        agree, and no step is left running afterwards."""
        out = os.path.join(self.tmp, "sweep")
        r = subprocess.run(
            ["/usr/bin/python3", SWEEP, "--bin_dir", testlib.BIN_DIR,
             "--launcher=slurm", "--config", MLP, "--out_dir", out,
             "--grid", "optimizer.learning_rate=0.02,0.1", "--grid",
             "batch_size=32,64", "--parallel", "2", "--early_stopping",
             "none", "--no_plot", "--trainers_per_trial", "1",
             "--srun_args=--time=5", "--", "--max_steps=100"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, env=self.cluster.env(), cwd=self.tmp,
            timeout=240, preexec_fn=testlib._die_with_parent)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:])
        self.assertRegex(r.stdout, r"sweep: 2 pservers \(srun\) at "
                         r"[^:,\s]+:\d+,[^:,\s]+:\d+")
        self.assertIn("sweep: 4 trials: 4 done", r.stdout)
        with open(os.path.join(out, "sweep.json")) as f:
            trials = json.load(f)["trials"]
        for t in trials:
            ev = final_eval(os.path.join(out, "trials", "%03d" % t["id"],
                                         "trainer-0.jsonl"), 0)
            self.assertEqual(ev["step"], 100)
            self.assertEqual(t["final"]["test_accuracy"],
                             ev["test_accuracy"])
        # Nothing left running: a job the sweep cancelled may still be
        # COMPLETING (CG) for a moment while slurmd cleans up; no job may
        # still be pending or running, and the queue must empty.
        deadline = time.monotonic() + 15
        while True:
            _, queue = self.cluster.command(
                ["squeue", "--noheader", "--format=%i %j %t"])
            states = [line.split()[-1] for line in queue.strip().splitlines()]
            self.assertEqual([st for st in states if st != "CG"], [],
                             "left in the queue: " + queue)
            if not states or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertEqual(queue.strip(), "", "left in the queue")


class WithoutSlurmTest(unittest.TestCase):

    def test_outside_a_job(self):
        """Run outside Slurm, the script says how to submit it."""
        r = subprocess.run(["bash", SCRIPT], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True,
                           env=clean_env(), timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("submit this file with sbatch --ntasks=P+N", r.stdout)


if __name__ == "__main__":
    testlib.main()
