"""How many producers (DataLoader worker processes) a job's input needs, how many its cores can
run, and the step time they give: shared by the reader rules (#2, #5), which size the workers
of an existing DataLoader, and the input rule (#1), which sizes those of the DataLoader that
replaces a synchronous feeding loop.

The predicted step is the slowest of three bounds:
- the step without data (the speed test's ceiling, else the cycle less the wait for data);
- one producer's time for a step's batches divided among the workers;
- the CPU the trainer and the producers need per step, over the cores other processes leave
  (time-sharing two cores between a trainer and two busy workers cannot beat that).
"""

import math
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from ..sources.code import CodeWriter
from .facts import FreeCores, cpu_facts, ms

MIN_WORKER_CORES = 0.1  # a worker mostly waiting (I/O, sleep) still needs this much of a core
MAX_WORKERS_PER_CORE = 4  # and no more worker processes than this per core (memory, switches)
MIN_WORKER_GAIN = 1.05  # a worker beyond the cores' count: only for a step this much faster
BLAS_BUSY_CORES = 1.2  # a trainer busier than this with BLAS threads > 1: say so
SMALL_GAIN, LARGE_GAIN = 1.05, 1.2  # predicted speedups: below SMALL low severity, below
# LARGE at most medium
CROWD_SLACK = 0.25  # math threads + busy worker cores over the cores by more: crowded
SHARED_CORE_USE = 0.85  # the share of the cores a trainer and its workers time-sharing them
# keep busy (bench_advice's sync-input job on 2 cores: 7.1 ms of CPU per 4.2 ms step)
# what moving a batch through a framework's worker processes costs on top of making it, per
# batch: (the trainer's side, taking it; the worker's, sending it), CPU seconds. PyTorch
# passes each tensor's shared memory by file descriptor: a 32-sample, two-tensor batch cost
# the trainer 0.55-0.76 ms and a worker 0.96-1.32 ms more than making it in the trainer
# (benchmarks/bench_worker_transfer.py, 2-core VM, 2026-11-29, another job beside it). Other
# frameworks: not counted here (the runtime's and Paddle's trainer side is about 0.15 ms:
# reader.WORKER_BATCH_S, counted where a reader thread's work moves to a worker).
WORKER_TRANSFER_S = {"torch": (0.00075, 0.0010)}


@dataclass(frozen=True)
class ProducerCost:
    """What one step's batches cost one producer.

    wall_s     its time making them, once it runs on a core of its own
    cpu_s      its CPU time for them (0: not measured)
    cpu_share  cpu_s / wall_s: the share of a core one producer keeps busy (None: unknown)
    """

    wall_s: float
    cpu_s: float
    cpu_share: Optional[float]

    @property
    def cores_each(self) -> float:
        """The cores one producer needs (at least MIN_WORKER_CORES; a whole one if unknown)."""
        return max(self.cpu_share if self.cpu_share is not None else 1.0, MIN_WORKER_CORES)

    @property
    def cpu_per_step_s(self) -> float:
        """The CPU the producers spend per step, whoever makes the batches."""
        return self.cpu_s or self.wall_s * self.cores_each


def transfer_costs(framework: str) -> Tuple[float, float]:
    """What moving a batch through `framework`'s worker processes costs on top of making it:
    (the trainer's side, taking it; the worker's, sending it), CPU seconds (WORKER_TRANSFER_S;
    (0, 0) where not measured)."""
    return WORKER_TRANSFER_S.get(framework, (0.0, 0.0))


def with_sending(cost: ProducerCost, sending_s: float) -> ProducerCost:
    """`cost` with a worker's sending of a step's batches added (its CPU, and its time)."""
    if not sending_s:
        return cost
    wall_s = cost.wall_s + sending_s
    cpu_s = cost.cpu_s + sending_s if cost.cpu_s else 0.0
    share = cpu_s / wall_s if cpu_s and wall_s else cost.cpu_share
    return ProducerCost(wall_s=wall_s, cpu_s=cpu_s, cpu_share=share)


@dataclass(frozen=True)
class WorkerSizing:
    """The producers a step needs and the cores allow.

    needed        producers that would make a step's batches within the step without data
    cap           producers the cores run (room_cores / a producer's share, rounded)
    workers       min(needed, cap)
    room_cores    the cores the producers can use (None: the cores unknown)
    widened       room_cores counts a trainer that mostly waits lending its core
    cpu_bound_s   the CPU the trainer and the producers need per step over the cores other
                  processes leave (None: the cores unknown)
    predicted_s   the step with `workers` producers (never slower than now)
    free_s        the step without data it assumes
    busy_cores    the cores the workers keep busy (worker_busy_cores)
    producing     the producers' worth of batches the workers make (_producing: fewer than
                  `workers` where they time-share the room)
    shared        room_cores is the job's fair share of the cores other processes keep
                  busy (fair_share_cores), more than they leave: each producer wants less
                  than its part, so their load does not hold it back
    usable_cores  the cores the trainer and its producers get beside other processes: those
                  left, or the fair share where `shared` (None: the cores unknown)
    """

    needed: int
    cap: int
    workers: int
    room_cores: Optional[float]
    widened: bool
    cpu_bound_s: Optional[float]
    predicted_s: float
    free_s: float
    busy_cores: float
    producing: float
    shared: bool = False
    usable_cores: Optional[float] = None

    @property
    def cpu_bound(self) -> bool:
        """The cores, not the producers' count, set the predicted step."""
        return self.cpu_bound_s is not None and self.cpu_bound_s >= self.predicted_s - 1e-12


def size_workers(cores: Optional[FreeCores], cost: ProducerCost, free_s: float,
                 cycle_s: float, trainer_bound: Optional[float],
                 trainer_cpu_s: Optional[float] = None) -> WorkerSizing:
    """Size the producers for a step of `free_s` without data (now `cycle_s`): `cores` the
    job's cores (free_cores), `trainer_bound` the most cores the trainer's own work keeps
    busy (trainer_work_bound; None: unknown), `trainer_cpu_s` the CPU its step without data
    takes (measured by the speed test's ceiling window, else trainer_cpu_from_steps; None:
    `free_s` stands for it, one core's worth); it also bounds the cores the trainer keeps
    busy beside the workers: that CPU over the fastest step they can give (the step
    without data, or the cores' bound where slower), as math threads spinning while they
    wait for data leave their cores to the workers (bench_advice's starved-thread job: 1.9
    ms of CPU in a 1.9 ms step without data, which counted as a whole core left the workers
    one core and proposed 1 worker, 1.34x; over the cores' 6.5 ms bound, 0.3 of a core, and
    2 workers: `tune` found 1.67x). The step without data is taken as measured
    even where blas_note advises fewer math threads: beside busy workers the threads it
    takes away had no free core to run on (bench_advice's sync-input and starved-workers
    jobs: predicted within 10% of the measured change this way, 20-25% short when the step
    was slowed by the thread ratio's square root)."""
    needed = max(1, math.ceil(cost.wall_s / free_s)) if free_s > 0 else 1
    usable, light = None, False
    if cores is not None and cores.cores:
        threads = 1 + min(needed, MAX_WORKERS_PER_CORE * cores.cores)  # (the trainer's too)
        usable = max(cores.cores - cores.others, 0.0)
        fair = fair_share_cores(cores.cores, cores.others, threads)
        light = cost.cores_each <= fair / threads  # (a producer wants less than its part)
        if light:
            usable = fair
    cpu_bound_s = _cpu_bound(usable, cost, free_s if trainer_cpu_s is None else trainer_cpu_s)
    fastest_s = max(free_s, cpu_bound_s or 0.0)
    if trainer_cpu_s is not None and fastest_s > 0:  # its own work, at most, beside workers
        own = trainer_cpu_s / fastest_s
        trainer_bound = own if trainer_bound is None else min(own, trainer_bound)
    working = cores
    if cores is not None and cores.trainer is not None and trainer_bound is not None:
        working = replace(cores, trainer=min(cores.trainer, trainer_bound))
    room = room_cores(working) if working is not None else None
    shared = room is not None and light
    if shared:  # (light producers beside other processes: the scheduler serves them)
        trainer = working.trainer if working.trainer is not None else 1.0
        shared = usable - trainer > room + 1e-9
        room = max(room, usable - trainer)
    cap = needed
    if room is not None:
        cap = _part_core_workers(worker_cap(room, cost.cores_each, cores.cores), needed, room,
                                 cost, fastest_s, cores.cores)
    widened = room is not None and not shared and \
        cap > max(math.floor(cores.free / cost.cores_each + 1e-9), 1)
    workers = min(needed, cap)
    busy = worker_busy_cores(cost, workers, free_s)
    producing = _producing(workers, room, cost)
    new_s = max(free_s, cost.wall_s / producing, cpu_bound_s or 0.0)
    return WorkerSizing(needed, cap, workers, room, widened, cpu_bound_s,
                        min(new_s, cycle_s), free_s, busy, producing, shared, usable)


def _producing(workers: int, room: Optional[float], cost: ProducerCost) -> float:
    """How many producers' worth of batches `workers` make: each its own core's worth while
    the room lasts (at least one), time-sharing what is left beyond."""
    if room is None:
        return workers
    return min(workers, max(room / cost.cores_each, 1.0))


def _part_core_workers(cap: int, needed: int, room: float, cost: ProducerCost,
                       floor_s: float, cores: Optional[int]) -> int:
    """`cap` (worker_cap: the workers that get most of a core each), raised by each further
    worker that makes the predicted step at least MIN_WORKER_GAIN faster with the part of a
    core left for it (room 1.4 cores, a worker a core each: a second worker makes 40% more
    batches). `floor_s`: the step no count of workers beats (without data; the cores'
    bound)."""
    top = min(needed, MAX_WORKERS_PER_CORE * cores) if cores else needed
    best = max(floor_s, cost.wall_s / _producing(cap, room, cost))
    while cap < top:
        step_s = max(floor_s, cost.wall_s / _producing(cap + 1, room, cost))
        if best < step_s * MIN_WORKER_GAIN:
            break
        cap, best = cap + 1, step_s
    return cap


def worker_busy_cores(cost: ProducerCost, workers: int, free_s: float) -> float:
    """The cores `workers` producers keep busy: each its share of a core, but no more than
    a step's batches need per step without data."""
    busy = workers * cost.cores_each
    if free_s > 0:
        busy = min(busy, cost.cpu_per_step_s / free_s)
    return busy


def _cpu_bound(usable: Optional[float], cost: ProducerCost, trainer_cpu_s: float
               ) -> Optional[float]:
    """The step the cores allow: the trainer's CPU per step without data (measured, else
    its step without data: one core's worth of work, as a trainer of several math threads
    crowded by workers gets no more) plus the producers' CPU for a step's batches, over the
    `usable` cores the job gets beside other processes (fair_share_cores), time-shared."""
    if not usable or usable <= 0:
        return None
    return (trainer_cpu_s + cost.cpu_per_step_s) / (usable * SHARED_CORE_USE)


def fair_share_cores(cores: int, others: float, threads: int) -> float:
    """The cores `threads` busy threads of the job get beside other processes that kept
    `others` cores busy while it ran: what those leave, or, where that is less, the
    scheduler's fair share (Linux's CFS gives runnable threads alike an equal part of the
    cores; the others' busy cores are counted as one thread each). The others' cores were
    measured while the job used what they left, so a producer that wants less than its part
    of the cores (a worker that mostly sleeps or waits for I/O) is not held back by them:
    size_workers counts on the fair share for such producers only, and never on taking a
    busy process's core for a producer that would keep one busy."""
    left = max(cores - others, 0.0)
    busy_others = round(others)
    if busy_others <= 0 or threads <= 0:
        return left
    return max(left, cores * threads / (threads + busy_others))


def worker_cap(room: Optional[float], per_worker: float, cores: Optional[int]) -> int:
    """How many workers `room` cores (room_cores) run, each needing `per_worker` of a core
    and getting most of one (rounded); at most MAX_WORKERS_PER_CORE per core, at least 1."""
    cap = math.floor((room or 0.0) / per_worker + 0.5)
    if cores:
        cap = min(cap, MAX_WORKERS_PER_CORE * cores)
    return max(cap, 1)


def room_cores(cores: FreeCores) -> Optional[float]:
    """The cores the producers can use: the free cores, or, when the trainer keeps less than
    one core busy (it waits for data most of its step), the cores it leaves: a worker
    time-shares a core with a trainer that mostly waits. None when the cores are unknown."""
    if cores.free is None:
        return None
    if cores.cores and cores.trainer is not None:
        return max(cores.free, cores.cores - cores.others - cores.trainer)
    return cores.free


def trainer_work_bound(profile, waiting_share: Optional[float]) -> Optional[float]:
    """The most cores the trainer's own work can keep busy: its math threads for the part of
    each step it does not wait for data (`waiting_share`: the DataLoader read share, or a
    synchronous loop's input share). CPU measured above that is threads spinning while they
    wait (OpenMP's spin-wait between ops, PyTorch's intra-op pool), which fewer threads (the
    advice's BLAS note) give back. None: unknown."""
    if not waiting_share:
        return None
    threads = max(cpu_facts(profile).blas_threads or 1, 1)
    return max(1.0 - waiting_share, 0.0) * threads


def trainer_cpu_from_steps(profile, free_s: float) -> Optional[float]:
    """The CPU the trainer's step without data takes, from the steps' own timing where no
    speed test measured it: `free_s` less the time the training thread was runnable but
    waiting for a core during its ops (records.Step.compute_queued_s: the cores time-shared
    with the producers and its own math threads, which the cores' bound, _cpu_bound, counts
    on its own; bench_advice's starved-workers job: 2.1 ms of a 4.8 ms step without data,
    which taken as the trainer's CPU had predicted 1.40x where 1.74x was measured). None:
    not measured (the runtime measures it; `free_s` then stands for it)."""
    b = profile.summary.breakdown_s
    queued = b.compute_queued_s if b is not None else None
    if not queued or free_s <= 0:
        return None
    return max(free_s - queued, 0.0)


NO_CORES = FreeCores(cores=None, free=None, others=0.0, trainer=None, producers=0.0,
                     idle=None)  # the core count unknown


def plan_figures(profile, sizing: WorkerSizing, cores: Optional[FreeCores],
                 cost: ProducerCost, cycle_s: float, free_s: float, source: str) -> dict:
    """The figures of a worker plan (the advice's `figures`), whatever sized it."""
    cores = cores or NO_CORES
    new_s = sizing.predicted_s
    return {"workers": sizing.workers, "workers_needed": sizing.needed,
            "worker_cap": sizing.cap, "trainer_cores": cores.trainer, **_blas(profile),
            "worker_s_per_step": cost.wall_s, "producer_cpu_s_per_step": cost.cpu_s,
            "consumer_s_per_step": free_s, "consumer_source": source, "cycle_s": cycle_s,
            "predicted_cycle_s": new_s, "cpu_bound_cycle_s": sizing.cpu_bound_s,
            "cpu_bound": sizing.cpu_bound,
            "speedup": cycle_s / new_s if new_s > 0 else None,
            "ceiling_steps_per_s": 1 / free_s if free_s > 0 else None,
            "cores": cores.cores, "free_cores": cores.free, "idle_cores": cores.idle,
            "room_cores": sizing.room_cores if sizing.widened or sizing.shared else None,
            "room_shared": sizing.shared, "usable_cores": sizing.usable_cores,
            "other_processes_cores": cores.others, "producer_cpu_share": cost.cpu_share,
            "worker_busy_cores": sizing.busy_cores, "producing_workers": sizing.producing}


def _blas(profile) -> dict:
    cpu = cpu_facts(profile)
    return {"blas_threads": cpu.blas_threads, "blas_env": cpu.blas_env,
            "blas_label": None if profile.source.framework == "fluid" else cpu.blas_label}


def shard_note(code: CodeWriter, config=None) -> list:
    """The reminder that an iterable dataset runs whole in every worker (each must yield only
    its share); none for a map-style one (LoaderConfig.dataset: the sampler's indices are
    split among the workers)."""
    if config is not None and config.dataset == "map":
        return []
    return [code.shard_note()]


def blas_note(code: CodeWriter, plan: dict, short_of_cores=True) -> list:
    """The trainer's BLAS thread count, when its threads and the reader workers together
    outnumber the cores (during each op the BLAS threads take every core they have, and the
    workers wait), or when the trainer kept more than BLAS_BUSY_CORES busy while the workers
    lack cores. The suggested count leaves a core to each worker (at least 1 thread)."""
    n = fewer_blas_threads(plan, short_of_cores)
    if n is None:
        return []
    blas, cores, trainer = plan["blas_threads"], plan["cores"], plan["trainer_cores"]
    workers = max(plan["workers"], plan["current_workers"], 1)
    busy = plan.get("worker_busy_cores") or float(workers)
    crowded = busy + blas > cores + CROWD_SLACK
    kind = "math" if plan.get("blas_label") else "BLAS"  # a framework's own pool: math
    why = (f"{blas} {kind} threads + {workers} worker(s) on {cores} cores: during each op the "
           f"workers wait" if crowded else
           f"the trainer itself kept {trainer:.1f} cores busy with {blas} {kind} threads")
    label = plan.get("blas_label") or "NumPy's BLAS"
    return [f"# {why}. Give {label} {n} thread(s) (check the step time after):\n"
            + code.comment(code.env(plan["blas_env"], n))]


def fewer_blas_threads(plan: dict, short_of_cores=True) -> Optional[int]:
    """The BLAS thread count blas_note proposes for `plan` (None: it proposes none)."""
    workers = max(plan["workers"], plan["current_workers"], 1)
    busy = plan.get("worker_busy_cores") or float(workers)
    return advised_threads(plan["blas_threads"], plan["cores"], busy, plan["trainer_cores"],
                           short_of_cores)


def gain_severity(severity: str, speedup: Optional[float]) -> str:
    """`severity` (from how much of the step waits), lowered to what the predicted gain of
    the change is worth: low under SMALL_GAIN, at most medium under LARGE_GAIN (a step that
    waits a lot for input the cores cannot make faster is not a high-severity finding)."""
    if speedup is None:
        return severity
    if speedup < SMALL_GAIN:
        return "low"
    if speedup < LARGE_GAIN and severity == "high":
        return "medium"
    return severity


def advised_threads(blas: Optional[int], cores: Optional[int], worker_cores: float,
                    trainer: Optional[float], short_of_cores: bool) -> Optional[int]:
    """The math threads to give the trainer beside worker processes that keep
    `worker_cores` busy, when its threads and the workers outnumber the cores, or when it
    kept more than BLAS_BUSY_CORES busy while the workers are `short_of_cores`: the most
    threads that, with the workers, no longer crowd the cores (at least 1); None: keep them.
    A worker needing part of a core counts: math threads spin on their cores between ops,
    so a worker beside them gets little of one (bench_advice's gil-thread job on 2 cores: a
    worker needing half a core beside 2 BLAS threads gained nothing, 70.2 against 72.8
    steps/s; with 1 BLAS thread 1.46x)."""
    if not blas or blas < 2 or not cores:
        return None
    crowded = worker_cores + blas > cores + CROWD_SLACK
    busy = short_of_cores and trainer is not None and trainer >= BLAS_BUSY_CORES
    if not (crowded or busy):
        return None
    n = max(1, math.floor(cores + CROWD_SLACK - worker_cores + 1e-9))
    return n if n < blas else None


def cpu_bound_note(plan) -> str:
    """Why the cores, not the workers' count, set the predicted step."""
    left = (plan["cores"] or 0) - (plan["other_processes_cores"] or 0.0)
    usable = plan.get("usable_cores")
    cpu = plan["producer_cpu_s_per_step"] or plan["worker_s_per_step"]
    trainer = plan.get("trainer_cpu_s_per_step") or plan["consumer_s_per_step"]
    text = (f"the cores bound it: the trainer's {ms(trainer)} and the producers' {ms(cpu)} "
            f"of CPU per step share ")
    if usable is not None and usable > left + 0.05:
        return text + (f"the {usable:.1f} core(s) the scheduler gives the job beside other "
                       f"processes ({plan['other_processes_cores']:.1f} busy)")
    return text + f"the {left:.1f} core(s) other processes leave"
