#!/usr/bin/python3
"""Large-batch training of the Fashion-MNIST MLP and CNN: the linear scaling
rule of Goyal et al. 2017 ("Accurate, Large Minibatch SGD"), with and without
its gradual warm-up.

What it measures: the final test accuracy of each model (configs/
fmnist_mlp.pbtxt, configs/fmnist_cnn.pbtxt) when its global batch B grows
from the config's own batch (the reference R: 64 for the MLP, 32 for the CNN)
to 256, 1024, 4096 and 8192, for the same number of passes over the 60,000
training images (so B/R times fewer steps), with the learning rate scaled by
B/R through the config's schedule (docs/config.md):

    schedule { type: WARMUP warmup_steps: W reference_batch_size: R }

which ramps the rate linearly from the base rate to base * B / R over W
steps, then keeps it. Variant `scaled`: W = 0, the scaled rate from the first
step. Variant `warmup`: W = the steps of --warmup_passes passes (default 2;
the paper's was 5 of 90 epochs, too few steps for runs this short), with
floor(records / B) steps a pass (the trainer drops a pass's last partial
batch). At B = R both variants
are the config's own run (no scaling, W = 0) and it runs once.

How: for each model, variant and B, one run of scripts/sweep/sweep.py (its own
directory under --work_dir; running this script again skips the sweeps that
ended and resumes the others), one trainer per trial, no early stopping,
over base learning rates = the config's rate times --lr_factors (0.5, 1, 2).
It then reads each sweep's trials.csv and evals.csv, prints a table (every
trial; `*` marks the best factor per model, variant and B), writes
work_dir/results.json and draws docs/images/large_batch.png (one panel per
model: the best factor's final test accuracy against B, one line per
variant).

    /usr/bin/python3 scripts/sweep/large_batch.py --bin_dir build \\
        [--models mlp,cnn] [--passes mlp=10,cnn=5] [--variants scaled,warmup]

A further variant is one more entry in VARIANTS: its name and the config
assignments (--config_set paths) each of its trials gets, with {ref},
{batch}, {steps_per_pass} and {warmup_steps} filled in.
"""

import argparse
import gzip
import json
import math
import os
import platform
import re
import struct
import subprocess
import sys
import time

from sweep_results import (last_train_loss, pyplot, read_csv,
                           sweep_ended, trial_dir)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SWEEP = os.path.join(REPO, "scripts", "sweep", "sweep.py")
LR_PATH = "optimizer.learning_rate"

# lars_trust: LARS's trust coefficient for the model, chosen so that the
# config's rate times it moves each table by about 0.1% of its norm a step
# at the reference batch (0.05 * 0.02 for the MLP, 0.005 * 0.2 for the CNN).
MODELS = {
    "mlp": {"config": "configs/fmnist_mlp.pbtxt", "passes": 10,
            "lars_trust": 0.02},
    "cnn": {"config": "configs/fmnist_cnn.pbtxt", "passes": 5,
            "lars_trust": 0.2},
}

# Variant name -> config assignments of each of its trials (besides the
# learning rate). Values are str.format templates: {ref} the config's batch
# (the reference), {batch} the global batch, {steps_per_pass}, and
# {warmup_steps} the steps of --warmup_passes passes (0 at B <= ref, where
# the rate is not scaled). Points whose assignments come out equal run once.
VARIANTS = {
    "scaled": {
        "optimizer.schedule.type": "WARMUP",
        "optimizer.schedule.reference_batch_size": "{ref}",
        "optimizer.schedule.warmup_steps": "0",
    },
    "warmup": {
        "optimizer.schedule.type": "WARMUP",
        "optimizer.schedule.reference_batch_size": "{ref}",
        "optimizer.schedule.warmup_steps": "{warmup_steps}",
    },
}
# LARS (You et al. 2017) in place of the config's optimizer, momentum 0.9,
# weight decay 5e-4, the same scaled rate without and with warm-up.
_LARS = {
    "optimizer.type": "LARS",
    "optimizer.momentum": "0.9",
    "optimizer.trust_coefficient": "{lars_trust}",
    "optimizer.weight_decay": "5e-4",
}
VARIANTS["lars"] = dict(_LARS, **VARIANTS["scaled"])
VARIANTS["lars_warmup"] = dict(_LARS, **VARIANTS["warmup"])

