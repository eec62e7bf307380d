"""What bench_torch_overhead.py and bench_paddle_overhead.py share: a block of training
steps run under the probes a `paddletune profile` session runs (session.session_probes,
writing a real profile file, with the framework source's hooks installed, and the session's
own step counter: session.StepCounter, without a limit), the interleaving
of bare and profiled blocks in one process, and the table and JSON line they print.

A job is any object with `steps(n) -> seconds per step`; a source is an eager framework's
Source (sources/torch, sources/paddle), made fresh for each profiled block."""

import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from paddletune.probes.base import Clock
from paddletune.profile import ProfileWriter, header_record
from paddletune.session import StepCounter, session_probes


class ProfiledBlock(NamedTuple):
    """What `profiled` yields: the source, and `settle()`, which writes what the block's
    probes queued (the writer's flush, on the calling thread)."""

    source: object
    settle: Callable[[], None]


@contextmanager
def profiled(make_source: Callable, path: Path, argv0: str, ops: bool = False):
    """Run the block under a profiling session's default probes, writing a profile to
    `path`; yields a ProfiledBlock."""
    clock = Clock()
    writer = ProfileWriter(path, clock=clock.now)
    source = make_source()
    source.begin()
    writer.submit(header_record({"argv": [argv0]}, {}, {}, time.time(), source.info()))
    active = session_probes(writer.submit, clock, source, 0.5, ops=ops)
    for p in active:
        p.start()
    counter = count_steps(source, writer)
    try:
        with source.running():
            yield ProfiledBlock(source, writer.flush)
    finally:
        counter.close()
        for p in active:
            p.stop()
        writer.finish()


def count_steps(source, writer):
    """The session's own step_end subscriber, as `paddletune profile` subscribes it after
    its probes (session.StepCounter, without a step limit); its Subscription."""
    return source.subscribe("step_end", StepCounter(None, None, writer.keep_up,
                                                    lambda: None).count)


class LoopJob:
    """A training loop over `self.loader`; a framework's job defines `train_step(x, y)`."""

    loader = None

    def train_step(self, x, y):
        raise NotImplementedError

    def steps(self, n: int) -> float:
        """Train `n` steps (new DataLoader passes as needed); seconds per step."""
        done = 0
        t0 = time.perf_counter()
        while done < n:
            for x, y in self.loader:
                self.train_step(x, y)
                done += 1
                if done >= n:
                    break
        return (time.perf_counter() - t0) / n


class Interleaved(NamedTuple):
    """Seconds per step of each round's bare and profiled blocks, each round's profiled /
    bare ratio, the process's CPU seconds per step in each block (every thread's: the
    probes' samplers and the profile writer's included; other jobs on a shared machine move
    it less than the wall time, though still by 2-5x between runs on the loaded 2-core VM),
    and of those the training thread's (the rest: the framework's reading threads, the
    probes' samplers, the profile's writer)."""

    bare: List[float]
    profiled: List[float]
    ratios: List[float]
    bare_cpu: List[float]
    profiled_cpu: List[float]
    bare_main: List[float]
    profiled_main: List[float]

    @property
    def median_bare(self) -> float:
        return statistics.median(self.bare)

    @property
    def median_profiled(self) -> float:
        return statistics.median(self.profiled)

    @property
    def overhead(self) -> float:
        """The ratio of the medians, less 1."""
        return self.median_profiled / self.median_bare - 1

    @property
    def paired_overhead(self) -> float:
        """The median of the rounds' paired ratios, less 1."""
        return statistics.median(self.ratios) - 1

    @property
    def cost_per_step_s(self) -> float:
        return self.median_profiled - self.median_bare

    @property
    def cost_per_step_by_minima_s(self) -> float:
        """The fastest profiled block less the fastest bare one: the cost with the least
        of other jobs' load in either (on a shared machine, noise only ever adds time)."""
        return min(self.profiled) - min(self.bare)

    @property
    def cpu_cost_per_step_s(self) -> float:
        return statistics.median(self.profiled_cpu) - statistics.median(self.bare_cpu)

    @property
    def main_cpu_cost_per_step_s(self) -> float:
        """The training thread's share of cpu_cost_per_step_s (the probes' callbacks, the
        source's hooks)."""
        return statistics.median(self.profiled_main) - statistics.median(self.bare_main)

    @property
    def other_cpu_cost_per_step_s(self) -> float:
        """The other threads' share (the samplers, the writer, the hooks in the framework's
        own threads): the medians of each block's process CPU less its training thread's."""
        return (statistics.median(c - m for c, m in zip(self.profiled_cpu, self.profiled_main))
                - statistics.median(c - m for c, m in zip(self.bare_cpu, self.bare_main)))


def interleave(job, rounds: int, steps: int, under_probes: Callable) -> Interleaved:
    """`rounds` rounds of a bare block and a profiled block of `steps` steps each, their
    order alternating between rounds; `under_probes(round)` is the profiled block's context."""
    out = Interleaved([], [], [], [], [], [], [])
    for r in range(rounds):
        order: Tuple[str, ...] = ("bare", "profiled") if r % 2 == 0 else ("profiled", "bare")
        this: Dict[str, float] = {}
        for kind in order:
            if kind == "bare":
                this[kind], cpu, main = _block(job, steps)
                out.bare_cpu.append(cpu)
                out.bare_main.append(main)
            else:
                with under_probes(r) as block:
                    job.steps(SETTLE_STEPS)  # the session's own first records (its header,
                    block.settle()  # the program, the loader's start): written untimed
                    this[kind], cpu, main = _block(job, steps, block.settle)
                out.profiled_cpu.append(cpu)
                out.profiled_main.append(main)
        out.bare.append(this["bare"])
        out.profiled.append(this["profiled"])
        out.ratios.append(this["profiled"] / this["bare"])
    return out


