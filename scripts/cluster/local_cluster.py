#!/usr/bin/env python3
"""Runs a ShardPS job on this machine: P pservers and N trainers.

    python3 scripts/cluster/local_cluster.py --pservers 2 --trainers 2 \\
        --config configs/fmnist_mlp.pbtxt -- --mode=async --num_passes=3

Starts the pservers on free loopback ports (pserver --port=0 --port_file=...),
waits until every one serves, starts the trainers with
--pservers=127.0.0.1:p0,127.0.0.1:p1,..., and waits for the trainers. Then
it stops the pservers with SIGTERM and exits with the status of the first
trainer that failed (128+n for a trainer killed by signal n), or 0.

Everything after `--` goes to every trainer. In those arguments `{k}` (or
`{trainer_id}`) becomes the trainer's id, e.g. `--save_dir=out/t{k}`.
Trainer k writes its metrics to METRICS_DIR/trainer-k.jsonl (METRICS_DIR is
--metrics_dir, else the log folder) unless `--metrics_file` is passed after
`--`.

All output goes to one folder (--log_dir; default a fresh /tmp/shardps-*):
pserver-i.log, pserver-i.port, trainer-k.log, cluster.json (pids, ports and
log paths, written once everything has started) and summary.json (exit codes
and final accuracies, written at the end). Trainer 0's output is also shown
on the terminal, with its progress bar when stderr is a terminal; warnings
and errors of the other processes are shown with a [pserver i] or
[trainer k] prefix.

A trainer that fails stops every process, as with mpirun or torchrun
(--keep_going lets the other trainers go on); so do Ctrl-C, SIGTERM,
--timeout and a pserver that dies. Each child runs in its own process group,
which is killed, and dies with this script even if this script is killed
with SIGKILL. Exit status: the trainers' as above; 124 on --timeout; 130 on
Ctrl-C (128+n on signal n); 1 when a pserver fails; 2 for bad arguments.

Standard library only; Python 3.6 or newer.
"""

import argparse
import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Flags of the trainer that this script sets itself.
OWNED_TRAINER_FLAGS = ("pservers", "trainer_id", "num_gradient_servers",
                       "num_trainers", "config")

from cluster_processes import (PROG, Child, ClusterError, Interrupted,
                               UsageError, describe_exit, describe_status,
                               end_open_line, exit_code_of, find_binary,
                               flag_in, say, split_at_dashes)


def make_parser():
    p = argparse.ArgumentParser(
        prog="local_cluster.py",
        description="Run P pservers and N trainers of ShardPS on this "
        "machine. Arguments after -- go to every trainer.",
        epilog="Example: %(prog)s --pservers 2 --trainers 2 -- --mode=async "
        "--num_passes=3")
    p.add_argument("--pservers", default="2", metavar="P",
                   help="pservers to start (default 2), or `beside`: one "
                   "per trainer, the layout of docs/deploy.md, \"A pserver "
                   "beside each trainer\" (on one machine every trainer "
                   "reaches every pserver through shared memory)")
    p.add_argument("--trainers", type=int, default=2, metavar="N",
                   help="trainers to start (default 2)")
    p.add_argument("--config",
                   default=os.path.join(REPO, "configs", "fmnist_mlp.pbtxt"),
                   help="model config for the trainers (default "
                   "configs/fmnist_mlp.pbtxt of this repository)")
    p.add_argument("--python", default=None, metavar="SCRIPT",
                   help="trainers run this Python script (e.g. "
                   "examples/torch_mlp.py) in the PyTorch virtualenv "
                   "(SHARDPS_TORCH_VENV; made the first time, by "
                   "scripts/setup/python_venv.sh torch) with "
                   "--pservers, --trainer_id and --num_trainers, instead of "
                   "the trainer binary and --config (docs/python.md)")
    p.add_argument("--python_bin", default=None, metavar="PYTHON",
                   help="with --python: the interpreter that runs SCRIPT "
                   "(default: the PyTorch virtualenv's)")
    p.add_argument("--python_path", default=os.path.join(REPO, "python"),
                   metavar="DIR",
                   help="with --python: the folder holding the shardps "
                   "package and its native module, put first on the "
                   "trainers' PYTHONPATH (default python/ of this "
                   "repository)")
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"),
                   help="build folder holding pserver/pserver and "
                   "trainer/trainer (default build/ of this repository)")
    add_run_args(p)
    return p


