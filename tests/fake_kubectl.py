#!/usr/bin/env python3
"""A stand-in for kubectl, for tests/sweep_test.py: the calls that
scripts/sweep/sweep_k8s.py makes, answered by running each Job's pods as local
processes. State in $FAKE_KUBE_DIR; a container's program is
$FAKE_KUBE_TRAINER whatever its image says.

    apply -f -                      a Job (JSON on stdin): its pods start
    get pods -l job-name=N,...=0 -o name
    logs -f pod/N-K                 the pod's output until it ends
    get job N -o json               status.succeeded / failed / conditions
    delete job N ...                SIGTERM to its pods

Standard library only.
"""

import json
import os
import signal
import subprocess
import sys
import time

DIR = os.environ.get("FAKE_KUBE_DIR", "")


def path(*parts):
    return os.path.join(DIR, *parts)


def load(name):
    try:
        with open(path(name + ".json")) as f:
            return json.load(f)
    except OSError:
        return None


def apply_job():
    job = json.load(sys.stdin)
    if job.get("kind") != "Job":
        sys.exit("fake kubectl: only Jobs")
    name = job["metadata"]["name"]
    spec = job["spec"]
    container = spec["template"]["spec"]["containers"][0]
    env = dict(os.environ)
    for e in container.get("env", []):
        env[e["name"]] = e["value"]
    pods = []
    for k in range(spec["completions"]):
        env["JOB_COMPLETION_INDEX"] = str(k)
        out = path("%s-%d.out" % (name, k))
        rc = path("%s-%d.rc" % (name, k))
        argv = [os.environ["FAKE_KUBE_TRAINER"]] + container.get("args", [])
        script = '"$@" >"%s" 2>&1; echo $? >"%s"' % (out, rc)
        p = subprocess.Popen(["sh", "-c", script, "sh"] + argv, env=env,
                             start_new_session=True,
                             stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        pods.append(p.pid)
    with open(path(name + ".json"), "w") as f:
        json.dump({"job": job, "pods": pods}, f)
    print("job.batch/%s created" % name)


def pod_rc(name, k):
    try:
        with open(path("%s-%d.rc" % (name, k))) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def get(argv):
    if argv[0] == "pods":
        selector = dict(kv.split("=") for kv in argv[argv.index("-l") +
                                                     1].split(","))
        name = selector["batch.kubernetes.io/job-name"]
        k = int(selector["batch.kubernetes.io/job-completion-index"])
        if load(name) is not None:
            print("pod/%s-%d" % (name, k))
        return
    name = argv[1]
    state = load(name)
    if state is None:
        sys.exit('Error from server (NotFound): jobs.batch "%s" not found' %
                 name)
    codes = [pod_rc(name, k) for k in range(len(state["pods"]))]
    failed = sum(1 for c in codes if c not in (None, 0))
    status = {"succeeded": sum(1 for c in codes if c == 0), "failed": failed}
    if failed:
        status["conditions"] = [{"type": "Failed", "status": "True"}]
    print(json.dumps({"status": status}))


def logs(argv):
    name, k = argv[-1].split("/", 1)[1].rsplit("-", 1)
    out = path("%s-%s.out" % (name, k))
    offset = 0
    while True:
        done = pod_rc(name, int(k)) is not None
        try:
            with open(out, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            data = b""
        offset += len(data)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        if done:
            return
        time.sleep(0.1)


def delete(argv):
    state = load(argv[1])
    for pid in (state or {}).get("pods", []):
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass
    print('job.batch "%s" deleted' % argv[1])


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--namespace"]:
        argv = argv[2:]
    if argv[:1] == ["apply"]:
        apply_job()
    elif argv[:1] == ["get"]:
        get(argv[1:])
    elif argv[:1] == ["logs"]:
        logs(argv[1:])
    elif argv[:1] == ["delete"]:
        delete(argv[1:])
    else:
        sys.exit("fake kubectl: unknown command %r" % argv)


if __name__ == "__main__":
    main()
