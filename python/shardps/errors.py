"""Exceptions of shardps: a failed call on the pservers raises one, carrying
the status code (``code``, e.g. ``"DEADLINE_EXCEEDED"``) and the same
message the trainer binary prints."""


class Error(Exception):
    """A failed ShardPS call: ``code`` names the status, ``message`` says
    what failed and why."""

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.code, self.message)


class InvalidArgumentError(Error, ValueError):
    """A bad argument, flag or table (INVALID_ARGUMENT)."""


class FailedPreconditionError(Error):
    """The call does not fit the job's state: another model, a job that has
    not started or has finished (FAILED_PRECONDITION)."""


class DeadlineExceededError(Error, TimeoutError):
    """The pservers did not answer in time (DEADLINE_EXCEEDED)."""


class UnavailableError(Error, ConnectionError):
    """A pserver cannot be reached (UNAVAILABLE)."""


class PermissionDeniedError(Error, PermissionError):
    """The credentials do not allow the call (PERMISSION_DENIED,
    UNAUTHENTICATED)."""


class ResourceExhaustedError(Error):
    """A pserver is out of room (RESOURCE_EXHAUSTED)."""


class CancelledError(Error):
    """The call was cancelled (CANCELLED)."""


CLASSES = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "UNAVAILABLE": UnavailableError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": PermissionDeniedError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "CANCELLED": CancelledError,
}


def error_classes():
    """code name -> class, for every code (Error for the others)."""
    codes = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
             "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
             "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
             "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
             "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]
    return {c: CLASSES.get(c, Error) for c in codes}
