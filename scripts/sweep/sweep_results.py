"""What a sweep's folder holds (scripts/sweep/sweep.py writes it), read by
the sweep itself when it resumes and by the studies that run sweeps and
report on them (large_batch.py, ctr_tuning.py):

    sweep.json              the sweep and every trial's state
    trials.csv, evals.csv   one row per trial; every eval line of every trial
    trials/NNN/             trial NNN's logs and trainer-K.jsonl metrics

Standard library only (matplotlib where a figure is drawn).
"""

import csv
import json
import math
import os
import sys

STATE_FILE = "sweep.json"
# A trial in one of these states is not run again when the sweep resumes.
ENDED = ("done", "stopped", "failed")


def trial_dir(sweep_dir, trial_id):
    return os.path.join(sweep_dir, "trials", "%03d" % int(trial_id))


def read_state(sweep_dir):
    """sweep.json as a dict, or None where there is none (or it is torn)."""
    try:
        with open(os.path.join(sweep_dir, STATE_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sweep_ended(sweep_dir):
    """Whether the sweep there has trials and every one has ended."""
    trials = (read_state(sweep_dir) or {}).get("trials")
    return bool(trials) and all(t["status"] in ENDED for t in trials)


def read_csv(path):
    """The rows of trials.csv or evals.csv as dicts; none without the file."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def new_history():
    """What read_metrics gathers from one trainer's metrics file."""
    return {"offset": 0, "steps": [], "evals": [], "last_step": None}


def read_metrics(path, history):
    """Adds the new lines of a trainer's metrics file to `history` (a dict
    of new_history(): the offset read to, steps [(samples, training loss)],
    eval lines, the last step line). A line still being written is left
    for the next call."""
    try:
        with open(path, "rb") as f:
            f.seek(history["offset"])
            data = f.read()
    except OSError:
        return
    end = data.rfind(b"\n") + 1
    history["offset"] += end
    for raw in data[:end].splitlines():
        try:
            line = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        if line.get("event") == "step":
            history["steps"].append((line.get("samples", 0),
                                     line.get("train_loss")))
            history["last_step"] = line
        elif line.get("event") == "eval":
            history["evals"].append(line)


def last_train_loss(trial_path):
    """The training loss of trainer 0's last step line in a trial's folder:
    NaN when it was not finite (the metrics file writes null), None when
    there is no step line."""
    h = new_history()
    read_metrics(os.path.join(trial_path, "trainer-0.jsonl"), h)
    if not h["steps"]:
        return None
    loss = h["steps"][-1][1]
    return loss if isinstance(loss, (int, float)) else math.nan


def pyplot(prog, what):
    """matplotlib.pyplot with the Agg backend, or None, saying on stderr
    that `what` is not drawn, where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("%s: no %s: matplotlib is missing (apt-get install "
              "python3-matplotlib; run with /usr/bin/python3)" % (prog, what),
              file=sys.stderr)
        return None
    return plt
