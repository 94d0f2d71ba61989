#!/usr/bin/python3
"""Runs a hyper-parameter sweep: many small ShardPS jobs on one set of
pservers, K at a time, stopping bad trials early.

    /usr/bin/python3 scripts/sweep/sweep.py \\
        --config configs/fmnist_mlp.pbtxt --out_dir sweeps/lr \\
        --grid optimizer.learning_rate=0.01,0.05,0.2 \\
        --grid batch_size=32,128 --parallel 2 -- --num_passes=1

Each trial is a job of its own (--job_id=<sweep>-t<trial>a<attempt>) on the
same pservers: the local launcher starts --num_pservers of them on loopback
(or uses --pservers=host:port,... already running); --launcher=slurm starts
them, and each trial's trainers, with srun; --launcher=k8s makes each trial
an Indexed Job from the trainer Job of configs/k8s, on the StatefulSet's
pservers (scripts/sweep/sweep_k8s.py). A trial's parameters reach its
trainers as flags: a plain name is a trainer flag (batch_size ->
--batch_size=V), a name with '.' or '[' a config path (given as
--config_set=path=V; docs/config.md). Arguments after -- go to every
trainer of every trial.

Search space: --grid NAME=V1,V2,... (every combination) and --sample
NAME=DIST:LOW:HIGH (uniform, loguniform, intuniform, intloguniform) or
NAME=choice:A,B,... drawn --samples times per grid point (Ray Tune's
grid_search x num_samples), seeded by --seed. Trials run in a shuffled
order. With neither, one trial runs the config and flags as given.

Early stopping: the median stopping rule (--early_stopping=median, the
default; docs/tuning.md says why not successive halving): after --grace of
its run, a trial whose best training loss is worse than the median of the
other trials' running means at the same number of samples is stopped
(SIGTERM; it leaves its job).

Output, in --out_dir: sweep.json (the sweep and every trial's state,
rewritten after each change; running the same command again resumes: ended
trials are kept, unfinished ones start again as a new attempt), trials.csv
(one row per trial, best first), evals.csv (every eval line of every
trial), curves.png (training loss against samples, one line per trial, and
the final metric), trials/<id>/ (each trainer's log and metrics). A
leaderboard is printed whenever a trial ends.

Exit status: 0 when the sweep ended with at least one finished trial
(failed trials are reported, and listed in trials.csv with the end of their
log); 1 when none finished, or the sweep cannot go on (a pserver died); 2
for bad arguments; 128+n on signal n (130 on Ctrl-C; the sweep can be
resumed).
"""

import argparse
import csv
import hashlib
import json
import math
import os
import random
import re
import signal
import sys
import time

# This folder's modules, and scripts/cluster/'s processes.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "cluster")]
import sweep_space  # noqa: E402
from cluster_processes import (ClusterError, Interrupted,  # noqa: E402
                               UsageError, describe_status, find_binary,
                               format_tail, split_at_dashes)
import sweep_launch  # noqa: E402
from sweep_results import (ENDED, STATE_FILE, new_history,  # noqa: E402
                           pyplot, read_metrics, trial_dir)

REPO = os.path.dirname(os.path.dirname(HERE))
STATE_VERSION = 1
# A trainer refused because the pservers hold --max_jobs jobs.
FULL = re.compile(r"RESOURCE_EXHAUSTED.*holds \d+ jobs already")
RETRY_S = 5.0
STOPPED_AT = re.compile(r"stopped by a signal at step (\d+)")


def make_parser():
    p = argparse.ArgumentParser(
        prog="sweep.py", description=__doc__.split("\n\n")[0],
        epilog="Example: %(prog)s --config configs/fmnist_mlp.pbtxt "
        "--out_dir /tmp/sw --grid optimizer.learning_rate=0.01,0.1 "
        "-- --num_passes=1")
    p.add_argument("--config", required=True, help="model config")
    p.add_argument("--out_dir", required=True,
                   help="where the sweep keeps its state and results; "
                   "given again, the sweep resumes")
    p.add_argument("--grid", action="append", default=[],
                   metavar="NAME=V1,V2,...", help="a grid dimension")
    p.add_argument("--sample", action="append", default=[],
                   metavar="NAME=DIST:LOW:HIGH",
                   help="a sampled dimension (uniform, loguniform, "
                   "intuniform, intloguniform, or choice:A,B,...)")
    p.add_argument("--samples", type=int, default=1,
                   help="draws of the sampled dimensions per grid point")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the draws and of the trial order")
    p.add_argument("--metric", default="test_accuracy",
                   help="eval field that ranks the trials (a name with "
                   "'loss' in it: lower is better); default test_accuracy")
    p.add_argument("--parallel", type=int, default=0, metavar="K",
                   help="trials at once; 0: the cores divided by the "
                   "trainers per trial (at least 1)")
    p.add_argument("--trainers_per_trial", type=int, default=1)
    p.add_argument("--early_stopping", choices=("median", "none"),
                   default="median")
    p.add_argument("--grace", type=float, default=0.1,
                   help="fraction of its run before a trial may be "
                   "stopped (default 0.1)")
    p.add_argument("--min_references", type=int, default=2,
                   help="other trials needed at the same point to stop one")
    add_launch_args(p)
    return p