SETTLE_STEPS = 10  # steps a profiled block runs, and writes, before its timed steps


def _block(job, steps: int, settle: Optional[Callable[[], None]] = None
           ) -> Tuple[float, float, float]:
    """(wall seconds per step, the process's CPU seconds per step, the training thread's) of
    `steps` steps (run in this thread), and of `settle()` after them: the profile writer
    encoding and writing the block's records. A session's writer does that every 0.5 s on
    its own thread, holding the GIL the loop needs; a block shorter than that (the near-empty
    step's) would otherwise leave it all to the session's end, outside the timing (before
    2026-11-29 it did: about 64% of what profiling costs the near-empty step, by callgrind,
    went unmeasured). The session's own first records are written before (SETTLE_STEPS):
    once a job, they are no cost per step."""
    cpu0, main0 = time.process_time(), time.thread_time()
    wall = job.steps(steps)
    if settle is not None:
        t0 = time.perf_counter()
        settle()
        wall += (time.perf_counter() - t0) / steps
    return wall, (time.process_time() - cpu0) / steps, (time.thread_time() - main0) / steps


def print_table(title: str, mlp: Interleaved, tiny: Interleaved, tiny_steps: int,
                target: float = 0.01):
    print(title)
    print(f"{'configuration':<14}{'median step (ms)':>18}{'min':>10}{'max':>10}")
    for kind, values in (("bare", mlp.bare), ("profiled", mlp.profiled)):
        print(f"{kind:<14}{statistics.median(values) * 1e3:>18.3f}"
              f"{min(values) * 1e3:>10.3f}{max(values) * 1e3:>10.3f}")
    spread = [r - 1 for r in mlp.ratios]
    print(f"overhead: {mlp.overhead:+.2%} (ratio of medians), {mlp.paired_overhead:+.2%} "
          f"(median of the rounds' paired ratios, which range {min(spread):+.2%} to "
          f"{max(spread):+.2%}); target < {target:.0%}")
    per_step = tiny.cost_per_step_s
    print(f"near-empty step, {len(tiny.bare)} rounds x {tiny_steps} steps per block: bare "
          f"median {tiny.median_bare * 1e6:.0f} us (min {min(tiny.bare) * 1e6:.0f}, max "
          f"{max(tiny.bare) * 1e6:.0f}), profiled {tiny.median_profiled * 1e6:.0f} us (min "
          f"{min(tiny.profiled) * 1e6:.0f}, max {max(tiny.profiled) * 1e6:.0f})")
    print(f"absolute cost per step: {per_step * 1e6:.1f} us = "
          f"{per_step / mlp.median_bare:.2%} of the MLP step (medians); "
          f"{tiny.cost_per_step_by_minima_s * 1e6:.1f} us = "
          f"{tiny.cost_per_step_by_minima_s / min(mlp.bare):.2%} of the fastest MLP step "
          f"(minima)")
    cpu = tiny.cpu_cost_per_step_s
    print(f"CPU cost per step (the process's CPU time, every thread's, on the near-empty "
          f"step): {cpu * 1e6:.1f} us = {cpu / mlp.median_bare:.2%} of the MLP step (the "
          f"training thread {tiny.main_cpu_cost_per_step_s * 1e6:+.1f} us, the other threads "
          f"{tiny.other_cpu_cost_per_step_s * 1e6:+.1f} us); MLP blocks: "
          f"{mlp.cpu_cost_per_step_s * 1e6:+.1f} us CPU per step")


def json_figures(mlp: Interleaved, tiny: Interleaved, target: float = 0.01) -> dict:
    share = tiny.cost_per_step_s / mlp.median_bare
    return {"bare_step_ms": round(mlp.median_bare * 1e3, 4),
            "profiled_step_ms": round(mlp.median_profiled * 1e3, 4),
            "overhead": round(mlp.overhead, 5), "paired_overhead": round(mlp.paired_overhead, 5),
            "paired_min": round(min(mlp.ratios) - 1, 5),
            "paired_max": round(max(mlp.ratios) - 1, 5),
            "cost_per_step_us": round(tiny.cost_per_step_s * 1e6, 2),
            "cost_share_of_mlp_step": round(share, 5),
            "cost_per_step_by_minima_us": round(tiny.cost_per_step_by_minima_s * 1e6, 2),
            "cost_share_by_minima": round(tiny.cost_per_step_by_minima_s / min(mlp.bare), 5),
            "cpu_cost_per_step_us": round(tiny.cpu_cost_per_step_s * 1e6, 2),
            "cpu_cost_share_of_mlp_step": round(tiny.cpu_cost_per_step_s / mlp.median_bare, 5),
            "main_thread_cpu_cost_per_step_us": round(tiny.main_cpu_cost_per_step_s * 1e6, 2),
            "other_threads_cpu_cost_per_step_us": round(tiny.other_cpu_cost_per_step_s * 1e6,
                                                        2),
            "mlp_cpu_cost_per_step_us": round(mlp.cpu_cost_per_step_s * 1e6, 2),
            "target": target, "within_target": share < target}
