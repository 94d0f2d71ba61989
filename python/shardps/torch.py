"""PyTorch on ShardPS (docs/python.md): a model's dense parameters live on
the pservers, updated there by a shardps.optim optimizer
(DistributedOptimizer), and its embeddings are sharded tables of rows that
only the ids a batch holds are fetched of (ShardedEmbeddingBag,
ShardedEmbedding).

    job = shardps.Job(pservers=..., trainer_id=k, num_trainers=n)
    model = Net(emb=shardps.torch.ShardedEmbeddingBag(job, "emb", dim=16))
    opt = shardps.torch.DistributedOptimizer(
        model, job, shardps.optim.Momentum(lr=0.1, momentum=0.9))
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step(loss=loss)
    job.finish()
"""

import math

import torch

from . import errors
from . import optim as _optim


def _fail(code, message, cls=errors.InvalidArgumentError):
    raise cls(code, message)


def _bad(message):
    _fail("INVALID_ARGUMENT", message)


def initial_values(config, input_dim, num_classes):
    """The trainer binary's initial values of the model of ``config`` (a
    configs/*.pbtxt path) for this input and class count: {table name:
    float32 tensor}, e.g. "fc1.weight" of shape [in, out] (the transpose of
    torch.nn.Linear's weight), "fc1.bias". For comparing a PyTorch model
    with the C++ trainer from the same start."""
    from . import _native
    out = {}
    for name, (shape, data) in _native.initial_values(
            config, int(input_dim), int(num_classes)).items():
        out[name] = torch.frombuffer(bytearray(data),
                                     dtype=torch.float32).reshape(shape)
    return out


class _HostBuffer:
    """Where a parameter's values and gradient cross to the C++ client:
    the tensors themselves when they are float32 CPU tensors; host copies
    otherwise (pinned for a GPU's) or when `stage` (the GPU's path, with
    CPU tensors): `host` for the values, `grad` for the gradient (a step
    pushes one while it pulls the other). `own_grad`: a host copy of the
    gradient in any case (a gradient pushed from backward must not change
    until the step ends)."""

    def __init__(self, tensor, stage, own_grad=False):
        self.device = tensor.device
        staged = tensor.device.type != "cpu" or stage
        pin = tensor.device.type == "cuda"
        self.host = self.grad = None
        if staged:
            self.host = torch.empty(tensor.shape, dtype=torch.float32,
                                    pin_memory=pin)
        if staged or own_grad:
            self.grad = torch.empty(tensor.shape, dtype=torch.float32,
                                    pin_memory=pin)


def _synchronize(buffers):
    """Waits for the copies between host buffers and a GPU."""
    if any(b.host is not None and b.device.type == "cuda" for b in buffers):
        torch.cuda.synchronize()


