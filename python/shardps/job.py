"""shardps.Job: this process's place in a ShardPS job, over the C++
trainer client (docs/python.md).

    job = shardps.Job(pservers="10.0.0.1:7164,10.0.0.2:7164",
                      trainer_id=0, num_trainers=2, mode="sync")

Every argument is a trainer flag (``trainer --help``, docs/flags.md) with
the binary's default, check and message; those not given come, as for the
binary, from ``SHARDPS_<FLAG>`` variables, then from the scheduler
(Open MPI, MPICH, Slurm, torchrun's ``RANK``/``WORLD_SIZE``, Kubernetes
indexed Jobs, ``TF_CONFIG``, ``PADDLE_INIT_*``). Flags without an argument
of their own are given by name: ``shardps.Job(..., rpc_retry_s=120)``.
"""

import math

from . import errors
from . import _native

_native.set_error_classes(errors.error_classes())

# Arguments whose flag has another name.
_FLAG_NAMES = {"num_trainers": "num_gradient_servers"}


def _flag_value(name, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("%s must be finite, got %r" % (name, value))
    return str(value)


def flags_of(**kwargs):
    """The trainer flags of these arguments (None: not given)."""
    out = []
    for name, value in kwargs.items():
        if value is None:
            continue
        flag = _FLAG_NAMES.get(name, name)
        out.append("--%s=%s" % (flag, _flag_value(name, value)))
    return out


class Job:
    """This trainer's session with the pservers of one job.

    Made from trainer flags; tables are added by the modules and the
    optimizer that use it (``ShardedEmbeddingBag``, ``DistributedOptimizer``)
    until ``start()``, which registers with every pserver, lets the chief
    (trainer 0) initialise the job with its values, waits until the job is
    ready and joins it at the step the pservers agree on. ``finish()``
    leaves the job; so does leaving a ``with`` block.
    """

    def __init__(self, pservers=None, trainer_id=None, num_trainers=None,
                 mode=None, max_staleness=None, job_id=None,
                 auth_token_file=None, tls_cert_file=None, tls_key_file=None,
                 tls_ca_file=None, tls_server_name=None, batch_size=None,
                 num_passes=None, compression=None, replication=None,
                 checkpoint_every_steps=None, metrics_file=None,
                 log_every_steps=None, monitoring_port=None, **flags):
        args = flags_of(
            pservers=pservers, trainer_id=trainer_id,
            num_trainers=num_trainers, mode=mode, max_staleness=max_staleness,
            job_id=job_id, auth_token_file=auth_token_file,
            tls_cert_file=tls_cert_file, tls_key_file=tls_key_file,
            tls_ca_file=tls_ca_file, tls_server_name=tls_server_name,
            batch_size=batch_size, num_passes=num_passes,
            compression=compression, replication=replication,
            checkpoint_every_steps=checkpoint_every_steps,
            metrics_file=metrics_file, log_every_steps=log_every_steps,
            monitoring_port=monitoring_port, **flags)
        self._session = _native.Session(args)
        self._sparse_modules = []
        # The DistributedOptimizer's: () -> (value addresses, tensors to
        # keep alive), for --save_dir at finish().
        self._current_values = None
        self._dense_tables = 0
        self._started = False
        self._finished = False

    # What the flags and the environment made of it.
    @property
    def trainer_id(self):
        return self._session.trainer_id

    @property
    def num_trainers(self):
        return self._session.num_trainers

    @property
    def is_chief(self):
        return self._session.trainer_id == 0

    @property
    def mode(self):
        """"sync" or "async"."""
        return self._session.mode

    @property
    def batch_size(self):
        """--batch_size: examples per step per trainer (64 unless given)."""
        return self._session.batch_size

    @property
    def num_passes(self):
        return self._session.num_passes

    @property
    def pservers(self):
        return list(self._session.pservers)

    @property
    def job_id(self):
        return self._session.job_id

    @property
    def monitoring_port(self):
        """The port /metrics is served on; -1 without --monitoring_port."""
        return self._session.monitoring_port

    @property
    def step(self):
        """The step this trainer computes now, counted from 0."""
        return self._session.step

    @property
    def started(self):
        return self._started

    @property
    def push_bytes(self):
        return self._session.push_bytes

    @property
    def pull_bytes(self):
        return self._session.pull_bytes

    @property
    def shared_memory_servers(self):
        """Pservers whose dense values go through shared memory."""
        return self._session.shared_memory_servers

    def _check_not_started(self, what):
        if self._started:
            raise errors.FailedPreconditionError(
                "FAILED_PRECONDITION",
                "%s: tables are added before the job starts (make every "
                "ShardedEmbeddingBag before the DistributedOptimizer)" % what)

    def _add_dense_table(self, name, shape, optimizer):
        self._check_not_started("table " + name)
        t = self._session.add_dense_table(name, list(shape), optimizer.text())
        self._dense_tables += 1
        return t

    def _add_sparse_table(self, name, sparse_text, optimizer, module):
        self._check_not_started("sparse table " + name)
        t = self._session.add_sparse_table(name, sparse_text, optimizer.text())
        self._sparse_modules.append(module)
        return t

    def start(self, initial=(), steps_per_pass=0):
        """Joins the job (see the class). ``initial``: the addresses of the
        dense tables' values, in the order they were added (the
        DistributedOptimizer passes them). Returns the step it joined at."""
        if self._started:
            raise errors.FailedPreconditionError(
                "FAILED_PRECONDITION", "the job has started")
        self._session.start(list(initial), int(steps_per_pass))
        self._started = True
        return self._session.step

    def _end_step(self, grads, next_values, loss_sum, samples):
        for m in self._sparse_modules:
            m._push_pending()
        fetch = [r for r in (m._fetch_request() for m in self._sparse_modules)
                 if r is not None]
        try:
            step, recovered = self._session.end_step(
                grads, next_values, fetch, loss_sum, samples)
        except BaseException:
            for m in self._sparse_modules:
                m._step_ended(None)
            raise
        for m in self._sparse_modules:
            m._step_ended(None if recovered else step)
        return step, recovered

    def evaluated(self, pass_, loss, accuracy, auc=None, final=False):
        """Records an evaluation as the trainer binary does: an "eval"
        line in --metrics_file (scripts/plot_metrics.py draws it), a log
        line, and the test figures on /metrics."""
        self._session.evaluated(int(pass_), bool(final), float(loss),
                                float(accuracy),
                                None if auc is None else float(auc))

    def finish(self):
        """With --save_dir, the chief saves the dense tables' values
        (docs/saved_model.md; --load_dir starts a job from them). Then
        leaves the job (async: after marking this trainer's steps done);
        with --wait_for_trainers_s, waits for the others. Again: nothing."""
        if self._started and not self._finished:
            if self._current_values is not None:
                addresses, keep = self._current_values()
                self._session.save(addresses)
                del keep
            self._finished = True
            self._session.finish()

    def abandon(self):
        """Leaves the job at once (an error ends the training loop)."""
        if self._started and not self._finished:
            self._finished = True
            self._session.abandon()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            self.abandon()
        return False
