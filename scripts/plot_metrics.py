#!/usr/bin/python3
"""Draws the curves of a ShardPS run from its metrics lines, in one PNG.

    /usr/bin/python3 scripts/plot_metrics.py [--out PNG] FILE_OR_DIR...

Each FILE is a metrics file of one trainer (trainer --metrics_file, JSON lines,
docs/flags.md "Metrics lines"); a DIR stands for every trainer-*.jsonl in it,
as scripts/cluster/local_cluster.py writes them into its log folder. The PNG
(default DIR/curves.png, or curves.png next to the first FILE; 1400x900 pixels)
has six panels, one line per trainer ("trainer K"):

  top:    test loss and test accuracy per pass (eval lines; test AUC as
          dashed lines when the eval lines carry test_auc, as sparse CTR
          runs' do), and the mean step time of each trainer split into
          data, compute, pull, push and wait (stacked bars, milliseconds or
          seconds per step, with each part's share);
  bottom: training loss, samples/s, and step time (total, and of it the
          wait for other trainers) over steps (step lines). Recoveries
          (recovery lines) are dotted vertical lines at the step the job
          rolled back to.

The title names the run (the log folder); when the folder holds the
cluster.json of local_cluster.py it also names the config and the trainer
flags.

Choices:
  * Several runs in one file. local_cluster.py appends to trainer-K.jsonl,
    so a folder used twice holds two runs. A new run is recognised by its
    step count starting again: a step line whose step is not above the
    previous step line's (or an eval line whose step is below it), or a
    step line after a final eval, unless a recovery line in between
    explains the rollback. Only the LAST run of each file is plotted, and a
    note on stderr says which lines that is.
  * Recoveries. A rollback undoes the steps after its to_step: the step and
    eval lines of the undone steps are dropped, so each curve shows the
    history the job kept.
  * Step times. The data_s ... wait_s of a step line are totals over the
    steps since the trainer's previous step line; they are divided by that
    number of steps (across a recovery: the steps before the failure plus
    those after the rollback; after a longer gap, as when a trainer joined
    late or rejoined, the usual distance between its step lines).
  * Missing fields: a line without train_loss is simply absent from that
    curve (which joins its neighbours); a step line without one of data_s
    ... wait_s is absent from the total step time and from that part's
    mean. Unknown events and fields are ignored. Evals of the
    same pass (a pass redone after a recovery) keep the last.
  * A last line without its newline that is not valid JSON (a trainer
    killed while writing) is skipped with a warning; any other line that is
    not a JSON object is an error naming the file and line.

Exit status: 0 when the PNG was written; 1 for no files, no metrics lines,
bad JSON or a PNG that cannot be written; 2 for bad arguments, or when
matplotlib is missing (apt-get install python3-matplotlib). Needs Debian's
python3-matplotlib, hence /usr/bin/python3; draws with Agg, no display.
"""

import argparse
import glob
import json
import math
import os
import re
import sys

PROG = "plot_metrics"
WIDTH_IN, HEIGHT_IN, DPI = 14, 9, 100
PARTS = (("data_s", "data", "#9e9e9e"), ("compute_s", "compute", "#59a14f"),
         ("pull_s", "pull", "#4e79a7"), ("push_s", "push", "#f28e2b"),
         ("wait_s", "wait", "#e15759"))
# Flags local_cluster.py sets itself; left out of the title.
OWN_FLAGS = ("pservers", "trainer_id", "num_gradient_servers", "num_trainers",
             "config", "metrics_file", "progress")


class PlotError(Exception):
    pass


# Reading ------------------------------------------------------------------


def input_files(paths):
    """The metrics files named by the command line, in order."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = glob.glob(os.path.join(p, "trainer-*.jsonl"))
            if not found:
                raise PlotError("%s: no trainer-*.jsonl in this folder "
                                "(written by trainer --metrics_file)" % p)
            key = lambda f: [int(t) if t.isdigit() else t
                             for t in re.split(r"(\d+)", f)]
            files += sorted(found, key=key)
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise PlotError("%s: no such file or folder" % p)
    return files


def read_lines(path):
    """[(line number, object)] of a metrics file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PlotError("%s: %s" % (path, e.strerror or e))
    out = []
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except ValueError as e:
            if i == len(lines) and not raw.endswith(b"\n"):
                warn("%s:%d: skipped a cut-off last line (%s)" % (path, i, e))
                continue
            raise PlotError("%s:%d: bad JSON: %s" % (path, i, e))
        if not isinstance(obj, dict):
            raise PlotError("%s:%d: bad JSON: not an object: %.60s" %
                            (path, i, line.decode("utf-8", "replace")))
        out.append((i, obj))
    return out


