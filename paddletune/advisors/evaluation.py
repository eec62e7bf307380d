"""docs/advice.md #30: evaluation passes that wait for their batches.

An evaluation (validation) loop over its own DataLoader, run between training steps, is left
out of the steps (sources/eager/steps.py): the steps' figures are the training's own, and the
summary's `evaluation` says what the passes cost the run. Where such a loader makes its
batches in the loop (num_workers=0), or in fewer workers than keep up, and the passes mostly
wait for them, (more) worker processes make them while the model evaluates the one before.

The prediction, per batch of the passes: now the loop makes it (the wait, `make_s`; with
workers, one worker's time for it) and then evaluates it (`eval_s`). With N workers a batch
takes the longest of: evaluating it and taking it over from a worker (the framework's
hand-over prior, producers.WORKER_TRANSFER_S); one worker's time over N; its CPU over the
cores the workers get beside the loop (all but one). N is the workers that would keep up
(make_s / eval_s, rounded up), no more than those cores run at each worker's measured share
of a core. Each pass still waits for its first batch as long as now (the workers begin it
as the pass begins). A loader with workers already gains, on the batches after each pass's
first, its pace with N workers against its pace with those it has (the same model). The
workers' start (a fork, FORK_S_PER_WORKER each; PyTorch's spawn or forkserver, a new
interpreter: _start_s_per_worker) is added once where they are kept, at every pass
where not: PyTorch's change keeps them (persistent_workers), Paddle's does not
(KEEPS_WORKERS). The gain is the run's, not the steps': the steps' figures do not change,
and `tune` (which measures steps) cannot show it."""

import math
from typing import Optional

from ..profile.figures import EvalLoader
from .base import Advice, rule
from .facts import declares_knob, ms, writer
from .producers import MAX_WORKERS_PER_CORE, MIN_WORKER_CORES, transfer_costs

MIN_RUN_SHARE = 0.05  # the passes' share of the run below which nothing is said
MIN_WAIT_SHARE = 0.3  # of the passes' time, waiting for batches: below, workers cannot help
# much (the rest is the evaluation itself)
MEDIUM_SAVED, HIGH_SAVED = 0.1, 0.25  # the run's share saved for medium / high severity
# frameworks whose workers a change keeps between passes (persistent_workers=True): PyTorch's
# wait for the next pass's indices (iter() 2.8 ms); Paddle 3.3.1's persistent iterator sleeps
# in 0.5 s polls in every later pass's iter() (pass_start.py, #31)
KEEPS_WORKERS = ("torch",)
FORK_S_PER_WORKER = 0.015  # forking a worker process as a pass starts (pass start: 45-55 ms
# for PyTorch's 3, 52-60 ms for Paddle's 4, 2-core VM, 2026-11-30)
SPAWN_S_PER_WORKER = 0.7  # starting one by spawn or forkserver: a new interpreter importing
# torch (a pass's start-up 1.4-5.5 s for PyTorch's 2, the same VM under load, 2026-11-30),
# where no loader of the job measured its own (_start_s_per_worker)
NOT_FORKED = ("spawn", "forkserver")


@rule
def evaluation_input(profile) -> Optional[Advice]:
    """evaluation passes waiting for their batches (#30)

    Fires when DataLoader passes between training steps (an evaluation loop) take at least
    5% of the run and wait for their batches at least 30% of their time, and more workers
    than it has (none: the loop makes the batches) would make them faster.
    """
    s = profile.summary
    if s.evaluation is None or not declares_knob(profile, "reader.num_workers"):
        return None
    candidates = [f for f in s.evaluation.loaders
                  if f.batches and (f.wait_share or 0.0) >= MIN_WAIT_SHARE]
    if not candidates or not s.duration_s:
        return None
    f = max(candidates, key=lambda c: c.read_s)
    figures = _figures(profile, f)
    if figures is None or f.total_s / s.duration_s < MIN_RUN_SHARE:
        return None
    saved = figures["saved_share"]
    severity = "high" if saved >= HIGH_SAVED else "medium" if saved >= MEDIUM_SAVED else "low"
    name = f.name or f"DataLoader#{f.loader}"
    return Advice(
        id="evaluation-input", source=30,
        title=(f"Evaluation waits {f.wait_share:.0%} of its time for data "
               f"({f.total_s / s.duration_s:.0%} of the run)"),
        severity=severity, confidence="medium", evidence=_evidence(f, name, figures),
        change=_change(profile, f, name, figures), expected_gain=_gain(figures),
        figures=figures)


def _start_s_per_worker(profile, loader) -> float:
    """What starting one worker costs a pass: forking it, or (spawn, forkserver: the
    loader's start method, which PyTorch records without workers too) the most a loader of
    the job with workers started that way measured a worker (its first pass's start-up over
    its workers), else SPAWN_S_PER_WORKER."""
    method = loader.config.start_method if loader is not None else None
    if method not in NOT_FORKED:
        return FORK_S_PER_WORKER
    reader = profile.summary.reader
    measured = [f.pass_starts.first_s / f.config.num_workers
                for f in (reader.loaders if reader is not None else ())
                if f.config.num_workers and f.config.start_method == method
                and f.pass_starts is not None and f.pass_starts.first_s]
    return max(measured, default=SPAWN_S_PER_WORKER)