def add_run_args(p):
    """Where the logs go, how long the job may take, what it shows."""
    p.add_argument("--log_dir", default=None,
                   help="folder for every log (default: a fresh "
                   "/tmp/shardps-XXXX)")
    p.add_argument("--metrics_dir", default=None,
                   help="trainer k writes its metrics to "
                   "METRICS_DIR/trainer-k.jsonl (default: the log folder)")
    p.add_argument("--timeout", type=float, default=0, metavar="SECONDS",
                   help="kill everything after this long and exit 124 "
                   "(default 0: no limit)")
    p.add_argument("--start_timeout", type=float, default=30,
                   metavar="SECONDS",
                   help="how long a pserver may take to serve (default 30)")
    p.add_argument("--pserver_args", default="",
                   help="extra pserver flags, one string, e.g. "
                   "--pserver_args='--max_pull_wait_s=5'")
    p.add_argument("--keep_going", action="store_true",
                   help="when a trainer fails, let the others go on "
                   "(default: stop everything, as mpirun and torchrun do)")
    p.add_argument("--quiet", action="store_true",
                   help="do not show trainer 0's output on the terminal")


def parse_args(argv):
    own, extra = split_at_dashes(argv)
    p = make_parser()
    a = p.parse_args(own)
    a.extra = extra
    if a.pservers == "beside":
        a.pservers = a.trainers
    elif not a.pservers.isdigit():
        p.error("--pservers must be a whole number or `beside`, not %r" %
                a.pservers)
    a.pservers = int(a.pservers)
    if a.pservers < 1:
        p.error("--pservers must be at least 1")
    if a.trainers < 1:
        p.error("--trainers must be at least 1")
    if a.timeout < 0 or a.start_timeout <= 0:
        p.error("--timeout must be >= 0 and --start_timeout > 0")
    return a


def torch_venv_python():
    """The PyTorch virtualenv's interpreter; the first time, makes the
    virtualenv (scripts/setup/python_venv.sh torch says what it downloads
    and why)."""
    venv = os.environ.get("SHARDPS_TORCH_VENV", os.path.expanduser(
        "~/.cache/shardps/torch-venv"))
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        say("--python: no PyTorch virtualenv at %s yet; making it once" %
            venv)
        script = os.path.join(REPO, "scripts", "setup", "python_venv.sh")
        if subprocess.call(["bash", script, "torch"]) != 0 or \
                not os.access(python, os.X_OK):
            raise UsageError("--python: no PyTorch virtualenv at %s (bash "
                             "%s torch did not make it; its message is "
                             "above)" % (venv, script))
    return python


