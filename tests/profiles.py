"""Build synthetic profiles for tests: `make_profile(path, ...)` writes a schema-2 profile
file with the records the session would write, and returns its path (load it with
paddletune.profile.load).

The builders below speak the plain-dict vocabulary of the first profile schema (`t`, `pass`,
`allocated`, a probe's `result`), which is short to write in a test; `typed()` turns such
dicts into the typed records a profile holds, through the loader's own v1 conversion, so a
test's records are checked exactly as a file's are.
"""

from paddletune import profile as prof
from paddletune.profile import records as r
from paddletune.profile import v1
from paddletune.profile.codec import from_json
from paddletune.profile.schema import SchemaError

DEFAULT_ENV = {"python": "3.11.7", "platform": "Linux-x86_64",
               "numpy": {"version": "2.0.0", "blas": "openblas", "blas_threads": 1},
               "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2},
               "gpu": {"available": False, "reason": "no NVIDIA driver", "devices": []},
               "cupy": {"available": False, "reason": "not installed"},
               "flags": {}}


def step_records(n_steps=40, wall_s=0.010, feed_s=0.0005, fetch_s=0.0002, gap_s=0.0,
                 batch_size=64, program=1, executor=1, warmup=1, warmup_factor=5.0,
                 fetch=("mean_0.tmp_0",), fetch_bytes=4, t_start=0.1):
    """`n_steps` training steps of `program` (preceded by one startup step), the first
    `warmup` of them `warmup_factor` times slower."""
    rows = [{"type": "step", "t": 0.0, "program": 0, "executor": executor, "step": 0,
             "wall_s": 0.001, "feed_s": 0.0, "compute_s": 0.001, "fetch_s": 0.0,
             "gap_s": None, "batch_size": None, "n_ops": 3, "feed_bytes": 0,
             "fetch_bytes": 0, "fetch": [], "startup": True, "place": "CPUPlace"}]
    t = t_start
    for i in range(n_steps):
        scale = warmup_factor if i < warmup else 1.0
        wall = wall_s * scale
        compute = max(wall - feed_s - fetch_s, 0.0)
        rows.append({"type": "step", "t": t, "program": program, "executor": executor,
                     "step": i, "wall_s": wall, "feed_s": feed_s, "compute_s": compute,
                     "fetch_s": fetch_s, "gap_s": gap_s, "batch_size": batch_size,
                     "n_ops": 20, "feed_bytes": batch_size * 4 * 785,
                     "fetch_bytes": fetch_bytes, "fetch": list(fetch), "startup": False,
                     "place": "CPUPlace"})
        t += wall + gap_s
    return rows


def eager_step_records(n_steps=40, read_s=0.006, **kwargs):
    """An eager framework's steps (PyTorch's, a Paddle dynamic graph's): step_records' with
    no startup run and no warm-up, no program's ops, each beginning with its wait of
    `read_s` for the DataLoader's batch (EAGER_SOURCE declares the terms)."""
    steps = step_records(n_steps=n_steps, warmup=0, **kwargs)[1:]
    for s in steps:
        s.update(program=0, executor=0, n_ops=None, fetch=[], read_s=read_s,
                 compute_s=s["compute_s"] - read_s)
    return steps


EAGER_SOURCE = r.SourceInfo(
    framework="torch", version="PyTorch 2.13",
    terms=r.Terms(step="a training step (optimizer.step to optimizer.step)",
                  call="the training loop", between="between steps", loader="DataLoader"))


def program_record(op_types_io, program=1):
    """A `program` record from [(type, inputs, outputs), ...] (dicts slot -> [names])."""
    return {"type": "program", "t": 0.05, "program": program, "compile_s": 0.001,
            "ops": [{"type": t, "role": 0, "inputs": i, "outputs": o}
                    for t, i, o in op_types_io]}


def ops_records(steps, op_durations, program=1):
    """One `ops` record per step index in `steps`, ops [(type, dur_s), ...] in order."""
    out = []
    for step in steps:
        t, rows = 0.0, []
        for index, (op_type, dur) in enumerate(op_durations):
            rows.append([index, op_type, t, dur])
            t += dur
        out.append({"type": "ops", "program": program, "step": step, "ops": rows})
    return out