# Below this test accuracy a trial is marked "chance" (10 classes).
CHANCE = 0.15


def parse_per_model(text, what, convert):
    """'mlp=10,cnn=4' -> {'mlp': 10, 'cnn': 4}."""
    out = {}
    for part in filter(None, text.split(",")):
        name, eq, value = part.partition("=")
        if not eq or name not in MODELS:
            raise argparse.ArgumentTypeError(
                "%s %r: want MODEL=VALUE,... with MODEL in %s" %
                (what, part, ",".join(MODELS)))
        out[name] = convert(value)
    return out


def make_parser():
    p = argparse.ArgumentParser(
        prog="large_batch.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--bin_dir", default=os.path.join(REPO, "build"),
                   help="build folder with pserver/pserver and "
                   "trainer/trainer (default build/)")
    p.add_argument("--work_dir", default="/tmp/shardps-large-batch",
                   help="the sweeps' folders and results.json")
    p.add_argument("--models", default="mlp,cnn",
                   help="of %s (default all)" % ",".join(MODELS))
    p.add_argument("--batches", default="ref,256,1024,4096,8192",
                   help="global batches; 'ref' is the config's own")
    p.add_argument("--lr_factors", action="append", default=[],
                   metavar="[MODEL=]F1,F2,...",
                   help="base learning rates as multiples of the config's "
                   "(default 0.5,1,2); MODEL= sets one model's; repeatable")
    p.add_argument("--passes", default="",
                   type=lambda s: parse_per_model(s, "--passes", int),
                   metavar="MODEL=N,...", help="passes per model (default "
                   + ",".join("%s=%d" % (m, c["passes"])
                              for m, c in MODELS.items()) + ")")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="of %s (default all)" % ",".join(VARIANTS))
    p.add_argument("--warmup_passes", type=float, default=2.0,
                   help="length of the warm-up in passes (default 2)")
    p.add_argument("--parallel", type=int, default=2,
                   help="trials at once in each sweep (default 2)")
    add_report_args(p)
    return p


def add_report_args(p):
    """Collecting, printing and drawing what ran."""
    p.add_argument("--plot", default=os.path.join(
        REPO, "docs", "images", "large_batch.png"),
        help="the figure (default docs/images/large_batch.png); '' for none")
    p.add_argument("--extra_work_dir", action="append", default=[],
                   help="with --report_only: also the trials of the same "
                   "points run in this work dir (other --lr_factors or "
                   "--batches); repeatable")
    p.add_argument("--report_only", action="store_true",
                   help="run nothing: collect, print and plot what the "
                   "sweeps under --work_dir hold")


def parse_args(argv):
    p = make_parser()
    a = p.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    a.variants = [v for v in a.variants.split(",") if v]
    for m in a.models:
        if m not in MODELS:
            p.error("--models: unknown model %r" % m)
    for v in a.variants:
        if v not in VARIANTS:
            p.error("--variants: unknown variant %r" % v)
    a.factors = {m: [0.5, 1.0, 2.0] for m in MODELS}
    try:
        for text in a.lr_factors:
            name, eq, rest = text.rpartition("=")
            values = [float(x) for x in rest.split(",") if x]
            if not values or any(not (x > 0) for x in values):
                raise ValueError(text)
            for m in ([name] if eq else MODELS):
                if m not in MODELS:
                    raise ValueError(text)
                a.factors[m] = values
        a.batch_list = [b if b == "ref" else int(b)
                        for b in a.batches.split(",") if b]
    except ValueError as e:
        p.error("bad --lr_factors or --batches: %s" % e)
    a.passes = dict({m: c["passes"] for m, c in MODELS.items()}, **a.passes)
    return a


# The plan --------------------------------------------------------------------


def config_value(text, pattern, what, path):
    m = re.search(pattern, text, re.M | re.S)
    if not m:
        sys.exit("large_batch: no %s in %s" % (what, path))
    return m.group(1)


def read_model(name, passes, factors):
    """The config's reference batch, base learning rate and number of
    training records (the header of its IDX images file)."""
    path = os.path.join(REPO, MODELS[name]["config"])
    with open(path) as f:
        text = re.sub(r"#[^\n]*", "", f.read())
    images = config_value(text, r'train_images:\s*"([^"]+)"', "train_images",
                          path)
    with gzip.open(images, "rb") if images.endswith(".gz") else \
            open(images, "rb") as f:
        records = struct.unpack(">II", f.read(8))[1]
    return {
        "name": name, "config": path, "passes": passes, "factors": factors,
        "ref": int(config_value(text, r"^batch_size:\s*(\d+)", "batch_size",
                                path)),
        "lr": float(config_value(
            text, r"optimizer\s*\{[^}]*?learning_rate:\s*([-+0-9.eE]+)",
            "optimizer learning_rate", path)),
        "optimizer": config_value(text, r"optimizer\s*\{[^}]*?type:\s*(\w+)",
                                  "optimizer type", path),
        "records": records,
        "lars_trust": MODELS[name]["lars_trust"],
    }


def plan_points(model, batches, variants, warmup_passes):
    """One point per (variant, batch): its assignments and sweep folder.
    Points with the same assignments share the folder of the first."""
    points, folders = [], {}
    for variant in variants:
        for b in batches:
            batch = model["ref"] if b == "ref" else b
            if any(p["variant"] == variant and p["batch"] == batch
                   for p in points):
                continue
            steps_per_pass = model["records"] // batch
            warmup = (int(math.ceil(warmup_passes * steps_per_pass))
                      if batch > model["ref"] else 0)
            fill = {"ref": model["ref"], "batch": batch,
                    "lars_trust": model["lars_trust"],
                    "steps_per_pass": steps_per_pass,
                    "warmup_steps": warmup}
            sets = {k: v.format(**fill) for k, v in VARIANTS[variant].items()}
            key = (batch, tuple(sorted(sets.items())))
            shared = folders.get(key)
            folder = folders.setdefault(key, "%s-%s-b%d" % (
                model["name"], variant, batch))
            points.append({"variant": variant, "batch": batch,
                           "steps_per_pass": steps_per_pass,
                           "total_steps": steps_per_pass * model["passes"],
                           "warmup_steps": int(sets.get(
                               "optimizer.schedule.warmup_steps", 0)),
                           "sets": sets, "folder": folder,
                           "same_sweep_as": shared})
    return points


def lr_text(x):
    return "%.6g" % x


def sweep_command(args, model, point, out_dir):
    cmd = [sys.executable, SWEEP, "--config", model["config"],
           "--out_dir", out_dir, "--bin_dir", args.bin_dir,
           "--early_stopping", "none", "--trainers_per_trial", "1",
           "--parallel", str(args.parallel), "--no_plot",
           "--grid", "%s=%s" % (LR_PATH, ",".join(
               lr_text(model["lr"] * f) for f in model["factors"])),
           "--grid", "batch_size=%d" % point["batch"]]
    for path, value in sorted(point["sets"].items()):
        cmd += ["--grid", "%s=%s" % (path, value)]
    return cmd + ["--", "--num_passes=%d" % model["passes"]]


def run_sweep(args, model, point):
    """Runs (or resumes) a point's sweep unless it has ended; its output
    goes to out_dir/sweep.log. Returns the seconds it ran (0 if skipped)."""
    out_dir = os.path.join(args.work_dir, point["folder"])
    # The same folder for another point only when its sweep is the same.
    if sweep_ended(out_dir):
        return 0.0
    os.makedirs(out_dir, exist_ok=True)
    cmd = sweep_command(args, model, point, out_dir)
    print("large_batch: %s %s B=%d: %s" % (
        model["name"], point["variant"], point["batch"],
        " ".join(cmd[1:])), flush=True)
    start = time.monotonic()
    with open(os.path.join(out_dir, "sweep.log"), "a") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    took = time.monotonic() - start
    timing = os.path.join(out_dir, "wall_s.json")
    spent = []
    if os.path.exists(timing):
        with open(timing) as f:
            spent = json.load(f)
    with open(timing, "w") as f:
        json.dump(spent + [round(took, 1)], f)
    print("large_batch:   exit %d after %.0f s (%s)" % (
        rc, took, os.path.join(out_dir, "sweep.log")), flush=True)
    if rc == 2 or rc >= 128:
        sys.exit("large_batch: the sweep failed (exit %d); see %s/sweep.log"
                 % (rc, out_dir))
    return took


