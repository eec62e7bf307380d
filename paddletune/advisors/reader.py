"""ADVICE.md #2-#5: the DataLoader's queue runs empty (how many workers), the speed test's
no-data ceiling, and the double buffer."""

import math
from typing import Optional

from ..summary import HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND
from .base import Advice, rule
from .facts import cpu_facts, enough_steps, free_cores, main_loader, ms
from .input import MIN_INPUT_S

STARVED_EMPTY_RATIO = 0.3  # the queue was empty in at least this share of the pops, or ...
SLOW_PRODUCER = 1.1  # ... the producer this many times slower than the consumer takes batches,
# while the loop waited MODERATELY_INPUT_BOUND (medium) / HIGHLY_INPUT_BOUND (high) of its step
MIN_WORKER_CORES = 0.1  # a worker mostly waiting (I/O, sleep) still needs this much of a core
MAX_WORKERS_PER_CORE = 4  # and no more worker processes than this per core (memory, switches)
NOT_BOTTLENECK = 1.1  # speed-test ceiling / actual at or below this: the reader is not the issue
SUSPICIOUS_EMPTY_RATIO = 0.1  # reader figures that make a speed test worth running
COPY_SHARE_LOW, COPY_SHARE_MEDIUM = 0.02, 0.05  # host->device copy share of the step
GIL_BOUND_CPU_SHARE = 0.5  # a reader thread computing this share of its time holds the GIL
BLAS_BUSY_CORES = 1.2  # a trainer busier than this with BLAS threads > 1: say so
SHARD = ("# each worker must make only its share of the batches; in the generator:\n"
         "#   info = fluid.io.get_worker_info()\n"
         "#   yield only items info.id, info.id + info.num_workers, ...")


@rule
def reader_starved(profile) -> Optional[Advice]:
    """reader queue and workers (#2, #5)

    Fires when the loop waited a visible share of its step while the queue was empty in a
    large share of the pops, or while the producer made batches measurably slower than the
    consumer takes them (a bursty producer: a few long waits hold most of the loop's wait,
    and most pops find the batch made while the step ran, yet the queue cannot stay
    filled); the worker count comes from producer vs consumer time.
    """
    f = main_loader(profile)
    if f is None or not enough_steps(profile) or not _starved(f):
        return None
    plan = worker_plan(profile, f)
    wait_s, share = f["wait"]["per_step_s"] or 0.0, f["wait"]["share"]
    tiny = wait_s < MIN_INPUT_S
    return Advice(
        id="reader-starved", source=2, figures=plan, evidence=_starved_evidence(f, plan),
        title=_starved_title(f),
        severity="low" if tiny else "high" if share >= HIGHLY_INPUT_BOUND else "medium",
        change=_worker_change(f, plan), expected_gain=_worker_gain(plan),
        expected_speedup=plan["speedup"],
        confidence="low" if tiny else "high" if f["empty_ratio"] >= 0.5 and
        profile.summary["steady_steps"] >= 20 else "medium")


def _starved(f) -> bool:
    share = f["wait"].get("share")
    if share is None or share < MODERATELY_INPUT_BOUND:
        return False
    return (f.get("empty_ratio") or 0) >= STARVED_EMPTY_RATIO or _slow_producer(f) is not None


def _slow_producer(f) -> Optional[float]:
    """How many times slower the producer makes batches than the consumer takes them, when
    at least SLOW_PRODUCER; else None."""
    made = (f.get("producer") or {}).get("rate_per_s")
    taken = (f.get("consumer") or {}).get("rate_per_s")
    if not made or not taken or taken < SLOW_PRODUCER * made:
        return None
    return taken / made


def _starved_title(f) -> str:
    if (f.get("empty_ratio") or 0) >= STARVED_EMPTY_RATIO:
        return f"Reader-starved: the queue was empty in {f['empty_ratio']:.0%} of the pops"
    return f"Reader-starved: the producer is {_slow_producer(f):.2f}x slower than the step"


