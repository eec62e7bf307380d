"""Figures several rules read from a profile: the main program's ops, op-time shares, the
system samples, the main loader, the cores free for its producers, the CPU's threads; and the
code writer of the profile's framework, through which every rule writes its change."""

from dataclasses import dataclass
from typing import Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..profile.figures import LoaderFigures, SampleStats
from ..profile.records import NumpyInfo, ProgramOp, Step
from ..profile.summarize import MIN_STEADY_STEPS
from ..sources.code import CodeWriter, code_for

BLAS_FAMILIES = (("openblas", "OpenBLAS", "OPENBLAS_NUM_THREADS"),  # (match, name, env var)
                 ("mkl", "MKL", "MKL_NUM_THREADS"), ("blis", "BLIS", "BLIS_NUM_THREADS"))
LOSS_ROLE = 256  # runtime.framework.OpRole.Loss: set on the op seeding the loss gradient
# optimizer update op types -> the optimizer class that adds them
OPTIMIZER_NAMES = {"adam": "Adam", "adamax": "Adamax", "adadelta": "Adadelta",
                   "rmsprop": "RMSProp", "ftrl": "Ftrl", "lamb": "Lamb", "adagrad": "Adagrad",
                   "decayed_adagrad": "DecayedAdagrad", "momentum": "Momentum",
                   "lars_momentum": "LarsMomentum", "sgd": "SGD", "dpsgd": "DpSGD"}


def writer(profile) -> CodeWriter:
    """The code writer of the profile's framework: every change a rule proposes is its (a
    Paddle 3 job whose model census read a static-graph program: its static-graph writer)."""
    framework = profile.source.framework
    census = profile.last_event("model") if framework == "paddle" else None
    if census is not None and census.graph == "static":
        return code_for("paddle-static")
    return code_for(framework)


def enough_steps(profile) -> bool:
    """The summary has a steady-state verdict (at least MIN_STEADY_STEPS steady steps)."""
    s = profile.summary
    return s.verdict.kind != "too-few-steps" and s.steady_steps >= MIN_STEADY_STEPS


def main_ops(profile) -> Tuple[ProgramOp, ...]:
    """The ops of the main program, () when not recorded."""
    return profile.program_ops(profile.summary.main_program)


def main_steps(profile) -> List[Step]:
    """The main program's training steps recorded in full (startup runs left out)."""
    main = profile.summary.main_program
    return [s for s in profile.steps if s.program == main and not s.startup]


def startup_outputs(profile) -> set:
    """Every variable a startup program writes (parameters, learning rate, accumulators)."""
    return {name for p in profile.summary.programs if p.startup
            for op in profile.program_ops(p.program) for name in names(op.outputs)}


def names(slots: Optional[Mapping[str, Sequence[str]]]) -> List[str]:
    """The variable names of an op's inputs/outputs ({slot: [names]}), in slot order."""
    return [n for values in (slots or {}).values() for n in values]


def is_forward(op: ProgramOp) -> bool:
    """The op runs in the forward pass (no backward, optimizer or lr-schedule role bit)."""
    return not op.role & 0xFF


def loss_name(ops: Iterable[ProgramOp]) -> Optional[str]:
    """The loss variable: the input of the op with the Loss role (the gradient seed)."""
    for op in ops:
        if op.role & LOSS_ROLE:
            inputs = names(op.inputs)
            if inputs:
                return inputs[0]
    return None


def op_types_share(profile, types: Iterable[str]) -> Optional[float]:
    """Share of the measured op time spent in ops of `types` (None without op timings)."""
    ops = profile.summary.ops
    if ops is None or not ops.by_type:
        return None
    wanted = set(types)
    return sum(row.share for row in ops.by_type if row.type in wanted)


def system_stats(profile, field: str) -> Optional[SampleStats]:
    """One field of the system probe's samples (figures.SystemFigures), None if absent."""
    system = profile.summary.system
    return getattr(system, field) if system is not None else None


def system_mean(profile, field: str) -> Optional[float]:
    """The mean of one field of the system probe's samples, None if absent."""
    stats = system_stats(profile, field)
    return float(stats.mean) if stats is not None else None


def declares_knob(profile, knob_id: str) -> bool:
    """Whether the job's source declares the knob `knob_id` ("reader.prefetch_factor"): the
    framework acts on that setting, so advice may change it."""
    return any(k.id == knob_id for k in profile.source.knobs)


def main_loader(profile) -> Optional[LoaderFigures]:
    """The figures of the training loop's DataLoader (ReaderFigures.main: the one that
    delivered the most batches, or another whose waits held the steps back far more; None
    without one)."""
    return profile.summary.main_loader


def script(profile) -> str:
    """The job's command line as typed (train.py when unknown)."""
    return " ".join(str(a) for a in profile.command.argv) or "train.py"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def code_name(var: Optional[str], fallback: str) -> str:
    """`var` if it can stand in Python code as the user's variable, else `fallback`."""
    return var if var and var.isidentifier() else fallback


def py_name(var: str) -> str:
    """A Python identifier to stand for `var` in code: 'accuracy_0.tmp_0' -> 'accuracy_0'."""
    if var.isidentifier():
        return var
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in var.split(".")[0])
    return stem if stem.isidentifier() else f"v_{stem}"


def human_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


