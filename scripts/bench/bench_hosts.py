#!/usr/bin/python3
"""The cross-host benchmark of the canonical dense workload (issue 33;
docs/benchmarks.md, "Across hosts"): Fashion-MNIST, MLP 784-256-128-10,
2 sync trainers, each "host" a network namespace on a Linux bridge with its
own PID namespace (so that, as between real hosts, a trainer can reach a
pserver's shared memory only on its own host), links shaped with `tc tbf`
on both ends of each host's veth pair (this kernel has no netem).

Layouts (--layouts):
  1ps      1 pserver on a host of its own (3 hosts)
  2ps      2 pservers, each on a host of its own (4 hosts)
  beside   a pserver beside each trainer (2 hosts): each host's link
           carries what a ring all-reduce carries, the local share goes
           through shared memory
each with every --compressions (none, bf16, threshold), against PyTorch DDP
(gloo, scripts/bench/torch_fmnist.py --rank) with a rank in each trainer's
host, on every --links (unshaped, 10g, 1g).

Prints one line per run, then a markdown table per link: samples/s (both
trainers), the ratio to DDP on that link, test accuracy after each pass,
the time to --target test accuracy (at the end of the first pass that
reaches it; "-" if none does), and the bytes a trainer pushed and pulled
per pass (ShardPS's own count) and the bytes the busiest host's link sent
and received per pass (the veth counters: what the wire carried, for DDP
too). --out DIR also writes results.json and each run's logs there.

Needs root (namespaces, tc), iproute2 and util-linux (unshare), Debian's
python3-torch for DDP (else --no_ddp). Run as:

    sudo /usr/bin/python3 scripts/bench/bench_hosts.py [--links unshaped,1g]
        [--layouts 1ps,beside] [--compressions none,bf16] [--passes 2]
        [--repeats 1] [--bin_dir build] [--out DIR]
"""

import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
import netns  # noqa: E402

TORCH_SCRIPT = os.path.join(REPO, "scripts", "bench", "torch_fmnist.py")
CONFIG = os.path.join(REPO, "configs", "fmnist_mlp.pbtxt")
BATCH = 64  # per trainer, the config's
TRAINERS = 2
PS_PORT = 7164  # every host has its own ports
DDP_PORT = 29517
LINKS = {"unshaped": None, "10g": 10 * 10**9, "1g": 10**9}
LAYOUTS = {
    # Hosts as (runs a pserver, trainer id or None).
    "1ps": [(False, 0), (False, 1), (True, None)],
    "2ps": [(False, 0), (False, 1), (True, None), (True, None)],
    "beside": [(True, 0), (True, 1)],
}
LAYOUT_NAMES = {"1ps": "1 pserver", "2ps": "2 pservers on their own hosts",
                "beside": "a pserver beside each trainer"}
COMPRESSIONS = ("none", "bf16", "threshold")
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", default="unshaped,10g,1g",
                   help="comma-separated, of %s" % ", ".join(LINKS))
    p.add_argument("--layouts", default="1ps,2ps,beside",
                   help="comma-separated, of %s" % ", ".join(LAYOUTS))
    p.add_argument("--compressions", default=",".join(COMPRESSIONS),
                   help="comma-separated, of %s" % ", ".join(COMPRESSIONS))
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each setting; the table shows the median "
                        "by samples/s")
    p.add_argument("--target", type=float, default=0.83,
                   help="the test accuracy whose time is reported")
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"))
    p.add_argument("--torch_python", default="/usr/bin/python3")
    p.add_argument("--no_ddp", action="store_true")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a run may take before it is stopped")
    p.add_argument("--out", default=None,
                   help="folder for results.json and the runs' logs")
    p.add_argument("--trainer_flags", default="",
                   help="more trainer flags, space-separated, for every "
                        "ShardPS run")
    a = p.parse_args(argv)

    def pick(value, allowed, what):
        got = [x for x in value.split(",") if x]
        bad = [x for x in got if x not in allowed]
        if bad or not got:
            p.error("--%s: %s not among %s" % (what, ",".join(bad) or "none",
                                                ", ".join(allowed)))
        return got
    a.links = pick(a.links, LINKS, "links")
    a.layouts = pick(a.layouts, LAYOUTS, "layouts")
    a.compressions = pick(a.compressions, COMPRESSIONS, "compressions")
    if a.passes < 1 or a.repeats < 1:
        p.error("--passes and --repeats must be at least 1")
    for b in ("pserver/pserver", "trainer/trainer"):
        if not os.access(os.path.join(a.bin_dir, b), os.X_OK):
            p.error("no %s in %s (build first, or --bin_dir)" % (b, a.bin_dir))
    why = netns.unavailable()
    if why is None and not os.path.exists(netns.TC):
        why = "no `tc` command (iproute2)"
    if why is None and not os.path.exists(UNSHARE):
        why = "no `unshare` command (util-linux)"
    if why:
        p.error("cannot make the hosts: " + why)
    if not a.no_ddp and subprocess.run(
            [a.torch_python, "-c", "import torch"],
            capture_output=True).returncode != 0:
        p.error("%s has no torch (apt-get install python3-torch), or pass "
                "--no_ddp" % a.torch_python)
    return a


