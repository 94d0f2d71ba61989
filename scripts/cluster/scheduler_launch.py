#!/usr/bin/env python3
"""One ShardPS job under Slurm or Open MPI: what configs/slurm/shardps.sbatch
and configs/mpi/shardps_mpi.sh run.

    scheduler_launch.py slurm-job [TRAINER FLAGS...]      # the batch script
    scheduler_launch.py task slurm|mpi [TRAINER FLAGS...]  # every task/rank

Of the job's P + N tasks (Slurm tasks, MPI ranks), tasks 0..P-1 run
pservers and tasks P..P+N-1 trainers (trainer id = task - P). Pserver task
r runs `pserver --port=PORT --port_file=... --num_gradient_servers=N` and,
once it serves, writes HOST:port into the job's rendezvous folder. Trainer
task k waits for the P addresses, runs `trainer --pservers=<them, in order>
--trainer_id=k --num_gradient_servers=N --config=... --metrics_file=...`
and leaves its exit status there. Once every trainer has, each pserver task
stops its pserver (SIGTERM) and exits. A task whose binary fails says why
on stderr, with the end of the binary's log, and exits non-zero; the
scheduler (srun --kill-on-bad-exit, mpirun) then sends SIGTERM to the other
tasks, which pass it on to their binaries. A task whose parent (slurmstepd,
mpirun, orted) is gone stops its binary.

Under Slurm, `slurm-job` runs in the batch script: it checks the settings,
makes the job's token, runs the tasks as one srun step and ends with each
trainer's last eval line. Its exit status: 0 when every trainer succeeded,
1 when a pserver failed, else the status of the first trainer that failed.

Settings are SHARDPS_SLURM_<NAME> or SHARDPS_MPI_<NAME> variables (the
table in docs/deploy.md, "Slurm and MPI"); the binaries do not see them.
Standard library only; Python 3.6 or newer.
"""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Flags that the launcher sets itself, refused in the flag variables.
OWN_FLAGS = {"pserver": ("port", "port_file", "num_gradient_servers"),
             "trainer": ("pservers", "trainer_id", "num_gradient_servers")}


class UsageError(Exception):
    """A setting or the way the job was started is wrong: exit status 2."""


class Failure(Exception):
    """This task failed: `status`, and the log whose end shows why."""

    def __init__(self, status, log, message):
        Exception.__init__(self, message)
        self.status = status or 1
        self.log = log


class Slurm(object):
    prog = "shardps.sbatch"
    prefix = "SHARDPS_SLURM_"
    launcher = "slurmstepd"
    append_logs = True  # a requeued job keeps the earlier attempt's lines

    def __init__(self, env):
        self.job = env.get("SLURM_JOB_ID", "0")
        self.rank = env.get("SLURM_PROCID")
        self.size = env.get("SLURM_NTASKS")
        self.threads = env.get("SLURM_CPUS_PER_TASK")

    def default_dir(self, env):
        return os.path.join(env.get("SLURM_SUBMIT_DIR", os.getcwd()),
                            "shardps-" + self.job)

    def default_pservers(self, env):
        return "1"

    def check_pservers(self, p):
        pass


class OpenMpi(object):
    prog = "shardps_mpi.sh"
    prefix = "SHARDPS_MPI_"
    launcher = "mpirun"
    append_logs = False  # each mpirun is a new job: earlier files go

    def __init__(self, env):
        self.job = env.get("OMPI_MCA_ess_base_jobid",
                           env.get("PMIX_NAMESPACE", "0"))
        self.rank = env.get("OMPI_COMM_WORLD_RANK")
        self.size = env.get("OMPI_COMM_WORLD_SIZE")
        self.threads = None
        self.app_sizes = env.get("OMPI_APP_CTX_NUM_PROCS", "").split()
        self.two_contexts = env.get("OMPI_NUM_APP_CTX") == "2"

    def default_dir(self, env):
        return os.path.join(os.getcwd(), "shardps-mpi")

    def default_pservers(self, env):
        """Two app contexts (MPMD): the first is the pservers."""
        return self.app_sizes[0] if self.two_contexts else "1"

    def check_pservers(self, p):
        if self.two_contexts and self.app_sizes[0] != str(p):
            raise UsageError(
                "SHARDPS_MPI_PSERVERS=%d but mpirun's first app context (the "
                "pservers) has %s processes" % (p, self.app_sizes[0]))