def typed(records):
    """Typed records from dicts in the v1 vocabulary (typed records pass through). A dict
    that does not fit its record class (a test's broken record) is kept as its v2 JSON
    object, so the file holds it as a buggy writer would have written it."""
    out = []
    for record in records:
        if not isinstance(record, dict):
            out.append(record)
            continue
        for item in v1.convert(record):
            try:
                out.append(from_json(item))
            except SchemaError:
                out.append(item)
    return out


_SOURCES = {}


def source_info(framework="fluid"):
    """The header's source declaration a session of `framework` writes (made once)."""
    if framework not in _SOURCES:
        from paddletune.sources import source_for
        _SOURCES[framework] = source_for(framework).info()
    return _SOURCES[framework]


def make_profile(path, steps=None, env=None, options=None, extra=(), exit_status=0,
                 exit_reason="returned", summary=True, command=None, source=None):
    """Write a profile to `path`: header (declaring `source`, default the embedded
    runtime's), `steps` (default: step_records()), `extra` records (program/ops/sample/
    event/probe), the exit event and (if `summary`) the summary."""
    header = prof.header_record(command or {"argv": ["train.py"], "script": "train.py"},
                                {"warmup": None, **(options or {})},
                                {**DEFAULT_ENV, **(env or {})}, t0_unix=1.7e9,
                                source=source or source_info())
    steps = step_records() if steps is None else steps
    end_t = max([s["t"] + s["wall_s"] for s in steps] or [0.0]) + 0.01
    records = [header, *typed(steps), *typed(extra)]
    if exit_reason is not None:
        records += typed([{"type": "event", "t": end_t, "kind": "exit", "status": exit_status,
                           "reason": exit_reason, "message": None}])
    prof.write_records(path, records)
    if summary:
        records.append(prof.load(path).summary)
        prof.write_records(path, records)
    return path


def system_samples(n=5, interval_s=0.1, cpu_percent=95.0, rss_bytes=200 * 2 ** 20, threads=4,
                   t_start=0.1, **fields):
    """`n` samples of the "system" probe, every `interval_s`; `fields` override the rest
    (e.g. steal_percent=3.0)."""
    rows = []
    for i in range(n):
        row = {"type": "sample", "probe": "system", "t": t_start + i * interval_s,
               "cpu_percent": cpu_percent + i, "cpu_total_percent": 50.0,
               "per_core_percent": [50.0, 50.0], "rss_bytes": rss_bytes + i * 2 ** 20,
               "threads": threads, "ctx_switches_per_s": 100.0, "load1": 1.0,
               "steal_percent": 0.0, "blas_threads": 1, "mem_available_bytes": 8 * 2 ** 30}
        row.update(fields)
        rows.append(row)
    return rows


def nvml_samples(n=3, gpus=(0,), interval_s=0.1, util_percent=80.0, t_start=0.1):
    """`n` rounds of "nvml" samples, one record per GPU in `gpus`."""
    return [{"type": "sample", "probe": "nvml", "t": t_start + i * interval_s, "gpu": g,
             "util_percent": util_percent + g, "mem_used_bytes": (2 + i) * 2 ** 30,
             "mem_total_bytes": 16 * 2 ** 30, "proc_mem_bytes": 2 ** 30, "sm_clock_mhz": 1400,
             "power_w": 250.0, "temperature_c": 70.0}
            for i in range(n) for g in gpus]


def ops_records_in_steps(steps, op_durations):
    """`ops` records for the training `steps` (step records), each op timed on the session
    clock from its step's compute start, as the ops probe writes them."""
    out = []
    for s in steps:
        if s.get("startup"):
            continue
        t, rows = s["t"] + s["feed_s"], []
        for index, (op_type, dur) in enumerate(op_durations):
            rows.append([index, op_type, t, dur])
            t += dur
        out.append({"type": "ops", "program": s["program"], "step": s["step"], "ops": rows})
    return out



READER_CONFIG = {"name": "DataLoader#0", "capacity": 8, "iterable": True,
                 "use_double_buffer": True, "num_workers": 0, "use_shared_memory": True,
                 "source": "batch", "batch_size": None, "feed": ["img", "label"],
                 "places": ["CPUPlace"], "drop_last": True, "timeout": 0.0}


