"""docs/advice.md #2-#5: the DataLoader's queue runs empty (how many workers), the speed test's
no-data ceiling, and the double buffer."""

from dataclasses import replace
from typing import Optional, Tuple

from ..profile.figures import LoaderFigures, ProducerAlone, Summary, WindowRate
from ..profile.summarize import HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND
from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import cpu_facts, enough_steps, free_cores, main_loader, ms, script, writer
from .input import MIN_INPUT_S
from .prefetch import burst_plan
from .producers import (ProducerCost, blas_note, cpu_bound_note, fewer_blas_threads,
                        gain_severity, plan_figures, shard_note, size_workers,
                        trainer_cpu_from_steps, trainer_work_bound, transfer_costs,
                        with_sending, worker_busy_cores)

STARVED_EMPTY_RATIO = 0.3  # the queue was empty in at least this share of the pops, or ...
SLOW_PRODUCER = 1.1  # ... the producer this many times slower than the consumer takes batches,
# while the loop waited MODERATELY_INPUT_BOUND (medium) / HIGHLY_INPUT_BOUND (high) of its step
NOT_BOTTLENECK = 1.1  # speed-test ceiling / actual at or below this: the reader is not the issue
SUSPICIOUS_EMPTY_RATIO = 0.1  # reader figures that make a speed test worth running
MEASURABLE_WAIT_SHARE = 0.02  # ... with the loop waiting at least this share of its step
COPY_SHARE_LOW, COPY_SHARE_MEDIUM = 0.02, 0.05  # host->device copy share of the step
GIL_BOUND_CPU_SHARE = 0.5  # a reader thread computing this share of its time holds the GIL
GIL_STEP_SHARE = 0.10  # a reader thread computing this share of each step takes the GIL from
GIL_STEP_SHARE_MEDIUM = 0.25  # the loop (low), this much: medium
GIL_INFLATED = ("a lower bound: the thread's CPU time and the step were measured while the "
                "two took turns at the GIL, which inflates both")
WORKER_BATCH_S = 0.00015  # the trainer's side of taking a batch from a worker process (a
# 64x784 float32 batch on this 2-core VM: 0.12-0.14 ms of the trainer's CPU, ipc check in
# docs/benchmarks.md)
ONE_THREAD = "speed test, 1 math thread"  # a plan made on the one-thread ceiling window
NO_GAIN = 1.02  # a predicted speedup below this is none
SEVERAL_BATCHES = 1.5  # batches a step from which the producer's time is said a step's
MIN_REST = 0.05  # the cycle less the wait below this share of it: take the step's run


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
    if f is None or not enough_steps(profile) or not _starved(f) or \
            burst_plan(profile, f) is not None:  # workers idle while the queue ran dry: #27
        return None
    plan = worker_plan(profile, f)
    plan |= _in_its_steps(plan, f)
    wait_s, share = f.wait.per_step_s or 0.0, f.wait.share
    tiny = wait_s < MIN_INPUT_S
    return Advice(
        id="reader-starved", source=2, figures=plan, evidence=_starved_evidence(f, plan),
        title=_starved_title(f),
        severity="low" if tiny else gain_severity(
            "high" if share >= HIGHLY_INPUT_BOUND else "medium",
            None if _gil_lower_bound(plan) else plan["speedup"]),  # GIL: a lower bound
        change=_worker_change(writer(profile), f, plan),
        expected_gain=_worker_gain(plan, script(profile)),
        expected_speedup=None if _gil_unpredictable(plan) else plan["speedup"],
        expected_range=_bounds(plan),
        confidence="low" if tiny else "high" if _empty_ratio(f) >= 0.5 and
        profile.summary.steady_steps >= 20 else "medium")


def _empty_ratio(f: LoaderFigures) -> float:
    return f.empty_ratio or 0.0


def starved(f: LoaderFigures) -> bool:
    """The loop waited a visible share of its step for a queue that ran empty or a producer
    slower than the step (reader-starved fires)."""
    return _starved(f)


def _starved(f: LoaderFigures) -> bool:
    share = f.wait.share
    if share is None or share < MODERATELY_INPUT_BOUND:
        return False
    return _empty_ratio(f) >= STARVED_EMPTY_RATIO or _slow_producer(f) is not None


def _slow_producer(f: LoaderFigures) -> Optional[float]:
    """How many times slower the producer makes batches than the consumer takes them, when
    at least SLOW_PRODUCER; else None."""
    made, taken = f.producer.rate_per_s, f.consumer.rate_per_s
    if not made or not taken or taken < SLOW_PRODUCER * made:
        return None
    return taken / made


def _starved_title(f: LoaderFigures) -> str:
    if _empty_ratio(f) >= STARVED_EMPTY_RATIO:
        return f"Reader-starved: the queue was empty in {f.empty_ratio:.0%} of the pops"
    return f"Reader-starved: the producer is {_slow_producer(f):.2f}x slower than the step"


