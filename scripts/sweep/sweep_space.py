"""The logic of scripts/sweep/sweep.py, apart from processes: the search space
and its trials, the trainer arguments of a trial, the median stopping rule and
the leaderboard.

Standard library only; Python 3.6 or newer.
"""

import itertools
import math
import random
import re

# A parameter's name: a trainer flag (`batch_size`, `updates_threshold`) or
# a path into the config (`optimizer.learning_rate`, `layers[fc1].output_dim`;
# anything with a '.' or '['), given to the trainer as --config_set. Paths
# joined by '+' take the same value (`a.lr+b.lr`). `flag:` and `config:`
# force the kind.
_FLAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]\-+]*$")
DISTRIBUTIONS = ("uniform", "loguniform", "intuniform", "intloguniform",
                 "choice")


class SpaceError(ValueError):
    """A search space that cannot be used; the message says why."""


class Param(object):
    """One dimension: grid values, or a distribution to sample."""

    def __init__(self, name, values=None, dist=None, low=None, high=None):
        self.name = name
        self.values = values  # grid or choice values, as strings
        self.dist = dist  # None for a grid
        self.low, self.high = low, high
        if name.startswith("flag:"):
            self.kind, self.target = "flag", name[5:]
        elif name.startswith("config:"):
            self.kind, self.target = "config", name[7:]
        elif "." in name or "[" in name:
            self.kind, self.target = "config", name
        else:
            self.kind, self.target = "flag", name
        pattern = _FLAG_NAME if self.kind == "flag" else _PATH_NAME
        if not pattern.match(self.target):
            raise SpaceError("%r is not a trainer flag name or a config path"
                             % name)
        if self.kind == "flag" and self.target in OWNED_FLAGS:
            raise SpaceError("%r: the sweep sets --%s itself" %
                             (name, self.target))

    def sample(self, rng):
        if self.dist == "choice":
            return rng.choice(self.values)
        lo, hi = self.low, self.high
        if self.dist in ("loguniform", "intloguniform"):
            x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        else:
            x = rng.uniform(lo, hi)
        if self.dist.startswith("int"):
            return str(int(round(x)))
        return "%.4g" % x


# Trainer flags that the sweep gives each trial itself.
OWNED_FLAGS = ("pservers", "trainer_id", "num_gradient_servers", "config",
               "job_id", "metrics_file", "config_set")


def _split_assignment(text, what):
    name, eq, value = text.partition("=")
    name = name.strip().lstrip("-") if not name.startswith(
        ("flag:", "config:")) else name.strip()
    if not eq or not name or not value.strip():
        raise SpaceError("%s %r: not NAME=VALUES" % (what, text))
    return name, value.strip()


def parse_grid(text):
    """NAME=V1,V2,... (a leading -- on NAME is allowed)."""
    name, value = _split_assignment(text, "--grid")
    values = [v.strip() for v in value.split(",")]
    if any(not v for v in values):
        raise SpaceError("--grid %r: an empty value" % text)
    if len(set(values)) != len(values):
        raise SpaceError("--grid %r: a value given twice" % text)
    return Param(name, values=values)


def parse_sample(text):
    """NAME=DIST:LOW:HIGH or NAME=choice:A,B,..."""
    name, value = _split_assignment(text, "--sample")
    dist, _, rest = value.partition(":")
    if dist not in DISTRIBUTIONS:
        raise SpaceError("--sample %r: the distribution must be one of %s" %
                         (text, ", ".join(DISTRIBUTIONS)))
    if dist == "choice":
        values = [v.strip() for v in rest.split(",") if v.strip()]
        if not values:
            raise SpaceError("--sample %r: choice:A,B,... needs values" % text)
        return Param(name, values=values, dist=dist)
    try:
        low, high = [float(x) for x in rest.split(":")]
    except ValueError:
        raise SpaceError("--sample %r: %s:LOW:HIGH with two numbers" %
                         (text, dist))
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SpaceError("--sample %r: needs LOW < HIGH, both finite" % text)
    if "log" in dist and low <= 0:
        raise SpaceError("--sample %r: a log distribution needs LOW > 0" %
                         text)
    return Param(name, dist=dist, low=low, high=high)


def make_trials(grid, samples, num_samples, seed):
    """Every grid point times `num_samples` draws of the sampled parameters
    (Ray Tune's grid_search x num_samples), in a shuffled order (so that
    early stopping meets good and bad trials early), each a dict of
    name -> value string. Deterministic for a seed."""
    names = [p.name for p in grid + samples]
    if len(set(names)) != len(names):
        raise SpaceError("a parameter is given twice")
    if num_samples < 1:
        raise SpaceError("--samples must be at least 1")
    if not samples and num_samples != 1:
        raise SpaceError("--samples needs a --sample parameter to draw")
    rng = random.Random(seed)
    trials = []
    for point in itertools.product(*[p.values for p in grid]):
        for _ in range(num_samples):
            t = dict(zip([p.name for p in grid], point))
            for p in samples:
                t[p.name] = p.sample(rng)
            trials.append(t)
    # No parameter: one trial of the config and flags as given.
    random.Random(seed + 1).shuffle(trials)
    return trials