# Results ---------------------------------------------------------------------


def number(text):
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def collect_point(args, model, point):
    """Every trial of a point's sweep, by learning-rate factor, and the best
    finished one."""
    # The rate after the warm-up: scaled by B/R when the schedule is WARMUP
    # with a reference batch R.
    sets = point["sets"]
    ref = (int(sets.get("optimizer.schedule.reference_batch_size", 0))
           if sets.get("optimizer.schedule.type") == "WARMUP" else 0)
    trials, wall = [], []
    for work_dir in [args.work_dir] + args.extra_work_dir:
        out_dir = os.path.join(work_dir, point["folder"])
        trials += collect_trials(model, point, out_dir, ref)
        if os.path.exists(os.path.join(out_dir, "wall_s.json")):
            with open(os.path.join(out_dir, "wall_s.json")) as f:
                wall += json.load(f)
    trials.sort(key=lambda t: t["lr_factor"])
    done = [t for t in trials if t["test_accuracy"] is not None]
    best = max(done, key=lambda t: t["test_accuracy"]) if done else None
    for t in trials:
        t["best"] = t is best
    return dict(point, sweep_dir=os.path.join(args.work_dir, point["folder"]),
                trials=trials,
                best_lr_factor=best["lr_factor"] if best else None,
                best_test_accuracy=best["test_accuracy"] if best else None,
                sweep_wall_s=sum(wall))


def collect_trials(model, point, out_dir, ref):
    """The trials of one sweep of a point (none when it did not run)."""
    evals = {}
    for e in read_csv(os.path.join(out_dir, "evals.csv")):
        if e.get("final") == "1":
            evals[e["trial"]] = e
    trials = []
    for row in read_csv(os.path.join(out_dir, "trials.csv")):
        lr = float(row[LR_PATH])
        e = evals.get(row["trial"], {})
        acc = number(row.get("test_accuracy"))
        t = {"lr_factor": round(lr / model["lr"], 6), "lr": lr,
             "target_lr": lr * point["batch"] / ref if ref > 0 else lr,
             "status": row["status"],
             "test_accuracy": acc if row["status"] == "done" else None,
             "last_test_accuracy": acc,
             "test_loss": number(e.get("test_loss")),
             "train_loss": last_train_loss(trial_dir(out_dir, row["trial"])),
             "train_seconds": number(e.get("train_seconds")),
             "steps": int(row["steps"] or 0),
             "why": row.get("why", "")}
        t["note"] = trial_note(t)
        if t["train_loss"] is not None and not math.isfinite(t["train_loss"]):
            t["train_loss"] = None  # JSON has no NaN
        trials.append(t)
    return trials


def trial_note(t):
    if t["status"] != "done":
        return "%s: %s" % (t["status"], (t["why"] or "").splitlines()[0]
                           if t["why"] else "")
    loss = t["train_loss"]
    if loss is None:
        return "no step line"
    if not math.isfinite(loss):
        return "train loss not finite"
    if t["test_accuracy"] < CHANCE:
        return "at chance (train loss %.3g)" % loss
    return ""