def worker_plan(profile, f: LoaderFigures) -> dict:
    """How many producers make the producer rate reach the consumer's, capped by the free
    cores; the step time and steps/s that gives, and the no-data ceiling (the speed test's
    when measured). See advisors/producers.py for the model. Where the plan gives the
    trainer one BLAS thread and the speed test measured its ceiling with one, the plan is
    made again on that step."""
    s = profile.summary
    per_step = f.consumer.batches_per_step or 1.0
    cpu_share = f.producer.cpu_share
    cpu_s = (f.producer.cpu_s_per_batch or 0.0) * per_step
    gil = f.config.made_in == "thread" and cpu_share is not None and \
        cpu_share >= GIL_BOUND_CPU_SHARE  # (the loop making its own batches holds no GIL
    # against the step: nothing waits for it meanwhile)
    measured_s = f.producer.s_per_batch * per_step  # one producer, one step's batches
    # in its own process a GIL-bound thread's work no longer waits for the GIL
    cost = ProducerCost(wall_s=(cpu_s or measured_s) if gil else measured_s, cpu_s=cpu_s,
                        cpu_share=cpu_share)
    taking_s, sending_s = worker_transfer(profile, f)
    cost = with_sending(cost, sending_s * per_step)
    free_s, source = _consumer_step(s, f, loader_cycle(s, f))
    free_s += taking_s * per_step
    measured = source == "speed test"
    alone = producer_alone(profile, f) if gil and measured else None
    hand_over_s = WORKER_BATCH_S * per_step if alone is not None else 0.0  # a worker's
    if alone is not None:  # the thread timed alone, and the step without it: an estimate
        cost = _alone_cost(alone, per_step, f.producer.cpu_s_per_batch)
    window = s.speed_test.ceiling if measured else None
    plan = _plan(profile, f, cost, free_s + hand_over_s, window, hand_over_s, source) | {
        "gil_bound_thread": gil, "producer_s_per_step": measured_s,
        "producer_cpu_measured_s": cpu_s, "transfer_s_per_batch": (taking_s, sending_s),
        "compute_taking_s": taking_s * per_step,
        "batches_per_step": per_step} | _alone_figures(alone, per_step)
    one = s.speed_test.one_thread if measured else None
    if one is not None and fewer_blas_threads(plan) == 1:
        plan |= _plan(profile, f, cost, one.cycle_s + hand_over_s, one, hand_over_s,
                      ONE_THREAD) | {"compute_taking_s": 0.0}
    plan |= _gil_bound_from_above(plan, gil and measured)
    plan["keep_in_loop"] = _hand_over_outweighs(plan)  # (then no worker count: tune)
    return plan


def loader_cycle(s: Summary, f: LoaderFigures) -> float:
    """The cycle of the steps loader `f` fed: its own where another training loader fed
    the others (LoaderFigures.cycle_s), else the steady steps' mean."""
    return f.cycle_s or s.cycle_s.mean


def _in_its_steps(plan: dict, f: LoaderFigures) -> dict:
    """Where the loader fed only some of the steady steps (`steps_share` of their time; an
    epoch on another dataset fed the rest), the plan's cycles are those steps' and so is
    its speedup (`loader_speedup`); the job's (`speedup`) is what that saves of the whole:
    1 / ((1 - share) + share / loader_speedup). (reader-starved's: the other cards that
    plan workers state their figures for the loader's steps.)"""
    share, own = f.steps_share, plan.get("speedup")
    if f.cycle_s is None or share is None or not own:
        return {"steps_share": None, "loader_speedup": None}
    return {"steps_share": share, "loader_speedup": own,
            "speedup": 1.0 / ((1.0 - share) + share / own)}


def worker_transfer(profile, f: LoaderFigures) -> Tuple[float, float]:
    """(the trainer's, a worker's) CPU seconds per batch for moving it between processes,
    where the plan moves the loop's own production into workers (producers.transfer_costs;
    0 where the job has workers already: its step and the workers' timing hold it)."""
    if f.config.num_workers:
        return 0.0, 0.0
    return transfer_costs(profile.source.framework)


def _plan(profile, f: LoaderFigures, cost: ProducerCost, free_s: float,
          window: Optional[WindowRate], hand_over_s: float, source: str) -> dict:
    """The worker plan's figures for a step of `free_s` without data (`window`: the speed
    test's window that measured it, its CPU per step the trainer's)."""
    s = profile.summary
    cycle_s = loader_cycle(s, f)
    one_thread = source == ONE_THREAD or cpu_facts(profile).blas_threads == 1
    trainer_cpu_s = (_trainer_cpu(window, free_s, hand_over_s, one_thread)
                     if window is not None else trainer_cpu_from_steps(profile, free_s))
    cores = free_cores(profile, f)
    shares = s.shares
    sizing = size_workers(cores, cost, free_s, cycle_s,
                          trainer_work_bound(profile, (shares.read if shares else None)
                                             or f.wait.share), trainer_cpu_s)
    return plan_figures(profile, sizing, cores, cost, cycle_s, free_s, source) | {
        "current_workers": f.config.num_workers or 0, "made_in": f.config.made_in,
        "trainer_cpu_s_per_step": trainer_cpu_s, "empty_ratio": f.empty_ratio,
        "wait_per_step_s": f.wait.per_step_s, "wait_share": f.wait.share,
        "capacity": f.config.capacity, "suggested_capacity": _capacity(f, sizing.workers)}


