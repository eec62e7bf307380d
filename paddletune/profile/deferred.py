"""A record built later: `Deferred(make, args)` stands in a profile writer's queue for the
record `make(*args)`, which the writer builds when it flushes, in the queue's order, on
whichever thread flushes (its own, every 0.5 s, in a warm batch).

Why: a probe's per-step callback (the memory probe's, on a GPU) runs on the training thread,
between the framework's ops, where Python runs cold; a record built there costs several
times what the same bytecodes cost in the writer's batch (benchmarks/torch_step_opcodes.py
counts them, and docs/benchmarks.md's bench_torch_overhead section has the timings). The
step probe goes further: it queues the source's events themselves through the writer's tap
(ProfileWriter.tap), with no callback of its own. The record keeps its
place among the others, so the accumulator (the speed test's phases, the head/tail split,
tune's windows) sees the same stream. `make` must need nothing but `args` and state that
only the conversions themselves change (they run in order, one at a time)."""

from typing import Callable, NamedTuple

from .schema import made_in_c


class Deferred(NamedTuple):
    make: Callable[..., object]  # returns the record (a profile record, typed)
    args: tuple


# deferred((make, args)): a Deferred made in C (on the training thread at each step)
deferred = made_in_c(Deferred)


def takes_deferred(sink) -> bool:
    """Whether `sink` takes Deferred records: a ProfileWriter's `submit` (its writer says so).
    Any other sink (a list's append in tests) is given finished records."""
    return writer_of(sink) is not None


def writer_of(sink):
    """The profile writer whose `submit` is `sink` (its `tap` queues events as they come);
    None for any other sink."""
    owner = getattr(sink, "__self__", None)
    return owner if getattr(owner, "takes_deferred", False) else None
