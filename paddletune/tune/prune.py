"""Values of a knob a coordinate race need not try under the throughput objective, each left
out with a note that says why (the memory objective, and values given with --space, keep
them all).

- Buffering, while the incumbent's latest trial shows it idle: its step hardly waits for
  data; or its producers make fewer batches a second than the loop takes when it does not
  wait (a queue drained as fast as it is filled never holds more, however long it is); or,
  for capacity, the reader's feeding thread was hardly ever blocked on a full queue (room
  it did not use cannot feed the step faster; more producers can).
  A DataLoader's prefetch_factor (the batches each worker makes ahead) is buffering too.
- A shorter reader queue: capacity (or prefetch_factor) only holds batches between the
  reader and the step, so less of it cannot make the step wait less (it saves memory, which
  the memory objective weighs).
- A DataLoader argument that needs worker processes (prefetch_factor, persistent_workers,
  use_shared_memory), or PyTorch's sharing strategy (how workers hand tensors over), while
  the incumbent has none: the framework's hooks would skip it ("no effect"), or it would
  change nothing, so a trial would only learn that.
- A DataLoader argument that acts only as a new pass starts (persistent_workers: the workers
  kept, not started again), while the incumbent's latest trial never began a second pass:
  nothing it changes happens inside a trial, so its race would only measure noise (a long
  job's epochs do start again: the advice's code sets it, for the start it saves).
- In a later round (a knob is raced again because other knobs changed since, to catch their
  interactions), a value that its knob's last race found slower than the value kept, by
  more than every change accepted since gained: the search assumes those changes do not
  favour it by more than they moved the throughput itself. A value that lost by 2.8x does
  not come back after a +4% change elsewhere; re-trying it costs a trial. (A change that
  favoured it far more than the incumbent would be missed: the price of the rule.)
"""

import math
from typing import Dict, List, Tuple

from . import space as sp
from .compare import mean

BUFFERING = ("capacity", "use_double_buffer", "prefetch_factor")  # reader knobs that only
# hide waiting for data
SHORTER_QUEUE = ("capacity", "prefetch_factor")  # knobs whose smaller values only save memory
AT_PASS_START = ("persistent_workers",)  # reader knobs that act only as a new pass starts


def idle_knob(tuner, name) -> bool:
    """Knob `name` cannot win for now (see above): not raced; a note says why."""
    return (_without_workers(tuner, name) or _buffering_idle(tuner, name)
            or _one_pass(tuner, name))


def _without_workers(tuner, name) -> bool:
    knob, workers = tuner.space.knobs[name], tuner.space.knobs.get("num_workers")
    if not sp.needs_workers(knob) or workers is None:
        return False
    if tuner.incumbent.get("num_workers", workers.current):
        return False
    _note(tuner, f"{name} not tried while the best setting had no worker processes "
                 f"(num_workers=0): it needs them")
    return True


def _one_pass(tuner, name) -> bool:
    if name not in AT_PASS_START or not _prunes(tuner, tuner.space.knobs[name]):
        return False
    latest = tuner.latest(tuner.incumbent)
    if latest is None or latest.passes is None or latest.passes > 1:
        return False
    return _skip(tuner, name, "the trials never began a second pass of the DataLoader, so "
                              "workers kept between passes would change nothing they measure "
                              "(in the whole job they save the workers' start at each epoch: "
                              "the advice's code sets persistent_workers=True)")


def _buffering_idle(tuner, name) -> bool:
    knob = tuner.space.knobs[name]
    latest = tuner.latest(tuner.incumbent) if name in BUFFERING else None
    if latest is None or not _prunes(tuner, knob):
        return False
    bar, share, blocked = tuner.options.min_gain, latest.input_share, latest.put_wait_share
    most = (share / (1 - share) if share < 1 else math.inf) if share is not None else None
    if most is not None and most < bar:
        return _skip(tuner, name, f"the step waits for data {share:.1%} of the time (at most "
                                  f"{most:+.1%} to win by buffering more, below the "
                                  f"{bar:.0%} that counts)")
    ratio = latest.producer_ratio
    if ratio is not None and ratio < 1 - bar:
        return _skip(tuner, name, f"the producers make {ratio:.0%} of the batches the loop "
                                  f"takes when it does not wait: the queue drains as fast as "
                                  f"they fill it, however long it is; more producers "
                                  f"(num_workers) are what feeds a step that waits")
    if name == "capacity" and blocked is not None and blocked < bar:
        return _skip(tuner, name, f"the reader waited for room in the queue {blocked:.1%} of "
                                  f"the time (below the {bar:.0%} that counts): a longer "
                                  f"queue would go unused; more producers (num_workers) are "
                                  f"what feeds a step that waits")
    return False