def has_flag(name, args):
    """Whether args set --name (or -name)."""
    return any(re.match(r"^--?%s(=|$)" % name, a) for a in args)


class Settings(object):
    """The job's settings from the scheduler's variables, checked."""

    def __init__(self, sched, env, args):
        self.sched = sched
        self.p = sched.prefix
        get = lambda name, default="": env.get(self.p + name, default)
        bin_dir = get("BIN_DIR", os.path.join(REPO, "build"))
        self.pserver_bin = get("PSERVER_BIN",
                               os.path.join(bin_dir, "pserver", "pserver"))
        self.trainer_bin = get("TRAINER_BIN",
                               os.path.join(bin_dir, "trainer", "trainer"))
        self.config = get("CONFIG",
                          os.path.join(REPO, "configs", "fmnist_mlp.pbtxt"))
        self.dir = os.path.abspath(get("DIR", sched.default_dir(env)))
        self.pservers = get("PSERVERS", sched.default_pservers(env))
        self.checkpoint_dir = get("CHECKPOINT_DIR")
        self.token_file = get("AUTH_TOKEN_FILE")
        self.host = get("HOST")
        self.port = self.whole("PORT", get("PORT", "0"))
        self.start_timeout = self.whole("START_TIMEOUT_S",
                                        get("START_TIMEOUT_S", "120"))
        self.stop_timeout = self.whole("STOP_TIMEOUT_S",
                                       get("STOP_TIMEOUT_S", "30"))
        self.rpc_retry_s = self.whole("RPC_RETRY_S", get("RPC_RETRY_S", "60"))
        # Split on white space, no quoting (--flagfile=PATH for spaces).
        self.flags = {"pserver": get("PSERVER_FLAGS").split(),
                      "trainer": get("TRAINER_FLAGS").split() + list(args)}
        self.check()

    def whole(self, name, value):
        if not re.match(r"^[0-9]+$", value):
            raise UsageError("%s%s=%s is not a whole number" %
                             (self.p, name, value))
        return int(value)

    def check(self):
        for role, own in OWN_FLAGS.items():
            for flag in own:
                if has_flag(flag, self.flags[role]):
                    raise UsageError(
                        "the %s flags may not set --%s: the launcher sets it"
                        " (docs/deploy.md, \"Slurm and MPI\")" % (role, flag))
        for b in (self.pserver_bin, self.trainer_bin):
            if not os.access(b, os.X_OK) or os.path.isdir(b):
                raise UsageError(
                    "no executable %s (set %sBIN_DIR, or %sPSERVER_BIN and "
                    "%sTRAINER_BIN)" % (b, self.p, self.p, self.p))
        if not has_flag("config", self.flags["trainer"]) and \
                not os.access(self.config, os.R_OK):
            raise UsageError("cannot read the config %s (set %sCONFIG)" %
                             (self.config, self.p))

    def num_pservers(self, size):
        """P, checked against the job's `size` tasks."""
        p = self.whole("PSERVERS", self.pservers)
        if not 1 <= p < size:
            raise UsageError(
                "%sPSERVERS=%d: need 1 <= P < %d (the job's tasks), so that "
                "there is at least one trainer" % (self.p, p, size))
        self.sched.check_pservers(p)
        return p

    def token(self):
        """--auth_token_file's value; "" for none."""
        return "" if self.token_file == "none" else self.token_file

    def rendezvous(self):
        return os.path.join(self.dir, ".rendezvous-" + self.sched.job)

    def child_env(self):
        """The environment without our variables (a binary would report
        each SHARDPS_ variable that names no flag of its own)."""
        return {k: v for k, v in os.environ.items()
                if not k.startswith(self.p)}