def worker_plan(profile, f) -> dict:
    """How many producers make the producer rate reach the consumer's, capped by the free
    cores; the step time and steps/s that gives, and the no-data ceiling (the speed test's
    when measured)."""
    s = profile.summary
    cycle_s = s["cycle_s"]["mean"]
    per_step = f["consumer"].get("batches_per_step") or 1.0
    measured_s = f["producer"]["s_per_batch"] * per_step  # one producer, one step's batches
    produce_s = measured_s
    current = (f.get("config") or {}).get("num_workers") or 0
    cpu_share = f["producer"].get("cpu_share")
    gil = not current and cpu_share is not None and cpu_share >= GIL_BOUND_CPU_SHARE
    if gil:  # in its own process the thread's work no longer waits for the GIL
        produce_s = (f["producer"].get("cpu_s_per_batch") or 0.0) * per_step or produce_s
    free_s, source = _consumer_step(s, f, cycle_s)
    needed = max(1, math.ceil(produce_s / free_s)) if free_s > 0 else 1
    cores = free_cores(profile, f)
    cap = _worker_cap(cores, cpu_share) if cores else needed  # core count unknown: no cap
    cores = cores or {"cores": None, "free": None, "others": 0.0, "idle": None,
                      "trainer": None}
    workers = min(needed, cap)
    new_s = min(max(free_s, produce_s / workers), cycle_s)  # never slower than now
    return {"workers": workers, "workers_needed": needed, "worker_cap": cap,
            "current_workers": current, "gil_bound_thread": gil,
            "trainer_cores": cores["trainer"], **_blas(profile),
            "producer_s_per_step": measured_s, "worker_s_per_step": produce_s,
            "producer_cpu_s_per_step": (f["producer"].get("cpu_s_per_batch") or 0.0) * per_step,
            "consumer_s_per_step": free_s,
            "consumer_source": source, "cycle_s": cycle_s, "predicted_cycle_s": new_s,
            "speedup": cycle_s / new_s if new_s > 0 else None,
            "ceiling_steps_per_s": 1 / free_s if free_s > 0 else None,
            "cores": cores["cores"], "free_cores": cores["free"], "idle_cores": cores["idle"],
            "other_processes_cores": cores["others"],
            "producer_cpu_share": cpu_share, "empty_ratio": f["empty_ratio"],
            "wait_per_step_s": f["wait"]["per_step_s"], "wait_share": f["wait"]["share"],
            "capacity": (f.get("config") or {}).get("capacity"),
            "suggested_capacity": _capacity(f, workers)}


def _blas(profile) -> dict:
    cpu = cpu_facts(profile)
    return {"blas_threads": cpu["blas_threads"], "blas_env": cpu["blas_env"]}


def _worker_cap(cores, cpu_share) -> int:
    """How many workers the free cores run: each needs its measured share of a core (all of
    one when unknown, at least MIN_WORKER_CORES), at most MAX_WORKERS_PER_CORE per core."""
    per_worker = max(cpu_share if cpu_share is not None else 1.0, MIN_WORKER_CORES)
    cap = math.floor(cores["free"] / per_worker + 1e-9)
    if cores["cores"]:
        cap = min(cap, MAX_WORKERS_PER_CORE * cores["cores"])
    return max(cap, 1)


def _consumer_step(s, f, cycle_s):
    """The step's time if data were free: the speed test's ceiling cycle when measured, else
    the loop's cycle less its wait for batches."""
    ceiling = (s.get("speed_test") or {}).get("ceiling")
    if ceiling:
        return ceiling["cycle_s"], "speed test"
    return max(cycle_s - (f["wait"]["per_step_s"] or 0.0), 0.0), "cycle - wait"


def _capacity(f, workers) -> int:
    """Room for every worker to hand in a batch twice over; doubled when the queue swung
    between full and empty (a bursty producer)."""
    capacity = (f.get("config") or {}).get("capacity") or 1
    return max(capacity * (2 if f.get("oscillating") else 1), 2 * workers)


def _starved_evidence(f, plan) -> str:
    idle, others = plan["idle_cores"], plan["other_processes_cores"]
    cores = (f"; {max(idle, 0):.1f} of {plan['cores']} cores idle" if idle is not None
             else f"; {plan['cores']} cores" if plan["cores"] else "")
    if others >= 0.5:
        cores += f", other processes busy on {others:.1f}"
    swings = (f"; it swung {f['swings']} times from full to empty" if f.get("oscillating")
              else "")
    return (f"the queue of {f.get('name') or 'the DataLoader'} (capacity {plan['capacity']}, "
            f"{_producers(plan['current_workers'])}) was empty in {f['empty_ratio']:.0%} of "
            f"{f['batches']:,} pops{swings}; the loop waited {ms(plan['wait_per_step_s'] or 0)}"
            f" per step, {plan['wait_share']:.0%} of its {ms(plan['cycle_s'])} step; producer "
            f"{ms(plan['producer_s_per_step'])}/batch{_cpu_part(plan)} vs compute "
            f"{ms(plan['consumer_s_per_step'])}/step ({plan['consumer_source']}){cores}.")


def _cpu_part(plan) -> str:
    cpu = plan["producer_cpu_s_per_step"]
    return f" (CPU {ms(cpu)})" if cpu else ""


def _producers(n) -> str:
    return f"{n} worker process{'es' * (n > 1)}" if n else "a thread producer"


