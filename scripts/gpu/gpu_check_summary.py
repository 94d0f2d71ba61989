#!/usr/bin/env python3
"""The table of a scripts/gpu/gpu_check.sh run, from its logs folder.

    python3 scripts/gpu/gpu_check_summary.py LOGS --md summary.md --json s.json
    python3 scripts/gpu/gpu_check_summary.py \
        --one_run LOGS/train/fmnist_mlp-gpu-1

LOGS holds what gpu_check.sh wrote: steps.tsv (one row a step: name,
PASS/FAIL, seconds, note), MANIFEST, gpu-describe.log, train/NAME/ (a
local_cluster.py log folder per training run, NAME = CONFIG-BACKEND-N) and
timing/step_timer.jsonl and timing/torch.jsonl. Tables:

  Steps      every step's status and note.
  Training   GPU against CPU backend per config and trainer count: the mean
             training loss over the first 100 steps (trainer 0's step line
             at step 100), the final test accuracy, the median whole step
             (trainer 0's step lines' median_step_s) and samples/s.
  Step time  ShardPS's compute step (tools/step_timer) on the GPU and the
             CPU against PyTorch's on the same GPU (compute: forward and
             backward on the device; compute_host: with the parameters and
             batch copied in and the gradients out, as a parameter-server
             trainer must; train: compute plus the optimizer).
  Python     examples/torch_mlp.py and torch_deepfm.py through shardps
             against plain PyTorch on the same device (python/, written by
             gpu_check_python.py: probe.json, results.jsonl), or why they
             did not run.

--one_run prints one line on one training run (for the step table).
Standard library only.
"""

import argparse
import json
import os
import statistics
import sys

from gpu_check_python import METRICS

