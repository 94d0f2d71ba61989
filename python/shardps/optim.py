"""The pservers' optimizers (docs/tuning.md), as the job's tables are given
them: each applies on the pservers, per table, what ``torch.optim``'s
namesake applies (to 1e-6 of it: tests/python_torch_test.py).

    shardps.optim.Momentum(lr=0.1, momentum=0.9)
    shardps.optim.Adagrad(lr=0.05, schedule=shardps.optim.StepLR(1000, 0.5))

Each one's ``text()`` is its ``OptimizerConfig`` (proto/ps_service.proto)
in protobuf text format, which the pservers check as they check the
trainer binary's configs.
"""

import math


def _number(name, value, low=None, high=None, low_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number, got %r" % (name, value))
    value = float(value)
    if not math.isfinite(value):
        raise ValueError("%s must be finite, got %r" % (name, value))
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError("%s must be %s %g, got %g" %
                         (name, ">" if low_open else ">=", low, value))
    if high is not None and value > high:
        raise ValueError("%s must be <= %g, got %g" % (name, high, value))
    return value


def _steps(name, value, low=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError("%s must be an integer >= %d, got %r" %
                         (name, low, value))
    return value


class Schedule:
    """A learning-rate schedule (LrSchedule): the step counts are the
    job's steps."""

    def text(self):
        raise NotImplementedError


class StepLR(Schedule):
    """lr * gamma ** (step // step_size), as torch.optim.lr_scheduler.StepLR
    stepped once per step."""

    def __init__(self, step_size, gamma=0.1):
        self.step_size = _steps("step_size", step_size)
        self.gamma = _number("gamma", gamma, 0, 1, low_open=True)

    def text(self):
        return "type: STEP step_size: %d gamma: %r" % (self.step_size,
                                                       self.gamma)


class Warmup(Schedule):
    """A linear ramp from ``start_lr`` (0: the unscaled lr) over
    ``warmup_steps``, then constant; with ``reference_batch_size``, the
    target is lr * global batch / reference_batch_size (Goyal et al.)."""

    def __init__(self, warmup_steps, start_lr=0.0, reference_batch_size=0):
        self.warmup_steps = _steps("warmup_steps", warmup_steps)
        self.start_lr = _number("start_lr", start_lr, 0)
        self.reference_batch_size = _steps("reference_batch_size",
                                           reference_batch_size, 0)

    def text(self):
        return ("type: WARMUP warmup_steps: %d warmup_start_lr: %r "
                "reference_batch_size: %d" % (
                    self.warmup_steps, self.start_lr,
                    self.reference_batch_size))


class Optimizer:
    """A server optimizer: its type and fields."""

    TYPE = None

    def __init__(self, lr, schedule=None):
        self.lr = _number("lr", lr, 0, low_open=True)
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError("schedule must be a shardps.optim schedule "
                            "(StepLR, Warmup), got %r" % (schedule,))
        self.schedule = schedule

    def fields(self):
        return {}

    def text(self):
        parts = ["type: %s" % self.TYPE, "learning_rate: %r" % self.lr]
        for k, v in self.fields().items():
            parts.append("%s: %s" % (k, ("true" if v else "false")
                                     if isinstance(v, bool) else repr(v)))
        if self.schedule is not None:
            parts.append("schedule { %s }" % self.schedule.text())
        return " ".join(parts)

    def __repr__(self):
        return "shardps.optim.%s(%s)" % (type(self).__name__, self.text())


class SGD(Optimizer):
    """p -= lr * g."""
    TYPE = "SGD"


class Momentum(Optimizer):
    """torch.optim.SGD(momentum=...): v = momentum * v + g, p -= lr * v;
    with nesterov, p -= lr * (g + momentum * v)."""
    TYPE = "MOMENTUM"

    def __init__(self, lr, momentum=0.9, nesterov=False, schedule=None):
        super().__init__(lr, schedule)
        self.momentum = _number("momentum", momentum, 0, 1)
        self.nesterov = bool(nesterov)

    def fields(self):
        return {"momentum": self.momentum, "nesterov": self.nesterov}


class Adagrad(Optimizer):
    """torch.optim.Adagrad: acc += g * g, p -= lr * g / (sqrt(acc) + eps).
    The pservers read an accumulator of 0 as their default, 0.1: give a
    positive ``initial_accumulator_value``."""
    TYPE = "ADAGRAD"

    def __init__(self, lr, initial_accumulator_value=0.1, eps=1e-10,
                 schedule=None):
        super().__init__(lr, schedule)
        self.initial_accumulator_value = _number(
            "initial_accumulator_value", initial_accumulator_value, 0,
            low_open=True)
        self.eps = _number("eps", eps, 0, low_open=True)

    def fields(self):
        return {"initial_accumulator": self.initial_accumulator_value,
                "epsilon": self.eps}


class Adam(Optimizer):
    """torch.optim.Adam (bias-corrected)."""
    TYPE = "ADAM"

    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, schedule=None):
        super().__init__(lr, schedule)
        if len(betas) != 2:
            raise ValueError("betas must be two numbers, got %r" % (betas,))
        self.betas = (_number("betas[0]", betas[0], 0, 1, low_open=True),
                      _number("betas[1]", betas[1], 0, 1, low_open=True))
        if self.betas[0] >= 1 or self.betas[1] >= 1:
            raise ValueError("betas must be in (0, 1), got %r" % (betas,))
        self.eps = _number("eps", eps, 0, low_open=True)

    def fields(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1],
                "epsilon": self.eps}


class RowwiseAdagrad(Adagrad):
    """Sparse tables only: one accumulator per row, acc += mean(g * g) over
    the row (FBGEMM's rowwise_adagrad; docs/sparse_memory.md)."""
    TYPE = "ROWWISE_ADAGRAD"


class RowwiseAdam(Adam):
    """Sparse tables only: Adam with the first moment per value and the
    second per row, the mean of g * g (FBGEMM's partial row-wise Adam)."""
    TYPE = "ROWWISE_ADAM"


class FTRL(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013), per coordinate."""
    TYPE = "FTRL"

    def __init__(self, lr, l1=0.0, l2=0.0, beta=1.0, schedule=None):
        super().__init__(lr, schedule)
        self.l1 = _number("l1", l1, 0)
        self.l2 = _number("l2", l2, 0)
        self.beta = _number("beta", beta, 0, low_open=True)

    def fields(self):
        return {"l1": self.l1, "l2": self.l2, "beta": self.beta}


class LARS(Optimizer):
    """LARS (You et al. 2017): momentum with a per-table trust ratio; dense
    tables of sync jobs (docs/tuning.md, "LARS")."""
    TYPE = "LARS"

    def __init__(self, lr, momentum=0.9, trust_coefficient=0.001,
                 weight_decay=0.0, schedule=None):
        super().__init__(lr, schedule)
        self.momentum = _number("momentum", momentum, 0, 1)
        self.trust_coefficient = _number("trust_coefficient",
                                         trust_coefficient, 0, low_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0)

    def fields(self):
        return {"momentum": self.momentum,
                "trust_coefficient": self.trust_coefficient,
                "weight_decay": self.weight_decay}


def check(optimizer, what="optimizer"):
    """``optimizer`` if it is a shardps.optim optimizer; TypeError naming
    the choices otherwise (a torch.optim optimizer, say)."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            "%s must be a shardps.optim optimizer (SGD, Momentum, Adagrad, "
            "Adam, RowwiseAdagrad, RowwiseAdam, FTRL, LARS): the pservers "
            "apply it; got %r" %
            (what, optimizer))
    return optimizer