def host_argv(net, i, script):
    """Runs the shell `script` as host i: inside namespace i, in a PID (and
    /proc) namespace of its own, killed with everything in it when the
    returned process is."""
    return net.prefix(i) + [UNSHARE, "--pid", "--fork", "--kill-child",
                            "--mount-proc", "sh", "-c", script]


def quote(args):
    return " ".join("'%s'" % x.replace("'", "'\\''") for x in args)


def link_bytes(net, i):
    """(sent, received) bytes on host i's end of its link so far."""
    dev = net.link(i)
    out = []
    for what in ("tx_bytes", "rx_bytes"):
        r = subprocess.run(net.prefix(i) + [
            "cat", "/sys/class/net/%s/statistics/%s" % (dev, what)],
            capture_output=True, text=True, check=True)
        out.append(int(r.stdout))
    return out


class Run(object):
    """One job on fresh hosts: the hosts' processes, their logs, the
    busiest link's bytes."""

    def __init__(self, a, hosts, link, log_dir):
        self.a, self.hosts, self.log_dir = a, hosts, log_dir
        self.net = netns.Net(len(hosts))
        self.procs = {}
        try:
            for i in range(len(hosts)):
                self.net.shape(i, LINKS[link])
            self.before = [link_bytes(self.net, i) for i in range(len(hosts))]
        except BaseException:
            self.net.close()
            raise

    def start(self, i, script):
        log = open(os.path.join(self.log_dir, "host-%d.log" % i), "w")
        self.procs[i] = subprocess.Popen(
            host_argv(self.net, i, script), stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait(self, hosts):
        """Waits for the hosts `hosts` to end; raises as soon as one fails,
        or on timeout, naming the host and its log."""
        limit = time.monotonic() + self.a.timeout
        left = set(hosts)
        while left:
            for i in sorted(left):
                rc = self.procs[i].poll()
                if rc is None:
                    continue
                left.discard(i)
                if rc != 0:
                    with open(os.path.join(self.log_dir,
                                           "host-%d.log" % i)) as f:
                        tail = f.read().strip().splitlines()[-5:]
                    raise RuntimeError("host %d exited %d; see %s:\n  %s" % (
                        i, rc, self.log_dir, "\n  ".join(tail)))
            if left and time.monotonic() > limit:
                raise RuntimeError(
                    "host(s) %s did not finish within %g s; see the logs in "
                    "%s" % (",".join(map(str, sorted(left))), self.a.timeout,
                            self.log_dir))
            time.sleep(0.05)

    def traffic(self):
        """Bytes (sent, received) of the busiest host link in the run."""
        deltas = []
        for i, (tx0, rx0) in enumerate(self.before):
            tx, rx = link_bytes(self.net, i)
            deltas.append((tx - tx0, rx - rx0))
        return max(deltas, key=lambda d: d[0] + d[1])

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.net.close()


def shardps_run(a, layout, compression, link, log_dir):
    hosts = LAYOUTS[layout]
    run = Run(a, hosts, link, log_dir)
    try:
        servers = ",".join("%s:%d" % (run.net.addrs[i], PS_PORT)
                           for i, (ps, _) in enumerate(hosts) if ps)
        pserver = [os.path.join(a.bin_dir, "pserver", "pserver"),
                   "--port=%d" % PS_PORT,
                   "--num_gradient_servers=%d" % TRAINERS]
        trainer_hosts = []
        for i, (ps, k) in enumerate(hosts):
            parts = []
            if ps:
                parts.append("%s > %s 2>&1 &" % (quote(pserver), quote(
                    [os.path.join(log_dir, "pserver-%d.log" % i)])))
            if k is None:
                parts.append("wait")
            else:
                trainer_hosts.append(i)
                trainer = [
                    os.path.join(a.bin_dir, "trainer", "trainer"),
                    "--pservers=" + servers, "--trainer_id=%d" % k,
                    "--num_gradient_servers=%d" % TRAINERS,
                    "--config=" + CONFIG, "--mode=sync",
                    "--num_passes=%d" % a.passes, "--progress=off",
                    "--compression=" + compression,
                    "--metrics_file=" + os.path.join(
                        log_dir, "trainer-%d.jsonl" % k)] + \
                    a.trainer_flags.split()
                parts.append("%s > %s 2>&1" % (quote(trainer), quote(
                    [os.path.join(log_dir, "trainer-%d.log" % k)])))
            run.start(i, "export OPENBLAS_NUM_THREADS=1; " + " ".join(parts))
        run.wait(trainer_hosts)
        sent, received = run.traffic()
    finally:
        run.close()
    return shardps_figures(a, read_evals(log_dir), sent, received)


def read_evals(log_dir):
    """{trainer id: [its eval line of each pass]} from the metrics files."""
    evals = {}
    for path in glob.glob(os.path.join(log_dir, "trainer-*.jsonl")):
        with open(path) as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("event") == "eval":
                    # One per pass: the final evaluation repeats the last.
                    evals.setdefault(ev["trainer_id"], {})[ev["pass"]] = ev
    if sorted(evals) != list(range(TRAINERS)):
        raise RuntimeError("no evaluation lines from every trainer in " +
                           log_dir)
    return {k: [e[p] for p in sorted(e)] for k, e in evals.items()}


def shardps_figures(a, evals, sent, received):
    """A run's samples/s, accuracy and seconds per pass, and bytes a
    trainer pushed and pulled and the busiest link carried, per pass."""
    last = [e[-1] for e in evals.values()]
    seconds = max(e["train_seconds"] for e in last)
    samples = sum(e["step"] * BATCH for e in last)
    passes = [dict(accuracy=e["test_accuracy"],
                   seconds=max(evals[k][j]["train_seconds"]
                               for k in evals))
              for j, e in enumerate(evals[0])]
    return dict(samples_per_s=samples / seconds, passes=passes,
                push_mb=statistics.mean(e["push_bytes"] for e in last) / 1e6 /
                a.passes,
                pull_mb=statistics.mean(e["pull_bytes"] for e in last) / 1e6 /
                a.passes,
                link_sent_mb=sent / 1e6 / a.passes,
                link_received_mb=received / 1e6 / a.passes)


def ddp_run(a, link, log_dir):
    hosts = [(False, 0), (False, 1)]
    run = Run(a, hosts, link, log_dir)
    try:
        for i in range(TRAINERS):
            cmd = [a.torch_python, TORCH_SCRIPT, "--mode", "ddp", "--rank",
                   str(i), "--master_addr", run.net.addrs[0], "--port",
                   str(DDP_PORT), "--epochs", str(a.passes)]
            # gloo takes the address the host name resolves to (127.0.0.1
            # here) unless told which interface to use.
            run.start(i, "export GLOO_SOCKET_IFNAME=%s; " % run.net.link(i) +
                      quote(cmd) + " > %s 2>&1" % quote(
                [os.path.join(log_dir, "rank-%d.log" % i)]))
        run.wait(range(TRAINERS))
        sent, received = run.traffic()
    finally:
        run.close()
    with open(os.path.join(log_dir, "rank-0.log")) as f:
        results = [json.loads(l[len("RESULT "):]) for l in f
                   if l.startswith("RESULT ")]
    if not results:
        raise RuntimeError("no RESULT line in %s/rank-0.log" % log_dir)
    epochs = results[0]["epochs"]
    elapsed, passes = 0.0, []
    for e in epochs:
        elapsed += e["wall_s"]
        passes.append(dict(accuracy=e["test_acc"], seconds=elapsed))
    return dict(samples_per_s=sum(e["samples"] for e in epochs) / elapsed,
                passes=passes, push_mb=None, pull_mb=None,
                link_sent_mb=sent / 1e6 / a.passes,
                link_received_mb=received / 1e6 / a.passes)


def time_to(r, target):
    for p in r["passes"]:
        if p["accuracy"] >= target:
            return p["seconds"]
    return None


def table(a, link, rows):
    ddp = rows.get("PyTorch DDP (gloo)")
    base = ddp["samples_per_s"] if ddp else None
    out = ["", "### Link: %s" % link, "",
           "| run | samples/s | vs DDP | test accuracy per pass | s to %.2f "
           "| MB pushed / pulled per trainer-pass | busiest link MB sent / "
           "received per pass |" % a.target,
           "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if r is None:
            out.append("| %s | failed | | | | | |" % name)
            continue
        t = time_to(r, a.target)
        out.append("| %s | %.0f | %s | %s | %s | %s | %.0f / %.0f |" % (
            name, r["samples_per_s"],
            "%.2f" % (r["samples_per_s"] / base) if base else "-",
            " / ".join("%.4f" % p["accuracy"] for p in r["passes"]),
            "%.1f" % t if t is not None else "-",
            "%.1f / %.1f" % (r["push_mb"], r["pull_mb"])
            if r["push_mb"] is not None else "-",
            r["link_sent_mb"], r["link_received_mb"]))
    return "\n".join(out)


def main(argv):
    a = parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="shardps-bench-hosts-")
    os.makedirs(out, exist_ok=True)
    settings = [(l, c) for l in a.layouts for c in a.compressions]
    results = {}
    tables = []
    for link in a.links:
        rows = {}
        runs_of_link = [("ShardPS, %s, %s" % (LAYOUT_NAMES[l], c),
                 lambda d, l=l, c=c: shardps_run(a, l, c, link, d))
                for l, c in settings]
        if not a.no_ddp:
            runs_of_link.append(("PyTorch DDP (gloo)",
                         lambda d: ddp_run(a, link, d)))
        for name, fn in runs_of_link:
            runs = []
            for rep in range(a.repeats):
                d = os.path.join(out, "%s-%s-%d" % (
                    link, name.replace(" ", "_").replace(",", "").replace(
                        "(", "").replace(")", ""), rep))
                os.makedirs(d, exist_ok=True)
                t0 = time.monotonic()
                try:
                    r = fn(d)
                except RuntimeError as e:
                    print("%-8s %-58s FAILED: %s" % (link, name, e),
                          file=sys.stderr, flush=True)
                    continue
                runs.append(r)
                print("%-8s %-58s %7.0f samples/s  accuracy %s  (%.0f s)" % (
                    link, name, r["samples_per_s"],
                    " ".join("%.4f" % p["accuracy"] for p in r["passes"]),
                    time.monotonic() - t0), file=sys.stderr, flush=True)
            runs.sort(key=lambda r: r["samples_per_s"])
            rows[name] = runs[len(runs) // 2] if runs else None
            results.setdefault(link, {})[name] = runs
        tables.append(table(a, link, rows))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(dict(passes=a.passes, repeats=a.repeats, target=a.target,
                       results=results), f, indent=1)
    print("Canonical MLP, 2 sync trainers, %d pass(es), median of %d run(s); "
          "logs and results.json in %s" % (a.passes, a.repeats, out))
    print("\n".join(tables))


if __name__ == "__main__":
    main(sys.argv[1:])