def _trainer_cpu(window: WindowRate, free_s: float, hand_over_s: float,
                 one_thread: bool = False) -> Optional[float]:
    """The CPU the trainer's step without data takes: the process's CPU per step in the
    speed test's no-data `window`, where it is less than that step (a step that waits,
    e.g. for the GIL or a device); never more (CPU above one core's worth of the step is
    math threads spinning, which workers beside them take back: producers.size_workers).
    When the window ran `one_thread` (one math thread: the trainer's work is the training
    thread's), the training thread's CPU instead: the process's also counts a producer
    thread filling the queue that the window only peeks at (bench_advice's starved-thread:
    8 batches of 5.7 ms of CPU in a window of 30 steps of 2.9 ms). `hand_over_s`: what
    taking a step's batches from a worker adds. None: not measured."""
    measured = window.cpu_s_per_step
    if one_thread and window.thread_cpu_s_per_step is not None:
        measured = window.thread_cpu_s_per_step
    if measured is None:
        return None
    measured += hand_over_s
    return measured if measured < free_s else None


def producer_alone(profile, f: LoaderFigures) -> Optional[ProducerAlone]:
    """Loader `f`'s producer thread timed alone at the speed test's end (None: not)."""
    st = profile.summary.speed_test
    return st.alone(f.loader) if st is not None else None


def _alone_cost(alone: ProducerAlone, per_step: float,
                beside_cpu: Optional[float] = None) -> ProducerCost:
    """What a step's batches cost a worker process: the GIL-bound thread's CPU time per
    batch, where it is less than the thread's time alone. Alone in the trainer, the thread
    still shares the interpreter with the process's other threads (the probes' samplers, the
    loop taking batches), so it waits for the GIL or a core part of the time; a worker
    process has an interpreter of its own, and the cores bound (producers.size_workers)
    counts the cores it shares. The CPU time is the lower of the two measures of the same
    work, alone (a few batches) and beside the trainer (`beside_cpu`, the whole run): sharing
    the process only adds to it. (bench_advice's starved-thread generator: 8.3 ms a batch
    alone in the trainer, 6.9 ms of CPU alone and 6.6 ms beside it, 5.4-6.3 ms in a process
    of its own; its Paddle job: 20.5 ms alone, 20.2 ms of CPU alone and 17.4 ms beside the
    trainer, about 16 ms in a worker by the measured step with 2 workers.)"""
    wall = alone.s_per_batch
    cpu = min((c for c in (alone.cpu_s_per_batch, beside_cpu) if c), default=None)
    if cpu is not None and cpu < wall:
        wall = cpu
    share = cpu / wall if cpu is not None and wall > 0 else None
    return ProducerCost(wall_s=wall * per_step, cpu_s=(cpu or 0.0) * per_step,
                        cpu_share=share)


def _alone_figures(alone: Optional[ProducerAlone], per_step: float) -> dict:
    cpu = alone.cpu_s_per_batch if alone else None
    return {"producer_alone_s_per_step": alone.s_per_batch * per_step if alone else None,
            "producer_alone_cpu_s_per_step": cpu * per_step if cpu is not None else None,
            "producer_alone_batches": alone.batches if alone else None}


def _gil_bound_from_above(plan, measured: bool) -> dict:
    """A GIL-bound thread's gain from above: the step without the thread (the speed test
    replays batches while the thread waits on the full queue). It bounds the whole change
    (`speedup_max`) unless the change also gives the trainer fewer BLAS threads, whose own
    gain the speed test did not see (`worker_speedup_max`: the worker's part alone); where
    it measured the step with one thread, that step bounds the whole change."""
    consumer_s = plan["consumer_s_per_step"]
    upper = plan["cycle_s"] / consumer_s if measured and consumer_s > 0 else None
    one_thread = plan.get("consumer_source") == ONE_THREAD
    if upper is not None and fewer_blas_threads(plan) is not None and not one_thread:
        return {"speedup_max": None, "worker_speedup_max": upper}
    return {"speedup_max": upper, "worker_speedup_max": upper}


def _consumer_step(s: Summary, f: LoaderFigures, cycle_s: float):
    """The step's time if data were free: the speed test's ceiling cycle when measured, else
    the loop's cycle less its wait for batches."""
    ceiling = s.speed_test.ceiling if s.speed_test is not None else None
    if ceiling is not None and f.cycle_s is None:  # (the ceiling is every step's)
        return ceiling.cycle_s, "speed test"
    rest_s = cycle_s - (f.wait.per_step_s or 0.0)
    b = s.breakdown_s
    if rest_s < MIN_REST * cycle_s and b is not None:  # the wait is timed by the loader and
        # the cycle by the steps: when waits fill the step, the run's own parts are surer
        return b.feed_s + b.compute_s + b.fetch_s, "feed + compute + fetch"
    return max(rest_s, 0.0), "cycle - wait"


def _capacity(f: LoaderFigures, workers: int) -> int:
    """Room for every worker to hand in a batch twice over; doubled when the queue swung
    between full and empty (a bursty producer)."""
    capacity = f.config.capacity or 1
    return max(capacity * (2 if f.oscillating else 1), 2 * workers)


