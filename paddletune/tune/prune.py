"""Values of a knob a coordinate race need not try under the throughput objective, each left
out with a note that says why (the memory objective and values given with --space keep all).

- Buffering, when the incumbent's trial shows it idle: the step hardly waits for data, or
  (capacity) the producers were hardly ever blocked on a full queue.
- A shorter reader queue: capacity only buffers batches between the reader and the step, so
  a smaller one cannot make the step wait less (it saves memory, which the memory objective
  weighs).
- In a later round, a value its knob's last race found clearly slower than the value kept,
  by more than every change accepted since gained: the search takes those changes not to
  favour it by more than they moved the throughput itself. (A later round re-races a knob
  because other knobs changed since, to catch their interactions; a value that lost by
  2.8x does not come back after a +4% change elsewhere, and re-trying it costs a trial.)
"""

import math
from typing import Dict, List, Optional

from . import space as sp
from .compare import mean

SHORTER_QUEUE = ("capacity",)  # knobs whose smaller values only save memory
BUFFERING = ("capacity", "use_double_buffer")  # reader knobs that only hide waiting for data


def buffering_idle(tuner, name) -> bool:
    """A buffering knob cannot win here (throughput objective), judged on the incumbent's
    latest trial: its step waits for data less than min_gain's worth (input share s: at
    most s / (1 - s) to win); or, for capacity, its producers were almost never blocked on a
    full queue (less than min_gain of the time): room they did not use cannot speed them
    up, only more producers can. Not raced then; a note says why (once per knob)."""
    latest = tuner.latest(tuner.incumbent) if name in BUFFERING else None
    if latest is None or tuner.options.objective != "throughput":
        return False
    bar = tuner.options.min_gain
    share, blocked = latest.input_share, latest.put_wait_share
    if share is not None and (share / (1 - share) if share < 1 else math.inf) < bar:
        _note_once(tuner, name, f"the step waits for data {share:.1%} of the time (at most "
                                f"{share / (1 - share):+.1%} to win by buffering more, below "
                                f"the {bar:.0%} that counts)")
        return True
    if name == "capacity" and blocked is not None and blocked < bar:
        _note_once(tuner, name, f"the reader's producers waited for room in the queue "
                                f"{blocked:.1%} of the time (below the {bar:.0%} that counts): "
                                f"a longer queue would go unused; more producers "
                                f"(num_workers) are what feeds a step that waits")
        return True
    return False


def _note_once(tuner, name, why):
    if not any(n.startswith(f"{name} not tried:") for n in tuner.notes):
        tuner.notes.append(f"{name} not tried: {why}")


class Losses:
    """Per knob: {value: how many times slower than the value kept} for the values its
    latest race found clearly slower, and how many accepted changes preceded that race's
    end. The tuner records every accepted gain in `gains`."""

    def __init__(self):
        self.gains: List[float] = []  # mean(new incumbent) / mean(old), per accepted change
        self.lost: Dict[str, tuple] = {}  # knob -> ({value: slowdown}, len(gains) then)

    def record(self, tuner, name, runs, kept_key):
        """After a race of knob `name`: `runs` {setting key: trials}, `kept_key` the key of
        the setting it left as the incumbent."""
        kept = runs.get(kept_key)
        knob = tuner.space.knobs[name]
        slower = {}
        for key, trials in runs.items():
            if key == kept_key or not trials or not kept:
                continue
            if tuner.better(kept, trials):
                value = trials[0].setting.get(name, knob.current)
                slower[_hashable(value)] = mean(kept) / mean(trials)
        self.lost[name] = (slower, len(self.gains))

    def since(self, name) -> Optional[float]:
        """The throughput factor of every change accepted after `name`'s latest race."""
        if name not in self.lost:
            return None
        return math.prod(self.gains[self.lost[name][1]:])

    def too_slow(self, name) -> Dict:
        """{value: slowdown} of `name`'s values that lost by more than `since(name)`."""
        if name not in self.lost:
            return {}
        slower, _ = self.lost[name]
        gained = self.since(name)
        return {v: s for v, s in slower.items() if s > gained}


def candidates(tuner, name, now) -> List:
    """The values of knob `name` to race against `now` (the incumbent's), less those the
    rules above leave out (a note each)."""
    knob = tuner.space.knobs[name]
    values = [v for v in knob.values if v != now]
    if tuner.options.objective != "throughput" or knob.why == "from --space":
        return values
    if name in SHORTER_QUEUE and isinstance(now, int):
        shorter = [v for v in values if isinstance(v, int) and v < now]
        if shorter:
            values = [v for v in values if v not in shorter]
            _note(tuner, f"{name} {_join(shorter)} not tried: a shorter queue than {now} "
                         f"cannot make the step wait less (it only saves memory: --objective "
                         f"memory tries it)")
    slow = tuner.losses.too_slow(name)
    left = [v for v in values if _hashable(v) in slow]
    if left:
        values = [v for v in values if v not in left]
        gained = tuner.losses.since(name) - 1
        why = ", ".join(f"{sp.label({name: v})} {slow[_hashable(v)]:.2f}x" for v in left)
        _note(tuner, f"{name}: {_join(left)} not tried again: slower in its last race than "
                     f"the value kept ({why}), by more than the {gained:+.1%} every change "
                     f"since gained")
    return values


def _note(tuner, text):
    if text not in tuner.notes:
        tuner.notes.append(text)


def _join(values) -> str:
    return ", ".join(sp.label({"v": v})[2:] for v in values)


def _hashable(value):
    return (type(value).__name__, value)