def candidates(tuner, name, now) -> List:
    """The values of knob `name` to race against `now` (the incumbent's), less those the
    rules above leave out (a note each)."""
    knob = tuner.space.knobs[name]
    values = [v for v in knob.values if v != now]
    if not _prunes(tuner, knob):
        return values
    return tuner.losses.prune(tuner, name, now, _longer_queues(tuner, name, now, values))


class Losses:
    """Per knob and value, from the knob's latest race that ran the value: how many times
    slower it was than the value kept, and how many accepted changes preceded that race's
    end. The tuner appends every accepted change's gain to `gains`."""

    def __init__(self):
        self.gains: List[float] = []  # mean(new incumbent) / mean(old), per accepted change
        self.lost: Dict[str, Dict[str, Tuple[float, int]]] = {}  # knob -> value key -> ...

    def record(self, tuner, name, runs, kept_key):
        """After a race of knob `name`: `runs` {setting key: its trials}; `kept_key`, the
        key of the setting left as the incumbent. Values not raced keep their entries."""
        kept = runs.get(kept_key)
        if not kept:
            return
        lost = self.lost.setdefault(name, {})
        for key, trials in runs.items():
            if key != kept_key and trials:
                value = _value_key(name, trials[0].setting.get(name, _current(tuner, name)))
                lost.pop(value, None)
                if tuner.better(kept, trials):
                    lost[value] = (mean(kept) / mean(trials), len(self.gains))

    def prune(self, tuner, name, now, values) -> List:
        """`values` less those that lost by more than every change since gained (a note)."""
        lost = self.lost.get(name, {})
        keep, left = [], []
        for v in values:
            slowdown, since = lost.get(_value_key(name, v), (0.0, len(self.gains)))
            gained = math.prod(self.gains[since:])
            (left if slowdown > gained else keep).append((v, slowdown, gained))
        if left:
            figures = ", ".join(f"{_show(v)} ({s:.2f}x)" for v, s, _ in left)
            gained = max(g for _, _, g in left)
            _note(tuner, f"{name} {figures} not tried again: slower than {_show(now)} in an "
                         f"earlier race, by more than the {gained - 1:+.1%} the changes since "
                         f"gained together")
        return [v for v, _, _ in keep]


def _longer_queues(tuner, name, now, values) -> List:
    if name not in SHORTER_QUEUE or not isinstance(now, int):
        return values
    shorter = [v for v in values if isinstance(v, int) and v < now]
    if shorter:
        _note(tuner, f"{name} {_join(shorter)} not tried: a shorter queue than {now} cannot "
                     f"make the step wait less (it only saves memory: --objective memory "
                     f"tries it)")
    return [v for v in values if v not in shorter]


def _prunes(tuner, knob) -> bool:
    return tuner.options.objective == "throughput" and knob.why != sp.GIVEN


def _skip(tuner, name, why) -> bool:
    """Not raced; the note once per knob (a later round's figures would differ a little)."""
    if not any(n.startswith(f"{name} not tried:") for n in tuner.notes):
        tuner.notes.append(f"{name} not tried: {why}")
    return True


def _note(tuner, text):
    if text not in tuner.notes:
        tuner.notes.append(text)


def _value_key(name, value) -> str:
    return sp.key({name: value})  # True and 1 stay apart, as in the tuner's setting keys


def _current(tuner, name):
    return tuner.space.knobs[name].current


def _join(values) -> str:
    return ", ".join(_show(v) for v in values)


def _show(value) -> str:
    return sp.label({"v": value})[2:]