def num(line, key):
    """line[key] as a float; NaN when missing or not a number."""
    v = line.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def split_runs(lines):
    """The lines of one trainer cut into runs (see the module's docstring)."""
    runs, cur = [], []
    cursor, final = None, False
    for n, line in lines:
        ev, step = line.get("event"), num(line, "step")
        new = False
        if ev == "step" and not math.isnan(step):
            new = final or (cursor is not None and step <= cursor)
        elif ev == "eval" and not math.isnan(step):
            new = cursor is not None and step < cursor
        if new and cur:
            runs.append(cur)
            cur, cursor, final = [], None, False
        cur.append((n, line))
        if ev in ("step", "eval") and not math.isnan(step):
            cursor = step
        elif ev == "recovery" and not math.isnan(num(line, "to_step")):
            cursor = num(line, "to_step")
        if ev == "eval" and line.get("final"):
            final = True
    if cur:
        runs.append(cur)
    return runs


class Trainer(object):
    """The curves of one trainer in one run."""

    def __init__(self, tid, path):
        self.tid, self.path = tid, path
        self.label = "trainer %s" % tid
        self.evals, self.steps, self.recoveries = [], [], []

    def add_run(self, lines):
        cursor, pending = 0.0, 0.0
        for _, line in lines:
            ev = line.get("event")
            step = num(line, "step")
            if ev == "step" and not math.isnan(step):
                self.steps.append(dict(line, _steps=pending + step - cursor,
                                       _rolled_back=pending > 0))
                cursor, pending = step, 0.0
            elif ev == "eval":
                self.evals.append(line)
            elif ev == "recovery":
                to = num(line, "to_step")
                frm = num(line, "from_step")
                if math.isnan(to):
                    continue
                self.recoveries.append(to)
                if not math.isnan(frm):
                    pending += max(0.0, frm - cursor)
                cursor = to
                self.steps = [s for s in self.steps if s["step"] <= to]
                self.evals = [e for e in self.evals
                              if not num(e, "step") > to]
        self.fix_windows()
        self.steps.sort(key=lambda s: s["step"])
        by_pass = {}
        for e in self.evals:
            by_pass[num(e, "pass")] = e  # the last eval of each pass
        self.evals = [by_pass[p] for p in sorted(
            by_pass, key=lambda p: (math.isnan(p), 0 if p != p else p))]

    def fix_windows(self):
        """Step lines come every --log_every_steps steps, so a longer gap
        (a trainer that joined late, or was restarted and rejoined) is a
        window of the usual length, unless a recovery explains it."""
        gaps = [s["_steps"] for s in self.steps[1:] if s["_steps"] > 0]
        if gaps:
            usual = max(set(gaps), key=gaps.count)
            for s in self.steps:
                if not s["_rolled_back"]:
                    s["_steps"] = min(s["_steps"], usual)

    def series(self, key, source="steps"):
        rows = self.steps if source == "steps" else self.evals
        x = "step" if source == "steps" else "pass"
        return points([(num(r, x), num(r, key)) for r in rows])

    def per_step(self, key):
        """(steps, seconds per step of `key`) over the step lines."""
        return points([(s["step"], num(s, key) / s["_steps"]
                        if s["_steps"] > 0 else math.nan)
                       for s in self.steps])

    def total_per_step(self):
        return points([(s["step"], sum(num(s, k) for k, _, _ in PARTS) /
                        s["_steps"] if s["_steps"] > 0 else math.nan)
                       for s in self.steps])

    def mean_split(self):
        """{part: mean seconds per step over the run} (NaN when absent)."""
        out = {}
        for key, _, _ in PARTS:
            secs = steps = 0.0
            for s in self.steps:
                v = num(s, key)
                if not math.isnan(v) and s["_steps"] > 0:
                    secs += v
                    steps += s["_steps"]
            out[key] = secs / steps if steps > 0 else math.nan
        return out


def points(pts):
    """([x], [y]) without the points that lack either: a line whose field
    is missing is left out, and the curve joins its neighbours."""
    pts = [(a, b) for a, b in pts if not (math.isnan(a) or math.isnan(b))]
    return [a for a, _ in pts], [b for _, b in pts]


