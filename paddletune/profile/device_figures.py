"""The summary's device figures: the steady training steps as the GPU ran them, from the
PyTorch source's CUDA-event totals (records.DeviceTimeEvent, written at growing step counts:
1, 2, 5, 10, 20, 50, ... and at the job's end).

The steady steps' share is the difference of two totals: the last, and the first written once
the warm-up was over (its last step at least the one before the first steady step), so no
warm-up step counts; the steps between the warm-up's end and that first total are left out.
When no total falls inside the steady steps (a short job), every timed step counts (scope
"all"). A speed test's replayed batches would hide the waits for data: with one, the first
total after its window is the starting point, when there is one.

The live dashboard has no steady steps while the job runs: it takes the latest two totals
(`latest_start`), the same difference (`between`), and the summary's figures once it is in."""

from typing import List, Optional, Tuple

from . import figures as F
from . import records as r


def device_figures(profile, steady, ceiling: Optional[Tuple[float, float]]
                   ) -> Optional[F.DeviceFigures]:
    """The main place's device figures (None without CUDA-event totals)."""
    totals = main_place(profile.events_of("device_time"))
    if not totals:
        return None
    first_steady = steady.steps[0].step if steady.steps else None
    start = _start(totals, first_steady, ceiling)
    return between(start, totals[-1])


def between(start: Optional[r.DeviceTimeEvent], last: r.DeviceTimeEvent
            ) -> F.DeviceFigures:
    """The figures of the steps `last` timed after `start` (None: all of them, scope
    "all"): the difference of the two totals."""
    scope = "steady" if start is not None else "all"
    if start is None:
        start = r.DeviceTimeEvent(0.0, last.place)
    steps, copied = last.steps - start.steps, last.copied - start.copied
    cycle_s = last.cycle_s - start.cycle_s
    idle_s, busy_s = last.idle_s - start.idle_s, last.busy_s - start.busy_s
    copied_s = idle_s + busy_s
    return F.DeviceFigures(
        place=last.place, scope=scope, steps=steps,
        cycle_s=cycle_s / steps if steps else None, copied_steps=copied,
        idle_share=idle_s / copied_s if copied_s > 0 else None,
        busy_s=busy_s / copied if copied else None)


def latest_start(totals, ceiling: Optional[Tuple[float, float]]
                 ) -> Optional[r.DeviceTimeEvent]:
    """The live view's starting total: the newest before the last with fewer steps (at
    1, 2, 5, 10, 20, 50, ... steps it lies at 40-50% of the steps timed so far, so only a
    warm-up longer than that would count; the summary calls at most half the steps
    warm-up; on a long job, a total also comes after every 30 s of the device's step time:
    then the last 30 s or so); None when there is none, or when the speed test's replayed
    batches lie between the two (as `_start` rules)."""
    last = totals[-1]
    for e in reversed(totals[:-1]):
        if e.steps < last.steps:
            return None if _before_speed_test_end(e, last, ceiling) else e
    return None


def _before_speed_test_end(e, last, ceiling) -> bool:
    """`e` was written before the speed test's end and `last` after it."""
    return ceiling is not None and e.t_s < ceiling[1] < last.t_s


def main_place(events) -> List[r.DeviceTimeEvent]:
    """The totals of the place that timed the most steps, in the order written."""
    by_place = {}
    for e in events:
        if isinstance(e, r.DeviceTimeEvent):
            by_place.setdefault(e.place, []).append(e)
    if not by_place:
        return []
    return max(by_place.values(), key=lambda rows: max(e.steps for e in rows))


def _start(totals, first_steady: Optional[int], ceiling) -> Optional[r.DeviceTimeEvent]:
    """The first total past the warm-up (and the speed test), with steps after it; None
    when there is none."""
    last = totals[-1]
    for e in totals[:-1]:
        if first_steady is not None and e.last_step < first_steady - 1:
            continue
        if _before_speed_test_end(e, last, ceiling):
            continue
        if e.steps < last.steps:
            return e
    return None