def write_atomically(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def read_file(path):
    """The file's text, stripped; "" when it is missing or empty."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def tail(path, lines=5):
    try:
        with open(path, errors="replace") as f:
            return "".join("    " + l for l in f.readlines()[-lines:])
    except OSError as e:
        return "    (%s)\n" % e


def exit_status(returncode):
    """A child's exit status as a shell shows it: 128+n for signal n."""
    return 128 - returncode if returncode < 0 else returncode


class Signalled(Exception):
    pass


class Task(object):
    """One task of the job: pserver r (rank r < P) or trainer k (rank P+k).
    Its binary's output goes to DIR/pserver-r.log or DIR/trainer-k.log,
    after one line saying what runs."""

    def __init__(self, settings, rank, size):
        self.s = settings
        self.rank = rank
        self.size = size
        self.p = settings.num_pservers(size)
        self.n = size - self.p
        self.rv = settings.rendezvous()
        self.host = socket.gethostname()
        self.child = None
        self.signalled = None
        self.launcher = os.getppid()

    def say(self, msg):
        try:
            sys.stderr.write("%s: rank %d on %s: %s\n" %
                             (self.s.sched.prog, self.rank, self.host, msg))
            sys.stderr.flush()
        except OSError:  # the launcher is gone
            pass

    def on_signal(self, signum, _):
        """The first signal ends the task once the binary has exited."""
        if self.signalled is None:
            self.signalled = signum
            raise Signalled()

    def wait_after_signal(self):
        """The scheduler signals the binary itself (Open MPI the task's
        process group, Slurm every process of the step); a signal that
        reached this task alone is passed on after 2 s. (Passed on at once,
        it would be the trainer's second: die now, not between steps.)"""
        if self.child is None:
            return
        try:
            self.child.wait(2)
        except subprocess.TimeoutExpired:
            self.child.send_signal(self.signalled)
            self.child.wait()

    def run(self):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        try:
            os.makedirs(self.rv, exist_ok=True)
            if self.rank < self.p:
                self.run_pserver(self.rank)
            else:
                self.run_trainer(self.rank - self.p)
            return 0
        except Signalled:
            self.wait_after_signal()
            return 128 + self.signalled
        except Failure as e:
            role, index = (("pserver", self.rank) if self.rank < self.p else
                           ("trainer", self.rank - self.p))
            write_atomically(self.marker(role, index), str(e.status))
            self.say("%s; the end of %s:\n%s" % (e, e.log, tail(e.log)))
            with open(e.log, "a") as f:
                f.write("%s: %s\n" % (self.s.sched.prog, e))
            return e.status

    def start(self, log, argv):
        with open(log, "a" if self.s.sched.append_logs else "w") as f:
            f.write("%s: rank %d of %d on %s (job %s): %s\n" % (
                self.s.sched.prog, self.rank, self.size, self.host,
                self.s.sched.job, " ".join(argv)))
        # Appending, so that this task's own lines are not overwritten.
        with open(log, "a") as f:
            self.child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=f,
                stderr=subprocess.STDOUT, env=self.s.child_env())

    def orphaned(self):
        """Whether the process that started this task is gone."""
        return os.getppid() != self.launcher

    def stop_orphan(self, what, log):
        with open(log, "a") as f:
            f.write("%s: %s is gone: stopping %s\n" % (
                self.s.sched.prog, self.s.sched.launcher, what))
        if self.child is not None:
            self.child.send_signal(signal.SIGTERM)
        self.on_signal(signal.SIGTERM, None)

    def watch(self, what, log, until, failure):
        """Polls until `until()`; fails with `failure` (formatted with the
        status) when the binary exits first."""
        while not until():
            status = self.child.poll()
            if status is not None:
                raise Failure(exit_status(status), log,
                              failure % exit_status(status))
            if self.orphaned():
                self.stop_orphan(what, log)
            time.sleep(0.1)

    def own_flags(self, role, index):
        """The variables' flags for this task, {r}/{k} and {dir} replaced."""
        return [a.replace("{r}", str(index)).replace("{k}", str(index))
                .replace("{dir}", self.s.dir) for a in self.s.flags[role]]

    def marker(self, role, index):
        return os.path.join(self.rv, "%s-%d.exit" % (role, index))

    def count(self, role):
        return len([f for f in os.listdir(self.rv)
                    if f.startswith(role + "-") and f.endswith(".exit")])

    def dial_host(self, flags):
        """What trainers dial for this machine's pserver: HOST (iface:NAME,
        that interface's IPv4 address), else the pserver's --host, else the
        host name."""
        host = self.s.host
        if host.startswith("iface:"):
            name = host[len("iface:"):]
            r = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", name],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
            m = re.search(r"inet ([0-9.]+)", r.stdout)
            if r.returncode != 0 or not m:
                raise UsageError("%sHOST=%s: no IPv4 address on %s (%s)" % (
                    self.s.p, host, name, r.stdout.strip()))
            return m.group(1)
        for a in flags:
            m = re.match(r"^--?host=(.+)$", a)
            if m and not host:
                host = m.group(1)
        if host in ("", "0.0.0.0", "::"):
            return self.host
        return host

    def run_pserver(self, r):
        log = os.path.join(self.s.dir, "pserver-%d.log" % r)
        port_file = os.path.join(self.rv, "pserver-%d.port" % r)
        flags = self.own_flags("pserver", r)
        host = self.dial_host(flags)
        argv = [self.s.pserver_bin,
                "--port=%d" % (self.s.port + r if self.s.port else 0),
                "--port_file=" + port_file,
                "--num_gradient_servers=%d" % self.n]
        if self.s.token():
            argv.append("--auth_token_file=" + self.s.token())
        if self.s.checkpoint_dir:
            argv.append("--checkpoint_dir=%s/pserver-%d" %
                        (self.s.checkpoint_dir, r))
        self.start(log, argv + flags)
        what = "pserver %d" % r
        self.watch(what, log, lambda: read_file(port_file),
                   what + " exited with status %d before serving")
        addr = "%s:%s" % (host, read_file(port_file))
        write_atomically(os.path.join(self.rv, "pserver-%d.addr" % r), addr)
        what = "pserver %d (%s)" % (r, addr)
        self.watch(what, log, lambda: self.count("trainer") >= self.n,
                   what + " exited with status %d while the trainers ran")
        status = self.stop_binary(what, log)
        write_atomically(self.marker("pserver", r), str(status))
        if status != 0:
            raise Failure(status, log, "%s exited with status %d after "
                          "SIGTERM at the end of the job" % (what, status))
        if r == 0 and not self.s.sched.append_logs:
            self.remove_rendezvous()

    def stop_binary(self, what, log):
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; the exit status."""
        self.child.send_signal(signal.SIGTERM)
        try:
            return exit_status(self.child.wait(self.s.stop_timeout))
        except subprocess.TimeoutExpired:
            self.say("%s still running %d s after SIGTERM (%sSTOP_TIMEOUT_S);"
                     " killing it; see %s" % (what, self.s.stop_timeout,
                                              self.s.p, log))
            self.child.kill()
            return exit_status(self.child.wait())

    def remove_rendezvous(self):
        """Once every pserver has stopped (30 s at most), the rendezvous
        folder goes."""
        deadline = time.time() + 30
        while self.count("pserver") < self.p and time.time() < deadline:
            time.sleep(0.2)
        if self.count("pserver") >= self.p:
            shutil.rmtree(self.rv, ignore_errors=True)

    def pserver_addresses(self, log, k):
        """The P addresses, in order, once every pserver has written its."""
        deadline = time.time() + self.s.start_timeout
        while True:
            addrs = [read_file(os.path.join(self.rv, "pserver-%d.addr" % i))
                     for i in range(self.p)]
            missing = [str(i) for i, a in enumerate(addrs) if not a]
            if not missing:
                return addrs
            if time.time() >= deadline:
                open(log, "a").close()
                raise Failure(1, log, (
                    "trainer %d: no address from pserver(s) %s in %s after %d"
                    " s (%sSTART_TIMEOUT_S). Is %sDIR one folder that every "
                    "machine sees?") % (k, " ".join(missing), self.rv,
                                        self.s.start_timeout, self.s.p,
                                        self.s.p))
            if self.orphaned():
                self.stop_orphan("trainer %d" % k, log)
            time.sleep(0.1)

    def trainer_argv(self, k, addrs, flags):
        argv = [self.s.trainer_bin, "--pservers=" + ",".join(addrs),
                "--trainer_id=%d" % k, "--num_gradient_servers=%d" % self.n]
        own = [("config", self.s.config),
               ("metrics_file",
                os.path.join(self.s.dir, "trainer-%d.jsonl" % k)),
               ("rpc_retry_s", str(self.s.rpc_retry_s)),
               ("num_threads", self.s.sched.threads),
               ("auth_token_file", self.s.token())]
        for name, value in own:
            if value and not has_flag(name, flags):
                argv.append("--%s=%s" % (name, value))
        return argv + flags

    def run_trainer(self, k):
        log = os.path.join(self.s.dir, "trainer-%d.log" % k)
        addrs = self.pserver_addresses(log, k)
        write_atomically(os.path.join(self.s.dir, "pservers"), ",".join(addrs))
        flags = self.own_flags("trainer", k)
        metrics = os.path.join(self.s.dir, "trainer-%d.jsonl" % k)
        if not self.s.sched.append_logs and os.path.exists(metrics) and \
                not has_flag("metrics_file", flags):
            os.remove(metrics)
        self.start(log, self.trainer_argv(k, addrs, flags))
        while self.child.poll() is None:
            if self.orphaned():
                self.stop_orphan("trainer %d" % k, log)
            time.sleep(0.2)
        status = exit_status(self.child.returncode)
        write_atomically(self.marker("trainer", k), str(status))
        if status != 0:
            raise Failure(status, log,
                          "trainer %d exited with status %d" % (k, status))


def last_eval(path):
    """The last eval line of a trainer's metrics file, or None."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if '"event":"eval"' in l]
    except OSError:
        return None
    return lines[-1] if lines else None