class DistributedOptimizer(torch.optim.Optimizer):
    """The model's dense parameters as tables of ``job``, updated on the
    pservers by ``optimizer`` (a shardps.optim optimizer): used as a
    torch.optim optimizer is.

    Making it starts the job: the chief's parameter values become the
    job's (or, when the pservers already hold the job, a restart, theirs),
    and every trainer's parameters are set to the job's. ``step()`` pushes
    the gradients (``p.grad``; none: zeros) and the sparse modules'
    gradients, and sets the parameters to the next step's values (sync:
    once every trainer's gradients are applied). Parameters stay float32;
    on a GPU they are copied through pinned host buffers.

    ``named_parameters`` chooses the tables (default: the model's, minus
    those of ShardedEmbeddingBag/ShardedEmbedding modules, which have
    none); ``optimizers`` maps a parameter name to an optimizer of its own.
    ``steps_per_pass`` shapes the progress lines (0: unknown).
    ``stage_on_host``: copy CPU parameters and gradients through host
    buffers too, as those on a GPU are (the GPU's path, where there is
    none; tests). ``push_in_backward``: push each parameter's gradient
    from a hook as backward produces it (last layer first), so that it
    travels while the layers below compute; ``step()`` then pushes the
    rest. One backward per step: a second one's gradients are refused
    (accumulate without it), and changes to ``.grad`` after backward
    (clipping) come too late. Not with threshold compression or LARS.
    """

    def __init__(self, model, job, optimizer, named_parameters=None,
                 optimizers=None, steps_per_pass=0, stage_on_host=False,
                 push_in_backward=False):
        _optim.check(optimizer)
        if named_parameters is None:
            if not isinstance(model, torch.nn.Module):
                raise TypeError("model must be a torch.nn.Module, got %r" %
                                (model,))
            named_parameters = list(model.named_parameters())
        else:
            named_parameters = list(named_parameters)
        optimizers = dict(optimizers or {})
        names = [n for n, _ in named_parameters]
        unknown = sorted(set(optimizers) - set(names))
        if unknown:
            _bad("optimizers names no parameter of the model: %s" %
                 ", ".join(unknown))
        if len(set(names)) != len(names):
            _bad("parameter names repeat")
        self._job = job
        self._fixed = False
        self._names = []
        self._params = []
        for name, p in named_parameters:
            if not isinstance(p, torch.Tensor):
                raise TypeError("parameter %s is not a tensor" % name)
            if p.dtype != torch.float32:
                _bad("parameter %s is %s: the pservers keep float32 tables "
                     "(model.float())" % (name, p.dtype))
            if p.numel() == 0:
                _bad("parameter %s is empty" % name)
            self._names.append(name)
            self._params.append(p)
        super().__init__(self._params or [torch.zeros(0)], {})
        self._fixed = True
        for name, p in zip(self._names, self._params):
            opt = _optim.check(optimizers.get(name, optimizer),
                               "the optimizer of " + name)
            job._add_dense_table(name, tuple(p.shape) or (1,), opt)
        self._buffers = [_HostBuffer(p, stage_on_host, push_in_backward)
                         for p in self._params]
        # Parameters whose gradient a hook pushed this step.
        self._pushed = set()
        self._hooks = []
        if push_in_backward:
            for i, p in enumerate(self._params):
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    self._backward_hook(i)))
        with torch.no_grad():
            initial = [self._values_address(i, fill=True)
                       for i in range(len(self._params))]
            job.start(initial, steps_per_pass)
            self._pull()
        job._current_values = self._current_values

    @property
    def job(self):
        return self._job

    def _backward_hook(self, i):
        def pushed_in_backward(p):
            g = p.grad
            if (g is None or g.is_sparse or g.dtype != torch.float32 or
                    tuple(g.shape) != tuple(p.shape)):
                return  # step() refuses it, naming the parameter
            b = self._buffers[i]
            b.grad.copy_(g)
            self._job._session.push_dense_early(i, b.grad.data_ptr())
            self._pushed.add(i)
        return pushed_in_backward

    def _values_address(self, i, fill=False):
        """The address the values of parameter i are read from or written
        to; `fill`: a host copy first takes the parameter's values."""
        p, b = self._params[i], self._buffers[i]
        if b.host is None:
            if not p.is_contiguous():
                _bad("parameter %s is not contiguous" % self._names[i])
            return p.data.data_ptr()
        if fill:
            b.host.copy_(p.data)
        return b.host.data_ptr()

    def _current_values(self):
        """(addresses, tensors) of the parameters' values now, on the
        host."""
        keep = []
        for p, b in zip(self._params, self._buffers):
            if b.host is None:
                keep.append(p.data.contiguous())
            else:
                b.host.copy_(p.data)
                keep.append(b.host)
        return [t.data_ptr() for t in keep], keep

    def _after_pull(self):
        for p, b in zip(self._params, self._buffers):
            if b.host is not None:
                p.data.copy_(b.host, non_blocking=True)
        _synchronize(self._buffers)

    def _pull(self):
        self._job._session.pull_dense(
            [self._values_address(i) for i in range(len(self._params))])
        self._after_pull()

    def _grad_addresses(self, keep):
        out = []
        for i, (name, p, b) in enumerate(zip(self._names, self._params,
                                             self._buffers)):
            if i in self._pushed:  # sent from backward
                out.append(b.grad.data_ptr())
                continue
            g = p.grad
            if g is None:
                g = torch.zeros_like(p.data, device="cpu")
            elif g.is_sparse:
                _bad("parameter %s has a sparse gradient: make it a "
                     "ShardedEmbeddingBag" % name)
            elif g.dtype != torch.float32:
                _bad("the gradient of %s is %s, not float32" % (name, g.dtype))
            if b.grad is not None:
                b.grad.copy_(g)
                g = b.grad
            elif not g.is_contiguous():
                g = g.contiguous()
            keep.append(g)
            out.append(g.data_ptr())
        return out

    @torch.no_grad()
    def step(self, closure=None, loss=None, samples=None):
        """Ends this trainer's step: pushes the gradients, then sets the
        parameters to the next step's values. ``loss`` (a tensor or a
        number: the batch's mean loss) and ``samples`` (default
        --batch_size) go to the progress lines and metrics. Returns the
        closure's loss. After a sync job rolled back (a pserver restarted
        from a checkpoint), the parameters are those of the step it went
        back to, and ``job.step`` says which."""
        result = None
        if closure is not None:
            with torch.enable_grad():
                result = closure()
            if loss is None:
                loss = result
        if samples is None:
            samples = self._job.batch_size
        if loss is None:
            loss_sum = math.nan
        else:
            loss_sum = float(loss.detach() if isinstance(loss, torch.Tensor)
                             else loss) * samples
        keep = []
        grads = self._grad_addresses(keep)
        _synchronize(self._buffers)
        values = [self._values_address(i) for i in range(len(self._params))]
        try:
            _, recovered = self._job._end_step(grads, values, loss_sum,
                                               int(samples))
        finally:
            self._pushed.clear()
        if recovered:
            self._pull()
        else:
            self._after_pull()
        return result

    def state_dict(self):
        """The job's position (the pservers hold the optimizer's state and
        checkpoint it: docs/fault_tolerance.md)."""
        return {"step": self._job.step, "job_id": self._job.job_id,
                "tables": list(self._names)}

    def load_state_dict(self, state_dict):
        """Checks that ``state_dict`` is this job's; the pservers restore
        their state from their checkpoints by themselves."""
        if list(state_dict.get("tables", [])) != self._names:
            _bad("the state is of another model (tables %s, not %s)" %
                 (state_dict.get("tables"), self._names))

    def add_param_group(self, param_group):
        if not getattr(self, "_fixed", False):  # torch's __init__
            return super().add_param_group(param_group)
        _fail("FAILED_PRECONDITION",
              "the job's tables are fixed once it has started",
              errors.FailedPreconditionError)