class Cluster(object):
    def __init__(self, args):
        self.args = args
        self.pservers = []
        self.trainers = []
        self.ports = []
        self.failures = []  # trainers that exited non-zero, in order
        self.lost_pservers = []  # died while replicas kept the job going
        self.metrics = []  # (path, byte offset before the run) per trainer
        self.t0 = time.monotonic()
        self.deadline = (self.t0 + args.timeout) if args.timeout > 0 else None

    # Setup ----------------------------------------------------------------

    def prepare(self):
        a = self.args
        self.pserver_bin = find_binary(a.bin_dir, "pserver")
        self.trainer_bin = find_binary(a.bin_dir, "trainer")
        a.config = os.path.abspath(a.config)
        if not os.path.isfile(a.config):
            raise UsageError("--config=%s: no such file" % a.config)
        if a.python is not None:
            self.prepare_python()
        for name in OWNED_TRAINER_FLAGS:
            i, _ = flag_in(a.extra, name)
            if i is not None:
                raise UsageError(
                    "trainer argument %r after --: this script sets --%s "
                    "itself%s" % (a.extra[i], name,
                                  " (use --config before --)"
                                  if name == "config" else ""))
        try:
            self.pserver_extra = shlex.split(a.pserver_args)
        except ValueError as e:
            raise UsageError("--pserver_args: %s" % e)
        for name in ("port", "port_file", "num_gradient_servers", "host"):
            i, _ = flag_in(self.pserver_extra, name)
            if i is not None:
                raise UsageError("--pserver_args: this script sets --%s "
                                 "itself" % name)
        i, user_metrics = flag_in(a.extra, "metrics_file")
        if i is not None and a.metrics_dir:
            raise UsageError("give --metrics_dir or --metrics_file after --, "
                             "not both")
        self.user_metrics = user_metrics if i is not None else None
        if a.metrics_dir:
            a.metrics_dir = os.path.abspath(a.metrics_dir)
            make_dir("--metrics_dir", a.metrics_dir)
        if a.log_dir:
            a.log_dir = os.path.abspath(a.log_dir)
            make_dir("--log_dir", a.log_dir)
        else:
            a.log_dir = tempfile.mkdtemp(prefix="shardps-")
        say("logs in %s" % a.log_dir)
        if not a.metrics_dir and self.user_metrics is None:
            a.metrics_dir = a.log_dir

    def prepare_python(self):
        """--python: the interpreter (--python_bin, else the virtualenv's,
        made the first time), and --python_path (python/ of this
        repository) first on the trainers' path."""
        a = self.args
        a.python = os.path.abspath(a.python)
        if not os.path.isfile(a.python):
            raise UsageError("--python=%s: no such file" % a.python)
        path = os.path.abspath(a.python_path)
        if not glob.glob(os.path.join(path, "shardps", "_native*.so")):
            raise UsageError(
                "--python: no shardps._native in %s/shardps; build it with "
                "cmake --build %s --target shardps_native (it needs Debian's "
                "pybind11-dev and python3-dev: bash scripts/setup/setup.sh)"
                % (path, a.bin_dir))
        self.python_bin = a.python_bin or torch_venv_python()
        if os.environ.get("PYTHONPATH"):
            path += os.pathsep + os.environ["PYTHONPATH"]
        os.environ["PYTHONPATH"] = path

    def log(self, name):
        return os.path.join(self.args.log_dir, name)

    def start_pservers(self):
        a = self.args
        port_files = []
        for i in range(a.pservers):
            port_file = self.log("pserver-%d.port" % i)
            for stale in (port_file, port_file + ".tmp"):
                if os.path.exists(stale):
                    os.remove(stale)
            port_files.append(port_file)
            argv = [self.pserver_bin, "--port=0", "--port_file=" + port_file,
                    "--host=127.0.0.1",
                    "--num_gradient_servers=%d" % a.trainers
                    ] + self.pserver_extra
            self.pservers.append(
                Child("pserver", i, argv, self.log("pserver-%d.log" % i)))
        limit = time.monotonic() + a.start_timeout
        self.ports = [None] * a.pservers
        while None in self.ports:
            for i, p in enumerate(self.pservers):
                if self.ports[i] is not None:
                    continue
                port = read_port(port_files[i])
                if port is not None:
                    self.ports[i] = port
                elif not p.running():
                    raise ClusterError(
                        "pserver %d %s before serving; see %s%s" %
                        (i, describe_exit(p.returncode), p.log_path,
                         p.last_words()),
                        reason="pserver %d did not start" % i)
            if None not in self.ports:
                break
            now = time.monotonic()
            if now > limit:
                late = [i for i, port in enumerate(self.ports) if port is None]
                raise ClusterError(
                    "pserver(s) %s did not write a port file within %g s; "
                    "see %s" % (",".join(map(str, late)), a.start_timeout,
                                ", ".join(self.pservers[i].log_path
                                          for i in late)),
                    reason="pserver start timed out")
            self.check_deadline()
            time.sleep(0.02)
        say("%d pserver(s) serving on 127.0.0.1 port(s) %s" %
            (a.pservers, ",".join(map(str, self.ports))))

    def trainer_argv(self, k):
        a = self.args
        addresses = ",".join("127.0.0.1:%d" % p for p in self.ports)
        if a.python is not None:
            argv = [self.python_bin, a.python, "--pservers=" + addresses,
                    "--trainer_id=%d" % k, "--num_trainers=%d" % a.trainers]
        else:
            argv = [self.trainer_bin, "--pservers=" + addresses,
                    "--trainer_id=%d" % k,
                    "--num_gradient_servers=%d" % a.trainers,
                    "--config=" + a.config]
        if self.user_metrics is None:
            metrics = os.path.join(a.metrics_dir, "trainer-%d.jsonl" % k)
            argv.append("--metrics_file=" + metrics)
        else:
            metrics = substitute(self.user_metrics, k)
        if k == 0 and not a.quiet and flag_in(a.extra, "progress")[0] is None:
            argv.append("--progress=%s" %
                        ("on" if sys.stderr.isatty() else "off"))
        argv += [substitute(x, k) for x in a.extra]
        return argv, metrics

    def start_trainers(self):
        a = self.args
        for k in range(a.trainers):
            argv, metrics = self.trainer_argv(k)
            try:
                offset = os.path.getsize(metrics)
            except OSError:
                offset = 0
            self.metrics.append((metrics, offset))
            self.trainers.append(
                Child("trainer", k, argv, self.log("trainer-%d.log" % k),
                      stream_to_terminal=(k == 0)))
        # Threads only now: no fork happens while another thread runs.
        for t in self.trainers:
            t.start_streaming(a.quiet)
        say("%d trainer(s) started: %s" % (a.trainers, " ".join(
            shlex.quote(x) for x in self.trainers[0].argv[1:])))
        self.write_json("cluster.json", self.describe())

    # Running --------------------------------------------------------------

    def check_deadline(self):
        if self.deadline is not None and time.monotonic() > self.deadline:
            running = [c for c in self.trainers + self.pservers if c.running()]
            raise ClusterError(
                "--timeout=%g s reached; still running: %s" %
                (self.args.timeout, ", ".join(
                    "%s (pid %d)" % (c.name, c.pid) for c in running)
                 or "nothing"), code=124,
                reason="--timeout=%g s reached" % self.args.timeout)

    def wait_for_trainers(self):
        while True:
            for t in self.trainers:
                if t.returncode is None and t.poll() is not None:
                    self.on_trainer_exit(t)
            for p in self.pservers:
                if not p.running() and self.replicated():
                    if p not in self.lost_pservers:
                        self.lost_pservers.append(p)
                        say("pserver %d %s; the trainers go on with its "
                            "replicas (--replication); see %s" % (
                                p.index, describe_exit(p.returncode),
                                p.log_path))
                elif not p.running():
                    raise ClusterError(
                        "pserver %d %s while trainers were running; see %s%s"
                        % (p.index, describe_exit(p.returncode), p.log_path,
                           p.last_words()),
                        reason="pserver %d failed" % p.index)
            for c in self.pservers + self.trainers:
                c.echo_new_warnings()
            if all(t.returncode is not None for t in self.trainers):
                return
            self.check_deadline()
            time.sleep(0.05)

    def replicated(self):
        """Whether the trainers keep copies of every shard on another
        pserver (--replication=R, R > 1): then a pserver may die."""
        _, r = flag_in(self.args.extra, "replication")
        try:
            return r is not None and int(r) > 1
        except ValueError:
            return False

    def on_trainer_exit(self, t):
        if t.returncode == 0:
            return
        self.failures.append(t)
        msg = "trainer %d %s; see %s%s" % (t.index, describe_exit(
            t.returncode), t.log_path, t.last_words(3))
        others = [x for x in self.trainers if x.running()]
        if not self.args.keep_going:
            if others:
                msg += "\n  stopping everything (--keep_going lets the " \
                       "other trainers go on)"
            raise ClusterError(msg, code=exit_code_of(t.returncode),
                               reason="trainer %d failed" % t.index)
        if others:
            msg += "\n  the other trainers go on (--keep_going)"
        say(msg)

    # Stopping -------------------------------------------------------------

    def stop_pservers(self):
        for p in self.pservers:
            if p.running():
                p.signal_group(signal.SIGTERM)
        limit = time.monotonic() + 10
        for p in self.pservers:
            p.wait(max(0.0, limit - time.monotonic()))
        for p in self.pservers:
            if p.running():
                say("pserver %d did not stop within 10 s of SIGTERM; killing "
                    "it" % p.index)
                p.signal_group(signal.SIGKILL)
                p.wait(5)
            elif p.returncode != 0:
                say("pserver %d %s after SIGTERM; see %s" %
                    (p.index, describe_exit(p.returncode), p.log_path))

    def kill_all(self, grace=3.0):
        """SIGTERM to every process group, then SIGKILL after `grace`."""
        children = self.trainers + self.pservers
        for c in children:
            c.signal_group(signal.SIGTERM)
        limit = time.monotonic() + grace
        for c in children:
            c.wait(max(0.0, limit - time.monotonic()))
        for c in children:
            # Even a reaped child may leave members in its group.
            c.signal_group(signal.SIGKILL)
        for c in children:
            if c.running():
                c.wait(5)

    def finish_output(self):
        for c in self.trainers + self.pservers:
            c.finish_output()

    # Reporting ------------------------------------------------------------

    def describe(self):
        return {
            "log_dir": self.args.log_dir,
            # --python: the script is the model; there is no config.
            "config": None if self.args.python else self.args.config,
            "python": self.args.python,
            "pservers": [{
                "id": p.index, "pid": p.pid, "port": self.ports[p.index]
                if p.index < len(self.ports) else None, "log": p.log_path,
                "argv": p.argv
            } for p in self.pservers],
            "trainers": [{
                "id": t.index, "pid": t.pid, "log": t.log_path,
                "metrics_file": self.metrics[t.index][0], "argv": t.argv
            } for t in self.trainers],
        }

    def write_json(self, name, obj):
        path = self.log(name)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)

    def final_eval(self, k):
        """The last eval line of trainer k written during this run."""
        path, offset = self.metrics[k]
        best = None
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                for raw in f:
                    try:
                        line = json.loads(raw.decode("utf-8"))
                    except ValueError:
                        continue
                    if (isinstance(line, dict) and
                            line.get("event") == "eval" and
                            line.get("trainer_id", k) == k):
                        best = line
        except OSError:
            pass
        return best

    def summary(self, code, reason):
        rows = []
        out = {"log_dir": self.args.log_dir, "exit_code": code,
               "reason": reason, "seconds": round(time.monotonic() - self.t0,
                                                  3),
               "trainers": [], "pservers": []}
        for t in self.trainers:
            t.poll()
            ev = self.final_eval(t.index)
            acc = ev.get("test_accuracy") if ev else None
            out["trainers"].append({
                "id": t.index, "pid": t.pid, "exit_code": t.returncode,
                "status": describe_status(t.returncode),
                "test_accuracy": acc,
                "test_loss": ev.get("test_loss") if ev else None,
                "pass": ev.get("pass") if ev else None,
                "step": ev.get("step") if ev else None,
                "final": bool(ev.get("final")) if ev else None,
                "ended_s": round(t.ended - self.t0, 3) if t.ended else None,
                "log": t.log_path, "metrics_file": self.metrics[t.index][0]})
            if ev is None:
                what = "no evaluation"
            else:
                what = "test_accuracy %.4f (pass %s, step %s%s)" % (
                    acc, ev.get("pass"), ev.get("step"),
                    "" if ev.get("final") else ", not final")
            rows.append("  trainer %d: %-20s %s" %
                        (t.index, describe_status(t.returncode) + ",", what))
        for p in self.pservers:
            p.poll()
            out["pservers"].append({
                "id": p.index, "pid": p.pid, "exit_code": p.returncode,
                "status": describe_status(p.returncode),
                "port": self.ports[p.index] if p.index < len(self.ports)
                else None, "log": p.log_path})
            port = self.ports[p.index] if p.index < len(self.ports) else None
            rows.append("  pserver %d: %s%s" % (
                p.index, describe_status(p.returncode),
                " (port %d)" % port if port else ", never served"))
        try:
            self.write_json("summary.json", out)
        except OSError as e:
            say("cannot write summary.json: %s" % e)
        end_open_line()
        print("%s: summary (%s, %.1f s; logs in %s)" %
              (PROG, reason, out["seconds"], self.args.log_dir))
        print("\n".join(rows))
        sys.stdout.flush()