def _starved_evidence(f: LoaderFigures, plan: dict) -> str:
    idle, others = plan["idle_cores"], plan["other_processes_cores"]
    cores = (f"; {max(idle, 0):.1f} of {plan['cores']} cores idle" if idle is not None
             else f"; {plan['cores']} cores" if plan["cores"] else "")
    if others >= 0.5:
        cores += f", other processes busy on {others:.1f}"
    swings = f"; it swung {f.swings} times from full to empty" if f.oscillating else ""
    return (f"the queue of {f.name or 'the DataLoader'} (capacity {plan['capacity']}, "
            f"{_producers(plan['current_workers'], plan['made_in'])}) was empty in {_empty_ratio(f):.0%} of "
            f"{f.batches:,} pops{swings}; the loop waited {ms(plan['wait_per_step_s'] or 0)}"
            f" per step, {plan['wait_share']:.0%} of its {ms(plan['cycle_s'])} step; producer "
            f"{ms(plan['producer_s_per_step'])}{_per(plan)}{_cpu_part(plan)} vs compute "
            f"{_compute_part(plan)}{cores}.")


def _per(plan: dict) -> str:
    """What the producer's time is of: a batch, or a step's batches where it takes several."""
    n = plan.get("batches_per_step") or 1.0
    return "/batch" if n < SEVERAL_BATCHES else f" for a step's {n:.3g} batches"


def _compute_part(plan: dict) -> str:
    """The step without data, and with the trainer's taking of a worker's batch where the
    plan adds it (a loop that makes its own batches: workers would hand them over)."""
    added_s = plan.get("compute_taking_s") or 0.0
    consumer_s, source = plan["consumer_s_per_step"], plan["consumer_source"]
    if not added_s:
        return f"{ms(consumer_s)}/step ({source})"
    return (f"{ms(max(consumer_s - added_s, 0.0))}/step ({source}), {ms(consumer_s)} with "
            f"workers ({ms(plan['transfer_s_per_batch'][0])} per batch to take it from one)")


def _ceiling(plan: dict) -> str:
    """The no-data ceiling the plan's step gives: with workers where it adds their
    hand-over (then below the loop's own rate, possibly)."""
    steps_per_s = plan["ceiling_steps_per_s"]
    if not steps_per_s:
        return "the no-data ceiling is unknown"
    if plan.get("compute_taking_s"):
        return (f"the no-data ceiling with workers (each batch taken from one) is "
                f"{steps_per_s:,.0f} steps/s")
    return f"the no-data ceiling is {steps_per_s:,.0f} steps/s"


def _cpu_part(plan) -> str:
    cpu = plan.get("producer_cpu_measured_s", plan["producer_cpu_s_per_step"])
    return f" (CPU {ms(cpu)})" if cpu else ""


def _producers(n, made_in="thread") -> str:
    if n:
        return f"{n} worker process{'es' * (n > 1)}"
    return "made by the training loop itself" if made_in == "loop" else "a thread producer"


def _producers_now(plan) -> int:
    """The producers that make batches beside the step now: the workers, or a reader thread
    as one; none where the loop makes its own (num_workers=0: each batch is waited for, so
    one worker already overlaps it)."""
    if plan.get("made_in") == "loop":
        return plan["current_workers"]
    return max(plan["current_workers"], 1)


def _hand_over_outweighs(plan: dict) -> bool:
    """A loop making its own batches, where workers would gain nothing because taking each
    batch from one costs the loop about what making it there does (PyTorch's hand-over
    through shared memory: WORKER_TRANSFER_S): the cores not being what bounds it, or
    taking the step's batches costing the loop at least what it waits for them now (then
    free cores would not help either: helper-34's s06, 0.75 ms to take a batch against
    0.33 ms waited, on a machine other jobs kept busy, was told to add a worker)."""
    taking_s = plan.get("transfer_s_per_batch", (0.0, 0.0))[0]
    outweighs = not plan.get("cpu_bound") or (
        plan.get("compute_taking_s", 0.0) >= _making_s(plan))
    return (plan.get("made_in") == "loop" and bool(taking_s) and outweighs
            and (plan["speedup"] or 1.0) < NO_GAIN)


def _making_s(plan: dict) -> float:
    """What making a step's batches costs the loop: its wait for them, or their CPU time
    where less (other processes taking the loop's core inflate the wait: helper-39's
    busy-machine s09b waited 0.78 ms for batches of 0.47 ms of CPU)."""
    wait_s = plan.get("wait_per_step_s") or 0.0
    cpu_s = plan.get("producer_cpu_measured_s") or 0.0
    return min(wait_s, cpu_s) if cpu_s > 0 else wait_s


def _worker_change(code: CodeWriter, f: LoaderFigures, plan: dict) -> str:
    n, now = plan["workers"], _producers_now(plan)
    capacity = plan["suggested_capacity"]
    if plan.get("keep_in_loop"):
        return ("# keep making the batches in the loop (num_workers=0): taking each from a "
                "worker would cost the loop as much or more.\n# Make each batch cheaper (move "
                "preprocessing into the model, cache decoded data in memory)")
    if plan["gil_bound_thread"]:
        return "\n".join([code.loader(f.config, capacity=capacity, num_workers=n),
                          _gil_note(plan)] + shard_note(code, f.config) + blas_note(code, plan))
    if plan["workers_needed"] <= now:
        return (f"{code.loader(f.config, capacity=capacity)}\n# the producer keeps "
                f"up on average: a larger queue absorbs its bursts")
    if n <= now:
        share = plan["producer_cpu_share"]
        need = f", and a worker needs {share:.2f} of one" if share is not None else ""
        return "\n".join([
            f"# no core is free for more reader workers: {plan['free_cores']:.1f} of the "
            f"{plan['cores']} cores once the trainer and other processes are served{need}.",
            "# Make each batch cheaper (move preprocessing into the model, cache decoded data "
            "in memory) or run on more cores"] + blas_note(code, plan))
    return "\n".join([code.loader(f.config, capacity=capacity, num_workers=n)]
                     + shard_note(code, f.config)
                     + blas_note(code, plan, n < plan["workers_needed"]))