class SlurmJob(object):
    """The batch script's part: checks, the token, then every task as one
    srun step (--kill-on-bad-exit: a task that fails stops the others)."""

    def __init__(self, args):
        env = os.environ
        if not env.get("SLURM_JOB_ID") or not env.get("SLURM_NTASKS"):
            raise UsageError(
                "SLURM_JOB_ID and SLURM_NTASKS are not set: submit this file "
                "with sbatch --ntasks=P+N (or run it in an salloc "
                "--ntasks=P+N shell)")
        self.s = Settings(Slurm(env), env, args)
        self.args = list(args)
        self.tasks = int(env["SLURM_NTASKS"])
        self.layout = []
        if self.s.pservers == "beside":
            nodes = int(env.get("SLURM_JOB_NUM_NODES",
                                env.get("SLURM_NNODES", "1")))
            if self.tasks != 2 * nodes:
                raise UsageError(
                    "SHARDPS_SLURM_PSERVERS=beside runs a pserver and a "
                    "trainer on each node: the job has %d task(s) on %d "
                    "node(s); submit with sbatch --nodes=N --ntasks-per-node=2"
                    % (self.tasks, nodes))
            self.s.pservers = str(nodes)
            # Tasks r and N+r on node r: pserver r beside trainer r.
            self.layout = ["--nodes=%d" % nodes, "--ntasks-per-node=2",
                           "--distribution=cyclic"]
        self.p = self.s.num_pservers(self.tasks)
        self.n = self.tasks - self.p
        self.srun = None

    def say(self, msg, error=False):
        stream = sys.stderr if error else sys.stdout
        stream.write("shardps.sbatch: %s%s\n" % ("error: " if error else "",
                                                 msg))
        stream.flush()

    def prepare(self):
        """The folder, a rendezvous without a requeued run's addresses, and
        the job's token (a fresh random one unless given)."""
        try:
            os.makedirs(self.s.dir, exist_ok=True)
        except OSError as e:
            raise UsageError("cannot create %s (SHARDPS_SLURM_DIR): %s" %
                             (self.s.dir, e))
        shutil.rmtree(self.s.rendezvous(), ignore_errors=True)
        if not self.s.token_file:
            self.s.token_file = os.path.join(self.s.dir, "auth_token")
            fd = os.open(self.s.token_file,
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))

    def on_signal(self, signum, _):
        """scancel, a time limit, requeue: Slurm signals every task itself;
        wait for them (STOP_TIMEOUT_S at most)."""
        self.say("got signal %d: waiting for the tasks to stop" % signum)
        try:
            self.srun.wait(self.s.stop_timeout)
        except subprocess.TimeoutExpired:
            pass
        sys.exit(128 + signum)

    def run(self):
        self.prepare()
        self.say("job %s: %d pserver(s)%s, %d trainer(s), config %s; logs in "
                 "%s" % (self.s.sched.job, self.p, " (one beside each "
                         "trainer)" if self.layout else "", self.n,
                         self.s.config, self.s.dir))
        env = dict(os.environ)
        p = self.s.p
        env.update({p + "PSERVERS": str(self.p), p + "DIR": self.s.dir,
                    p + "AUTH_TOKEN_FILE": self.s.token_file})
        argv = (["srun", "--kill-on-bad-exit=1", "--job-name=shardps",
                 "--ntasks=%d" % self.tasks,
                 "--cpus-per-task=" + (self.s.sched.threads or "1")] +
                self.layout + [sys.executable, os.path.abspath(__file__),
                               "task", "slurm"] + self.args)
        self.srun = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        status = self.outcome(exit_status(self.srun.wait()))
        shutil.rmtree(self.s.rendezvous(), ignore_errors=True)
        return status

    def outcome(self, srun_status):
        """Says how each process ended; the job's exit status."""
        rv = self.s.rendezvous()
        ends = {}
        for role, count in (("pserver", self.p), ("trainer", self.n)):
            for i in range(count):
                path = os.path.join(rv, "%s-%d.exit" % (role, i))
                if read_file(path):
                    ends[role, i] = (os.path.getmtime(path),
                                     int(read_file(path)))
        for k in range(self.n):
            line = last_eval(os.path.join(self.s.dir, "trainer-%d.jsonl" % k))
            self.say("trainer %d: %s" % (k, line or "(no eval line)"))
        failed = sorted((t, role, i, st) for (role, i), (t, st) in
                        ends.items() if st != 0)
        for _, role, i, st in failed:
            if role == "pserver":
                self.say("pserver %d failed (exit %d); see %s/pserver-%d.log"
                         % (i, st, self.s.dir, i), error=True)
                return 1
        if failed:
            _, _, k, st = failed[0]
            self.say("trainer %d failed (exit %d); see %s/trainer-%d.log" %
                     (k, st, self.s.dir, k), error=True)
            return st
        if srun_status != 0 or len(ends) < self.p + self.n:
            self.say("the tasks' step failed (srun exit %d); see the lines "
                     "above and %s" % (srun_status, self.s.dir), error=True)
            return srun_status or 1
        self.say("every trainer succeeded; logs in %s" % self.s.dir)
        return 0


