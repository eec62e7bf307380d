"""Exception types of the runtime: every error names the culprit and, where possible, the fix."""


class EnforceNotMet(Exception):
    """Base of the runtime's errors (Paddle's name for a failed runtime check)."""


class FlagError(EnforceNotMet, ValueError):
    """An unknown FLAG or a value outside its valid range."""


class ShapeError(EnforceNotMet, ValueError):
    """An op was given inputs whose shapes do not fit together (raised when the layer is built)."""


class FeedError(EnforceNotMet, ValueError):
    """A feed is missing a variable, or a fed value has the wrong shape or dtype."""


class FetchError(EnforceNotMet, KeyError):
    """A fetch target does not exist in the program or is never computed."""

    def __str__(self):  # KeyError would quote the message; keep it readable
        return str(self.args[0]) if self.args else ""


class UninitializedVariableError(EnforceNotMet, RuntimeError):
    """A persistable variable (parameter, optimizer state) is read before the startup program ran."""


class OpRuntimeError(EnforceNotMet, RuntimeError):
    """A kernel failed while running an op; the message says which op, where it was built, and why."""


class NanInfError(OpRuntimeError):
    """FLAGS_check_nan_inf found a NaN or Inf in an op's output.

    Attributes (for tools): op_type, op_index, output, inputs (the op's input variable
    names), n_nan, n_inf, step (the Executor.run count of that program, from 0).
    """

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details
        for key, value in details.items():
            setattr(self, key, value)


class PoolOutOfMemory(EnforceNotMet, MemoryError):
    """A place's memory pool could not serve a request (Paddle's ResourceExhaustedError; also
    `fluid.core.MemoryError`). A MemoryError, so `except MemoryError` catches it.

    Attributes (bytes unless said): place, requested, allocated, reserved, capacity, peak,
    free (capacity not yet reserved plus cached free blocks), op_type, op_index, batch_size,
    largest (list of (variable name, bytes)), fit_batch_size (estimated largest batch that
    fits, or None), phase (the failing op's memory category), gc, inplace (the plan's
    settings). The executor and the pool stay usable afterwards.
    """

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details
        for key, value in details.items():
            setattr(self, key, value)


class DeviceOutOfMemory(MemoryError):
    """The GPU pool refused an allocation CuPy asked for (raised from CuPy's allocator hook,
    memory/device.py); `info` is the pool's OOMInfo. The message names the flags to change.
    Inside Executor.run it becomes a PoolOutOfMemory naming the op (as a refusal of the CPU pool
    does), so it is deliberately not an EnforceNotMet."""

    def __init__(self, message, info=None):
        super().__init__(message)
        self.info = info


class PlaceUnavailableError(EnforceNotMet, RuntimeError):
    """A CUDAPlace was requested but CuPy or a GPU is not available."""


class SerializationError(EnforceNotMet, ValueError):
    """A saved model/persistables file is corrupt or does not match the program."""


class UnsavedValueError(UninitializedVariableError, SerializationError):
    """save_* found a variable with no value in the scope (the startup program has not run)."""


class ReaderWorkerError(EnforceNotMet, RuntimeError):
    """A reader worker process died, or a reader failed in a way that cannot be raised as
    itself (an error the trainer could not rebuild, sys.exit in a generator)."""


def reader_exit_error(raised, where):
    """The error for a reader's generator that raised SystemExit/KeyboardInterrupt (`raised`,
    as text) in `where`: a reader ends its pass by returning, never the whole job."""
    return ReaderWorkerError(f"the generator raised {raised} in {where}: a reader cannot end "
                             f"the job; raise an exception, or return to end the pass")


class ReaderFailure(EnforceNotMet):
    """A reader's generator (or worker) raised: what the consumer of a DataLoader/PyReader
    gets. In Fluid 1.8 the failed reader kills the queue and the run raises EnforceNotMet;
    here the error raised is also of the generator's own exception class, with its message,
    notes and traceback (reader_failure)."""


_FAILURE_CLASSES = {}


def reader_failure(err):
    """`err` as a ReaderFailure that is still an instance of type(err) (an EnforceNotMet
    already is returned as it is; a class that cannot be combined gives a ReaderFailure
    caused by err)."""
    if isinstance(err, EnforceNotMet):
        return err
    cls = type(err)
    if cls not in _FAILURE_CLASSES:
        try:
            _FAILURE_CLASSES[cls] = type(cls.__name__, (cls, ReaderFailure),
                                         {"__module__": cls.__module__,
                                          "__doc__": ReaderFailure.__doc__})
        except TypeError:  # an incompatible layout
            _FAILURE_CLASSES[cls] = None
    combined = _FAILURE_CLASSES[cls]
    try:
        if combined is None:
            raise TypeError(cls)
        failure = combined.__new__(combined, *err.args)
        failure.__dict__.update(getattr(err, "__dict__", {}))  # attributes and __notes__
    except TypeError:
        failure = ReaderFailure(f"{cls.__name__}: {err}")
        failure.__cause__ = err
        return failure
    failure.__cause__, failure.__context__ = err.__cause__, err.__context__
    return failure.with_traceback(err.__traceback__)


def add_note(err, note):
    """err.add_note(note) (Python 3.11+); before 3.11, which prints no notes, the note is
    appended to a one-string message so it is still shown."""
    if hasattr(err, "add_note"):
        err.add_note(note)
    elif len(err.args) == 1 and isinstance(err.args[0], str):
        err.args = (f"{err.args[0]}\n{note}",)
    return err


def where(callsite):
    """Format a (filename, lineno) call site as ' (created at file:line)', or '' when unknown."""
    if not callsite:
        return ""
    return f" (created at {callsite[0]}:{callsite[1]})"
