"""docs/advice.md #21: CPU threads: BLAS x runtime threads vs cores, steal time, idle cores;
and, for the ParallelExecutor on CPU places, Reduce instead of AllReduce."""

from typing import List, NamedTuple, Optional

from ..profile.figures import WindowRate
from .base import Advice, rule
from .facts import (BLAS_FAMILIES, OPTIMIZER_NAMES, CpuFacts, blas_family,  # noqa: F401
                    concurrent_executors, cpu_facts, enough_steps, free_cores, main_loader,
                    main_ops, ms, op_types_share, script, system_mean, system_stats, writer)
from .parallel import parallel_summary
from .reader import starved as reader_is_starved

STEAL_PERCENT = 10.0  # mean steal at or above this: the VM shares its cores (medium)
HIGH_STEAL_PERCENT = 25.0  # ... and at or above this: high
WORKER_SLACK = 0.25  # reader workers busy on this much less than a core do not crowd one
IDLE_FRACTION = 0.5  # process CPU below this share of the usable cores: cores idle
NO_GAIN = 1.02  # a measured one-thread speedup below this: none (the card drops to low)
PREEMPTED_PER_STEP = 2.0  # involuntary switches of the training thread per step from which its
# math threads are taken off the cores mid-op (measured, examples/torch/mlp.py on 2 cores with
# another process busy on ~1.4: 4-5 per step at 2 intra-op threads, 0.5-0.7 at 1)
REDUCE_SHARE = 0.10  # Reduce vs AllReduce: optimizer share of op time for it to matter
MIN_BLAS_SHARE = 0.3  # raise BLAS threads only when BLAS ops take at least this op time
BLAS_OPS = tuple(t + g for t in ("mul", "matmul", "conv2d", "depthwise_conv2d",
                                 "conv2d_transpose", "depthwise_conv2d_transpose")
                 for g in ("", "_grad")) + (
    # the layers PyTorch's and Paddle's --ops time (the leaf module's class: forward only)
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose",
    "Conv3DTranspose", "LSTM", "GRU", "RNN", "SimpleRNN", "MultiheadAttention",
    "MultiHeadAttention")


@rule
def cpu_threads(profile) -> List[Advice]:
    """CPU threads (#21)

    BLAS x runtime threads vs usable cores, hypervisor steal time, idle cores.
    """
    cpu = cpu_facts(profile)
    if not cpu.cores:
        return []
    found = [_steal(profile, cpu), _oversubscribed(profile, cpu)]
    if found[1] is None:
        found.append(_contended(profile, cpu))
    if found[1] is None and found[2] is None:
        found.append(_underused(profile, cpu))
    return [a for a in found if a is not None]


def blas_setting(profile, cpu: CpuFacts, n: int) -> str:
    """The lines that set the math library's threads to `n`."""
    return writer(profile).blas_threads(cpu.blas_env, n)