def print_table(results):
    for m in results["models"].values():
        print("\n%s (%s, %s lr %g, reference batch %d, %d pass(es)): final "
              "test accuracy; * best factor" % (
                  m["name"], os.path.relpath(m["config"], REPO),
                  m["optimizer"], m["lr"], m["ref"], m["passes"]))
        print("%-8s %6s %7s %6s %9s %9s %-6s %8s  %s" % (
            "variant", "B", "warmup", "factor", "base lr", "target lr",
            "status", "accuracy", "note"))
        for p in m["points"]:
            for t in p["trials"]:
                acc = t["test_accuracy"]
                print("%-8s %6d %7d %6g %9s %9s %-6s %7s%s  %s" % (
                    p["variant"], p["batch"], p["warmup_steps"],
                    t["lr_factor"], lr_text(t["lr"]), lr_text(t["target_lr"]),
                    t["status"], "%.4f" % acc if acc is not None else "-",
                    "*" if t["best"] else " ", t["note"] or (
                        "the sweep of %s" % p["same_sweep_as"]
                        if p["same_sweep_as"] else "")))
        print("%s: sweeps' wall time %.0f s in all" % (m["name"],
                                                        m["wall_s"]))


# The figure ------------------------------------------------------------------


def plot(results, path):
    plt = pyplot("large_batch", "figure")
    if plt is None:
        return
    models = list(results["models"].values())
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 5),
                             squeeze=False)
    for ax, m in zip(axes[0], models):
        batches = set()
        for i, variant in enumerate(m["variants"]):
            pts = sorted((p["batch"], p["best_test_accuracy"],
                          p["best_lr_factor"]) for p in m["points"]
                         if p["variant"] == variant and
                         p["best_test_accuracy"] is not None)
            batches.update(b for b, _, _ in pts)
            ax.plot([b for b, _, _ in pts], [a for _, a, _ in pts],
                    marker="os^Dv"[i % 5], color="C%d" % i, lw=2,
                    label=variant)
        ax.axhline(0.1, color="grey", ls=":", lw=1)
        ax.text(max(batches or [1]), 0.065, "chance (0.10): no lr factor "
                "learned", color="grey", fontsize=8, ha="right")
        ax.set_xscale("log", base=2)
        if batches:
            ax.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        ax.set_xticks(sorted(batches))
        ax.set_xticklabels([str(b) for b in sorted(batches)])
        ax.set_ylim(0.0, 1.0)
        ax.set_xlabel("global batch (1 trainer; reference %d)" % m["ref"])
        factors = sorted({t["lr_factor"] for p in m["points"]
                          for t in p["trials"]})
        ax.set_ylabel("final test accuracy, best of lr x %s" %
                      ",".join("%g" % f for f in factors))
        ax.set_title("%s: %s lr %g, %d pass%s" % (
            m["name"].upper(), m["optimizer"], m["lr"], m["passes"],
            "" if m["passes"] == 1 else "es"))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", title="lr x B/%d" % m["ref"])
    fig.suptitle("Linear scaling rule (Goyal et al. 2017) on Fashion-MNIST: "
                 "scaled = lr x B/ref from step 0, warmup = ramp over %g "
                 "passes;\nlars = LARS (You et al. 2017) in place of the "
                 "config's optimizer; each point the best lr factor (table: docs/tuning.md)" %
                 results["warmup_passes"], fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print("large_batch: figure in %s" % path)


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor()


def main(argv):
    args = parse_args(argv)
    args.work_dir = os.path.abspath(args.work_dir)
    args.bin_dir = os.path.abspath(args.bin_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    results = {"command": [sys.executable, os.path.abspath(__file__)] + argv,
               "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "cpu": cpu_name(), "cores": os.cpu_count(),
               "warmup_passes": args.warmup_passes, "models": {}}
    for name in args.models:
        model = read_model(name, args.passes[name], args.factors[name])
        points = plan_points(model, args.batch_list, args.variants,
                             args.warmup_passes)
        ran = 0.0
        if not args.report_only:
            for p in points:
                ran += run_sweep(args, model, p)
            print("large_batch: %s: %.0f s in this run" % (name, ran),
                  flush=True)
        collected = [collect_point(args, model, p) for p in points]
        # A shared sweep counts once.
        wall = {p["sweep_dir"]: p["sweep_wall_s"] for p in collected}
        results["models"][name] = dict(
            model, variants=args.variants, points=collected,
            wall_s=round(sum(wall.values()), 1))
    print_table(results)
    out = os.path.join(args.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print("large_batch: results in %s" % out)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
