"""ShardPS from Python: a job's trainer side over the C++ client, and the
PyTorch modules and optimizer that train on it (docs/python.md).

    import shardps, shardps.torch
    job = shardps.Job(pservers="127.0.0.1:7164", trainer_id=0,
                      num_trainers=1)
    opt = shardps.torch.DistributedOptimizer(
        model, job, shardps.optim.Momentum(lr=0.1, momentum=0.9))
"""

from . import optim
from .errors import (Error, InvalidArgumentError, FailedPreconditionError,
                     DeadlineExceededError, UnavailableError,
                     PermissionDeniedError, ResourceExhaustedError,
                     CancelledError)
try:
    from .job import Job
except ImportError as _native_missing:  # not built: the readers still work
    _job_import_error = _native_missing

    def __getattr__(name):
        if name == "Job":
            raise ImportError(
                "shardps.Job needs the native module, which is not built "
                "(pip install ./python, or cmake --build build --target "
                "shardps_native): %s"
                % _job_import_error)
        raise AttributeError(name)

__all__ = ["Job", "optim", "Error", "InvalidArgumentError",
           "FailedPreconditionError", "DeadlineExceededError",
           "UnavailableError", "PermissionDeniedError",
           "ResourceExhaustedError", "CancelledError"]