# --- cores ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FreeCores:
    """The usable cores and who kept them busy (means over the system samples).

    cores      usable cores (None: unknown, in a placeholder)
    free       cores left to a loader's producers (None: unknown)
    others     cores other processes kept busy
    trainer    cores the trainer kept busy, its loader's reader thread left out (None:
               unsampled)
    producers  cores the loader's producers kept busy
    idle       cores nothing kept busy (None: the machine's CPU unsampled)
    """

    cores: Optional[int]
    free: Optional[float]
    others: float
    trainer: Optional[float]
    producers: float
    idle: Optional[float]


def free_cores(profile, loader: Optional[LoaderFigures] = None) -> Optional[FreeCores]:
    """Usable cores, and how many are free for `loader`'s producers: all but the trainer's
    (at least one core; more when its BLAS threads keep more busy) and those other processes
    used. The loader's own producers are what is being sized, so they never count against
    it: its worker processes' CPU (the workers probe) is taken out of the other processes',
    its reader thread's (CPU per batch x batches/s) out of the trainer's. From the system
    samples' means; None when the core count is unknown."""
    cores = profile.env.cpu.cores
    if not cores:
        return None
    machine = system_mean(profile, "cpu_total_percent")
    process = system_mean(profile, "cpu_percent")
    busy = machine * cores / 100 if machine is not None else None
    in_trainer, in_workers = _producer_cores(loader)
    trainer = max(process / 100 - in_trainer, 0.0) if process is not None else None
    others = (max(busy - process / 100 - in_workers, 0.0)
              if busy is not None and process is not None else 0.0)
    return FreeCores(cores, max(cores - max(trainer or 0.0, 1.0) - others, 0.0), others,
                     trainer, in_trainer + in_workers,
                     cores - busy if busy is not None else None)


def _producer_cores(loader: Optional[LoaderFigures]) -> Tuple[float, float]:
    """(cores the loader's reader thread used inside the trainer, cores its workers used)."""
    if loader is None:
        return 0.0, 0.0
    if loader.config.num_workers:
        return 0.0, (loader.processes.cores or 0.0) if loader.processes else 0.0
    cpu_s, rate = loader.producer.cpu_s_per_batch, loader.consumer.actual_per_s
    return (cpu_s * rate if cpu_s and rate else 0.0), 0.0


# --- threads -------------------------------------------------------------------------------------
class BlasFamily(NamedTuple):
    """A BLAS library's short name and the variable that sets its thread count."""

    name: str
    env_var: str


@dataclass(frozen=True)
class CpuFacts:
    """The cores and the threads that compete for them.

    cores            usable cores (None: unknown)
    blas_threads     NumPy's BLAS threads (the last sampled value, else the header's)
    blas             the BLAS family's short name
    blas_env         the variable that sets its thread count
    runtime_threads  threads per executor x executors running at the same time
    blas_label       who runs those threads, in words ("NumPy's OpenBLAS")
    """

    cores: Optional[int]
    blas_threads: Optional[int]
    blas: str
    blas_env: str
    runtime_threads: int
    blas_label: str = "NumPy's BLAS"


def cpu_facts(profile) -> CpuFacts:
    """Usable cores, BLAS family/threads and runtime threads (the ParallelExecutor's threads,
    else 1, x executors running at the same time)."""
    sampled = system_stats(profile, "blas_threads")
    blas = sampled.last if sampled is not None else profile.env.numpy.blas_threads
    parallel = profile.summary.parallel
    per_executor = parallel.threads if parallel is not None and parallel.threads else 1
    family = blas_family(profile.env.numpy)
    label = f"NumPy's {family.name}"
    if profile.source.framework in FRAMEWORK_THREADS:  # the framework's own math threads
        label, env_var = FRAMEWORK_THREADS[profile.source.framework]
        family = BlasFamily(family.name, env_var)
    return CpuFacts(profile.env.cpu.cores, int(blas) if blas else None, family.name,
                    family.env_var, int(per_executor) * concurrent_executors(profile.steps),
                    label)


# frameworks whose math runs on their own thread pool: (its name, the variable that sizes it)
FRAMEWORK_THREADS = {"torch": ("PyTorch's intra-op pool", "OMP_NUM_THREADS"),
                     "paddle": ("Paddle's CPU math (OpenMP/MKL)", "OMP_NUM_THREADS")}


def concurrent_executors(steps: Sequence[Step]) -> int:
    """The most executors whose training runs overlap in time (1 for the usual single loop;
    one executor's own steps never count twice, however their rounded times touch)."""
    runs = [(s.t_s, s.end_s, s.executor) for s in steps if not s.startup]
    edges = sorted([(t0, 1, e) for t0, _, e in runs] + [(t1, -1, e) for _, t1, e in runs],
                   key=lambda edge: edge[:2])
    active, peak = {}, 0
    for _t, delta, executor in edges:  # at equal times ends (-1) sort first
        active[executor] = active.get(executor, 0) + delta
        peak = max(peak, sum(1 for n in active.values() if n > 0))
    return max(peak, 1)


def blas_family(numpy: NumpyInfo) -> BlasFamily:
    """The BLAS family of the header's numpy entry (`blas` may be a family or a whole config
    string, `blas_path` the library)."""
    text = f"{numpy.blas or ''} {numpy.blas_path or ''}".lower()
    for match, name, var in BLAS_FAMILIES:
        if match in text:
            return BlasFamily(name, var)
    return BlasFamily("BLAS", "OMP_NUM_THREADS")