def task(sched_name, args):
    env = os.environ
    sched = Slurm(env) if sched_name == "slurm" else OpenMpi(env)
    if sched.rank is None or sched.size is None:
        raise UsageError(
            "%s are not set: start me with %s" %
            (("SLURM_PROCID/SLURM_NTASKS", "srun (configs/slurm/shardps.sbatch"
              " does)") if sched_name == "slurm" else
             ("OMPI_COMM_WORLD_RANK/SIZE", "Open MPI's mpirun "
              "(docs/deploy.md, \"MPI\")")))
    return Task(Settings(sched, env, args), int(sched.rank),
                int(sched.size)).run()


def main(argv):
    if argv[1:2] == ["slurm-job"]:
        prog, run = "shardps.sbatch", lambda: SlurmJob(argv[2:]).run()
    elif argv[1:2] == ["task"] and argv[2:3] in (["slurm"], ["mpi"]):
        prog = Slurm.prog if argv[2] == "slurm" else OpenMpi.prog
        run = lambda: task(argv[2], argv[3:])
    elif argv[1:2] in (["-h"], ["--help"]):
        sys.stdout.write(__doc__)
        return 0
    else:
        sys.stderr.write(__doc__)
        return 2
    try:
        return run()
    except UsageError as e:
        sys.stderr.write("%s: error: %s\n" % (prog, e))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