def _gil_note(plan) -> str:
    if plan.get("made_in") == "loop":
        return ("# with num_workers=0 the training loop makes each batch itself while the "
                "model waits; a worker process prepares the next batches during the step")
    return (f"# the reader thread computes {plan['producer_cpu_share']:.0%} of its time, "
            f"holding the GIL the training loop needs (every op waits to get it back); a "
            f"worker process prepares batches beside the trainer instead")


def _gil_upper_bound(plan, script_name: str) -> str:
    """A GIL-bound thread's gain from above: the step without the thread, as the speed test
    measured it, or the command that measures it."""
    upper, worker_only = plan.get("speedup_max"), plan.get("worker_speedup_max")
    measured = f"the step without the thread that the speed test measured " \
               f"({ms(plan['consumer_s_per_step'])})"
    if upper is not None:
        return f"; at most {upper:.2f}x, {measured}"
    if worker_only is not None:
        return (f"; at most {worker_only:.2f}x from the worker process alone, {measured}; "
                f"the fewer BLAS threads below may add to it")
    return (f"; `paddletune profile --speed-test {script_name}` measures the step without "
            f"the thread, the gain's upper bound")


def _worker_gain(plan, script_name: str) -> str:
    n, needed = plan["workers"], plan["workers_needed"]
    ceiling = _ceiling(plan)
    if n <= _producers_now(plan) < needed and not plan["gil_bound_thread"]:
        return (f"none from more workers on these cores; {ceiling}, which {needed} workers "
                f"would reach")
    if plan.get("keep_in_loop"):
        return (f"none from workers: taking each batch from one would cost the loop "
                f"{ms(plan['transfer_s_per_batch'][0])}, against the "
                f"{ms(plan['wait_per_step_s'] or 0.0)} per step it waits now to make them")
    how = f"{n} worker(s)"
    if plan.get("made_in") == "loop":
        how = f"{n} worker process(es) making the batches while the model computes"
    elif plan["gil_bound_thread"]:
        how = f"{n} worker process(es), the training loop no longer waiting for the GIL"
    bound = "at least" if _gil_lower_bound(plan) else "up to"
    if plan.get("loader_speedup"):  # (it fed some of the steps: _in_its_steps)
        text = (f"{bound} {plan['speedup']:.2f}x steps/s over the run: {how} make the "
                f"steps it feeds ({plan['steps_share']:.0%} of the training time) "
                f"{plan['loader_speedup']:.2f}x faster ({ms(plan['cycle_s'])} -> "
                f"{ms(plan['predicted_cycle_s'])} per step); {ceiling}")
    else:
        text = (f"{bound} {plan['speedup']:.2f}x steps/s ({ms(plan['cycle_s'])} -> "
                f"{ms(plan['predicted_cycle_s'])} per step) with {how}; {ceiling}")
    if plan["gil_bound_thread"]:
        text += _gil_basis(plan, script_name)
    if plan.get("cpu_bound"):
        if _gil_unpredictable(plan):
            return f"{_gil_unknown()}; {ceiling}"
        if (plan["speedup"] or 1.0) < NO_GAIN:
            return (f"none on these cores: {cpu_bound_note(plan)}; {ceiling} once they "
                    f"are free")
        text += "; " + cpu_bound_note(plan)
    if needed > n:
        room = plan.get("room_cores")
        if room is None or room <= plan["free_cores"] + 1e-9:
            where = f"the {plan['free_cores']:.1f} free core(s)"
        elif plan.get("room_shared"):
            where = (f"the {room:.1f} core(s) the scheduler gives the job's threads beside "
                     f"other processes")
        else:
            where = f"the {room:.1f} core(s) the trainer leaves (it waits most of its step)"
        text += (f"; reaching it takes {needed} workers, but {where} run "
                 f"{plan['worker_cap']}: make each batch cheaper too")
    return text