def _figures(profile, f: EvalLoader) -> Optional[dict]:
    """Per batch: making it (in the loop, or one worker's time), evaluating it, its CPU; the
    workers and the passes' time with them; the run's time saved (None: nothing to gain)."""
    loader = _loader_figures(profile, f)
    cpu_s = loader.producer.cpu_s_per_batch if loader is not None else None
    if f.workers:  # (a worker's own time per batch, where the workers' timing came back)
        make_s = loader.producer.s_per_batch if loader is not None else None
        if not make_s:
            return None
    else:
        make_s = f.read_s / f.batches
    eval_s = max(f.total_s - f.read_s, 0.0) / f.batches
    cores = profile.env.cpu.cores
    room = max(cores - 1, 1) if cores else 1  # the loop keeps one core evaluating
    share = min(cpu_s / make_s, 1.0) if cpu_s and make_s > 0 else 1.0
    cap = max(1, min(int(room / max(share, MIN_WORKER_CORES)), room * MAX_WORKERS_PER_CORE))
    wanted = math.ceil(make_s / eval_s) if eval_s > 0 else cap
    workers = max(1, min(wanted, cap))
    if workers <= f.workers:
        return None
    take_s = transfer_costs(profile.source.framework)[0]
    cpu_bound_s = (cpu_s or make_s * share) / room

    def pace(n: int) -> float:  # a batch's time, after a pass's first, with n workers
        return max(eval_s + take_s, make_s / n, cpu_bound_s)

    batch_s = pace(workers)
    now_s = pace(f.workers) if f.workers else make_s + eval_s
    if batch_s >= now_s:
        return None
    # each pass waits for its first batch as now (the workers start on it as the pass
    # does); the rest come at the new pace; the workers are forked once where kept, else
    # at every pass
    forks = (workers - f.workers) * (1 if profile.source.framework in KEEPS_WORKERS
                                     else f.passes)
    rest = f.batches - f.passes
    if f.workers:
        passes_s = f.total_s - rest * (now_s - batch_s)
    else:
        passes_s = f.passes * (make_s + take_s) + rest * batch_s
    start_s = _start_s_per_worker(profile, loader)
    passes_s += forks * start_s
    saved_s = f.total_s - passes_s
    if saved_s <= 0:
        return None
    duration_s = profile.summary.duration_s
    return {"loader": f.loader, "passes": f.passes, "batches": f.batches,
            "passes_s": f.total_s, "make_s_per_batch": make_s, "eval_s_per_batch": eval_s,
            "cpu_s_per_batch": cpu_s, "cores": cores, "current_workers": f.workers,
            "workers_wanted": wanted, "workers_cap": cap, "suggested_workers": workers,
            "predicted_batch_s": batch_s, "predicted_passes_s": passes_s,
            "cpu_bound": cpu_bound_s >= batch_s - 1e-12, "run_s": duration_s,
            "start_s_per_worker": start_s,
            "saved_s": saved_s, "saved_share": saved_s / duration_s,
            "run_speedup": duration_s / (duration_s - saved_s)}


def _evidence(f: EvalLoader, name: str, figures: dict) -> str:
    cpu = (f", {ms(figures['cpu_s_per_batch'])} of it CPU" if figures["cpu_s_per_batch"]
           else "")
    made = ("the loop made each batch itself in" if not f.workers
            else "its one worker made each batch in" if f.workers == 1
            else f"each of its {f.workers} workers made a batch in")
    return (f"{f.passes} pass{'es' if f.passes != 1 else ''} of {name} ran between training "
            f"steps: {f.batches:,} batches in {f.total_s:.2f} s, "
            f"{f.total_s / figures['run_s']:.0%} of the {figures['run_s']:.1f} s run; {made} "
            f"{ms(figures['make_s_per_batch'])}{cpu}, and the loop evaluated it in "
            f"{ms(figures['eval_s_per_batch'])}: it waited {f.wait_share:.0%} of the passes' "
            f"time. These passes are left out of the steps' figures.")


def _change(profile, f: EvalLoader, name: str, figures: dict) -> str:
    code = writer(profile)
    loader = _loader_figures(profile, f)
    config = loader.config if loader is not None else None
    keep = {"persistent_workers": True} if profile.source.framework in KEEPS_WORKERS else {}
    if config is None:
        return code.comment(f"give {name} num_workers={figures['suggested_workers']}"
                            + (" and persistent_workers=True" if keep else ""))
    line = eval_loader(code.loader(config, num_workers=figures["suggested_workers"], **keep))
    return f"{code.comment(f'the DataLoader the evaluation loop iterates ({name})')}\n{line}"


def _loader_figures(profile, f: EvalLoader):
    """The reader figures of the evaluation loader `f` (None: none)."""
    reader = profile.summary.reader
    return reader.of(f.loader) if reader is not None else None


def eval_loader(line: str) -> str:
    """A DataLoader's construction (CodeWriter.loader) named as the evaluation's."""
    return "eval_loader = " + line[len("loader = "):] if line.startswith("loader = ") else line


def _gain(figures: dict) -> str:
    bound = ("the cores bound it" if figures["cpu_bound"] else
             f"{figures['suggested_workers']} worker(s) making batches while it evaluates")
    return (f"the run about {figures['run_speedup']:.2f}x shorter ({figures['run_s']:.1f} s "
            f"-> {figures['run_s'] - figures['saved_s']:.1f} s): the passes "
            f"{figures['passes_s']:.2f} s -> {figures['predicted_passes_s']:.2f} s, "
            f"{ms(figures['predicted_batch_s'])} per batch ({bound}); the training steps "
            f"unchanged")