def load(paths):
    files = input_files(paths)
    trainers, empty_files = [], []
    for path in files:
        lines = read_lines(path)
        if not lines:
            empty_files.append(path)
            continue
        ids = set(l["trainer_id"] for _, l in lines if "trainer_id" in l)
        m = re.match(r"trainer-(\d+)\.jsonl$", os.path.basename(path))
        default = (list(ids)[0] if len(ids) == 1 else
                   int(m.group(1)) if m else len(trainers))
        groups = {}
        for n, line in lines:
            tid = line.get("trainer_id", default)
            if isinstance(tid, (dict, list)):
                tid = default
            groups.setdefault(tid, []).append((n, line))
        for tid in sorted(groups, key=str):
            if not any(l.get("event") in ("step", "eval")
                       for _, l in groups[tid]):
                continue
            runs = split_runs(groups[tid])
            last = runs[-1]
            if len(runs) > 1:
                warn("%s: %d runs in this file (the step count starts "
                     "again); plotting the last, lines %d-%d" %
                     (path, len(runs), last[0][0], last[-1][0]))
            t = Trainer(tid, path)
            t.add_run(last)
            trainers.append(t)
    if len(empty_files) == len(files):
        raise PlotError("no metrics lines in %s" % ", ".join(files))
    for path in empty_files:
        warn("%s: no metrics lines; skipped" % path)
    if not any(t.steps or t.evals for t in trainers):
        raise PlotError("no step or eval lines in %s" % ", ".join(files))
    folders = run_folders(paths)
    if len(set(t.tid for t in trainers)) < len(trainers):
        for t in trainers:  # the same id from several runs
            where = os.path.basename(os.path.dirname(os.path.abspath(t.path)))
            t.label = "trainer %s (%s)" % (t.tid, where)
    return trainers, files, folders


def run_folders(paths):
    out = []
    for p in paths:
        d = os.path.abspath(p if os.path.isdir(p) else os.path.dirname(p)
                            or ".")
        if d not in out:
            out.append(d)
    return out


def cluster_details(folders):
    """'config, P pservers, flags' from local_cluster.py's cluster.json."""
    if len(folders) != 1:
        return None
    try:
        with open(os.path.join(folders[0], "cluster.json")) as f:
            c = json.load(f)
        argv = c["trainers"][0]["argv"][1:]
        model = c.get("python") or c["config"]
        if c.get("python"):
            argv = argv[1:]  # the interpreter's first argument: the script
        flags = [a for a in argv if a.lstrip("-").split("=")[0]
                 not in OWN_FLAGS]
        text = "%s, %d pserver%s, %d trainer%s" % (
            os.path.basename(model), len(c["pservers"]),
            "" if len(c["pservers"]) == 1 else "s", len(c["trainers"]),
            "" if len(c["trainers"]) == 1 else "s")
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    flags = " ".join(flags)
    if len(flags) > 90:
        flags = flags[:87] + "..."
    return text + (", " + flags if flags else "")


def warn(msg):
    sys.stderr.write("%s: %s\n" % (PROG, msg))


# Drawing ------------------------------------------------------------------


def color(i):
    return "C%d" % (i % 10)


def style(i, n):
    """Line width and marker size of trainer i of n: later trainers are
    drawn thinner on top, so that equal curves (sync) all stay visible."""
    f = i / (n - 1.0) if n > 1 else 0.6
    return {"lw": 3.2 - 2.0 * f, "ms": 10 - 5 * f}


def empty(ax, what):
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center",
            va="center", color="0.45", fontsize=11)


def draw_evals(ax_loss, ax_acc, trainers):
    has_auc = False
    for i, t in enumerate(trainers):
        st = dict(style(i, len(trainers)), color=color(i))
        ax_loss.plot(*t.series("test_loss", "evals"), "o-", **st)
        ax_acc.plot(*t.series("test_accuracy", "evals"), "o-", **st)
        x, y = t.series("test_auc", "evals")
        if y:
            has_auc = True
            ax_acc.plot(x, y, "s--", **st)
    ax_loss.set_title("test loss per pass")
    ax_loss.set_ylabel("test loss (cross-entropy)")
    ax_acc.set_title("test accuracy%s per pass" % (" and AUC" if has_auc
                                                    else ""))
    ax_acc.set_ylabel("test accuracy%s (fraction)" % (" / AUC" if has_auc
                                                      else ""))
    passes = [p for t in trainers for p in t.series("pass", "evals")[0]]
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel("pass")
        if passes:
            ax.set_xlim(min(passes) - 0.4, max(passes) + 0.4)
            ax.set_xticks(range(int(min(passes)), int(max(passes)) + 1))
        else:
            empty(ax, "no eval lines (no pass finished)")
    if has_auc:
        from matplotlib.lines import Line2D
        ax_acc.legend([Line2D([], [], color="0.3", marker="o"),
                       Line2D([], [], color="0.3", ls="--", marker="s")],
                      ["accuracy", "AUC"], loc="best", fontsize=9)


