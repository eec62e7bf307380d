"""The async reader against its bound: does the DataLoader deliver what the producer and the
model allow?

A producer with a tunable per-batch cost (pure-Python work that holds the GIL, like decoding
and augmenting in Python, or NumPy work) feeds a training loop with a tunable step cost (a
sleep: the host waits while the device computes, the usual GPU situation; `--step-kind numpy`
burns host CPU instead). For each (num_workers, capacity, use_double_buffer) the loop's
throughput is compared with the bound

    min(1 / step_cost, max(workers, 1) / producer_cost)      (batches per second)

and the ratio is reported; the target is >= 95% of the bound where the machine has the cores
(the producer processes plus the training loop). The plain synchronous loop (generator called
inline, no queue) is measured too, as the baseline an async reader improves on.

Also measured: the queue's own cost per batch with tiny batches and free producer and step,
in microseconds, for the thread producer and for worker processes.

    python benchmarks/bench_reader.py                       # the default grid (~30 s)
    python benchmarks/bench_reader.py --producer-ms 8 --step-ms 4 --workers 0,1,2,3

Prints a table and one JSON line (the last line of output).
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import runtime as fluid  # noqa: E402


# --- the workload ------------------------------------------------------------------------------
def burn_python(seconds):
    """Pure-Python work holding the GIL for about `seconds`."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i * i
    return x