@rule
def reader_thread_gil(profile) -> Optional[Advice]:
    """reader thread holding the GIL (#5)

    Fires when the loader's producer is a thread of the trainer that keeps the queue filled
    yet computes a visible share of each step in Python: the two threads take turns at the
    GIL, so the loop's ops wait while the thread works (the report then says compute-bound).
    A worker process makes the batches beside the trainer instead. Without a speed test the
    gain is a lower bound (the figures are inflated by the contention), and the advice says
    how to measure it; a speed test measures the step without the thread (the upper bound)
    and times the thread alone, which estimate it. Where the runtime measured how long the
    training thread was off its CPU while computing (Breakdown.compute_wait_s), the gain is
    an estimate from it (_gil_plan).
    """
    f = main_loader(profile)
    s = profile.summary
    if f is None or not enough_steps(profile) or f.config.made_in != "thread" or _starved(f):
        return None
    measured = s.speed_test is not None
    if measured and producer_alone(profile, f) is None:
        return None  # measured, the thread not timed alone: #3 judges the ceiling
    cycle_s = loader_cycle(s, f)  # (its steps': the card's figures are of those)
    cpu_s = (f.producer.cpu_s_per_batch or 0.0) * (f.consumer.batches_per_step or 1.0)
    share = cpu_s / cycle_s if cycle_s > 0 else 0.0
    if share < GIL_STEP_SHARE:
        return None
    plan = worker_plan(profile, f) if measured else _gil_plan(profile, f, cycle_s, cpu_s)
    known = (plan["speedup"] or 1.0) >= NO_GAIN  # else the inflated figures bound nothing
    waited = plan.get("compute_wait_s") is not None  # the loop's wait measured
    if not plan["gil_bound_thread"] or ((measured or waited) and not known and
                                        not plan.get("cpu_bound")):  # measured: no gain
        return None
    code = writer(profile)
    return Advice(
        id="reader-thread-gil", source=5, figures=plan,
        title=f"The reader thread holds the GIL {share:.0%} of each step",
        severity="medium" if share >= GIL_STEP_SHARE_MEDIUM and known else "low",
        confidence="medium",
        evidence=(f"{f.name or 'the DataLoader'}'s thread producer keeps the queue filled "
                  f"(empty in {_empty_ratio(f):.0%} of {f.batches:,} pops) but computes "
                  f"{ms(cpu_s)} per step in Python, {share:.0%} of the {ms(cycle_s)} step, "
                  f"in the trainer's process: while it holds the GIL the training loop's "
                  f"Python waits{_wait_evidence(plan)}."),
        change="\n".join([code.loader(f.config, num_workers=plan["workers"] if measured
                                      else 1)] + shard_note(code, f.config)
                          + blas_note(code, plan)),
        expected_speedup=plan["speedup"] if known else None,
        expected_range=_bounds(plan) if known else None,
        expected_gain=_thread_gil_gain(plan, cycle_s, script(profile)) if known
        else f"none on these cores: {cpu_bound_note(plan)}" if waited
        else f"{_gil_unknown()}; `paddletune profile --speed-test {script(profile)}` "
             f"measures the step without the thread")


def _wait_evidence(plan) -> str:
    wait_s = plan.get("compute_wait_s")
    if wait_s is None:
        return ""
    queued_s = plan.get("compute_queued_s")
    split = "" if queued_s is None else (
        f" ({ms(max(wait_s - queued_s, 0.0))} blocked, for the GIL; {ms(queued_s)} waiting "
        f"for a core)")
    return (f"; the training thread was off its CPU {ms(wait_s)} per step while its ops ran, "
            f"{wait_s / plan['cycle_s']:.0%} of the step{split}")


def _thread_gil_gain(plan, cycle_s: float, script_name: str) -> str:
    change = (f"{ms(cycle_s)} -> {ms(plan['predicted_cycle_s'])} per step) with the loop no "
              f"longer waiting for the GIL")
    cores = f"; {cpu_bound_note(plan)}" if plan["cpu_bound"] else ""
    if plan.get("compute_wait_s") is not None:
        return (f"{plan['speedup']:.2f}x steps/s ({change} (the step less the time the "
                f"training thread was off its CPU while its ops ran, "
                f"{ms(plan['compute_wait_s'])}){cores}; `paddletune profile --speed-test "
                f"{script_name}` measures the step without the thread")
    if not plan.get("producer_alone_s_per_step"):
        return (f"at least {plan['speedup']:.2f}x steps/s ({change} ({GIL_INFLATED}){cores}"
                f"; `paddletune profile --speed-test {script_name}` measures the step "
                f"without the thread")
    return f"{plan['speedup']:.2f}x steps/s ({change}{_gil_basis(plan, script_name)}{cores}"


def _bounds(plan):
    """(the lower bound, the speed test's upper bound or None) where the gain is only bounded
    from below (_gil_lower_bound); None for a point prediction."""
    if not _gil_lower_bound(plan) or plan.get("speedup") is None:
        return None
    return plan["speedup"], plan.get("speedup_max")


def _gil_lower_bound(plan) -> bool:
    """A GIL-bound thread's gain is only bounded from below: the speed test did not time
    the thread alone (see GIL_INFLATED), and the runtime did not measure how long the
    training loop was off its CPU (_gil_plan)."""
    return plan["gil_bound_thread"] and not plan.get("producer_alone_s_per_step") and \
        plan.get("compute_wait_s") is None


def _gil_unpredictable(plan) -> bool:
    """A GIL-bound thread's inflated figures bound no gain (see GIL_INFLATED)."""
    return _gil_lower_bound(plan) and (plan["speedup"] or 1.0) < NO_GAIN