def draw_steps(ax_loss, ax_rate, ax_time, trainers, unit):
    scale, _ = unit
    top = {ax_rate: 0.0, ax_time: 0.0}

    def curve(ax, x, y, i, **kw):
        lw = 0.5 + 0.6 * style(i, len(trainers))["lw"]
        ax.plot(x, y, color=color(i), lw=lw, marker="o" if len(x) < 3
                else None, ms=4, **kw)
        if ax in top and y:
            top[ax] = max(top[ax], max(y))

    for i, t in enumerate(trainers):
        curve(ax_loss, *t.series("train_loss"), i)
        curve(ax_rate, *t.series("samples_per_s"), i)
        x, y = t.total_per_step()
        curve(ax_time, x, [v * scale for v in y], i)
        x, y = t.per_step("wait_s")
        curve(ax_time, x, [v * scale for v in y], i, ls=":")
    total = summed_rate(trainers)
    if total:
        line, = ax_rate.plot(*total, color="0.15", lw=1.2, ls="--")
        top[ax_rate] = max([top[ax_rate]] + total[1])
        ax_rate.legend([line], ["all trainers (sum)"], loc="lower right",
                       fontsize=8)
    ax_loss.set_title("training loss (mean over each logging window)")
    ax_loss.set_ylabel("training loss (cross-entropy)")
    ax_rate.set_title("training throughput")
    ax_rate.set_ylabel("samples/s")
    ax_time.set_title("step time: total (solid) and waiting (dotted)")
    ax_time.set_ylabel("%s per step" % unit[1])
    has_steps = any(t.steps for t in trainers)
    if has_steps:
        from matplotlib.lines import Line2D
        ax_time.legend([Line2D([], [], color="0.3"),
                        Line2D([], [], color="0.3", ls=":")],
                       ["total", "wait for other trainers"],
                       loc="upper right", fontsize=8)
    if top[ax_rate] > 0:
        ax_rate.set_ylim(0, top[ax_rate] * 1.08)
    if top[ax_time] > 0:
        ax_time.set_ylim(0, top[ax_time] * 1.3)  # room for the legend
    for ax in (ax_loss, ax_rate, ax_time):
        ax.set_xlabel("step")
        if not has_steps:
            empty(ax, "no step lines")
        for i, t in enumerate(trainers):
            for r in t.recoveries:
                ax.axvline(r, color=color(i), ls=(0, (1, 2)), lw=1.2)


def summed_rate(trainers):
    """The job's samples/s (the trainers' sum) when every trainer logged
    the same steps, as in sync mode; else None."""
    if len(trainers) < 2 or not trainers[0].steps:
        return None
    x0, _ = trainers[0].series("samples_per_s")
    ys = []
    for t in trainers:
        x, y = t.series("samples_per_s")
        if x != x0:
            return None
        ys.append(y)
    return x0, [sum(v) for v in zip(*ys)]


def time_unit(trainers):
    """(scale, name): milliseconds unless steps take a second or more."""
    worst = 0.0
    for t in trainers:
        m = sum(v for v in t.mean_split().values() if not math.isnan(v))
        worst = max(worst, m)
    return (1.0, "seconds") if worst >= 1.0 else (1000.0, "milliseconds")