def trial_args(space, params):
    """The trainer arguments that set a trial's parameters."""
    args, sets = [], []
    by_name = {p.name: p for p in space}
    for name, value in sorted(params.items()):
        p = by_name[name]
        if p.kind == "flag":
            args.append("--%s=%s" % (p.target, value))
        else:
            if "," in value:
                raise SpaceError("%s=%s: a config value cannot hold a comma" %
                                 (name, value))
            for path in p.target.split("+"):
                sets.append("%s=%s" % (path, value))
    if sets:
        args.append("--config_set=" + ",".join(sets))
    return args


def describe(params):
    return " ".join("%s=%s" % kv for kv in sorted(params.items()))


# The median stopping rule ---------------------------------------------------


def value_at(reports, x):
    """The last value of `reports` (sorted (x, value) pairs) at x' <= x, or
    None when there is none."""
    last = None
    for xx, v in reports:
        if xx > x:
            break
        last = v
    return last


def should_stop(trial_reports, others, fraction, grace, min_references):
    """The median stopping rule (Golovin et al. 2017, Google Vizier; Ray
    Tune's MedianStoppingRule, Katib's medianstop): stop a trial when its
    best value so far (lower is better: the training loss) is worse than the
    median of the other trials' values at the same point.

    Two departures from Vizier, both measured on the first grids run here:
    the others' value at a point is their last report up to it (a step line's
    train_loss is already the mean over --log_every_steps steps), not the
    mean of all their reports since the start, which one diverging first
    window (a loss of 1e9) keeps huge for the rest of the run so that
    nothing is stopped; and `others` holds every trial that has reached this
    point, running or ended, not only completed ones (with few trials at
    once, most would go unchecked). `fraction` is how far the trial is
    through its own run; nothing is stopped before `grace`. A non-finite
    loss (divergence) counts as worse than anything.

    Returns None to go on, else the reason, a line."""
    if not trial_reports or fraction < grace:
        return None
    x = trial_reports[-1][0]
    best = min(_finite_or_inf(v) for _, v in trial_reports)
    values = []
    for reports in others:
        if not reports or reports[-1][0] < x:
            continue
        v = value_at(reports, x)
        if v is not None:
            values.append(_finite_or_inf(v))
    if len(values) < min_references:
        return None
    values.sort()
    n = len(values)
    median = (values[n // 2] if n % 2 else
              0.5 * (values[n // 2 - 1] + values[n // 2]))
    if best > median:
        return ("best train loss %.4g after %d samples is worse than the "
                "median %.4g of %d other trials there" % (best, x, median, n))
    return None


def _finite_or_inf(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else math.inf


# The leaderboard ------------------------------------------------------------


def metric_is_higher_better(metric):
    return not ("loss" in metric)


def rank(trials, metric):
    """Trials sorted best first: finished ones by `metric`, then stopped
    ones by it, then the rest."""
    higher = metric_is_higher_better(metric)

    def key(t):
        value = (t.get("final") or {}).get(metric)
        has = isinstance(value, (int, float)) and math.isfinite(value)
        group = {"done": 0, "stopped": 1}.get(t["status"], 2)
        score = (-value if higher else value) if has else math.inf
        return (group, not has, score, t["id"])

    return sorted(trials, key=key)


def training_note(reports):
    """Whether a trial that ran to its end learned: a line when its training
    loss (`reports`: [(samples, train_loss)], one per step line) ended not
    finite, no lower than in its first window, or over 3 times its best
    (a run that diverged after learning), else None. A diverged run often
    settles at the loss of a constant guess (ln 10 for 10 classes) rather
    than at NaN, so the pservers' finite-gradient check does not fire and
    the trial ends like any other."""
    values = [v for _, v in reports if v is not None]
    if not values:
        return None
    last = values[-1]
    if not math.isfinite(last):
        return "diverged: train loss %s at the end" % last
    finite = [v for v in values if math.isfinite(v)]
    first, best = finite[0], min(finite)
    if len(finite) > 1 and last >= first:
        return ("no progress: train loss %.4g at the end, %.4g in its first "
                "window" % (last, first))
    if last > 3 * best:
        return ("diverged: train loss %.4g at the end, %.4g at its best" %
                (last, best))
    return None


def leaderboard(trials, metric, limit=10):
    """Lines of text: the best trials first."""
    lines = ["%-4s %-5s %-9s %10s %8s  %s" %
             ("rank", "trial", "status", metric, "steps", "parameters")]
    for i, t in enumerate(rank(trials, metric)[:limit]):
        value = (t.get("final") or {}).get(metric)
        shown = ("%.4f" % value if isinstance(value, (int, float))
                 else "-")
        steps = "%d/%s" % (t.get("steps", 0), t.get("total_steps") or "?")
        note = ""
        if t["status"] == "done" and t.get("why"):
            note = "  [%s]" % t["why"].split(":")[0]
        lines.append("%-4d %-5d %-9s %10s %8s  %s%s" %
                     (i + 1, t["id"], t["status"], shown, steps,
                      describe(t["params"]), note))
    return lines