def _per_runtime_thread(cpu: CpuFacts, cores: float) -> int:
    return max(1, int(cores) // cpu.runtime_threads)


def _oversubscribed(profile, cpu: CpuFacts) -> Optional[Advice]:
    blas, rt, cores = cpu.blas_threads, cpu.runtime_threads, cpu.cores
    workers = _busy_workers(profile)
    if not blas or blas * rt + workers.busy <= cores + WORKER_SLACK:
        return None
    total, share = blas * rt, op_types_share(profile, BLAS_OPS)
    ratio = (total + workers.busy) / cores
    ctx = system_mean(profile, "ctx_involuntary_per_s")
    severity = "medium"  # high only when measured: BLAS ops a large share of op time
    if share is not None:
        severity = "low" if share < 0.1 else "high" if ratio >= 2 and share >= MIN_BLAS_SHARE \
            else "medium"
    evidence = (f"{cpu.blas_label} runs {blas} threads in each of {rt} runtime "
                f"thread(s): {total} threads")
    if workers.busy:
        evidence += (f" and {workers.count} reader worker process(es) busy on "
                     f"{workers.busy:.1f} cores")
    evidence += f" on {cores} usable cores ({ratio:.1f}x oversubscribed)"
    if share is not None:
        evidence += f"; BLAS ops take {share:.1%} of the op time"
    if ctx is not None:
        evidence += f"; {ctx:.0f} involuntary context switches/s"
    n = _per_runtime_thread(cpu, max(cores - round(workers.busy), 1))
    if n >= blas:
        return None
    title = f"CPU oversubscribed: {total} math threads on {cores} cores"
    if workers.busy:
        title = (f"CPU oversubscribed: {total} math threads and {workers.count} reader "
                 f"worker(s) on {cores} cores")
    # the speed test's no-data windows leave busy workers idle (the queue is only peeked
    # at, so they stop once it is full): they do not measure the threads against them
    measured = one_thread_gain(profile, n, total) if not workers.busy else None
    if measured is not None and measured.speedup < NO_GAIN:
        severity = "low"
    return Advice(
        id="cpu-oversubscribed", source=21, severity=severity, confidence="medium",
        title=title, evidence=evidence + ".", change=blas_setting(profile, cpu, n),
        expected_gain=measured.text if measured is not None else (
            f"not predicted from this profile: at {n} BLAS thread(s) per runtime "
            f"thread they stop preempting and waiting for one another (and for "
            f"the workers); typically 1.1-2x on BLAS-heavy steps. "
            f"{_measure_it(profile, cpu, n, speed_test_measures=not workers.busy)}"),
        expected_speedup=measured.speedup if measured is not None else None,
        figures={"usable_cores": cores, "blas_threads": blas, "runtime_threads": rt,
                 "threads": total, "blas_op_share": share, "ctx_involuntary_per_s": ctx,
                 "worker_processes": workers.count, "worker_cores": workers.busy,
                 "suggested_blas_threads": n, **_measured_figures(measured)})


def _contended(profile, cpu: CpuFacts) -> Optional[Advice]:
    """The math threads fit the cores, but not the cores other processes leave, and the
    training thread is preempted every step: OpenMP threads spin at each op's barrier, and
    one taken off its core stalls the op."""
    threads, cores = (cpu.blas_threads or 0) * cpu.runtime_threads, cpu.cores
    free = free_cores(profile)
    invol, cycle = system_mean(profile, "ctx_involuntary_per_s"), profile.summary.cycle_s
    if threads < 2 or free is None or invol is None or not cycle or \
            not enough_steps(profile):
        return None
    left = max(cores - free.others, 0.0)  # the cores other processes leave the job
    n = max(1, round(left)) // cpu.runtime_threads or 1
    per_step = invol * cycle.mean
    if n >= cpu.blas_threads or per_step < PREEMPTED_PER_STEP:
        return None
    measured = one_thread_gain(profile, n, threads)
    return Advice(
        id="cpu-contended", source=21, confidence="medium",
        severity=_contended_severity(per_step, invol, measured),
        title=f"CPU contended: {threads} math threads on the {left:.1f} core(s) other "
              f"processes leave",
        evidence=(f"{cpu.blas_label} runs {cpu.blas_threads} thread(s) per runtime thread "
                  f"({threads}) on {cores} usable cores, while other processes kept "
                  f"{free.others:.1f} of them busy; the training thread was preempted "
                  f"{per_step:.1f} times per step ({invol:.0f} involuntary context "
                  f"switches/s of the main thread over a {cycle.mean * 1e3:.2f} ms step): "
                  f"math threads spin at each op's barrier, and one taken off its core "
                  f"stalls the op."),
        change=blas_setting(profile, cpu, n),
        expected_gain=(measured.text + "; when the other processes stop, more threads may "
                       "pay again" if measured is not None else
                       f"not predicted from this profile (it ran only this thread count). "
                       f"Measured on a 2-core VM with another process busy on ~1.4 cores: a "
                       f"PyTorch MLP step took 43-61 ms at 2 intra-op threads, 3.4-4.1 ms at 1. "
                       f"{_measure_it(profile, cpu, n)}; when the other processes stop, more "
                       f"threads may pay again"),
        expected_speedup=measured.speedup if measured is not None else None,
        figures={"usable_cores": cores, "blas_threads": cpu.blas_threads,
                 "runtime_threads": cpu.runtime_threads, "other_processes_cores": free.others,
                 "cores_left": left, "ctx_involuntary_per_s": invol,
                 "preempted_per_step": per_step, "suggested_blas_threads": n,
                 **_measured_figures(measured)})


SEVERE_PREEMPTED_PER_STEP = 4.0  # preemptions of the training thread per step, and per
SEVERE_PREEMPTED_PER_S = 50.0  # second, from which one math thread was measured several
# times faster: 4-5 a step (80-100 a second) on the reference MLP (12-15x at 1 thread), and
# on helper-40's sweep (2-core VM, load 5-10) 12-85 a step, 73-262 a second: 3.2-9.6x (s01,
# s11) and 46x (s07, a GRU) with OMP_NUM_THREADS=1. (A long step reaches 4 a step at a rate
# a mildly loaded machine gives: the rate keeps it medium.)


def _contended_severity(per_step: float, per_s: float, measured) -> str:
    """high where the training thread was preempted SEVERE_PREEMPTED_PER_STEP times a step
    and SEVERE_PREEMPTED_PER_S a second or more (unless the speed test measured one thread
    no faster), medium below, low where the speed test measured no gain."""
    if measured is not None and measured.speedup < NO_GAIN:
        return "low"
    return "high" if per_step >= SEVERE_PREEMPTED_PER_STEP and \
        per_s >= SEVERE_PREEMPTED_PER_S else "medium"


class ThreadGain(NamedTuple):
    """One math thread's gain, measured by the speed test: its no-data step with the job's
    math threads (`threads_s`) and with one (`one_s`), the job's step (`cycle_s`), and the
    step that gives (`predicted_s`, one_thread_gain's model)."""

    speedup: float
    cycle_s: float
    threads_s: float
    one_s: float
    predicted_s: float
    text: str


def one_thread_gain(profile, n: int, threads: int) -> Optional[ThreadGain]:
    """The gain of one math thread where the change gives one (`n` 1) and the speed test
    measured its no-data step with one (SpeedTestFigures.one_thread) as well as with the
    job's `threads`; None otherwise.

    Batches the training loop makes itself (num_workers=0) are made by the same thread with
    the same math threads (the collate's tensor ops join the intra-op pool, and that thread
    spins at its barriers too), so the whole step shrinks as the no-data step did; measured
    on examples/torch/input_heavy.py with another process busy on ~1.3 of 2 cores: 9.5
    steps/s at 2 threads, 65-81 at 1, the no-data step 74.8 -> 10.4 ms (7.2x). Batches made
    elsewhere (workers, a reader thread) keep their wait: the step saves what the no-data
    step saved."""
    st, cycle = profile.summary.speed_test, profile.summary.cycle_s
    if n != 1 or st is None or not cycle or not _timed(st.ceiling) or \
            not _timed(st.one_thread):
        return None
    threads_s, one_s, cycle_s = st.ceiling.cycle_s, st.one_thread.cycle_s, cycle.mean
    loader = main_loader(profile)
    in_loop = loader is not None and loader.config.made_in == "loop"
    if in_loop:
        predicted_s = cycle_s * one_s / threads_s
    else:
        predicted_s = max(cycle_s - (threads_s - one_s), one_s)
    speedup = cycle_s / predicted_s
    basis = (f"the speed test ran the step without data in {ms(threads_s)} with {threads} "
             f"math threads and in {ms(one_s)} with 1")
    data = ("the loop makes its batches with the same threads, so they shrink alike"
            if in_loop else "the data side stays as it is")
    if speedup < NO_GAIN:
        text = (f"none measured: {basis}; the {ms(cycle_s)} step would take "
                f"{ms(predicted_s)}")
    else:
        text = (f"{speedup:.2f}x ({ms(cycle_s)} -> {ms(predicted_s)} a step): {basis}, and "
                f"{data}")
    return ThreadGain(speedup, cycle_s, threads_s, one_s, predicted_s, text)


def _timed(window: Optional[WindowRate]) -> bool:
    return window is not None and bool(window.steps) and bool(window.cycle_s)


def _measured_figures(measured: Optional[ThreadGain]) -> dict:
    if measured is None:
        return {}
    return {"measured_by": "speed test", "one_thread_cycle_s": measured.one_s,
            "threads_cycle_s": measured.threads_s, "predicted_cycle_s": measured.predicted_s}


def _measure_it(profile, cpu: CpuFacts, n: int, speed_test_measures: bool = True) -> str:
    """What to run for a prediction: with a DataLoader, the speed test measures the no-data
    step with one math thread too (where it has not run, and measures what the card is
    about: `speed_test_measures`); else a run with `n` threads."""
    if n == 1 and speed_test_measures and main_loader(profile) is not None and \
            profile.summary.speed_test is None:
        return (f"`paddletune profile --speed-test {script(profile)}` measures the step "
                f"without data with 1 math thread as well, and predicts it")
    return f"Measure it: `{cpu.blas_env}={n} paddletune profile {script(profile)}`"


class BusyWorkers(NamedTuple):
    """A DataLoader's worker processes and the cores they kept busy (0: none measured)."""

    count: int
    busy: float


def _busy_workers(profile) -> BusyWorkers:
    """The main loader's worker processes, when they keep the cores busy beside the trainer
    and the loader is not starved (then #2's worker advice sets the BLAS threads)."""
    f = main_loader(profile)
    if f is None or not f.config.num_workers or f.processes is None or \
            not f.processes.cores or not enough_steps(profile) or reader_is_starved(f):
        return BusyWorkers(0, 0.0)
    return BusyWorkers(int(f.config.num_workers), float(f.processes.cores))


def _steal(profile, cpu: CpuFacts) -> Optional[Advice]:
    stats = system_stats(profile, "steal_percent")
    steal = stats.mean if stats is not None else None
    if steal is None or steal < STEAL_PERCENT:
        return None
    n = _per_runtime_thread(cpu, cpu.cores * (1 - steal / 100))
    speedup = 1 / (1 - min(steal, 90.0) / 100)
    return Advice(
        id="cpu-steal", source=21, confidence="medium",
        severity="high" if steal >= HIGH_STEAL_PERCENT else "medium",
        title=f"The hypervisor steals {steal:.0f}% of the CPU",
        evidence=(f"steal time averaged {steal:.1f}% of CPU time (peak {stats.max:.1f}%) "
                  f"over {stats.n} samples: this VM's {cpu.cores} cores are shared "
                  f"with other tenants, and threads stall while descheduled."),
        change=_steal_change(profile, cpu, n),
        expected_gain=f"up to {speedup:.2f}x on CPU-bound steps if the stolen time comes back",
        expected_speedup=speedup,
        figures={"steal_percent_mean": steal, "steal_percent_max": stats.max,
                 "samples": stats.n, "usable_cores": cpu.cores,
                 "suggested_blas_threads": n})


def _steal_change(profile, cpu: CpuFacts, n: int) -> str:
    move = "# run on a dedicated (non-shared, non-burstable) instance"
    if cpu.blas_threads and cpu.blas_threads <= n:
        return f"{move}; your {cpu.blas_threads} BLAS thread(s) per runtime thread fit"
    return f"{move}; until then use fewer threads:\n{blas_setting(profile, cpu, n)}"


OTHERS_SLACK = 0.25  # cores other processes keep busy that still leave a core whole


def _underused(profile, cpu: CpuFacts) -> Optional[Advice]:
    """Conservative: compute-bound, BLAS-heavy (or unknown), process far below the cores,
    and the cores other processes leave fitting at least twice the math threads (a machine
    other jobs keep busy has no idle cores to give: more threads would be preempted)."""
    blas, rt, cores = cpu.blas_threads, cpu.runtime_threads, cpu.cores
    busy = system_mean(profile, "cpu_percent")
    verdict = profile.summary.verdict.kind
    if not enough_steps(profile) or verdict != "compute-bound" or busy is None or not blas \
            or cores < 2 or blas * rt * 2 > cores or busy >= IDLE_FRACTION * cores * 100:
        return None
    share = op_types_share(profile, BLAS_OPS)
    if share is not None and share < MIN_BLAS_SHARE:
        return None
    free = free_cores(profile, main_loader(profile))  # (its workers are the job's own)
    others = free.others if free is not None else 0.0
    left = int(cores - others + OTHERS_SLACK)  # (the whole cores other processes leave the
    # job: a daemon's 0.04 of one on an idle 2-core machine leaves both)
    if blas * rt * 2 > left:
        return None
    n = _per_runtime_thread(cpu, left)
    factor = n / blas
    speedup = _amdahl(profile, share, factor)
    return Advice(
        id="cpu-underused", source=21, severity="low",
        confidence="medium" if share is not None else "low",
        title=f"Cores idle: {blas} BLAS thread(s) on {cores} cores",
        evidence=(f"the job is compute-bound, yet the process used {busy:.0f}% CPU on "
                  f"average (100% = one core) of {cores * 100}% available"
                  + (f" ({others:.1f} core(s) busy with other processes)" if others >= 0.05
                     else "") + "; "
                  f"{cpu.blas_label} runs {blas} thread(s) per runtime thread ({rt})"
                  + (f"; BLAS ops take {share:.1%} of the op time" if share is not None
                     else "") + "."),
        change=blas_setting(profile, cpu, n), expected_speedup=speedup,
        expected_gain=(f"up to {speedup:.2f}x steps/s (Amdahl: BLAS ops {factor:.0f}x faster "
                       f"at best)" if speedup else f"up to {factor:.0f}x on the BLAS ops "
                       f"only (profile with --ops to size the gain)"),
        figures={"usable_cores": cores, "blas_threads": blas, "runtime_threads": rt,
                 "cpu_percent_mean": busy, "blas_op_share": share,
                 "other_processes_cores": others, "suggested_blas_threads": n})


def _amdahl(profile, share, factor) -> Optional[float]:
    """Steps/s factor if BLAS ops (`share` of op time) ran `factor` x faster (None: unknown)."""
    shares = profile.summary.shares
    compute = shares.compute if shares is not None else None
    if share is None or compute is None:
        return None
    part = compute * share
    return 1 / ((1 - part) + part / factor)


@rule
def reduce_strategy(profile) -> Optional[Advice]:
    """Reduce vs AllReduce on CPU (#21)

    Under AllReduce every place runs every parameter's update; Reduce runs each once.
    """
    p = parallel_summary(profile)
    if p is None or p.places < 2 or p.reduce != "AllReduce":
        return None
    if any((s.place or "").startswith("CUDAPlace") for s in profile.steps):
        return None
    kinds = sorted({op.type for op in main_ops(profile) if op.type in OPTIMIZER_NAMES})
    share = op_types_share(profile, kinds) if kinds else None
    if share is None or share < REDUCE_SHARE:
        return None
    places = p.places
    saved = share * (1 - 1 / places)
    return Advice(
        id="reduce-strategy", source=21, severity="low", confidence="medium",
        title=f"Updates run {places} times: try ReduceStrategy.Reduce",
        evidence=(f"under AllReduce each of the {places} places runs every parameter's "
                  f"{'/'.join(kinds)} update: {share:.1%} of the op time. Reduce updates each "
                  f"parameter on one place and broadcasts it."),
        change=writer(profile).build_strategy({"reduce_strategy": "Reduce"}),
        expected_gain=(f"up to {saved:.1%} of the op time less (the updates' "
                       f"{1 - 1 / places:.0%}), minus the broadcasts"),
        figures={"places": places, "optimizer_share": share, "optimizer_ops": kinds,
                 "predicted_op_time_saved_share": saved})