def _worker_change(f, plan) -> str:
    n, now = plan["workers"], max(plan["current_workers"], 1)
    if plan["gil_bound_thread"]:
        return "\n".join([loader_line(f, capacity=plan["suggested_capacity"], num_workers=n),
                          _gil_note(plan), SHARD] + _blas_note(plan))
    if plan["workers_needed"] <= now:
        return (f"{loader_line(f, capacity=plan['suggested_capacity'])}\n# the producer keeps "
                f"up on average: a larger queue absorbs its bursts")
    if n <= now:
        share = plan["producer_cpu_share"]
        need = f", and a worker needs {share:.2f} of one" if share is not None else ""
        return "\n".join([
            f"# no core is free for more reader workers: {plan['free_cores']:.1f} of the "
            f"{plan['cores']} cores once the trainer and other processes are served{need}.",
            "# Make each batch cheaper (move preprocessing into the model, cache decoded data "
            "in memory) or run on more cores"] + _blas_note(plan))
    return "\n".join([loader_line(f, capacity=plan["suggested_capacity"], num_workers=n),
                      SHARD] + _blas_note(plan, n < plan["workers_needed"]))


def _gil_note(plan) -> str:
    return (f"# the reader thread computes {plan['producer_cpu_share']:.0%} of its time, "
            f"holding the GIL the training loop needs (every op waits to get it back); a "
            f"worker process prepares batches beside the trainer instead")


def _blas_note(plan, short_of_cores=True) -> list:
    """The trainer's BLAS thread count, when its threads and the reader workers together
    outnumber the cores (during each op the BLAS threads take every core they have, and the
    workers wait), or when the trainer kept more than BLAS_BUSY_CORES busy while the workers
    lack cores. The suggested count leaves a core to each worker (at least 1 thread)."""
    blas, cores, trainer = plan.get("blas_threads"), plan.get("cores"), plan.get("trainer_cores")
    workers = max(plan["workers"], plan["current_workers"], 1)
    if not blas or blas < 2 or not cores:
        return []
    crowded = workers + blas > cores
    busy = short_of_cores and trainer is not None and trainer >= BLAS_BUSY_CORES
    if not (crowded or busy):
        return []
    n = max(1, int(cores) - workers)
    if n >= blas:
        return []
    why = (f"{blas} BLAS threads + {workers} worker(s) on {cores} cores: during each op the "
           f"workers wait" if crowded else
           f"the trainer itself kept {trainer:.1f} cores busy with {blas} BLAS threads")
    return [f"# {why}. Give NumPy's BLAS {n} thread(s) (check the step time after):\n"
            f"# export {plan['blas_env']}={n}"]


def _worker_gain(plan) -> str:
    n, needed = plan["workers"], plan["workers_needed"]
    ceiling = f"the no-data ceiling is {plan['ceiling_steps_per_s']:,.0f} steps/s"
    if n <= max(plan["current_workers"], 1) < needed and not plan["gil_bound_thread"]:
        return (f"none from more workers on these cores; {ceiling}, which {needed} workers "
                f"would reach")
    how = (f"{n} worker process(es), the training loop no longer waiting for the GIL"
           if plan["gil_bound_thread"] else f"{n} worker(s)")
    text = (f"up to {plan['speedup']:.2f}x steps/s ({ms(plan['cycle_s'])} -> "
            f"{ms(plan['predicted_cycle_s'])} per step) with {how}; {ceiling}")
    if needed > n:
        text += (f"; reaching it takes {needed} workers, but the {plan['free_cores']:.1f} free "
                 f"core(s) run {plan['worker_cap']}: make each batch cheaper too")
    return text


def loader_line(f, **changes) -> str:
    """The from_generator call of this loader with `changes` applied."""
    config = f.get("config") or {}
    feeds = config.get("feed") or []
    names = ", ".join(feeds) if feeds and all(n.isidentifier() for n in feeds) else "..."
    args = {"capacity": config.get("capacity")}
    if config.get("iterable") is False:
        args["iterable"] = False
    args.update(changes)
    return (f"loader = fluid.io.DataLoader.from_generator(feed_list=[{names}], "
            + ", ".join(f"{k}={v}" for k, v in args.items()) + ")")