def _gil_basis(plan, script_name: str) -> str:
    """What a GIL-bound thread's prediction rests on, and its upper bound: the thread timed
    alone by the speed test (an estimate), else its figures beside the trainer (a lower
    bound)."""
    if not plan.get("producer_alone_s_per_step"):
        return f" ({GIL_INFLATED})" + _gil_upper_bound(plan, script_name)
    return (f" (from the speed test: the step without the thread, "
            f"{ms(plan['consumer_s_per_step'])} with a worker's hand-over, and the thread "
            f"timed alone, {_alone_time(plan)} per step against "
            f"{ms(plan['producer_cpu_measured_s'])} of CPU beside the trainer"
            f"{_worker_time(plan)})" + _gil_upper_bound(plan, script_name))


def _alone_time(plan) -> str:
    alone_s, cpu_s = plan["producer_alone_s_per_step"], plan.get("producer_alone_cpu_s_per_step")
    return ms(alone_s) if cpu_s is None else f"{ms(alone_s)} ({ms(cpu_s)} of CPU)"


def _worker_time(plan) -> str:
    """What a worker is sized on, when it is not the thread's time alone: the lower CPU
    time (_alone_cost)."""
    worker_s = plan["worker_s_per_step"]
    if worker_s >= plan["producer_alone_s_per_step"]:
        return ""
    return f"; a worker process takes the lower CPU time, {ms(worker_s)}"


def _gil_unknown() -> str:
    return ("not predictable from these figures: the thread's CPU time and the step were "
            "measured while the two took turns at the GIL, which inflates both, so the cores "
            "look fuller than they are")


def _gil_plan(profile, f: LoaderFigures, cycle_s: float, cpu_s: float) -> dict:
    """One worker process making what the thread made: the step loses what the loop waited
    for the thread, pays the worker's hand-over per batch, and the cores bound it. What the
    loop waited: the time the runtime measured the training thread off its CPU while its ops
    ran (Breakdown.compute_wait_s: blocked for the GIL the thread held, or waiting for a core
    it took; an estimate: the GIL's convoy costs the loop more than the thread's own CPU
    time, as each op that lets the GIL go waits to get it back), else the thread's CPU time
    (a lower bound of the gain: GIL_INFLATED). The step less that wait is the loop's own CPU
    path; the cores bound (producers.size_workers) adds back what the worker and the
    trainer's threads still contend for."""
    per_step = f.consumer.batches_per_step or 1.0
    cost = ProducerCost(wall_s=cpu_s, cpu_s=cpu_s, cpu_share=f.producer.cpu_share)
    b = profile.summary.breakdown_s
    wait_s = b.compute_wait_s if b is not None else None  # (Breakdown: what it measures)
    lost_s = cpu_s if wait_s is None else wait_s
    free_s = max(cycle_s - lost_s, 0.0) + WORKER_BATCH_S * per_step
    cores = free_cores(profile, f)
    sizing = size_workers(cores, cost, free_s, cycle_s, None)
    sizing = replace(sizing, workers=1, busy_cores=worker_busy_cores(cost, 1, free_s),
                     predicted_s=min(max(sizing.free_s, cost.wall_s, sizing.cpu_bound_s or 0.0),
                                     cycle_s))
    plan = plan_figures(profile, sizing, cores, cost, cycle_s, free_s,
                        "cycle - thread CPU" if wait_s is None else "cycle - off-CPU wait")
    return {**plan, "current_workers": 0, "made_in": "thread", "gil_bound_thread": True,
            "thread_cpu_share_of_step": cpu_s / cycle_s if cycle_s else None,
            "compute_wait_s": wait_s,
            "compute_queued_s": b.compute_queued_s if b is not None else None}


@rule
def speed_test_ceiling(profile) -> Optional[Advice]:
    """no-data ceiling (#3)

    Quantifies what data costs from --speed-test; suggests running it when the reader
    looks suspicious and it was not measured.
    """
    st, f = profile.summary.speed_test, main_loader(profile)
    if f is None or not enough_steps(profile):
        return None
    if st is None:
        return _suggest_speed_test(profile, f)
    if _predicted_from_alone(profile, f):
        return None
    ratio = st.ratio
    if ratio is None or ratio <= NOT_BOTTLENECK:
        return None
    base, ceil = st.baseline, st.ceiling
    plan = worker_plan(profile, f) if _starved(f) else None  # (its change's, when starved)
    speedup, gain = ratio, f"up to {ratio:.2f}x ({_samples(ceil)}) if data were free"
    one = _one_thread_ceiling(plan, st)
    if one is not None and one.steps_per_s < ceil.steps_per_s:  # (the change's threads)
        speedup = one.steps_per_s / base.steps_per_s
        gain = (f"up to {speedup:.2f}x ({_samples(one)}): the ceiling with one math thread, "
                f"which the change sets; {ratio:.2f}x with the job's own threads if data "
                f"were free")
    return Advice(
        id="reader-data-cost", source=3, figures=_speed_figures(st),
        title=f"Data costs {st.data_share:.0%} of the throughput (speed test)",
        severity=gain_severity("medium" if st.data_share >= HIGHLY_INPUT_BOUND else "low",
                               speedup),
        evidence=(f"with FLAGS_reader_queue_speed_test_mode on (the queue peeked, never popped) "
                  f"the job ran {_rate(ceil)} against {_rate(base)} in the baseline window: "
                  f"data costs {st.data_share:.0%} of your throughput; ceiling "
                  f"{_samples(ceil)}."),
        change=_ceiling_change(profile, f, plan), expected_speedup=speedup,
        expected_gain=gain,
        confidence="high" if st.complete else "medium")