def burn_numpy(seconds, _scratch=np.ones((64, 64), np.float32)):
    """NumPy work (small matmuls, mostly releasing the GIL) for about `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _scratch @ _scratch
    return _scratch


BURN = {"python": burn_python, "numpy": burn_numpy}


def make_batches(n, producer_s, kind, rows=32, cols=16):
    """A batch generator of `n` batches costing `producer_s` each; with worker processes it
    shards itself with fluid.io.get_worker_info(), so each worker makes only its own."""
    burn = BURN[kind]

    def gen():
        info = fluid.io.get_worker_info()
        ids = range(n) if info is None else range(info.id, n, info.num_workers)
        for i in ids:
            if producer_s:
                burn(producer_s)
            yield [np.full((rows, cols), i, np.float32)]
    return gen


def build_program(cols=16):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, cols], "float32")
        out = fluid.layers.reduce_sum(x)
    return main, x, out


def step_fn(step_s, kind):
    if not step_s:
        return lambda: None
    if kind == "sleep":
        return lambda: time.sleep(step_s)
    return lambda: BURN[kind](step_s)


# --- contenders --------------------------------------------------------------------------------
def run_sync(n, producer_s, step_s, producer_kind, step_kind):
    """The synchronous loop: the generator is called inline, then the step runs."""
    main, x, out = build_program()
    exe = fluid.Executor(fluid.CPUPlace())
    step = step_fn(step_s, step_kind)
    gen = make_batches(n, producer_s, producer_kind)
    t0 = time.perf_counter()
    count = 0
    for (arr,) in gen():
        exe.run(main, feed={"x": arr}, fetch_list=[out])
        step()
        count += 1
    return count / (time.perf_counter() - t0)


def run_loader(n, producer_s, step_s, producer_kind, step_kind, workers, capacity,
               double_buffer):
    main, x, out = build_program()
    exe = fluid.Executor(fluid.CPUPlace())
    step = step_fn(step_s, step_kind)
    with fluid.program_guard(main):
        loader = fluid.io.DataLoader.from_generator(
            feed_list=[x], capacity=capacity, use_double_buffer=double_buffer,
            num_workers=workers)
    loader.set_batch_generator(make_batches(n, producer_s, producer_kind))
    it = loader()
    first = next(it)  # start-up (thread or process start) is not the steady state
    exe.run(main, feed=first, fetch_list=[out])
    t0 = time.perf_counter()
    count = 0
    for data in it:
        exe.run(main, feed=data, fetch_list=[out])
        step()
        count += 1
    rate = count / (time.perf_counter() - t0)
    return rate


def queue_overhead_us(n, workers):
    """Microseconds per batch the loader adds over a plain loop, tiny batches, no work."""
    gen = make_batches(n, 0, "python", rows=1, cols=1)
    t0 = time.perf_counter()
    for _ in gen():
        pass
    plain = time.perf_counter() - t0
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 1], "float32")
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=64,
                                                    num_workers=workers)
    loader.set_batch_generator(gen)
    it = loader()
    next(it)
    t0 = time.perf_counter()
    count = sum(1 for _ in it)
    through = time.perf_counter() - t0
    return (through / count - plain / n) * 1e6


def cores_needed(workers, step_kind):
    """Cores the bound assumes: each worker process keeps one busy; the trainer needs one of
    its own next to them (it wakes every step to pop, copy and run, and must not queue behind
    busy workers), and a thread producer shares the trainer's (one GIL) unless the step
    burns CPU too."""
    if workers:
        return workers + 1
    return 1 + (step_kind != "sleep")


# --- main --------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--producer-ms", type=float, default=6.0)
    ap.add_argument("--step-ms", type=float, default=3.0)
    ap.add_argument("--producer-kind", choices=sorted(BURN), default="python")
    ap.add_argument("--step-kind", choices=["sleep", *sorted(BURN)], default="sleep")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--capacity", default="2,16")
    ap.add_argument("--double-buffer", default="1", help="1, 0 or 0,1")
    ap.add_argument("--overhead-batches", type=int, default=3000)
    args = ap.parse_args()
    p_s, s_s = args.producer_ms / 1e3, args.step_ms / 1e3
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# reader benchmark: producer {args.producer_ms} ms/batch ({args.producer_kind}), "
          f"step {args.step_ms} ms ({args.step_kind}), {args.batches} batches, {cores} cores, "
          f"Python {platform.python_version()}")
    sync = run_sync(args.batches, p_s, s_s, args.producer_kind, args.step_kind)
    sync_bound = 1.0 / (p_s + s_s)
    print(f"{'sync loop (no queue)':<34} {sync:8.1f} batches/s   bound {sync_bound:8.1f}   "
          f"{sync / sync_bound:6.1%}")
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        for capacity in [int(c) for c in args.capacity.split(",")]:
            for db in [bool(int(d)) for d in args.double_buffer.split(",")]:
                rate = run_loader(args.batches, p_s, s_s, args.producer_kind, args.step_kind,
                                  workers, capacity, db)
                bound = min(1.0 / s_s if s_s else float("inf"),
                            max(workers, 1) / p_s if p_s else float("inf"))
                needs = cores_needed(workers, args.step_kind)
                row = {"workers": workers, "capacity": capacity, "double_buffer": db,
                       "batches_per_s": round(rate, 2), "bound": round(bound, 2),
                       "of_bound": round(rate / bound, 4), "cores_allow": needs <= cores}
                rows.append(row)
                label = (f"workers={workers} capacity={capacity} "
                         f"double_buffer={'on' if db else 'off'}")
                note = "" if row["cores_allow"] else "  (needs more cores than the machine has)"
                print(f"{label:<34} {rate:8.1f} batches/s   bound {bound:8.1f}   "
                      f"{rate / bound:6.1%}{note}")
    overhead = {}
    for workers in (0, 1):
        overhead[workers] = round(queue_overhead_us(args.overhead_batches, workers), 1)
        kind = "thread producer" if workers == 0 else f"{workers} worker process"
        print(f"queue overhead per tiny batch, {kind:<18} {overhead[workers]:8.1f} us")
    met = [r for r in rows if r["cores_allow"]]
    worst = min((r["of_bound"] for r in met), default=None)
    print(f"worst share of the bound where cores allow: "
          f"{'n/a' if worst is None else f'{worst:.1%}'} (target >= 95%)")
    print(json.dumps({"bench": "reader", "producer_ms": args.producer_ms,
                      "step_ms": args.step_ms, "producer_kind": args.producer_kind,
                      "step_kind": args.step_kind, "cores": cores,
                      "sync_batches_per_s": round(sync, 2), "rows": rows,
                      "worst_of_bound": worst,
                      "queue_overhead_us": {"thread": overhead[0], "worker": overhead[1]}}))


if __name__ == "__main__":
    main()