def add_launch_args(p):
    """Where the trials run: the launcher, the pservers, the binaries."""
    p.add_argument("--launcher", choices=("local", "slurm", "k8s"),
                   default="local")
    p.add_argument("--k8s_job_template",
                   default=os.path.join(REPO, "configs", "k8s",
                                        "trainer-job.yaml"),
                   help="--launcher=k8s: the trainer Job each trial copies")
    p.add_argument("--k8s_namespace", default="",
                   help="--launcher=k8s: kubectl --namespace")
    p.add_argument("--kubectl", default="kubectl",
                   help="--launcher=k8s: the kubectl program")
    p.add_argument("--pservers", default="",
                   help="host:port,... of running pservers to use instead "
                   "of starting them (they need --max_jobs >= --parallel)")
    p.add_argument("--num_pservers", type=int, default=2,
                   help="pservers to start when --pservers is not given")
    p.add_argument("--pserver_args", default="",
                   help="extra flags of the pservers this script starts")
    p.add_argument("--srun_args", default="",
                   help="--launcher=slurm: extra srun options, e.g. "
                   "'--partition=debug'")
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"),
                   help="build folder with pserver/pserver and "
                   "trainer/trainer (default build/)")
    p.add_argument("--trial_timeout", type=float, default=0,
                   metavar="SECONDS", help="fail a trial after this long "
                   "(default 0: no limit)")
    p.add_argument("--no_plot", action="store_true",
                   help="do not draw curves.png")


def parse_args(argv):
    own, extra = split_at_dashes(argv)
    p = make_parser()
    a = p.parse_args(own)
    a.extra = extra
    if a.trainers_per_trial < 1:
        p.error("--trainers_per_trial must be at least 1")
    if a.parallel < 0:
        p.error("--parallel must be >= 0")
    if a.parallel == 0:
        a.parallel = max(1, (os.cpu_count() or 1) // a.trainers_per_trial)
    if not 0 <= a.grace < 1:
        p.error("--grace must be in [0, 1)")
    if a.min_references < 1:
        p.error("--min_references must be at least 1")
    if a.num_pservers < 1:
        p.error("--num_pservers must be at least 1")
    for flag in sweep_space.OWNED_FLAGS:
        for arg in extra:
            if re.match(r"^--?%s(=|$)" % flag, arg):
                p.error("trainer argument %r after --: the sweep sets --%s "
                        "itself" % (arg, flag))
    try:
        a.space = ([sweep_space.parse_grid(g) for g in a.grid] +
                   [sweep_space.parse_sample(s) for s in a.sample])
        params = sweep_space.make_trials(
            [x for x in a.space if x.dist is None],
            [x for x in a.space if x.dist is not None], a.samples, a.seed)
        for t in params:
            sweep_space.trial_args(a.space, t)
    except sweep_space.SpaceError as e:
        p.error(str(e))
    a.params = params
    a.config = os.path.abspath(a.config)
    if not os.path.isfile(a.config):
        p.error("--config=%s: no such file" % a.config)
    return a


# State ---------------------------------------------------------------------


class Sweep(object):
    """The trials and their state in out_dir/sweep.json."""

    def __init__(self, args):
        self.args = args
        self.dir = os.path.abspath(args.out_dir)
        self.path = os.path.join(self.dir, STATE_FILE)
        self.name = re.sub(r"[^A-Za-z0-9.-]", "-",
                           os.path.basename(self.dir.rstrip("/")))[:40]
        with open(args.config, "rb") as f:  # a changed config is another sweep
            config_sha1 = hashlib.sha1(f.read()).hexdigest()
        self.spec = {"config": args.config, "config_sha1": config_sha1,
                     "grid": args.grid,
                     "sample": args.sample, "samples": args.samples,
                     "seed": args.seed, "trainer_args": args.extra,
                     "trainers_per_trial": args.trainers_per_trial}
        self.trials = [{"id": i, "params": p, "status": "pending",
                        "attempt": 0, "steps": 0, "total_steps": None}
                       for i, p in enumerate(args.params)]
        self.resumed = 0

    def load_or_create(self):
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.exists(self.path):
            self.save()
            return
        with open(self.path) as f:
            old = json.load(f)
        if old.get("version") != STATE_VERSION or old.get("spec") != self.spec:
            raise UsageError(
                "%s holds another sweep (its config or the config file's "
                "contents, space, trainer arguments or trainers per trial "
                "differ); give another "
                "--out_dir, or the same arguments to resume it" % self.path)
        for t, o in zip(self.trials, old["trials"]):
            t.update(o)
            if t["status"] in ENDED:
                self.resumed += 1
            else:
                t["status"] = "pending"
        self.save()

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"version": STATE_VERSION, "spec": self.spec,
                       "trials": self.trials}, f, indent=1)
        os.replace(tmp, self.path)

    def trial_dir(self, t):
        return trial_dir(self.dir, t["id"])