def _one_thread_ceiling(plan: Optional[dict], st) -> Optional[WindowRate]:
    """The speed test's ceiling with one math thread where the card's change (the worker
    `plan`'s) sets one BLAS thread: the change's own ceiling; None otherwise."""
    if plan is None or st.one_thread is None or not st.baseline.steps_per_s:
        return None
    return st.one_thread if fewer_blas_threads(plan) == 1 else None


def _predicted_from_alone(profile, f: LoaderFigures) -> bool:
    """#2 or #5 predicts moving the producer thread out from the speed test's timing of it
    alone: their card gives the ceiling too."""
    if producer_alone(profile, f) is None:
        return False
    card = reader_starved(profile) if _starved(f) else reader_thread_gil(profile)
    return card is not None and card.expected_speedup is not None


def _rate(w: WindowRate) -> str:
    return f"{w.steps_per_s:,.1f} steps/s ({_samples(w)})"


def _samples(w: WindowRate) -> str:
    return (f"{w.samples_per_s:,.0f} samples/s" if w.samples_per_s
            else f"{w.steps_per_s:,.1f} steps/s")


def _speed_figures(st) -> dict:
    return {"ratio": st.ratio, "data_share": st.data_share,
            "baseline_steps_per_s": st.baseline.steps_per_s,
            "ceiling_steps_per_s": st.ceiling.steps_per_s,
            "baseline_samples_per_s": st.baseline.samples_per_s,
            "ceiling_samples_per_s": st.ceiling.samples_per_s,
            "complete": st.complete}


def _ceiling_change(profile, f: LoaderFigures, plan: Optional[dict]) -> str:
    """The change: the worker `plan`'s where the queue starves (its plan), else a worker
    process for a thread producer, or a note."""
    code = writer(profile)
    if plan is not None:
        return _worker_change(code, f, plan)
    if not f.config.num_workers:
        return "\n".join([f"{code.loader(f.config, num_workers=1)}\n# a worker process: the "
                          f"producer stops competing with training for the GIL"]
                         + shard_note(code, f.config))
    return ("# the workers keep the queue filled but compete with training for the cores:\n"
            "# move preprocessing into the model, or cache decoded data in memory")


def _suggest_speed_test(profile, f: LoaderFigures) -> Optional[Advice]:
    """The speed test suggested where the data's cost is in question: the loop waited a
    measurable share of its step (MEASURABLE_WAIT_SHARE), and either MODERATELY_INPUT_BOUND
    of it, or a queue was empty at SUSPICIOUS_EMPTY_RATIO of the pops or swung between full
    and empty. A loop that makes its own batches (num_workers=0) has no queue: every pop
    "finds it empty", which says nothing (helper s27's s04: 100% empty, a 0.8% wait)."""
    share = f.wait.share or 0.0
    queued = f.config.made_in != "loop"
    empty = _empty_ratio(f) if queued else None
    if share < MEASURABLE_WAIT_SHARE or (
            share < MODERATELY_INPUT_BOUND and not (
                queued and (empty >= SUSPICIOUS_EMPTY_RATIO or f.oscillating))):
        return None
    seen = (f"the queue was empty in {empty:.0%} of the pops and the loop waited "
            f"{share:.0%} of its step" if queued else
            f"the loop makes its own batches (num_workers=0) and waited {share:.0%} of its "
            f"step for them")
    return Advice(
        id="reader-speed-test", source=3, severity="info", confidence="high",
        title="Measure the no-data ceiling with --speed-test",
        evidence=f"{seen}; a speed test measures what data costs.",
        change=f"paddletune profile --speed-test --steps 60 {script(profile)}",
        expected_gain="none by itself: it measures how fast training runs without data",
        figures={"empty_ratio": f.empty_ratio if queued else None, "wait_share": share})


@rule
def double_buffer_off(profile) -> Optional[Advice]:
    """double buffer (#4)

    Fires when a loader runs without use_double_buffer and its host->device copy shows.
    """
    f = main_loader(profile)
    if f is None or not enough_steps(profile) or f.config.use_double_buffer is not False:
        return None
    cycle_s = profile.summary.cycle_s.mean
    copy_s = (f.copy_s_per_pop or 0.0) * (f.consumer.batches_per_step or 1.0)
    share = copy_s / cycle_s if cycle_s else 0.0
    if share < COPY_SHARE_LOW:
        return None
    speedup = cycle_s / (cycle_s - copy_s) if cycle_s > copy_s else None
    return Advice(
        id="double-buffer-off", source=4, title="Turn the DataLoader's double buffer on",
        severity="medium" if share >= COPY_SHARE_MEDIUM else "low", confidence="high",
        evidence=(f"{f.name or 'the DataLoader'} runs with use_double_buffer=False and "
                  f"copies each batch to the device on the training thread: "
                  f"{ms(copy_s)} per step, {share:.1%} of the {ms(cycle_s)} step."),
        change=writer(profile).loader(f.config, use_double_buffer=True),
        expected_gain=(f"up to {speedup:.2f}x steps/s: the copy overlaps the previous step"
                       if speedup else "the copy overlaps the previous step"),
        expected_speedup=speedup, figures={"copy_s_per_step": copy_s, "copy_share": share})
