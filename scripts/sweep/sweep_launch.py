"""How scripts/sweep/sweep.py starts pservers and trials: as local processes,
or with Slurm's srun (inside or outside an allocation).

Standard library only; Python 3.6 or newer.
"""

import binascii
import os
import shlex
import signal
import sys
import time

# scripts/cluster/'s processes.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "cluster"))
from cluster_processes import (Child, ClusterError,  # noqa: E402
                               UsageError, describe_exit)

START_TIMEOUT_S = 60
STOP_GRACE_S = 10


def make(args, binaries, out_dir):
    if args.launcher == "k8s":
        import sweep_k8s
        return sweep_k8s.K8sLauncher(args, binaries, out_dir)
    cls = {"local": LocalLauncher, "slurm": SlurmLauncher}[args.launcher]
    return cls(args, binaries, out_dir)


def read_file(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def stop_children(children, grace=STOP_GRACE_S):
    """SIGTERM to each process group, SIGKILL after `grace` seconds."""
    for c in children:
        c.silent = True  # their "stopped by a signal" lines are expected
        if c.running():
            c.signal_group(signal.SIGTERM)
    limit = time.monotonic() + grace
    for c in children:
        c.wait(max(0.0, limit - time.monotonic()))
        if c.running():
            c.signal_group(signal.SIGKILL)
            c.wait(5)
    for c in children:
        c.finish_output()


class LocalLauncher(object):
    """Pservers and trainers as processes of this machine."""

    def __init__(self, args, binaries, out_dir):
        self.args = args
        self.pserver_bin, self.trainer_bin = binaries
        self.dir = os.path.join(out_dir, "pservers")
        self.pservers = []
        self.trainer_extra = []  # the token of pservers started here
        self.addresses = [a for a in args.pservers.split(",") if a]
        try:
            self.pserver_extra = shlex.split(args.pserver_args)
        except ValueError as e:
            raise UsageError("--pserver_args: %s" % e)

    def pserver_flags(self):
        # Room for every trial at once, and ended trials' jobs freed soon
        # (a sweep starts many more jobs than the default --max_jobs).
        return ["--max_jobs=%d" % max(16, 4 * self.args.parallel),
                "--job_retention=10",
                "--auth_token_file=" + self.token_file] + self.pserver_extra

    def make_token(self):
        """A fresh secret for the pservers this script starts (mode 600);
        the trials' trainers get it too."""
        os.makedirs(self.dir, exist_ok=True)
        self.token_file = os.path.join(self.dir, "auth_token")
        fd = os.open(self.token_file + ".tmp",
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(binascii.hexlify(os.urandom(32)).decode() + "\n")
        os.replace(self.token_file + ".tmp", self.token_file)
        self.trainer_extra = ["--auth_token_file=" + self.token_file]

    def start_pservers(self):
        if self.addresses:
            print("sweep: using the pservers at %s" % ",".join(
                self.addresses), flush=True)
            return
        self.make_token()
        port_files = []
        for i in range(self.args.num_pservers):
            port_file = os.path.join(self.dir, "pserver-%d.port" % i)
            if os.path.exists(port_file):
                os.remove(port_file)
            port_files.append(port_file)
            argv = [self.pserver_bin, "--port=0", "--port_file=" + port_file,
                    "--host=127.0.0.1"] + self.pserver_flags()
            self.pservers.append(Child(
                "pserver", i, argv,
                os.path.join(self.dir, "pserver-%d.log" % i)))
        ports = self.wait_for(port_files)
        self.addresses = ["127.0.0.1:%s" % p for p in ports]
        print("sweep: %d pservers at %s" % (len(ports), ",".join(
            self.addresses)), flush=True)

    def wait_for(self, paths):
        limit = time.monotonic() + START_TIMEOUT_S
        while True:
            values = [read_file(p) for p in paths]
            if all(values):
                return values
            self.check_pservers()
            if time.monotonic() > limit:
                raise ClusterError("the pservers did not start within %d s; "
                                   "see %s" % (START_TIMEOUT_S, self.dir))
            time.sleep(0.05)

    def check_pservers(self):
        for p in self.pservers:
            if not p.running():
                raise ClusterError("%s %s; see %s" % (
                    p.name, describe_exit(p.returncode), p.log_path))

    def trainer_argv(self, k, trial_args, trial_dir):
        n = self.args.trainers_per_trial
        return [self.trainer_bin, "--pservers=" + ",".join(self.addresses),
                "--trainer_id=%d" % k, "--num_gradient_servers=%d" % n,
                "--metrics_file=" + os.path.join(trial_dir,
                                                 "trainer-%d.jsonl" % k)
                ] + self.trainer_extra + trial_args

    def start_trial(self, tid, trial_args, trial_dir):
        return [Child("trainer", k, self.trainer_argv(k, trial_args, trial_dir),
                      os.path.join(trial_dir, "trainer-%d.log" % k))
                for k in range(self.args.trainers_per_trial)]

    def poll(self, trainers):
        """None while running; else 0, or the first failure's status (the
        other trainers are then stopped)."""
        codes = [t.poll() for t in trainers]
        bad = [c for c in codes if c not in (None, 0)]
        if bad:
            self.stop(trainers)
            return bad[0]
        if None in codes:
            return None
        for t in trainers:
            t.finish_output()
        return 0

    def stop(self, trainers):
        stop_children(trainers)

    def log_of(self, trainers):
        for t in trainers:
            if t.returncode not in (None, 0):
                return t.log_path
        return trainers[0].log_path

    def shutdown(self):
        stop_children(self.pservers, grace=30)


class SlurmLauncher(LocalLauncher):
    """srun steps: one for the pservers (unless --pservers), one per trial.
    Each trial's trainers take their id and count from SLURM_PROCID and
    SLURM_NTASKS; --srun_args go to every srun."""

    def __init__(self, args, binaries, out_dir):
        LocalLauncher.__init__(self, args, binaries, out_dir)
        try:
            self.srun_extra = shlex.split(args.srun_args)
        except ValueError as e:
            raise UsageError("--srun_args: %s" % e)
        self.name = os.path.basename(out_dir.rstrip("/"))

    def srun(self, ntasks, job_name):
        return ["srun", "--ntasks=%d" % ntasks, "--job-name=" + job_name,
                "--kill-on-bad-exit=1"] + self.srun_extra

    def start_pservers(self):
        if self.addresses:
            LocalLauncher.start_pservers(self)
            return
        self.make_token()
        n = self.args.num_pservers
        for i in range(n):
            for ext in (".port", ".host"):
                path = os.path.join(self.dir, "pserver-%d%s" % (i, ext))
                if os.path.exists(path):
                    os.remove(path)
        # Each task writes its host, then serves on a free port.
        script = ('hostname >"$1/pserver-$SLURM_PROCID.host" && '
                  'exec "$2" --port=0 '
                  '--port_file="$1/pserver-$SLURM_PROCID.port" "${@:3}"')
        argv = (self.srun(n, self.name + "-pservers") +
                ["--output=" + os.path.join(self.dir, "pserver-%t.log"),
                 "bash", "-c", script, "bash", self.dir, self.pserver_bin] +
                self.pserver_flags())
        self.pservers.append(Child("pserver step", 0, argv,
                                   os.path.join(self.dir, "srun.log")))
        ports = self.wait_for([os.path.join(self.dir, "pserver-%d.port" % i)
                               for i in range(n)])
        hosts = self.wait_for([os.path.join(self.dir, "pserver-%d.host" % i)
                               for i in range(n)])
        self.addresses = ["%s:%s" % hp for hp in zip(hosts, ports)]
        print("sweep: %d pservers (srun) at %s" % (n, ",".join(
            self.addresses)), flush=True)

    def start_trial(self, tid, trial_args, trial_dir):
        script = ('exec "$1" --metrics_file="$2/trainer-$SLURM_PROCID.jsonl" '
                  '"${@:3}"')
        argv = (self.srun(self.args.trainers_per_trial,
                          "%s-t%d" % (self.name, tid)) +
                ["--output=" + os.path.join(trial_dir, "trainer-%t.log"),
                 "bash", "-c", script, "bash", self.trainer_bin, trial_dir,
                 "--pservers=" + ",".join(self.addresses)] +
                self.trainer_extra + trial_args)
        return [Child("trial", tid, argv,
                      os.path.join(trial_dir, "srun.log"))]

    def log_of(self, handle):
        d = os.path.dirname(handle[0].log_path)
        logs = sorted(f for f in os.listdir(d) if f.endswith(".log") and
                      f.startswith("trainer-"))
        return os.path.join(d, logs[0]) if logs else handle[0].log_path
