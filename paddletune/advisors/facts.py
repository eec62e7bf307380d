"""Figures several rules read from a profile: main program ops, op-time shares, samples."""

from typing import Iterable, List, Optional

from ..summary import MIN_STEADY_STEPS

BLAS_FAMILIES = (("openblas", "OpenBLAS", "OPENBLAS_NUM_THREADS"),  # (match, name, env var)
                 ("mkl", "MKL", "MKL_NUM_THREADS"), ("blis", "BLIS", "BLIS_NUM_THREADS"))
LOSS_ROLE = 256  # runtime.framework.OpRole.Loss: set on the op seeding the loss gradient
# optimizer update op types -> the fluid.optimizer class that adds them
OPTIMIZER_NAMES = {"adam": "Adam", "adamax": "Adamax", "adadelta": "Adadelta",
                   "rmsprop": "RMSProp", "ftrl": "Ftrl", "lamb": "Lamb", "adagrad": "Adagrad",
                   "decayed_adagrad": "DecayedAdagrad", "momentum": "Momentum",
                   "lars_momentum": "LarsMomentum", "sgd": "SGD", "dpsgd": "DpSGD"}


def enough_steps(profile) -> bool:
    """The summary has a steady-state verdict (at least MIN_STEADY_STEPS steady steps)."""
    verdict = profile.summary.get("verdict") or {}
    return verdict.get("kind") not in (None, "too-few-steps") and \
        (profile.summary.get("steady_steps") or 0) >= MIN_STEADY_STEPS


def main_ops(profile) -> List[dict]:
    """The ops ({type, role, inputs, outputs}) of the main program, [] when not recorded."""
    record = profile.programs.get(profile.summary.get("main_program")) or {}
    return list(record.get("ops") or [])


def startup_outputs(profile) -> set:
    """Every variable a startup program writes (parameters, learning rate, accumulators)."""
    startup = {p["program"] for p in profile.summary.get("programs") or [] if p.get("startup")}
    return {name for pid in startup for op in (profile.programs.get(pid) or {}).get("ops", [])
            for name in names(op.get("outputs"))}


def names(slots) -> List[str]:
    """The variable names of an op's inputs/outputs ({slot: [names]}), in slot order."""
    return [n for values in (slots or {}).values() for n in (values or [])]


def loss_name(ops: Iterable[dict]) -> Optional[str]:
    """The loss variable: the input of the op with the Loss role (the gradient seed)."""
    for op in ops:
        if int(op.get("role") or 0) & LOSS_ROLE:
            inputs = names(op.get("inputs"))
            if inputs:
                return inputs[0]
    return None


def op_types_share(profile, types: Iterable[str]) -> Optional[float]:
    """Share of the measured op time spent in ops of `types` (None without op timings)."""
    ops = profile.summary.get("ops") or {}
    by_type = ops.get("by_type")
    if not by_type:
        return None
    wanted = set(types)
    return sum(row["share"] for row in by_type if row["type"] in wanted)


def sample_mean(profile, probe: str, key: str) -> Optional[float]:
    """Mean of one numeric field of a probe's samples (from the summary), None if absent."""
    fields = (profile.summary.get("samples") or {}).get(probe) or {}
    value = (fields.get(key) or {}).get("mean")
    return float(value) if value is not None else None


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


def main_loader(profile) -> Optional[dict]:
    """The summary's figures of the DataLoader that delivered the most batches (None when the
    job has none): see summary_reader.py."""
    loaders = [f for f in ((profile.summary.get("reader") or {}).get("loaders") or [])
               if f.get("batches")]
    return max(loaders, key=lambda f: f["batches"]) if loaders else None


def free_cores(profile, loader: Optional[dict] = None) -> Optional[dict]:
    """Usable cores, and how many are free for `loader`'s producers: all but the trainer's
    (at least one core; more when its BLAS threads keep more busy) and those other processes
    used. The loader's own producers are what is being sized, so they never count against
    it: its worker processes' CPU (the workers probe) is taken out of the other processes',
    its reader thread's (CPU per batch x batches/s) out of the trainer's. From the system
    samples' means; None when the core count is unknown."""
    cpu = profile.env.get("cpu") or {}
    cores = cpu.get("usable_cores") or cpu.get("logical_cores")
    if not cores:
        return None
    machine = sample_mean(profile, "system", "cpu_total_percent")
    process = sample_mean(profile, "system", "cpu_percent")
    busy = machine * cores / 100 if machine is not None else None
    in_trainer, in_workers = _producer_cores(loader)
    trainer = max(process / 100 - in_trainer, 0.0) if process is not None else None
    others = (max(busy - process / 100 - in_workers, 0.0)
              if busy is not None and process is not None else 0.0)
    return {"cores": cores, "free": max(cores - max(trainer or 0.0, 1.0) - others, 0.0),
            "others": others, "trainer": trainer, "producers": in_trainer + in_workers,
            "idle": cores - busy if busy is not None else None}


def _producer_cores(loader) -> tuple:
    """(cores the loader's reader thread used inside the trainer, cores its workers used)."""
    if not loader:
        return 0.0, 0.0
    if (loader.get("config") or {}).get("num_workers"):
        return 0.0, ((loader.get("processes") or {}).get("cores") or 0.0)
    cpu_s = (loader.get("producer") or {}).get("cpu_s_per_batch")
    rate = (loader.get("consumer") or {}).get("actual_per_s")
    return (cpu_s * rate if cpu_s and rate else 0.0), 0.0


def cpu_facts(profile) -> dict:
    """Usable cores, BLAS family/threads (last sampled value, else the header's) and runtime
    threads (threads per executor x executors running at the same time)."""
    cpu, numpy = profile.env.get("cpu") or {}, profile.env.get("numpy") or {}
    sampled = ((profile.summary.get("samples") or {}).get("system") or {}).get("blas_threads")
    blas = sampled["last"] if sampled else numpy.get("blas_threads")
    parallel = profile.summary.get("parallel") or {}
    per_executor = profile.options.get("num_threads") or parallel.get("threads") or max(
        [s.get("threads") or 1 for s in profile.steps] or [1])
    return {"cores": cpu.get("usable_cores") or cpu.get("logical_cores"),
            "blas_threads": int(blas) if blas else None,
            **blas_family(numpy),
            "runtime_threads": int(per_executor) * concurrent_executors(profile.steps)}


def concurrent_executors(steps) -> int:
    """The most executors whose training runs overlap in time (1 for the usual single loop)."""
    runs = [(s["t"], s["t"] + s["wall_s"]) for s in steps if not s.get("startup")]
    edges = sorted([(t0, 1) for t0, _ in runs] + [(t1, -1) for _, t1 in runs])
    running = peak = 0
    for _t, delta in edges:  # at equal times ends (-1) sort first: touching runs don't overlap
        running += delta
        peak = max(peak, running)
    return max(peak, 1)


def blas_family(numpy: dict) -> dict:
    """{'blas': short name, 'blas_env': its thread-count variable} from the header's numpy
    entry ('blas' may be a family or a whole config string, 'blas_path' the library)."""
    text = f"{numpy.get('blas') or ''} {numpy.get('blas_path') or ''}".lower()
    for match, name, var in BLAS_FAMILIES:
        if match in text:
            return {"blas": name, "blas_env": var}
    return {"blas": "BLAS", "blas_env": "OMP_NUM_THREADS"}