# Running -------------------------------------------------------------------


class Runner(object):
    def __init__(self, sweep, launcher):
        self.sweep = sweep
        self.args = sweep.args
        self.launcher = launcher
        self.running = {}  # id -> (trial, process handle, started)
        self.history = {}  # id -> metrics of trainer 0
        self.retry = []  # (monotonic time, trial) refused for --max_jobs

    def load_ended_histories(self):
        for t in self.sweep.trials:
            if t["status"] in ENDED:
                h = new_history()
                read_metrics(self.metrics_path(t), h)
                self.history[t["id"]] = h

    def metrics_path(self, t):
        return os.path.join(self.sweep.trial_dir(t), "trainer-0.jsonl")

    def start(self, t):
        t["attempt"] += 1
        t["status"] = "running"
        t["job_id"] = "%s-t%da%d" % (self.sweep.name, t["id"], t["attempt"])
        d = self.sweep.trial_dir(t)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):  # an earlier attempt's files
            os.remove(os.path.join(d, name))
        # Step lines every 10 steps unless given: the stopping rule
        # decides at step lines.
        args = (["--config=" + self.args.config, "--job_id=" + t["job_id"],
                 "--progress=off", "--log_every_steps=10"] + self.args.extra +
                sweep_space.trial_args(self.args.space, t["params"]))
        handle = self.launcher.start_trial(t["id"], args, d)
        self.running[t["id"]] = (t, handle, time.monotonic())
        self.history[t["id"]] = new_history()
        self.sweep.save()
        print("sweep: trial %d started (%s)" %
              (t["id"], sweep_space.describe(t["params"])), flush=True)

    def poll(self):
        """Reads new metrics, applies early stopping, reaps ended trials.
        Returns the trials that ended."""
        ended = []
        for tid, (t, handle, started) in list(self.running.items()):
            h = self.history[tid]
            read_metrics(self.metrics_path(t), h)
            if h["last_step"] is not None:
                t["steps"] = h["last_step"]["step"]
                t["total_steps"] = h["last_step"].get("total_steps")
            rc = self.launcher.poll(handle)
            if rc is None:
                why = self.stop_reason(t, h)
                if why is None and self.args.trial_timeout > 0 and (
                        time.monotonic() - started > self.args.trial_timeout):
                    self.launcher.stop(handle)
                    self.end(t, "failed", "no end after --trial_timeout")
                    ended.append(t)
                elif why is not None:
                    self.launcher.stop(handle)
                    # The steps it ran, the ones after its last step line
                    # included ("stopped by a signal at step N").
                    ran = STOPPED_AT.findall(format_tail(
                        self.launcher.log_of(handle), 10))
                    t["steps"] = max([t["steps"]] + [int(n) for n in ran])
                    self.end(t, "stopped", why)
                    ended.append(t)
                continue
            read_metrics(self.metrics_path(t), h)
            finals = [e for e in h["evals"] if e.get("final")]
            log = self.launcher.log_of(handle)
            if rc != 0 and FULL.search(format_tail(log, 5)):
                # The pservers hold --max_jobs jobs (ended trials' stay
                # for --job_retention): try again shortly.
                del self.running[tid]
                t["status"] = "pending"
                t["attempt"] -= 1
                # A random delay: two trials each refused by a different
                # pserver must not come back in step.
                self.retry.append((time.monotonic() + RETRY_S *
                                   random.uniform(0.5, 1.5), t))
                print("sweep: trial %d waits for a free job place on the "
                      "pservers" % tid, flush=True)
                continue
            if rc == 0 and finals:
                t["final"] = finals[-1]
                t["steps"] = finals[-1]["step"]
                # Done, but flagged where it did not learn.
                self.end(t, "done", sweep_space.training_note(h["steps"]))
            else:
                self.end(t, "failed", "%s%s" % (
                    describe_status(rc), format_tail(log, 3)))
            ended.append(t)
        return ended

    def stop_reason(self, t, h):
        if self.args.early_stopping != "median" or not h["steps"]:
            return None
        total = t.get("total_steps") or 0
        fraction = t["steps"] / total if total else 0.0
        others = [self.history[o["id"]]["steps"]
                  for o in self.sweep.trials
                  if o["id"] != t["id"] and o["id"] in self.history]
        return sweep_space.should_stop(h["steps"], others, fraction,
                                       self.args.grace,
                                       self.args.min_references)

    def end(self, t, status, why):
        del self.running[t["id"]]
        t["status"] = status
        h = self.history[t["id"]]
        if status != "done" and h["evals"]:
            t["final"] = h["evals"][-1]
        if why:
            t["why"] = why
        self.sweep.save()
        print("sweep: trial %d %s at step %d%s" %
              (t["id"], status, t["steps"], (": " + why) if why else ""),
              flush=True)

    def run(self):
        pending = [t for t in self.sweep.trials if t["status"] == "pending"]
        while pending or self.running or self.retry:
            now = time.monotonic()
            pending += [t for when, t in self.retry if when <= now]
            self.retry = [(when, t) for when, t in self.retry if when > now]
            while pending and len(self.running) < self.args.parallel:
                self.start(pending.pop(0))
            # Often: a trial stopped late has run on for the delay.
            time.sleep(0.05)
            self.launcher.check_pservers()
            if self.poll():
                write_outputs(self.sweep, self.history)
                print("\n".join(sweep_space.leaderboard(
                    self.sweep.trials, self.args.metric)), flush=True)

    def stop_all(self):
        for tid, (t, handle, _) in list(self.running.items()):
            self.launcher.stop(handle)
            t["status"] = "pending"
        self.running.clear()
        self.sweep.save()