_INIT_TYPES = {"zeros": "ZERO", "zero": "ZERO", "uniform": "UNIFORM",
               "constant": "CONSTANT"}
_MEANS = {"step_trainers": "STEP_TRAINERS", "key_pushers": "KEY_PUSHERS"}
_STORAGES = {"float32": "FLOAT32", "bf16": "BF16", "fp16": "FP16"}


_EVICTIONS = {"lru": "LRU", "lfu": "LFU"}


def _check_count(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        _bad("%s must be an integer >= 0, got %r" % (name, v))


def _init_text(init, seed):
    if isinstance(init, str):
        init = (init, 0.0)
    if (not isinstance(init, (tuple, list)) or len(init) != 2 or
            init[0] not in _INIT_TYPES):
        _bad("init must be 'zeros', ('uniform', scale) or ('constant', "
             "value), got %r" % (init,))
    scale = float(init[1])
    if not math.isfinite(scale) or (init[0] == "uniform" and scale <= 0):
        _bad("init scale must be finite (and positive for uniform), got %r" %
             (init[1],))
    _check_count("seed", seed)
    return "init { type: %s scale: %r seed: %d }" % (_INIT_TYPES[init[0]],
                                                     scale, seed)


def _memory_text(eviction, disk):
    """The eviction { } and disk { } of a table: ``eviction`` None or a
    policy name, ``disk`` None, True (the table's memory share as the
    cache) or the cache's MiB."""
    text = ""
    if eviction is not None:
        if eviction not in _EVICTIONS:
            _bad("eviction must be None, 'lru' or 'lfu', got %r" %
                 (eviction,))
        text += " eviction { policy: %s }" % _EVICTIONS[eviction]
    if disk is True:
        text += " disk { }"
    elif disk is not None and disk is not False:
        if isinstance(disk, bool) or not isinstance(disk, int) or disk < 4:
            _bad("disk must be None, True or the memory cache's MiB (at "
                 "least 4), got %r" % (disk,))
        text += " disk { cache_mb: %d }" % disk
    return text


def _sparse_text(dim, init, seed, admit_after=0, evict_after_steps=0,
                 gradient_mean="step_trainers", storage="float32",
                 eviction=None, disk=None):
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        _bad("dim must be a positive integer, got %r" % (dim,))
    init_text = _init_text(init, seed)
    _check_count("admit_after", admit_after)
    _check_count("evict_after_steps", evict_after_steps)
    if gradient_mean not in _MEANS:
        _bad("gradient_mean must be 'step_trainers' or 'key_pushers', got "
             "%r" % (gradient_mean,))
    if storage not in _STORAGES:
        _bad("storage must be 'float32', 'bf16' or 'fp16', got %r" %
             (storage,))
    return ("dim: %d %s admit_after: %d evict_after_steps: %d "
            "gradient_mean: %s storage_type: %s%s" % (
                dim, init_text, admit_after, evict_after_steps,
                _MEANS[gradient_mean], _STORAGES[storage],
                _memory_text(eviction, disk)))


# The last ids _unique was given and its answer: tables that share ids (an
# embedding and a linear weight of the same features) dedupe them once.
_last_unique = [None]


def _unique(ids):
    """(distinct ids in first-seen order, where each id is among them) of
    a 1-D CPU int64 tensor: a hash table in the native module (torch.unique
    sorts). The answer is shared with a later call of equal ids, so
    neither may be written to."""
    from . import _native
    last = _last_unique[0]
    if (last is not None and last[0].numel() == ids.numel() and
            torch.equal(last[0], ids)):
        return last[1], last[2]
    ids = ids.contiguous()
    unique = torch.empty_like(ids)
    inverse = torch.empty_like(ids)
    n = _native.unique_ids(ids.data_ptr(), ids.numel(), unique.data_ptr(),
                           inverse.data_ptr())
    _last_unique[0] = (ids.clone(), unique[:n], inverse)
    return unique[:n], inverse


class _Fetched:
    """Rows fetched for a step: of the distinct ids of `ids` (CPU)."""

    def __init__(self, ids, dim):
        self.ids = ids.clone()
        self.unique, self.inverse = _unique(self.ids)
        self.rows = torch.empty((self.unique.numel(), dim),
                                dtype=torch.float32)
        self.step = None  # set once the rows are the step's


class _ShardedRows(torch.nn.Module):
    """A sparse table of ``job``: 64-bit ids to rows of ``dim`` floats,
    fetched per batch (or with the previous step's push: prefetch), their
    gradients pushed at the optimizer's step."""

    def __init__(self, job, name, dim, optimizer, init, seed, options):
        super().__init__()
        _optim.check(optimizer)
        self.name = name
        self.dim = dim
        text = _sparse_text(dim, init, seed, **options)
        self._job = job
        self._table = job._add_sparse_table(name, text, optimizer, self)
        # This step's (ids, rows) of each forward with gradients.
        self._pending = []
        # prefetch(): the rows to fetch at the step's end, and those fetched.
        self._next = None
        self._fetched = None
        # Forwards that found their rows prefetched, and that pulled them.
        self.stats = {"prefetched_forwards": 0, "pulled_forwards": 0}

    def _ids(self, ids):
        if not isinstance(ids, torch.Tensor):
            raise TypeError("%s: ids must be a tensor of int64, got %s" %
                            (self.name, type(ids).__name__))
        if ids.dtype not in (torch.int64, torch.int32):
            _bad("%s: ids must be int64 (or int32), got %s" % (self.name,
                                                               ids.dtype))
        return ids.to(torch.int64)

    def _check_started(self):
        if not self._job.started:
            _fail("FAILED_PRECONDITION",
                  "%s: the job has not started (make the "
                  "DistributedOptimizer, or call job.start())" % self.name,
                  errors.FailedPreconditionError)

    def prefetch(self, ids):
        """The ids of the next step's forward (the next batch's): their
        rows are fetched as the optimizer's step ends, with its push, in
        one call for every table (sync: the rows of the next step, as a
        pull in the forward would give; async: once this trainer's push
        is applied). A forward of other ids pulls them as usual
        (``stats`` counts both kinds of forward)."""
        ids = self._ids(ids).reshape(-1).cpu()
        self._check_started()
        self._next = _Fetched(ids, self.dim)

    def _fetch_request(self):
        """(table, keys, count, rows) of prefetch's rows, or None."""
        n = self._next
        if n is None or n.unique.numel() == 0:
            return None
        return (self._table, n.unique.data_ptr(), n.unique.numel(),
                n.rows.data_ptr())

    def _track(self, ids, rows, device):
        rows = rows.to(device)
        if torch.is_grad_enabled() and self.training:
            rows.requires_grad_(True)
            self._pending.append((ids, rows))
        return rows

    def _lookup(self, ids):
        """Where each id (1-D) is among the distinct ids, on the ids'
        device, and the distinct ids' rows there."""
        self._check_started()
        f = self._fetched
        if (f is not None and f.step == self._job.step and
                f.ids.numel() == ids.numel() and
                torch.equal(f.ids, ids.cpu())):
            self._fetched = None
            self.stats["prefetched_forwards"] += 1
            return (f.inverse.to(ids.device),
                    self._track(f.unique, f.rows, ids.device))
        unique, inverse = _unique(ids.cpu())
        self.stats["pulled_forwards"] += 1
        rows = torch.empty((unique.numel(), self.dim), dtype=torch.float32)
        if unique.numel() > 0:
            self._job._session.pull_sparse(self._table, unique.data_ptr(),
                                           unique.numel(), rows.data_ptr())
        return inverse.to(ids.device), self._track(unique, rows, ids.device)

    def _push_pending(self):
        if not self._pending:
            return
        grads = [(r.grad if r.grad is not None else torch.zeros_like(r)).cpu()
                 for _, r in self._pending]
        if len(self._pending) == 1:  # one forward: its ids are distinct
            unique, summed = self._pending[0][0], grads[0].contiguous()
        else:
            ids = torch.cat([i for i, _ in self._pending])
            unique, inverse = _unique(ids)
            summed = torch.zeros((unique.numel(), self.dim),
                                 dtype=torch.float32)
            summed.index_add_(0, inverse, torch.cat(grads))
        self._pending = []
        if unique.numel() == 0:
            return
        self._job._session.push_sparse(self._table, unique.data_ptr(),
                                       unique.numel(), summed.data_ptr(),
                                       summed.numel())

    def _step_ended(self, step):
        """`step`: the step the job stands at when the rows prefetch asked
        for are its rows; None when they are not (a failed or rolled-back
        step)."""
        self._pending = []
        if self._next is not None and step is not None:
            self._next.step = step
            self._fetched = self._next
        else:
            self._fetched = None
        self._next = None

    def extra_repr(self):
        return "name=%r, dim=%d" % (self.name, self.dim)


class ShardedEmbeddingBag(_ShardedRows):
    """torch.nn.EmbeddingBag over a sparse table of the job: ``forward(ids,
    offsets=None, per_sample_weights=None)`` takes int64 ids (any 64-bit
    value: a hashed feature), as a 2-D (bags, length) tensor or a 1-D one
    with ``offsets``; pulls the rows of the distinct ids only; and, at the
    optimizer's step, pushes each row's summed gradient. ``mode``: "sum" or
    "mean" (per_sample_weights with "sum" only, as torch). ``init``:
    "zeros", ("uniform", scale) or ("constant", value), drawn on the
    pservers from (seed, id). ``admit_after``: an id becomes a row once
    pushed this many times; ``evict_after_steps``: a row not updated for
    that many steps is dropped (0: never). ``gradient_mean``: what a sync
    step's summed gradient of an id is divided by: "step_trainers" (N
    trainers of batch b train as one of batch N*b, as dense tables do) or
    "key_pushers" (the trainers that pushed the id). ``storage``: how the
    pservers hold the rows and their optimizer state: "float32", "bf16"
    (half the bytes, stochastic rounding; docs/sparse_memory.md) or
    "fp16" (SGD and momentum only). ``eviction``: "lru" (the least
    recently updated) or "lfu" (the least often): which rows go first
    when the table holds its share of the pservers' --max_memory_mb
    (None: LRU, or LFU with ``disk``). ``disk``: True, or the MiB of a
    memory cache, to keep the rows beyond the cache on the pservers'
    disks (their --sparse_store_dir; docs/sparse_memory.md, "Disk
    tier")."""

    def __init__(self, job, name, dim, optimizer, init=("uniform", 0.05),
                 seed=1, admit_after=0, evict_after_steps=0, mode="mean",
                 gradient_mean="step_trainers", storage="float32",
                 eviction=None, disk=None):
        if mode not in ("sum", "mean"):
            _bad("mode must be 'sum' or 'mean', got %r" % (mode,))
        super().__init__(job, name, dim, optimizer, init, seed, dict(
            admit_after=admit_after, evict_after_steps=evict_after_steps,
            gradient_mean=gradient_mean, storage=storage, eviction=eviction,
            disk=disk))
        self.mode = mode

    def forward(self, ids, offsets=None, per_sample_weights=None):
        ids = self._ids(ids)
        if ids.dim() == 2:
            if offsets is not None:
                _bad("%s: offsets go with 1-D ids only" % self.name)
            bags, length = ids.shape
            offsets = torch.arange(0, bags * length, length,
                                   device=ids.device)
            ids = ids.reshape(-1)
            if per_sample_weights is not None:
                per_sample_weights = per_sample_weights.reshape(-1)
        elif ids.dim() == 1:
            if offsets is None:
                _bad("%s: 1-D ids need offsets" % self.name)
        else:
            _bad("%s: ids must be 1-D (with offsets) or 2-D, got %d-D" %
                 (self.name, ids.dim()))
        inverse, rows = self._lookup(ids)
        return torch.nn.functional.embedding_bag(
            inverse, rows, offsets.to(torch.int64), mode=self.mode,
            per_sample_weights=per_sample_weights)


class ShardedEmbedding(_ShardedRows):
    """torch.nn.Embedding over a sparse table of the job: one id per slot;
    ``forward(ids)`` returns ids.shape + (dim,). Arguments as
    ShardedEmbeddingBag's."""

    def __init__(self, job, name, dim, optimizer, init=("uniform", 0.05),
                 seed=1, admit_after=0, evict_after_steps=0,
                 gradient_mean="step_trainers", storage="float32",
                 eviction=None, disk=None):
        super().__init__(job, name, dim, optimizer, init, seed, dict(
            admit_after=admit_after, evict_after_steps=evict_after_steps,
            gradient_mean=gradient_mean, storage=storage, eviction=eviction,
            disk=disk))

    def forward(self, ids):
        ids = self._ids(ids)
        inverse, rows = self._lookup(ids.reshape(-1))
        return rows.index_select(0, inverse).reshape(
            tuple(ids.shape) + (self.dim,))
