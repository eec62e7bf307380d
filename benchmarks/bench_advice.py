"""Is the advice right? Mis-configured jobs (and well-tuned ones) profiled, advised, changed the
way the top advice says, and measured: Fluid jobs on the embedded runtime, and one PyTorch and
one Paddle 3 job (their frameworks installed: the test extra).

For each job:
  1. `paddletune profile` runs it (a trial: tune's own runner) and `advise` ranks the advice;
  2. the top advice (the first that is not info) must name the job's real bottleneck (one of
     the ids the job lists); a well-tuned job must get no high-severity advice;
  3. the top advice is applied: through the override channel (PADDLETUNE_OVERRIDES, FLAGS,
     thread variables: the same mapping `tune` uses for advice, tune/proposals.py) or, for a
     code change, the job's own flag that makes it (each job says how);
  4. the job and the changed job run alternately, --rounds times each: the measured speedup
     (samples/s), or for memory advice the measured peak against the predicted one;
  5. unless --no-tune, `paddletune tune` (--budget each) first finds its best over the job's
     knobs, and that setting runs in the same rounds as the job and the change (step 4): the
     advice's gain as a share of tune's ((advice - 1) / (tune - 1)).
Targets (issue 26): the right bottleneck on every job; predicted within 15% of measured. A
card that states a lower bound (">="), or whose gain names `--speed-test` as what measures
it, makes the job profiled once more with it, as a user would, and the card on that profile
(a reader thread timed alone, the step without it, the step with one math thread) is the one
applied and judged: where it states a point, within 15%; where a lower bound, not above the
measured by more than 15%, nor the measured above its upper bound by more ("1.91-4.22");
at least 80% of tune's gain; no high-severity advice on a well-tuned job. The `range` column
is the range the card states (advisors/ranges.py: the model's error at its confidence, widened
by the run's spread, or a rule's own bounds; for memory advice its step peak range over the
predicted peak) and whether the measured speedup (or peak) fell in it;
`rounds` the lowest and highest of the rounds' own speedups (the advised run over the
baseline run of the same round): how far the measurement itself moves.

    python benchmarks/bench_advice.py                     # every job, with tune (~11 min)
    python benchmarks/bench_advice.py --jobs sync-input,gil-thread --no-tune --rounds 3

Prints a table and one JSON line (the last line of output). Run it alone on the machine: the
jobs' speed depends on the cores being free.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paddletune.advisors import advise  # noqa: E402
from paddletune.advisors.base import post_pass  # noqa: E402
from paddletune.advisors.ranges import within  # noqa: E402
from paddletune.profile import load  # noqa: E402
from paddletune.tune import space as sp  # noqa: E402
from paddletune.tune.proposals import _change as advice_change  # noqa: E402
from paddletune.tune.search import TuneOptions, Tuner  # noqa: E402
from paddletune.tune.trials import TrialRunner  # noqa: E402

PIPELINE = "examples/input_pipeline.py"
LONG = ["--steps", "100000", "--log-every", "0"]
MLP_MEM = ["--model", "mlp", "--loader", "--batches", "256", "--steps", "100000"]
SEQ = ["--model", "seq", "--loader", "--batches", "32", "--len", "16", "--long-len", "1024",
       "--long-every", "25", "--steps", "100000"]
PREDICTION_TOLERANCE = 0.15
TUNE_SHARE = 0.80


@dataclass
class Job:
    """One job: what is wrong with it (`wrong`), the advice ids that name it (`expect`;
    empty: a well-tuned job), and how its top advice is applied when that needs a code change
    (`code_change(advice) -> (args, env)`; None: through the override channel)."""

    name: str
    wrong: str
    script: str
    args: List[str]
    expect: Tuple[str, ...]
    env: dict = field(default_factory=dict)
    code_change: Optional[Callable] = None
    metric: str = "speed"  # speed | peak (memory advice: the pool's peak, predicted vs measured)
    tune_specs: Tuple[str, ...] = ()
    steps: int = 300
    keep_batch_size: bool = True


def _pipeline_loader(advice, base_args):
    """The sync loop rewritten as the advice says: a DataLoader with its worker count, and the
    BLAS threads its note gives."""
    f = advice.figures
    args = [a for a in base_args]
    i = args.index("--reader")
    args[i + 1] = "loader"
    args += ["--num-workers", str(f["workers"])]
    return args, _blas_env(f)


def _blas_env(f) -> dict:
    blas, cores, workers = f.get("blas_threads"), f.get("cores"), f.get("workers") or 0
    if blas and blas >= 2 and cores and max(workers, 1) + blas > cores:
        return {f.get("blas_env") or "OPENBLAS_NUM_THREADS": str(max(1, int(cores) - workers))}
    return {}


def _fused_loss(advice, base_args):
    return [a if a != "unfused" else "fused" for a in base_args], {}


def _fetch_less(advice, base_args):
    every = str((advice.figures or {}).get("every") or 100)
    return base_args + ["--fetch-every", every], {}


JOBS = [
    Job("sync-input", "a synchronous loop preparing each batch in Python between runs",
        PIPELINE, ["--reader", "sync"] + LONG, ("input-bound",),
        code_change=lambda a: _pipeline_loader(a, ["--reader", "sync"] + LONG)),
    Job("starved-thread", "an async reader whose one Python thread cannot keep up",
        PIPELINE, ["--reader", "loader", "--num-workers", "0"] + LONG, ("reader-starved",),
        tune_specs=("only=num_workers,capacity,blas_threads",)),
    Job("starved-workers", "one worker process, slower than the step",
        PIPELINE, ["--reader", "loader", "--num-workers", "1"] + LONG, ("reader-starved",),
        tune_specs=("only=num_workers,capacity,blas_threads",)),
    Job("gil-thread", "a reader thread that keeps the queue full but holds the GIL",
        PIPELINE, ["--reader", "loader", "--num-workers", "0", "--hidden", "1024,512",
                   "--decode-us", "8"] + LONG, ("reader-thread-gil", "reader-starved"),
        tune_specs=("only=num_workers,blas_threads",)),
    Job("blas-workers", "BLAS threads and reader workers outnumber the cores",
        PIPELINE, ["--reader", "loader", "--num-workers", "2"] + LONG,
        ("cpu-oversubscribed", "reader-starved"),
        tune_specs=("only=num_workers,blas_threads",)),
    Job("gc-off", "garbage collection off under a memory cap: every temporary lives to the "
        "step's end", "tests/memjob.py", MLP_MEM, ("gc-off",),
        env={"FLAGS_eager_delete_tensor_gb": "-1", "FLAGS_cpu_memory_limit_mb": "22"},
        metric="peak"),
    Job("oom-batch", "a batch too large for the memory cap",
        "tests/memjob.py", ["--model", "mlp", "--batches", "4096", "--steps", "100000"],
        ("batch-size-memory",), env={"FLAGS_cpu_memory_limit_mb": "32"}, metric="peak",
        keep_batch_size=False,
        code_change=lambda a: (["--model", "mlp", "--batches",
                                str(a.figures.get("largest_safe_batch") or 64),
                                "--steps", "100000"], {})),
    Job("unfused-loss", "fc(act='softmax') + cross_entropy instead of the fused op",
        "benchmarks/advice_job.py", ["--loss", "unfused", "--classes", "1000", "--hidden",
                                     "256", "--steps", "100000"],
        ("unfused-softmax-cross-entropy",),
        code_change=lambda a: _fused_loss(a, ["--loss", "unfused", "--classes", "1000",
                                              "--hidden", "256", "--steps", "100000"])),
    Job("scope-drops", "the ParallelExecutor drops its local scopes every 4 steps, and each drop "
        "costs 10 ms (tests/dropjob.py: a spin-wait standing in for a device synchronisation; "
        "the NumPy runtime's own drop is nearly free)", "tests/dropjob.py",
        ["--drop", "4", "--drop-ms", "10", "--spin", "--step-ms", "0", "--batch-size", "128",
         "--in-dim", "256", "--hidden", "512"], ("drop-scope",), steps=600,
        tune_specs=("only=num_iteration_per_drop_scope",)),
    Job("fetch-heavy", "a large activation fetched every step",
        "benchmarks/advice_job.py", ["--fetch", "hidden", "--hidden", "4096",
                                     "--batch-size", "512", "--in-dim", "64",
                                     "--steps", "100000"], ("large-fetch",),
        code_change=lambda a: _fetch_less(a, ["--fetch", "hidden", "--hidden", "4096",
                                              "--batch-size", "512", "--in-dim", "64",
                                              "--steps", "100000"])),
    Job("long-sequences", "a few very long batches set the step time and the peak",
        "tests/memjob.py", SEQ, ("long-sequence-outliers", "long-batch-memory"),
        code_change=lambda a: (SEQ + ["--max-len", "64"], {})),
    Job("torch-input", "PyTorch: a DataLoader with num_workers=0 over per-sample Python work",
        "examples/torch/input_heavy.py", ["--steps", "100000"], ("reader-starved",),
        tune_specs=("only=num_workers,prefetch_factor,persistent_workers,blas_threads",)),
    Job("paddle-input", "Paddle 3: a DataLoader with num_workers=0 over per-sample work",
        "examples/paddle/input_heavy.py", ["--steps", "100000"], ("reader-starved",),
        env={"GLOG_minloglevel": "2"},
        tune_specs=("only=num_workers,prefetch_factor,persistent_workers,blas_threads",)),
    Job("tuned-mlp", "none: a compute-bound MLP", "examples/mlp.py",
        ["--steps", "100000", "--log-every", "0"], ()),
    Job("tuned-pipeline", "none: two workers and one BLAS thread feed the step", PIPELINE,
        ["--reader", "loader", "--num-workers", "2"] + LONG, (),
        env={"OPENBLAS_NUM_THREADS": "1"}),
    Job("tuned-loss", "none: the fused loss, only the loss fetched, batches in memory",
        "benchmarks/advice_job.py", ["--steps", "100000"], ()),
]


@dataclass
class Result:
    job: str
    top: Optional[str]
    severity: Optional[str]
    right: bool
    predicted: Optional[float] = None
    measured: Optional[float] = None
    tune: Optional[float] = None
    high_on_tuned: int = 0
    note: str = ""
    metric_peak: bool = False  # predicted/measured compare peaks, not speedups
    lower_bound: bool = False  # the advice predicts "at least" its speedup
    upper: Optional[float] = None  # a lower bound's upper one, from a --speed-test profile
    stated: Optional[tuple] = None  # the card's range (low, high or None)
    rounds: List[float] = field(default_factory=list)  # each round's advised / base

    @property
    def prediction_error(self) -> Optional[float]:
        if self.predicted is None or self.measured is None:
            return None
        return self.predicted / self.measured - 1

    @property
    def prediction_ok(self) -> Optional[bool]:
        """Within PREDICTION_TOLERANCE of the measured speedup; a lower bound: not above it
        by more than that, and its upper bound (when measured) not below it by more."""
        err = self.prediction_error
        if err is None:
            return None
        if not self.lower_bound:
            return abs(err) <= PREDICTION_TOLERANCE
        below_upper = self.upper is None or \
            self.measured <= self.upper * (1 + PREDICTION_TOLERANCE)
        return err <= PREDICTION_TOLERANCE and below_upper

    @property
    def in_range(self) -> Optional[bool]:
        """The measured speedup within the range the card states (advisors/ranges.py); for
        memory advice, the measured peak within the card's peak range (both over the
        predicted peak)."""
        return within(self.stated, self.measured)

    @property
    def tune_share(self) -> Optional[float]:
        if self.measured is None or self.tune is None or self.tune < 1.05:
            return None
        return (self.measured - 1) / (self.tune - 1)


def top_advice(advices):
    return next((a for a in advices if a.severity != "info"), None)


def run_job(job: Job, args, workdir: Path) -> Result:
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    env.update(job.env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "examples"),
                                         env.get("PYTHONPATH", "")])
    runner = TrialRunner(str(REPO / job.script), job.args, workdir / job.name, env)
    try:
        return _run(job, args, runner, env, workdir)
    finally:
        runner.close()


def _run(job, args, runner, env, workdir) -> Result:
    base = runner.run({}, {}, job.steps, 300, "baseline", "baseline")
    if base.profile is None or not Path(base.profile).exists():
        return Result(job.name, None, None, False, note=f"no profile: {base.message}")
    profile = load(base.profile)
    advices = post_pass(advise(profile), profile)  # what `paddletune advise` prints
    top = top_advice(advices)
    if not job.expect:
        high = [a.id for a in advices if a.severity == "high"]
        return Result(job.name, top.id if top else None, top.severity if top else None,
                      not high, high_on_tuned=len(high),
                      note=f"high: {', '.join(high)}" if high else "")
    result = Result(job.name, top.id if top else None, top.severity if top else None,
                    top is not None and top.id in job.expect,
                    lower_bound=top is not None and _is_lower_bound(top))
    if top is None:
        result.note = "no advice"
        return result
    if result.lower_bound or _asks_for_speed_test(top):  # follow it, as a user would
        measured = _speed_test_card(job, top, runner)
        if measured is not None:
            top, profile = measured  # that card's change, its figures
            result.lower_bound = _is_lower_bound(top)
            result.upper = (top.figures or {}).get("speedup_max")
            result.note = f"{top.id} on a --speed-test profile"
    changed = _changed_runner(job, top, profile, runner, env, workdir)
    if changed is None:
        result.note = f"{top.id}: no way to apply it"
        return result
    new_runner, setting_env = changed
    tuned_env = _tune(job, runner, args) if args.tune and job.tune_specs else None
    if job.metric == "peak":
        _measure_peak(result, top, new_runner, setting_env, job, args)
    else:
        _measure_speed(result, top, runner, new_runner, setting_env, tuned_env, job, args)
    if new_runner is not runner:
        new_runner.close()
    return result


SPEED_TEST_STEPS = 30


def _speed_test_card(job, top, runner):
    """What the advice says when asked for it: a lower bound's card names `paddletune profile
    --speed-test`, which measures the step without the contention (and times a reader
    thread alone). (the card on that profile that names the job's bottleneck: `top`'s id
    first, else any the job expects; that profile), or None."""
    runner.speed_test = SPEED_TEST_STEPS
    try:
        trial = runner.run({}, {}, max(job.steps, 6 * SPEED_TEST_STEPS), 300, "speed-test",
                           "speed-test")
    finally:
        runner.speed_test = None
    if trial.profile is None or not Path(trial.profile).exists():
        return None
    profile = load(trial.profile)
    cards = {a.id: a for a in post_pass(advise(profile), profile)}
    for wanted in (top.id,) + tuple(job.expect):
        if wanted in cards:
            return cards[wanted], profile
    return None


def _is_lower_bound(card) -> bool:
    return card.expected_gain.startswith("at least")


def _asks_for_speed_test(card) -> bool:
    """A card whose gain names `--speed-test` as the run that measures it (the thread cards
    without a prediction: its one-math-thread window; reader-thread-gil's estimate: the step
    without the thread), on a profile without one: a user would run it."""
    return "--speed-test" in card.expected_gain


def _changed_runner(job, top, profile, runner, env, workdir):
    """(the runner of the changed job, the env that changes it), or None."""
    if job.code_change is not None:
        new_args, new_env = job.code_change(top)
        return TrialRunner(str(REPO / job.script), new_args, workdir / f"{job.name}-advised",
                           env), new_env
    space = sp.build_space(profile, keep_batch_size=job.keep_batch_size)
    change = {k: v for k, v in advice_change(top.id, top.figures or {}).items()
              if k in space.knobs and v is not None}
    if not change:
        return None
    setting = sp.merged({}, change, space)
    return runner, sp.to_env(setting, space)


def _measure_speed(result, top, runner, new_runner, new_env, tuned_env, job, args):
    """The job, the advised change and (with `tuned_env`) tune's best, run in turn
    --rounds times: each speedup over the same baseline rounds."""
    contenders = [("base", runner, {}), ("advised", new_runner, new_env)]
    if tuned_env is not None:
        contenders.append(("tune", runner, tuned_env))
    rates = {name: [] for name, _, _ in contenders}
    for _ in range(args.rounds):
        this_round = {}
        for which, r, e in contenders:
            t = r.run({}, e, job.steps, 300, which, which)
            if t.ok:
                rates[which].append(t.samples_per_s)
                this_round[which] = t.samples_per_s
        if "base" in this_round and "advised" in this_round:
            result.rounds.append(this_round["advised"] / this_round["base"])

    def speedup(which):
        if not rates["base"] or not rates.get(which):
            return None
        return (sum(rates[which]) / len(rates[which])) / \
            (sum(rates["base"]) / len(rates["base"]))

    result.measured, result.tune = speedup("advised"), speedup("tune")
    result.predicted = top.expected_speedup
    result.stated = top.expected_range


def _measure_peak(result, top, new_runner, new_env, job, args):
    """Memory advice: the changed job's measured step peak against the advice's predicted one
    (their ratio stands in the speedup columns as measured / predicted); without a predicted
    peak, whether the changed job ran and its peak against the capacity."""
    t = new_runner.run({}, new_env, 20, 300, "advised", "advised")
    f = top.figures or {}
    predicted = f.get("predicted_peak_bytes")
    if not t.ok:
        result.note = f"the changed job failed: {t.status} {t.message or ''}"[:120]
        return
    memory = load(t.profile).summary.memory
    peak = memory.step_peak_bytes if memory is not None else None
    result.metric_peak = True
    if predicted and peak:
        result.predicted, result.measured = 1.0, peak / predicted
        result.note = f"step peak {peak / 2**20:.1f} MiB, predicted {predicted / 2**20:.1f} MiB"
        if top.expected_peak_range is not None:
            result.stated = tuple(x / predicted for x in top.expected_peak_range)
            low, high = top.expected_peak_range
            result.note += f" ({low / 2**20:.1f}-{high / 2**20:.1f})"
    elif peak:
        result.note = (f"the changed job ran: step peak {peak / 2**20:.1f} MiB of "
                       f"{memory.capacity_bytes / 2**20:.0f} MiB (no peak predicted)")


def _tune(job, runner, args) -> Optional[dict]:
    """`paddletune tune`'s search on the job: the environment of the best setting it found
    (measured again beside the advice, not by its own final pairs: the same baseline
    rounds for both)."""
    options = TuneOptions(budget_s=args.budget, keep_batch_size=job.keep_batch_size,
                          specs=job.tune_specs)
    tuner = Tuner(runner, options).run()
    return sp.to_env(tuner.incumbent, tuner.space)


def fmt(x, spec=".2f", empty="-"):
    return empty if x is None else format(x, spec)


def _pred(r: Result) -> str:
    if r.lower_bound and r.upper is not None:
        return f"{fmt(r.predicted)}-{fmt(r.upper)}"
    return (">=" if r.lower_bound else "") + fmt(r.predicted)


def _stated(r: Result) -> str:
    if r.stated is None:
        return "-"
    low, high = r.stated
    return f"{fmt(low)}-{fmt(high, empty='')}" + ("" if r.in_range is None else
                                                 " in" if r.in_range else " OUT")


def _rounds(r: Result) -> str:
    """The measured speedup's spread: the lowest and highest of the rounds' own."""
    if len(r.rounds) < 2:
        return "-"
    return f"{min(r.rounds):.2f}-{max(r.rounds):.2f}"


def print_table(results: List[Result]):
    print(f"{'job':16} {'top advice':32} {'right':5} {'pred':>9} {'meas':>6} {'rounds':>9} "
          f"{'err':>6} {'range':>14} {'tune':>6} {'share':>6}  note")
    for r in results:
        print(f"{r.job:16} {(r.top or '-') + ' (' + (r.severity or '-') + ')':32} "
              f"{'yes' if r.right else 'NO':5} {_pred(r):>9} {fmt(r.measured):>6} "
              f"{_rounds(r):>9} {fmt(r.prediction_error, '+.0%'):>6} {_stated(r):>14} "
              f"{fmt(r.tune):>6} {fmt(r.tune_share, '.0%'):>6}  {r.note}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(j.name for j in JOBS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=90.0, help="tune's budget per job, s")
    parser.add_argument("--no-tune", dest="tune", action="store_false")
    parser.add_argument("--keep", help="keep the trials' profiles in this folder")
    args = parser.parse_args(argv)
    wanted = args.jobs.split(",")
    unknown = [n for n in wanted if n not in {j.name for j in JOBS}]
    if unknown:
        parser.error(f"unknown job(s) {', '.join(unknown)}; known: "
                     f"{', '.join(j.name for j in JOBS)}")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_advice_"))
    results = []
    t0 = time.monotonic()
    for job in JOBS:
        if job.name in wanted:
            print(f"[{job.name}] {job.wrong}", flush=True)
            results.append(run_job(job, args, workdir))
            print_table(results[-1:])
    print()
    print_table(results)
    speed = [r for r in results if r.prediction_error is not None]
    shares = [r.tune_share for r in results if r.tune_share is not None]
    summary = {
        "bench": "advice", "jobs": len(results), "seconds": round(time.monotonic() - t0),
        "right": sum(r.right for r in results),
        "within_15pct": sum(bool(r.prediction_ok) for r in speed),
        "predicted": len(speed),
        "in_range": sum(bool(r.in_range) for r in results),
        "ranged": sum(r.in_range is not None for r in results),
        "tune_share_ok": sum(s >= TUNE_SHARE for s in shares), "tune_compared": len(shares),
        "results": [{"job": r.job, "top": r.top, "severity": r.severity, "right": r.right,
                     "predicted": r.predicted, "lower_bound": r.lower_bound,
                     "upper_bound": r.upper,
                     "range": list(r.stated) if r.stated is not None else None,
                     "measured": r.measured, "measured_rounds": r.rounds, "tune": r.tune,
                     "note": r.note} for r in results]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