# Outputs -------------------------------------------------------------------


def write_outputs(sweep, history):
    metric = sweep.args.metric
    names = sorted({n for t in sweep.trials for n in t["params"]})
    with open(os.path.join(sweep.dir, "trials.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "trial", "status"] + names +
                   [metric, "steps", "total_steps", "why"])
        for i, t in enumerate(sweep_space.rank(sweep.trials, metric)):
            w.writerow([i + 1, t["id"], t["status"]] +
                       [t["params"].get(n, "") for n in names] +
                       [(t.get("final") or {}).get(metric, ""), t["steps"],
                        t.get("total_steps") or "", t.get("why", "")])
    fields = ["pass", "step", "final", "test_loss", "test_accuracy",
              "test_auc", "test_logloss", "push_bytes", "pull_bytes",
              "train_seconds", "samples_per_s"]
    with open(os.path.join(sweep.dir, "evals.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "status"] + names + fields)
        for t in sweep.trials:
            for e in (history.get(t["id"]) or new_history())["evals"]:
                w.writerow([t["id"], t["status"]] +
                           [t["params"].get(n, "") for n in names] +
                           [e.get(k, "") for k in fields])


def plot(sweep, history):
    plt = pyplot("sweep", "curves.png")
    if plt is None:
        return
    metric = sweep.args.metric
    ranked = sweep_space.rank(sweep.trials, metric)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6))
    everything = []
    for t in ranked:
        pts = [(x, v) for x, v in (history.get(t["id"]) or new_history())[
            "steps"] if isinstance(v, (int, float)) and math.isfinite(v)]
        if not pts:
            continue
        everything += [v for _, v in pts]
        style = {"done": "-", "stopped": "--"}.get(t["status"], ":")
        left.plot([p[0] for p in pts], [p[1] for p in pts], style,
                  label="%d: %s" % (t["id"], sweep_space.describe(
                      t["params"])))
    left.set_xlabel("samples (trainer 0)")
    left.set_ylabel("training loss (dashed: stopped early; dotted: failed)")
    if everything:
        # Diverging trials reach 1e9: show the range the others use.
        everything.sort()
        top = everything[int(0.9 * (len(everything) - 1))] * 1.5
        left.set_ylim(max(0.0, everything[0] * 0.9),
                      min(everything[-1] * 1.05, top))
    left.legend(fontsize=7)
    vals = [(t["id"], (t.get("final") or {}).get(metric), t["status"])
            for t in ranked]
    vals = [v for v in vals if isinstance(v[1], (int, float))]
    right.barh(["%d (%s)" % (i, s) for i, _, s in vals],
               [v for _, v, _ in vals],
               color=["C0" if s == "done" else "C7" for _, _, s in vals])
    right.invert_yaxis()
    right.set_xlabel(metric + " of the final eval (grey: the last eval "
                    "before a stop or failure)")
    if vals:
        lo = min(v for _, v, _ in vals)
        hi = max(v for _, v, _ in vals)
        right.set_xlim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.05 * (hi - lo))
    fig.suptitle("sweep %s: %s" % (sweep.name, os.path.basename(
        sweep.args.config)))
    fig.tight_layout()
    fig.savefig(os.path.join(sweep.dir, "curves.png"), dpi=100)
    plt.close(fig)


def summary(sweep):
    done = [t for t in sweep.trials if t["status"] == "done"]
    run = sum(t["steps"] for t in sweep.trials)
    planned = sum(t.get("total_steps") or t["steps"] for t in sweep.trials)
    counts = {s: sum(1 for t in sweep.trials if t["status"] == s)
              for s in ENDED}
    print("sweep: %d trials: %d done, %d stopped early, %d failed; "
          "%d of %d trial-steps run (%.0f%% saved)%s" %
          (len(sweep.trials), counts["done"], counts["stopped"],
           counts["failed"], run, planned,
           100.0 * (1 - run / planned) if planned else 0.0,
           "; %d ended before this run" % sweep.resumed
           if sweep.resumed else ""), flush=True)
    if done:
        best = sweep_space.rank(sweep.trials, sweep.args.metric)[0]
        print("sweep: best trial %d: %s = %.4f with %s" %
              (best["id"], sweep.args.metric,
               best["final"][sweep.args.metric],
               sweep_space.describe(best["params"])), flush=True)
    print("sweep: results in %s (trials.csv, evals.csv%s)" %
          (sweep.dir, "" if sweep.args.no_plot else ", curves.png"),
          flush=True)


def main(argv):
    args = parse_args(argv)
    sweep = Sweep(args)
    launcher = None

    def on_signal(signum, frame):
        raise Interrupted(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    runner = None
    try:
        sweep.load_or_create()
        binaries = (find_binary(args.bin_dir, "pserver"),
                    find_binary(args.bin_dir, "trainer"))
        launcher = sweep_launch.make(args, binaries, sweep.dir)
        runner = Runner(sweep, launcher)
        runner.load_ended_histories()
        if sweep.resumed:
            print("sweep: resuming: %d of %d trials ended before" %
                  (sweep.resumed, len(sweep.trials)), flush=True)
        launcher.start_pservers()
        runner.run()
    except UsageError as e:
        print("sweep: %s" % e, file=sys.stderr)
        return 2
    except ClusterError as e:
        print("sweep: %s" % e, file=sys.stderr)
        if runner is not None:
            runner.stop_all()
        return e.code
    except Interrupted as e:
        print("sweep: interrupted (%s); run the same command to resume" % e,
              file=sys.stderr)
        if runner is not None:
            runner.stop_all()
        return 128 + e.signum
    finally:
        if launcher is not None:
            launcher.shutdown()
    write_outputs(sweep, runner.history)
    if not args.no_plot:
        plot(sweep, runner.history)
    summary(sweep)
    if not any(t["status"] == "done" for t in sweep.trials):
        print("sweep: no trial finished; see trials.csv and the trainers' "
              "logs under %s/trials" % sweep.dir, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