@rule
def speed_test_ceiling(profile) -> Optional[Advice]:
    """no-data ceiling (#3)

    Quantifies what data costs from --speed-test; suggests running it when the reader
    looks suspicious and it was not measured.
    """
    st, f = profile.summary.get("speed_test"), main_loader(profile)
    if f is None or not enough_steps(profile):
        return None
    if not st:
        return _suggest_speed_test(profile, f)
    ratio = st.get("ratio")
    if ratio is None or ratio <= NOT_BOTTLENECK:
        return None
    base, ceil = st["baseline"], st["ceiling"]
    return Advice(
        id="reader-data-cost", source=3, figures=_speed_figures(st),
        title=f"Data costs {st['data_share']:.0%} of the throughput (speed test)",
        severity="medium" if st["data_share"] >= HIGHLY_INPUT_BOUND else "low",
        evidence=(f"with FLAGS_reader_queue_speed_test_mode on (the queue peeked, never popped) "
                  f"the job ran {_rate(ceil)} against {_rate(base)} in the baseline window: "
                  f"data costs {st['data_share']:.0%} of your throughput; ceiling "
                  f"{_samples(ceil)}."),
        change=_ceiling_change(profile, f), expected_speedup=ratio,
        expected_gain=f"up to {ratio:.2f}x ({_samples(ceil)}) if data were free",
        confidence="high" if st.get("complete") else "medium")


def _rate(w) -> str:
    return f"{w['steps_per_s']:,.1f} steps/s ({_samples(w)})"


def _samples(w) -> str:
    return (f"{w['samples_per_s']:,.0f} samples/s" if w.get("samples_per_s")
            else f"{w['steps_per_s']:,.1f} steps/s")


def _speed_figures(st) -> dict:
    return {"ratio": st["ratio"], "data_share": st["data_share"],
            "baseline_steps_per_s": st["baseline"]["steps_per_s"],
            "ceiling_steps_per_s": st["ceiling"]["steps_per_s"],
            "baseline_samples_per_s": st["baseline"].get("samples_per_s"),
            "ceiling_samples_per_s": st["ceiling"].get("samples_per_s"),
            "complete": st.get("complete")}


def _ceiling_change(profile, f) -> str:
    if _starved(f):
        plan = worker_plan(profile, f)
        return _worker_change(f, plan)
    if not (f.get("config") or {}).get("num_workers"):
        return (f"{loader_line(f, num_workers=1)}\n# a worker process: the producer stops "
                f"competing with training for the GIL\n{SHARD}")
    return ("# the workers keep the queue filled but compete with training for the cores:\n"
            "# move preprocessing into the model, or cache decoded data in memory")


def _suggest_speed_test(profile, f) -> Optional[Advice]:
    share = f["wait"].get("share") or 0.0
    if (f.get("empty_ratio") or 0) < SUSPICIOUS_EMPTY_RATIO and \
            share < MODERATELY_INPUT_BOUND and not f.get("oscillating"):
        return None
    argv = " ".join(str(a) for a in (profile.header.get("command") or {}).get("argv") or [])
    return Advice(
        id="reader-speed-test", source=3, severity="info", confidence="high",
        title="Measure the no-data ceiling with --speed-test",
        evidence=(f"the queue was empty in {f['empty_ratio']:.0%} of the pops and the loop "
                  f"waited {share:.0%} of its step; a speed test measures what data costs."),
        change=f"paddletune profile --speed-test --steps 60 {argv or 'train.py'}",
        expected_gain="none by itself: it measures how fast training runs without data",
        figures={"empty_ratio": f["empty_ratio"], "wait_share": share})


@rule
def double_buffer_off(profile) -> Optional[Advice]:
    """double buffer (#4)

    Fires when a loader runs without use_double_buffer and its host->device copy shows.
    """
    f = main_loader(profile)
    if f is None or not enough_steps(profile) or (f.get("config") or {}).get(
            "use_double_buffer", True):
        return None
    cycle_s = profile.summary["cycle_s"]["mean"]
    copy_s = (f.get("copy_s_per_pop") or 0.0) * (f["consumer"].get("batches_per_step") or 1.0)
    share = copy_s / cycle_s if cycle_s else 0.0
    if share < COPY_SHARE_LOW:
        return None
    speedup = cycle_s / (cycle_s - copy_s) if cycle_s > copy_s else None
    return Advice(
        id="double-buffer-off", source=4, title="Turn the DataLoader's double buffer on",
        severity="medium" if share >= COPY_SHARE_MEDIUM else "low", confidence="high",
        evidence=(f"{f.get('name') or 'the DataLoader'} runs with use_double_buffer=False and "
                  f"copies each batch to the device on the training thread: "
                  f"{ms(copy_s)} per step, {share:.1%} of the {ms(cycle_s)} step."),
        change=loader_line(f, use_double_buffer=True),
        expected_gain=(f"up to {speedup:.2f}x steps/s: the copy overlaps the previous step"
                       if speedup else "the copy overlaps the previous step"),
        expected_speedup=speedup, figures={"copy_s_per_step": copy_s, "copy_share": share})