def make_dir(flag, path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError("%s=%s: %s" % (flag, path, e.strerror or e))


def substitute(arg, k):
    return arg.replace("{trainer_id}", str(k)).replace("{k}", str(k))


def read_port(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    try:
        port = int(text)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def main(argv):
    args = parse_args(argv)
    cluster = Cluster(args)

    def on_signal(signum, frame):
        raise Interrupted(signum)

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, on_signal)
    code, reason = 0, "done"
    started = False
    try:
        try:
            cluster.prepare()
        except UsageError as e:
            say(str(e))
            return 2
        started = True
        cluster.start_pservers()
        cluster.start_trainers()
        cluster.wait_for_trainers()
        cluster.stop_pservers()
        if cluster.failures:
            first = cluster.failures[0]
            code = exit_code_of(first.returncode)
            reason = "trainer %d failed first" % first.index
        else:
            reason = "all trainers succeeded"
    except ClusterError as e:
        say(str(e))
        code, reason = e.code, e.reason
    except Interrupted as e:
        say("%s: stopping every process" % e)
        code, reason = 128 + e.signum, "interrupted by %s" % e
    except Exception as e:  # a bug here must not leave processes behind
        say("internal error: %r; stopping every process" % e)
        code, reason = 1, "internal error"
        import traceback
        traceback.print_exc()
    finally:
        # From here on a second Ctrl-C must not interrupt the clean-up.
        for sig in old:
            signal.signal(sig, signal.SIG_IGN)
        if started:
            cluster.kill_all()
            cluster.finish_output()
    if started:
        cluster.summary(code, reason)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