def draw_split(ax, trainers, unit):
    scale, name = unit
    rows = []  # (trainer, [ms or s per step of each part], their sum)
    for t in trainers:
        m = t.mean_split()
        if any(not math.isnan(v) for v in m.values()):
            w = [0.0 if math.isnan(m[k]) else m[k] * scale for k, _, _ in
                 PARTS]
            rows.append((t, w, sum(w)))
    ax.set_title("where a step's time goes (mean over the run)")
    ax.set_xlabel("%s per step" % name)
    if not rows:
        return empty(ax, "no step times")
    ys = list(range(len(rows)))[::-1]
    widest = max(whole for _, _, whole in rows)
    left = [0.0] * len(rows)
    for j, (_, part, col) in enumerate(PARTS):
        width = [w[j] for _, w, _ in rows]
        ax.barh(ys, width, left=left, color=col, label=part, height=0.6,
                edgecolor="white", linewidth=0.6)
        for y, l, w, (_, _, whole) in zip(ys, left, width, rows):
            if whole > 0 and w / whole >= 0.07:
                ax.text(l + w / 2, y, "%.0f%%" % (100 * w / whole),
                        ha="center", va="center", fontsize=8, color="white",
                        fontweight="bold")
        left = [l + w for l, w in zip(left, width)]
    for y, (_, _, whole) in zip(ys, rows):
        ax.text(whole + widest * 0.01, y, "%.3g %s" % (
            whole, "s" if scale == 1.0 else "ms"), va="center", fontsize=8,
            color="0.25")
    ax.set_yticks(ys)
    ax.set_yticklabels([t.label for t, _, _ in rows])
    ax.set_xlim(0, widest * 1.18 if widest > 0 else 1)
    ax.set_ylim(-0.8, len(rows) + 0.4)
    ax.legend(loc="upper center", ncol=5, fontsize=8, frameon=False,
              handlelength=1.2, columnspacing=1.0)


def headline(trainers):
    """'final test accuracy ...' from the trainers' last evals."""
    parts = []
    for key, name in (("test_accuracy", "test accuracy"),
                      ("test_auc", "test AUC")):
        vals = [num(t.evals[-1], key) for t in trainers if t.evals]
        vals = [v for v in vals if not math.isnan(v)]
        if not vals:
            continue
        lo, hi = min(vals), max(vals)
        parts.append("%s %.4f" % (name, lo) if hi - lo < 5e-5 else
                     "%s %.4f-%.4f" % (name, lo, hi))
    if not parts:
        return None
    last = max((num(t.evals[-1], "pass") for t in trainers if t.evals),
               default=math.nan)
    after = "" if math.isnan(last) else " after pass %d" % last
    return "last eval%s: %s" % (after, ", ".join(parts))


def draw(trainers, folders, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(2, 3, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    unit = time_unit(trainers)
    draw_evals(axes[0][0], axes[0][1], trainers)
    draw_split(axes[0][2], trainers, unit)
    draw_steps(axes[1][0], axes[1][1], axes[1][2], trainers, unit)
    for ax in axes[1]:
        ax.sharex(axes[1][0])
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=9)
    axes[0][2].grid(False, axis="y")

    name = title or ", ".join(os.path.basename(f) or f for f in folders)
    sub = [s for s in (cluster_details(folders), headline(trainers)) if s]
    fig.suptitle("ShardPS run %s" % name, fontsize=15, fontweight="bold",
                 y=0.985)
    if sub:
        fig.text(0.5, 0.943, "   |   ".join(sub), ha="center", fontsize=10,
                 color="0.25")
    handles = [Line2D([], [], color=color(i), lw=2) for i in
               range(len(trainers))]
    labels = [t.label for t in trainers]
    if any(t.recoveries for t in trainers):
        handles.append(Line2D([], [], color="0.3", ls=(0, (1, 2))))
        labels.append("recovery (rolled back to this step)")
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 8),
               bbox_to_anchor=(0.5, 0.937), frameon=False, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.925), h_pad=2.0, w_pad=1.5)
    tmp = out + ".tmp"
    try:
        fig.savefig(tmp, dpi=DPI, format="png")
        os.replace(tmp, out)
    except OSError as e:
        raise PlotError("cannot write %s: %s" % (out, e.strerror or e))
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv):
    p = argparse.ArgumentParser(
        prog="plot_metrics.py",
        description="Draw a ShardPS run's curves (test loss and accuracy "
        "per pass, training loss, samples/s and step-time split over steps) "
        "from its metrics lines into one PNG.")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR",
                   help="metrics files, or folders holding trainer-*.jsonl")
    p.add_argument("--out", metavar="PNG",
                   help="the PNG to write (default: curves.png in the "
                   "folder of the first argument)")
    p.add_argument("--title", help="the run's name (default: its folder's)")
    a = p.parse_args(argv)
    try:
        trainers, files, folders = load(a.paths)
        out = a.out or os.path.join(folders[0], "curves.png")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.stderr.write("%s: matplotlib is missing (apt-get install "
                             "python3-matplotlib)\n" % PROG)
            return 2
        draw(trainers, folders, out, a.title)
    except PlotError as e:
        sys.stderr.write("%s: %s\n" % (PROG, e))
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