def reader_records(steps, config=None, intervals=4, loader=0, cost=None, speed_test=(),
                   **per_batch):
    """What the reader probe writes for one DataLoader pass feeding the training `steps`
    (step records): a start record, `intervals` interval records splitting the steps (one
    batch per step), an end record. `per_batch` overrides READER_BATCH (seconds per batch,
    the share of empty pops, the fill every queue sample read, drains, shapes per feed
    {"64x784": batches per step}, worker ids sharing the pushes). `cost` ({elements:
    [steps, compute_s]}) goes to the last interval; intervals whose index is in
    `speed_test` hold peeks instead of pops."""
    config = {**READER_CONFIG, **(config or {})}
    per = {**READER_BATCH, **per_batch}
    per["shapes"] = per["shapes"] or {name: {"64x784" if name == "img" else "64x1": 1}
                                      for name in config["feed"]}
    train = [s for s in steps if not s.get("startup")]
    size = -(-len(train) // intervals)
    t0 = train[0]["t"] - 0.002
    rows = [{"type": "reader", "what": "start", "t": t0, "loader": loader, "pass": 1,
             "config": config}]
    for i in range(0, len(train), size):
        chunk = train[i:i + size]
        t = chunk[-1]["t"] + chunk[-1]["wall_s"]
        rows.append(reader_interval(t0, t, len(chunk), per, loader, i // size in speed_test))
        t0 = t
    if cost:
        rows[-1]["cost"] = {str(k): v for k, v in cost.items()}
    return rows + [{"type": "reader", "what": "end", "t": t0, "loader": loader, "pass": 1,
                    "batches": len(train), "detail": ""}]


READER_BATCH = {"wait_s": 0.0, "empty_ratio": 0.0, "produce_s": 0.002, "cpu_s": 0.001,
                "copy_s": 0.0, "handover_s": 0.0, "fill": 8, "swings": 0, "shapes": None,
                "workers": (-1,)}


def reader_interval(t0, t, n, per, loader=0, peeking=False):
    """One interval record of `n` batches pushed and popped (peeked when `peeking`)."""
    from paddletune.profile import loghist
    pops, ids, wait_s = (0 if peeking else n), per["workers"], per["wait_s"]
    counts = [n // len(ids) + (i < n % len(ids)) for i in range(len(ids))]  # whole batches
    return {"type": "reader", "what": "interval", "t0": t0, "t": t, "loader": loader,
            "pass": 1, "speed_test": peeking, "pushes": n, "produce_s": per["produce_s"] * n,
            "cpu_s": per["cpu_s"] * n, "cpu_n": n, "put_wait_s": 0.0, "nbytes": n * 1000,
            "workers": {str(w): [k, per["produce_s"] * k, per["cpu_s"] * k]
                        for w, k in zip(ids, counts)}, "pops": pops, "peeks": n - pops,
            "empty_pops": round(per["empty_ratio"] * pops), "wait_s": wait_s * pops,
            "wait_max_s": wait_s * 1.5 if pops else 0.0, "copy_s": per["copy_s"] * pops,
            "handover_s": per["handover_s"] * pops,  # (of wait_s: a worker's batch taken
            # over once made; the histogram holds the waits without it)
            "wait_hist": ({str(loghist.bucket(max(wait_s - per["handover_s"], 0.0))): pops}
                          if pops else {}),
            "pop_sizes": {"0" if per["empty_ratio"] >= 0.5 else "3": pops} if pops else {},
            "occupancy": {str(per["fill"]): 10}, "swings": 0 if peeking else per["swings"],
            "shapes": {k: {s: c * n for s, c in v.items()} for k, v in per["shapes"].items()},
            "cost": {}, "steps": pops, "step_wait_s": wait_s * pops,
            "programs": {"1": pops} if pops else {}}


def worker_samples(workers=2, uss_start=8 * 2 ** 20, growth=0, n=5, interval_s=0.1,
                   cores=0.9, loader=0, t_start=0.1):
    """`n` samples of the "workers" probe per worker of one pass, the first at the pass's
    start; each worker's USS grows by `growth` bytes over them and its CPU runs at `cores`."""
    return [{"type": "sample", "probe": "workers", "t": t_start + i * interval_s,
             "loader": loader, "pass": 1, "worker": w, "pid": 1000 + w,
             "uss_bytes": uss_start + growth * i // (n - 1), "rss_bytes": 64 * 2 ** 20,
             "cpu_s": round(cores * i * interval_s, 4)}
            for i in range(n) for w in range(workers)]



def memory_records(steps, allocated=3 << 20, step_peak=8 << 20, capacity=1 << 30,
                   system_allocs=0, system_alloc_s=0.0, phase_peaks=None, by_tag=None,
                   result=None, oom=None):
    """What the memory probe writes for the training `steps` (step records): a step sample
    per training step, one peak record, and its probe record (`result` overrides fields)."""
    phase_peaks = phase_peaks or {"activations": 5 << 20, "gradients": 7 << 20,
                                  "optimizer": step_peak}
    by_tag = by_tag or {"parameters": 1 << 20, "optimizer_state": 1 << 20,
                        "activations": 2 << 20, "gradients": 1 << 20, "optimizer": 3 << 20}
    train = [s for s in steps if not s.get("startup")]
    rows = [{"type": "memory", "what": "step", "t": s["t"], "program": s["program"],
             "step": s["step"], "allocated": allocated, "reserved": allocated + (1 << 20),
             "step_peak": step_peak, "phase_peaks": phase_peaks, "requests": 80,
             "system_allocs": system_allocs, "system_alloc_s": system_alloc_s,
             "batch_size": s.get("batch_size")} for s in train]
    rows.insert(1, {"type": "memory", "what": "peak", "t": train[0]["t"], "program": 1,
                    "step": 0, "peak_allocated": step_peak, "peak_reserved": step_peak * 2,
                    "by_tag": by_tag})
    if oom:
        rows.append({"type": "memory", "what": "oom", "t": train[-1]["t"], **oom})
    res = {"steps": len(train), "place": "CPUPlace", "strategy": "auto_growth",
           "capacity": capacity, "peak_allocated": step_peak, "peak_reserved": step_peak * 2,
           "by_tag_at_peak": by_tag, "cached_free": 1 << 20, "fragmentation": 0.25,
           "gc": True, "inplace": False, **(result or {})}
    rows.append({"type": "probe", "name": "memory", "available": True, "reason": None,
                 "overhead_s": 0.0001, "in_step": True, "result": res})
    return rows


def sched_records(steps, places=2, threads=4, reduce="AllReduce", busy=(0.006, 0.004, 0.001,
                                                                          0.0),
                  ops=120, sched_s=0.0012, concurrency=1.1, combine_s=0.001,
                  place_s=(0.009, 0.0095), drop_every=100, drops=(), fused=None,
                  ready_mean=0.5, ready_max=3):
    """What the scheduler probe writes for the training `steps`: a step record each, and a
    drop record (wall_s, held_bytes) after each step index in `drops`."""
    rows = []
    for s in steps:
        if s.get("startup"):
            continue
        rows.append({"type": "sched", "what": "step", "t": s["t"], "executor": 1,
                     "program": s["program"], "step": s["step"], "places": places,
                     "threads": threads, "reduce": reduce, "wall_s": s["wall_s"],
                     "busy_s": list(busy), "ops": ops, "sched_s": sched_s,
                     "ready_max": ready_max, "ready_mean": ready_mean,
                     "concurrency": concurrency,
                     "combine_s": combine_s, "place_s": list(place_s),
                     "drop_every": drop_every, "dropped": s["step"] in dict(drops),
                     "fused": dict(fused or {})})
        if s["step"] in dict(drops):
            wall, held = dict(drops)[s["step"]]
            rows.append({"type": "sched", "what": "drop", "t": s["t"] + s["wall_s"],
                         "executor": 1, "program": s["program"], "step": s["step"],
                         "wall_s": wall, "held_bytes": held, "variables": 40})
    return rows


class DiskFullFile:
    """A file object whose writes fail as on a full disk (ENOSPC): a ProfileWriter's _file."""

    def write(self, text):
        raise OSError(28, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass
