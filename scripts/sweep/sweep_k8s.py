"""scripts/sweep/sweep.py --launcher=k8s: each trial is an Indexed Job made
from the trainer Job of configs/k8s (or --k8s_job_template), on the pservers of
the StatefulSet (or --pservers), with kubectl.

Per trial the Job gets its own name (shardps-<sweep>-t<id>a<attempt>), the
trial's job id and trainer count (SHARDPS_JOB_ID, completions, parallelism,
SHARDPS_NUM_GRADIENT_SERVERS), the trial's flags after the template's
arguments, and --metrics_file=/dev/stdout: the sweep reads trainer 0's
metrics lines from `kubectl logs -f` of the pod of completion index 0. The
template's --config stays (the model config comes from the ConfigMap, so
--config of the sweep must be the same file); --config_set changes it per
trial. A trial ends when the Job has as many succeeded pods as
completions (0) or a failed condition (1); a stopped trial's Job is
deleted. The pservers are the cluster's: the sweep neither starts nor stops
them.

Needs PyYAML (Debian's python3-yaml) to read the template.
"""

import json
import os
import re
import subprocess
import sys
import time

# scripts/cluster/'s processes.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "cluster"))
from cluster_processes import Child, UsageError  # noqa: E402

POLL_S = 2.0  # between `kubectl get job` calls, per trial
JOB_LABEL = "batch.kubernetes.io/job-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def load_template(path):
    try:
        import yaml
    except ImportError:
        raise UsageError("--launcher=k8s reads the Job template with PyYAML: "
                         "apt-get install python3-yaml (and run with "
                         "/usr/bin/python3)")
    try:
        with open(path) as f:
            job = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise UsageError("--k8s_job_template=%s: %s" % (path, e))
    if not isinstance(job, dict) or job.get("kind") != "Job":
        raise UsageError("--k8s_job_template=%s: not a Job manifest" % path)
    return job


def job_name(sweep, tid, attempt):
    """A DNS-1123 label of at most 63 characters (the Job's pods add a
    suffix to it, and Kubernetes keeps Job names to 63)."""
    base = re.sub(r"[^a-z0-9-]", "-", sweep.lower()).strip("-")[:40] or "sweep"
    return "shardps-%s-t%da%d" % (base, tid, attempt)


def _set_env(container, name, value):
    env = container.setdefault("env", [])
    for e in env:
        if e.get("name") == name:
            e.pop("valueFrom", None)
            e["value"] = value
            return
    env.append({"name": name, "value": value})


def render_job(template, name, sweep, job_id, trainers, trial_args,
               pservers=None):
    """The trial's Job: a deep copy of `template` (a dict) with the changes
    described in this module's comment."""
    job = json.loads(json.dumps(template))
    job["metadata"]["name"] = name
    labels = job["metadata"].setdefault("labels", {})
    labels["shardps.io/sweep"] = re.sub(r"[^A-Za-z0-9._-]", "-", sweep)[:63]
    spec = job["spec"]
    spec["completionMode"] = "Indexed"
    spec["completions"] = spec["parallelism"] = trainers
    containers = spec["template"]["spec"]["containers"]
    trainer = next((c for c in containers if c.get("name") == "trainer"),
                   containers[0])
    args = [a for a in trainer.get("args", [])
            if not (pservers and a.startswith("--pservers="))]
    if pservers:
        args.append("--pservers=" + pservers)
    trainer["args"] = args + ["--metrics_file=/dev/stdout"] + trial_args
    _set_env(trainer, "SHARDPS_JOB_ID", job_id)
    _set_env(trainer, "SHARDPS_NUM_GRADIENT_SERVERS", str(trainers))
    return job


class K8sLauncher(object):
    def __init__(self, args, binaries, out_dir):
        self.args = args
        self.template = load_template(args.k8s_job_template)
        self.sweep = os.path.basename(out_dir.rstrip("/"))
        self.kubectl = [args.kubectl] + (
            ["--namespace", args.k8s_namespace] if args.k8s_namespace
            else [])

    def run(self, argv, stdin=None):
        try:
            r = subprocess.run(self.kubectl + argv, input=stdin,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return 1, "", str(e)
        return r.returncode, r.stdout, r.stderr

    def start_pservers(self):
        where = self.args.pservers or "the template's --pservers"
        print("sweep: trials as Kubernetes Jobs (%s) on %s" %
              (os.path.basename(self.args.k8s_job_template), where),
              flush=True)

    def check_pservers(self):
        pass  # the StatefulSet's; Kubernetes restarts them

    def start_trial(self, tid, trial_args, trial_dir):
        job_id = next(a.split("=", 1)[1] for a in trial_args
                      if a.startswith("--job_id="))
        args = [a for a in trial_args if not a.startswith(
            ("--job_id=", "--config="))]
        name = job_name(self.sweep, tid, int(job_id.rsplit("a", 1)[1]))
        job = render_job(self.template, name, self.sweep, job_id,
                         self.args.trainers_per_trial, args,
                         self.args.pservers or None)
        with open(os.path.join(trial_dir, "job.json"), "w") as f:
            json.dump(job, f, indent=1)
        rc, out, err = self.run(["apply", "-f", "-"], stdin=json.dumps(job))
        log = os.path.join(trial_dir, "kubectl.log")
        with open(log, "a") as f:
            f.write(out + err)
        handle = {"name": name, "dir": trial_dir, "log": log,
                  "follower": None, "next_poll": 0.0, "rc": None}
        if rc != 0:
            handle["rc"] = 1
        return handle

    def follow(self, h):
        """Starts `kubectl logs -f` of index 0 once its pod exists."""
        rc, out, _ = self.run(["get", "pods", "-l", "%s=%s,%s=0" % (
            JOB_LABEL, h["name"], INDEX_LABEL), "-o", "name"])
        pods = out.split()
        if rc == 0 and pods:
            h["follower"] = Child(
                "logs", 0, self.kubectl + ["logs", "-f", pods[0]],
                os.path.join(h["dir"], "trainer-0.jsonl"))
            h["follower"].silent = True

    def poll(self, h):
        if h["rc"] is not None:
            return self.finish(h)
        now = time.monotonic()
        if now < h["next_poll"]:
            return None
        h["next_poll"] = now + POLL_S
        if h["follower"] is None:
            self.follow(h)
        rc, out, err = self.run(["get", "job", h["name"], "-o", "json"])
        if rc != 0:
            return None  # the API server may be busy: ask again
        try:
            status = json.loads(out).get("status", {})
        except ValueError:
            return None
        failed = any(c.get("type") == "Failed" and c.get("status") == "True"
                     for c in status.get("conditions", []))
        if failed:
            h["rc"] = 1
        elif status.get("succeeded", 0) >= self.args.trainers_per_trial:
            h["rc"] = 0
        return None if h["rc"] is None else self.finish(h)

    def finish(self, h):
        f = h["follower"]
        if f is not None:
            f.wait(30)  # the rest of the log after the pod ended
            if f.running():
                f.signal_group(15)
                f.wait(5)
            f.finish_output()
        return h["rc"]

    def stop(self, h):
        self.run(["delete", "job", h["name"], "--wait=false",
                  "--cascade=foreground"])
        if h["follower"] is not None:
            h["follower"].signal_group(15)
            h["follower"].wait(5)
            h["follower"].finish_output()

    def log_of(self, h):
        return os.path.join(h["dir"], "trainer-0.jsonl") if h["follower"] \
            else h["log"]

    def shutdown(self):
        pass
