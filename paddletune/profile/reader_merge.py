"""Reader intervals added up: consecutive intervals of a pass merge into one interval record
(the accumulator's windows of a long job), and any set of them into the counters the reader
figures read (summary)."""

from typing import Dict, Sequence

from . import records as r

SUMS = ("pushes", "produce_s", "cpu_s", "cpu_n", "put_wait_s", "nbytes", "pops", "peeks",
        "empty_pops", "wait_s", "copy_s", "handover_s", "swings", "steps", "step_wait_s")
COUNTERS = ("wait_hist", "pop_sizes", "occupancy", "programs")
MAX_KEYS = 256  # a merged counter keyed by batch elements or shapes keeps at most this many


def merge_intervals(rows: Sequence[r.ReaderInterval]) -> r.ReaderInterval:
    """One interval holding every counter of `rows` (of one loader and pass): sums added,
    histograms and per-key rows added key by key, the longest wait kept, the span from the
    first interval's start to the last one's end."""
    first = rows[0]
    sums = {key: sum(getattr(iv, key) for iv in rows) for key in SUMS}
    counters = {key: add_counters(getattr(iv, key) for iv in rows) for key in COUNTERS}
    return r.ReaderInterval(
        t0_s=min(iv.t0_s for iv in rows), t_s=max(iv.t_s for iv in rows), loader=first.loader,
        pass_no=first.pass_no, speed_test=first.speed_test, **sums, **counters,
        wait_max_s=max(iv.wait_max_s for iv in rows),
        workers=add_rows(({w: c._replace(cpu_n=c.cpu_batches) for w, c in iv.workers.items()}
                          for iv in rows), r.WorkerCounts),
        cost=_coarse(add_rows((iv.cost for iv in rows), r.StepCost)),
        shapes=add_shapes(iv.shapes for iv in rows))


def add_counters(counters) -> Dict:
    total: Dict = {}
    for counter in counters:
        for key, n in counter.items():
            total[key] = total.get(key, 0) + n
    return total


def add_rows(tables, row_type) -> Dict:
    """{key: row} tables added field by field."""
    total: Dict = {}
    for table in tables:
        for key, row in table.items():
            before = total.get(key)
            total[key] = row if before is None else row_type(*(a + b for a, b in
                                                               zip(before, row)))
    return total


def add_shapes(tables) -> Dict[str, Dict[str, int]]:
    """{feed: {shape: batches}} added; a feed's rarest shapes past MAX_KEYS are dropped."""
    total: Dict[str, Dict[str, int]] = {}
    for table in tables:
        for name, shapes in table.items():
            into = total.setdefault(name, {})
            for shape, n in shapes.items():
                into[shape] = into.get(shape, 0) + n
    return {name: dict(sorted(shapes.items(), key=lambda kv: -kv[1])[:MAX_KEYS])
            for name, shapes in total.items()}


def _coarse(cost: Dict[int, r.StepCost]) -> Dict[int, r.StepCost]:
    """At most MAX_KEYS batch sizes: past that, sizes are rounded to two significant digits
    (the long-batch figures compare the 95th percentile with the rest)."""
    if len(cost) <= MAX_KEYS:
        return cost
    out: Dict[int, r.StepCost] = {}
    for elements, row in cost.items():
        key = int(float(f"{elements:.2g}"))
        before = out.get(key)
        out[key] = row if before is None else r.StepCost(before.steps + row.steps,
                                                        before.compute_s + row.compute_s)
    return out
