"""Figures several rules read from a profile: main program ops, op-time shares, samples."""

from typing import Iterable, List, Optional

from ..summary import MIN_STEADY_STEPS

LOSS_ROLE = 256  # runtime.framework.OpRole.Loss: set on the op seeding the loss gradient


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


def free_cores(profile) -> Optional[dict]:
    """Usable cores, and how many are free for reader workers: all but the trainer's own
    core and the CPU other processes used (machine busy - this process busy, from the system
    samples). None when the core count is unknown."""
    cpu = profile.env.get("cpu") or {}
    cores = cpu.get("usable_cores") or cpu.get("logical_cores")
    if not cores:
        return None
    machine = sample_mean(profile, "system", "cpu_total_percent")
    process = sample_mean(profile, "system", "cpu_percent")
    busy = machine * cores / 100 if machine is not None else None
    others = max(busy - process / 100, 0.0) if busy is not None and process is not None else 0.0
    return {"cores": cores, "free": max(cores - 1 - others, 0.0), "others": others,
            "idle": cores - busy if busy is not None else None}