# GPU and CPU agree when the mean training loss over the first 100 steps
# differs by at most LOSS_REL_TOL (relative), the mean over the whole pass
# by at most PASS_LOSS_REL_TOL, and the final test accuracy by at most the
# larger of ACC_POINTS_TOL and the CPU's own rounding spread (the accuracy
# difference between the CPU backend with 1 and with 4 threads). FP32 on
# both sides, so only rounding differs. Over a pass, rounding differences
# grow chaotically, and one run's final accuracy is a poor witness: the CPU
# backend alone ended fmnist_mlp (1 trainer) at 0.8064 on an AMD EPYC and
# at 0.8331 on the H100 machine's CPU, while the means of the training loss
# over the pass differed by 0.45% (docs/cuda.md, "Runs"). The early loss
# checks the arithmetic, the pass loss the training, and the accuracy bound
# catches gross failures only.
LOSS_REL_TOL = 1e-3
PASS_LOSS_REL_TOL = 1e-2
ACC_POINTS_TOL = 3.0
# The goal: ShardPS's compute step at most this many times
# PyTorch's on the same GPU.
GOAL_RATIO = 1.2
# The Python rows: shardps and plain PyTorch agree when the final test
# accuracy (torch_mlp) differs by at most 0.03 (3 points, the C++ rows'
# bound: one pass's final accuracy moves by up to 2 points with rounding
# alone) and the test AUC (torch_deepfm) by at most 0.01. Both train the
# same model from the same seed and batches; with shardps the optimizer
# runs on the pserver (and DeepFM's embedding rows start from the
# pserver's own draw), so only rounding and those draws differ. On this
# project's CPU: accuracy 0.8051 (shardps) and 0.8117 (plain), AUC 0.8420
# and 0.8417.
PY_TOLERANCE = {"torch_mlp": 0.03, "torch_deepfm": 0.01}


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def run_stats(run_dir):
    """What one local_cluster.py run of the check gives, or None."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = None
    lines = read_jsonl(os.path.join(run_dir, "trainer-0.jsonl"))
    steps = [l for l in lines if l.get("event") == "step"]
    evals = [l for l in lines if l.get("event") == "eval"]
    loss100 = next((l["train_loss"] for l in steps if l.get("step") == 100),
                   None)
    medians = [l["median_step_s"] for l in steps if "median_step_s" in l]
    # The pass's mean training loss: each line's window, weighted by its
    # steps.
    weighted, counted, prev = 0.0, 0, 0
    for l in steps:
        if "train_loss" in l and "step" in l and l["step"] > prev:
            weighted += l["train_loss"] * (l["step"] - prev)
            counted += l["step"] - prev
            prev = l["step"]
    final = next((e for e in reversed(evals) if e.get("final")), None)
    if final is None and evals:
        final = evals[-1]
    ok = bool(summary) and summary.get("exit_code") == 0
    if summary is None and not lines:
        return None
    return {
        "ok": ok,
        "exit_code": summary.get("exit_code") if summary else None,
        "loss100": loss100,
        "pass_loss": weighted / counted if counted else None,
        "accuracy": final.get("test_accuracy") if final else None,
        "steps": final.get("step") if final else None,
        "step_ms": statistics.median(medians) * 1e3 if medians else None,
        "samples_per_s": final.get("samples_per_s") if final else None,
    }


def fmt(v, spec="%.4f", none="–"):
    return none if v is None else spec % v


def one_run_line(run_dir):
    s = run_stats(run_dir)
    if s is None:
        return "no logs in %s" % run_dir
    return ("accuracy %s after %s steps, loss over steps 1-100 %s, median "
            "step %s ms, %s samples/s" % (
                fmt(s["accuracy"]), s["steps"], fmt(s["loss100"]),
                fmt(s["step_ms"], "%.3f"), fmt(s["samples_per_s"], "%.0f")))


def read_steps(logs):
    rows = []
    try:
        with open(os.path.join(logs, "steps.tsv")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    rows.append({"step": parts[0], "status": parts[1],
                                 "seconds": parts[2],
                                 "note": parts[3] if len(parts) > 3 else ""})
    except OSError:
        pass
    return rows


def first_line(path):
    try:
        with open(path) as f:
            lines = [l.strip() for l in f if l.strip()]
        return lines[-1] if lines else None
    except OSError:
        return None


def training_rows(logs):
    rows = []
    for config in ("fmnist_mlp", "fmnist_cnn"):
        for n in (1, 2):
            cpu = run_stats(os.path.join(logs, "train",
                                         "%s-cpu-%d" % (config, n)))
            gpu = run_stats(os.path.join(logs, "train",
                                         "%s-gpu-%d" % (config, n)))
            cpu4 = run_stats(os.path.join(logs, "train",
                                          "%s-cpu4-%d" % (config, n)))
            if cpu is None and gpu is None:
                continue
            row = {"config": config, "trainers": n, "cpu": cpu, "gpu": gpu,
                   "cpu4": cpu4, "loss_rel_diff": None,
                   "pass_loss_rel_diff": None,
                   "accuracy_diff_points": None, "cpu_spread_points": None,
                   "accuracy_tolerance_points": ACC_POINTS_TOL,
                   "verdict": "incomplete"}
            if (cpu and cpu4 and cpu["accuracy"] is not None and
                    cpu4["accuracy"] is not None):
                row["cpu_spread_points"] = 100 * abs(cpu4["accuracy"] -
                                                     cpu["accuracy"])
                row["accuracy_tolerance_points"] = max(
                    ACC_POINTS_TOL, row["cpu_spread_points"])
            if cpu and gpu and cpu["loss100"] and gpu["loss100"] is not None:
                row["loss_rel_diff"] = (abs(gpu["loss100"] - cpu["loss100"]) /
                                        abs(cpu["loss100"]))
            if cpu and gpu and cpu["pass_loss"] and \
                    gpu["pass_loss"] is not None:
                row["pass_loss_rel_diff"] = (
                    abs(gpu["pass_loss"] - cpu["pass_loss"]) /
                    abs(cpu["pass_loss"]))
            if (cpu and gpu and cpu["accuracy"] is not None and
                    gpu["accuracy"] is not None):
                row["accuracy_diff_points"] = 100 * (gpu["accuracy"] -
                                                     cpu["accuracy"])
            if not (cpu and cpu["ok"]) or not (gpu and gpu["ok"]):
                row["verdict"] = "a run failed"
            elif (row["loss_rel_diff"] is not None and
                  row["pass_loss_rel_diff"] is not None and
                  row["accuracy_diff_points"] is not None):
                agree = (row["loss_rel_diff"] <= LOSS_REL_TOL and
                         row["pass_loss_rel_diff"] <= PASS_LOSS_REL_TOL and
                         abs(row["accuracy_diff_points"]) <=
                         row["accuracy_tolerance_points"])
                row["verdict"] = "agree" if agree else "DIFFER"
            rows.append(row)
    return rows


def timing_rows(logs, training):
    ours = [l for l in read_jsonl(os.path.join(logs, "timing",
                                                "step_timer.jsonl"))
            if l.get("event") == "step_timer"]
    torch = read_jsonl(os.path.join(logs, "timing", "torch.jsonl"))
    rows = []
    for config in ("fmnist_mlp", "fmnist_cnn"):
        gpu = next((l for l in ours if l.get("config") == config and
                    str(l.get("backend", "")).startswith("cuda")), None)
        cpu = next((l for l in ours if l.get("config") == config and
                    l.get("backend") == "cpu"), None)
        t = {l["kind"]: l for l in torch if l.get("config") == config}
        if not (gpu or cpu or t):
            continue
        whole = next((r["gpu"]["step_ms"] for r in training
                      if r["config"] == config and r["trainers"] == 1 and
                      r["gpu"]), None)

        def med(line):
            return line["median_ms"] if line else None

        row = {"config": config,
               "batch": (gpu or cpu or next(iter(t.values()), {})).get(
                   "batch"),
               "shardps_gpu_ms": med(gpu), "shardps_cpu_ms": med(cpu),
               "torch_compute_ms": med(t.get("compute")),
               "torch_compute_host_ms": med(t.get("compute_host")),
               "torch_train_ms": med(t.get("train")),
               "shardps_whole_step_gpu_ms": whole}
        for k in ("compute", "compute_host"):
            theirs = row["torch_%s_ms" % k]
            row["ratio_vs_torch_" + k] = (
                row["shardps_gpu_ms"] / theirs
                if row["shardps_gpu_ms"] and theirs else None)
        rows.append(row)
    return rows


def python_rows(logs):
    """The Python rows: per example, its shardps and plain runs and the
    verdict (agree, DIFFER, a run failed, or skipped/not run: why)."""
    runs = read_jsonl(os.path.join(logs, "python", "results.jsonl"))
    rows = []
    for name in ("torch_mlp", "torch_deepfm"):
        mine = {r.get("kind"): r for r in runs if r.get("example") == name}
        if not mine:
            continue
        shard, plain = mine.get("shardps"), mine.get("plain")
        row = {"example": name, "figure": METRICS[name][2],
               "tolerance": PY_TOLERANCE[name], "shardps": shard,
               "plain": plain, "diff": None}
        statuses = [r.get("status") for r in mine.values()]
        if None in mine:
            row["verdict"] = "skipped: " + mine[None].get("reason", "?")
        elif "FAIL" in statuses:
            row["verdict"] = "a run failed"
        elif "NOT RUN" in statuses or not (shard and plain):
            row["verdict"] = "not run: " + next(
                (r["reason"] for r in mine.values() if r.get("reason")),
                "a run is missing")
        else:
            row["diff"] = shard["metric"] - plain["metric"]
            row["verdict"] = ("agree" if abs(row["diff"]) <=
                              row["tolerance"] else "DIFFER")
        rows.append(row)
    return rows


def python_cells(r):
    s, p = r["shardps"] or {}, r["plain"] or {}
    return [r["example"], s.get("device") or p.get("device") or "–",
            r["figure"], fmt(s.get("metric")), fmt(p.get("metric")),
            fmt(r["diff"], "%+.4f"), "±%g" % r["tolerance"],
            fmt(s.get("loss")), fmt(p.get("loss")),
            fmt(s.get("train_seconds"), "%.1f"),
            fmt(p.get("train_seconds"), "%.1f"),
            fmt(s.get("samples_per_s"), "%.0f"),
            fmt(p.get("samples_per_s"), "%.0f"),
            fmt(s.get("wall_s"), "%.1f"), fmt(p.get("wall_s"), "%.1f"),
            r["verdict"].replace("|", "/")[:400]]


def read_probe(logs):
    try:
        with open(os.path.join(logs, "python", "probe.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def probe_line(probe):
    """One line on the interpreter the Python rows ran with."""
    line = "%s: Python %s, glibc %s, " % (
        probe.get("which") or probe.get("executable"),
        ".".join(str(v) for v in probe.get("version", [])),
        probe.get("glibc") or "?")
    if "torch" in probe:
        return line + "PyTorch %s (CUDA %s), CUDA available: %s%s" % (
            probe["torch"], probe.get("torch_cuda"),
            probe.get("cuda_available"),
            " (%s)" % probe["device_name"] if probe.get("device_name")
            else "")
    return line + "no PyTorch (%s)" % probe.get("torch_error")


def section(out, title, intro, headers, rows):
    """Appends a "## title" section: an intro paragraph (if any) and a
    table of `rows`, lists of cells."""
    out += ["", "## " + title, ""]
    if intro:
        out += [intro, ""]
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "---|" * len(headers))
    for cells in rows:
        out.append("| " + " | ".join(str(c) for c in cells) + " |")


def training_cells(r):
    c, g, c4 = r["cpu"] or {}, r["gpu"] or {}, r["cpu4"] or {}
    return [r["config"], r["trainers"],
            fmt(c.get("loss100")), fmt(g.get("loss100")),
            fmt(r["loss_rel_diff"], "%.1e"),
            fmt(c.get("pass_loss")), fmt(g.get("pass_loss")),
            fmt(r["pass_loss_rel_diff"], "%.1e"),
            fmt(c.get("accuracy")), fmt(c4.get("accuracy")),
            fmt(g.get("accuracy")),
            fmt(r["accuracy_diff_points"], "%+.2f"),
            fmt(c.get("step_ms"), "%.3f"), fmt(g.get("step_ms"), "%.3f"),
            fmt(c.get("samples_per_s"), "%.0f"),
            fmt(g.get("samples_per_s"), "%.0f"), r["verdict"]]


def timing_cells(r):
    return [r["config"], r["batch"]] + [
        fmt(r[k], "%.3f") for k in ("shardps_gpu_ms", "shardps_cpu_ms",
                                    "torch_compute_ms",
                                    "torch_compute_host_ms",
                                    "torch_train_ms")] + [
        fmt(r["ratio_vs_torch_compute"], "%.2fx"),
        fmt(r["ratio_vs_torch_compute_host"], "%.2fx"),
        fmt(r["shardps_whole_step_gpu_ms"], "%.3f")]


def header(logs):
    """The lines above the tables: GPU, host, bundle, Python."""
    out = ["# ShardPS GPU check", ""]
    describe = first_line(os.path.join(logs, "gpu-describe.log"))
    if describe and describe.startswith("cuda:"):
        out.append("- GPU: %s" % describe)
    host = first_line(os.path.join(logs, "host.log"))
    if host:
        out.append("- host (the CPU backend's figures): %s" % host)
    try:
        with open(os.path.join(logs, "MANIFEST")) as f:
            out += ["- bundle %s" % l.rstrip() for l in f][1:6]
    except OSError:
        pass
    probe = read_probe(logs)
    if probe:
        out.append("- Python (the Python rows): %s" % probe_line(probe))
    return out


def steps_section(out, steps):
    section(out, "Steps", None, ["step", "status", "s", "note"],
            [[s["step"], s["status"], s["seconds"],
              s["note"].replace("|", "/")[:400]] for s in steps])
    passed = sum(1 for s in steps if s["status"] == "PASS")
    skipped = sum(1 for s in steps if s["status"] == "SKIP")
    out += ["", "%d of %d steps passed%s." % (
        passed, len(steps), " (%d skipped)" % skipped if skipped else "")]


def training_section(out, training):
    section(out, "Training: GPU against the CPU backend",
            "1 pserver, sync, 1 pass; trainer 0. Loss 1-100: mean "
            "training loss over steps 1-100; pass loss: over the pass. "
            "CPU spread: the accuracy difference between the CPU backend "
            "with 1 and 4 threads (rounding alone). Agree: loss 1-100 "
            "within %g and pass loss within %g (relative), accuracy "
            "within the larger of %g points and the CPU spread. Step: "
            "median whole step (pull, compute, push)." % (
                LOSS_REL_TOL, PASS_LOSS_REL_TOL, ACC_POINTS_TOL),
            ["config", "trainers", "loss 1-100 CPU", "GPU", "rel. diff",
             "pass loss CPU", "GPU", "rel. diff", "accuracy CPU",
             "CPU 4 threads", "GPU", "GPU - CPU (points)", "step CPU ms",
             "GPU ms", "samples/s CPU", "GPU", "verdict"],
            [training_cells(r) for r in training])


def timing_sections(out, logs, timing):
    if timing:
        section(out, "Step time on the same GPU: ShardPS against PyTorch",
                "Medians in ms. ShardPS compute: tools/step_timer "
                "(parameters up, forward, backward, gradients down). PyTorch "
                "compute: forward and backward on the device; +transfers: "
                "with parameters and batch in and gradients out; train: "
                "compute and the optimizer. Whole step: a GPU trainer's step "
                "with 1 pserver (pull, compute, push). Goal: ShardPS compute "
                "at most %gx PyTorch's." % GOAL_RATIO,
                ["config", "batch", "ShardPS GPU", "ShardPS CPU",
                 "PyTorch compute", "PyTorch +transfers", "PyTorch train",
                 "ShardPS / PyTorch compute", "ShardPS / PyTorch +transfers",
                 "ShardPS whole step (GPU)"],
                [timing_cells(r) for r in timing])
    calls = [l for l in read_jsonl(os.path.join(logs, "timing",
                                                 "step_timer.jsonl"))
             if l.get("event") == "step_timer_call" and
             str(l.get("backend", "")).startswith("cuda")]
    if calls:
        section(out, "Where ShardPS's GPU step goes",
                "tools/step_timer --per_call: each backend call waited for "
                "(host overhead and device work, plus a wait each), so the "
                "sum exceeds the step.",
                ["config", "call", "calls/step", "ms/step"],
                [[l["config"], l["call"], "%g" % l["calls_per_step"],
                  "%.3f" % l["ms_per_step"]] for l in calls])


def python_section(out, python):
    section(out, "Python: shardps against plain PyTorch on the same device",
            "examples/torch_mlp.py (Fashion-MNIST, batch 64) and "
            "torch_deepfm.py (200,000 generated records, batch 256), 1 pass "
            "(GPU_CHECK_QUICK: 120 steps), seed 1, with the machine's own "
            "Python and PyTorch (the Python line above). shardps: the "
            "bundle's package and native module, 1 pserver of the bundle on "
            "the CPU, 1 sync trainer; the model on the device, the "
            "optimizer on the pserver. Plain: --plain, one process, "
            "torch.optim on the device, no pservers. Agree: the final test "
            "accuracy within %g, the test AUC within %g (rounding alone "
            "moves one pass's final figures; the test loss is beside them). "
            "Training s: the pass alone; run s: the whole command, start-up "
            "included." % (PY_TOLERANCE["torch_mlp"],
                           PY_TOLERANCE["torch_deepfm"]),
            ["example", "device", "figure", "shardps", "plain",
             "shardps - plain", "tolerance", "test loss shardps", "plain",
             "training s shardps", "plain", "samples/s shardps", "plain",
             "run s shardps", "plain", "verdict"],
            [python_cells(r) for r in python])


def markdown(logs, steps, training, timing, python):
    out = header(logs)
    steps_section(out, steps)
    if training:
        training_section(out, training)
    timing_sections(out, logs, timing)
    if python:
        python_section(out, python)
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("logs", nargs="?")
    p.add_argument("--md")
    p.add_argument("--json")
    p.add_argument("--one_run", metavar="RUN_DIR")
    args = p.parse_args(argv)
    if args.one_run:
        print(one_run_line(args.one_run))
        return 0
    if not args.logs or not os.path.isdir(args.logs):
        print("gpu_check_summary: no logs folder %r" % args.logs,
              file=sys.stderr)
        return 2
    steps = read_steps(args.logs)
    training = training_rows(args.logs)
    timing = timing_rows(args.logs, training)
    python = python_rows(args.logs)
    md = markdown(args.logs, steps, training, timing, python)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": steps, "training": training,
                       "timing": timing, "python": python,
                       "python_probe": read_probe(args.logs),
                       "gpu": first_line(os.path.join(args.logs,
                                                      "gpu-describe.log"))},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
