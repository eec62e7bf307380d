"""docs/advice.md #13 for PyTorch on a GPU: the caching allocator's configuration
(PYTORCH_CUDA_ALLOC_CONF), as FLAGS_allocator_strategy is Paddle's.

PyTorch keeps freed device blocks in a cache and splits them for smaller requests. The
profile's memory figures show when that cache strains (sources/torch/gpu.py reads them from
torch.cuda.memory_stats):
- retries: a cudaMalloc failed, so the allocator freed every cached block (a device
  synchronisation and a cudaFree each) and tried again; the step that hits one stalls;
- cudaMalloc calls during steady steps: the cache never settles (batches of varying shapes
  want new block sizes), and each call is synchronous;
- fragmentation near the device's capacity: reserved memory held in split blocks that
  requests cannot use, memory a larger batch could have had;
- an out-of-memory error while more memory was cached than the request asked for.

Expandable segments (`expandable_segments:True`) map more physical memory into one segment
as it grows, instead of a new segment per size: fewer cudaMalloc calls, and freed memory that
other sizes can reuse. How much time that saves is not in the profile (the calls are not
timed): the advice gives no speedup and says how to measure it (`paddletune tune` tries the
setting as the PYTORCH_CUDA_ALLOC_CONF knob whenever this rule has evidence).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

from .base import Advice, rule
from .facts import enough_steps, human_bytes, writer
from .memory import memory_summary, on_gpu

CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
OTHER_CONF_VAR = "PYTORCH_ALLOC_CONF"  # (the name PyTorch 2.9+ also reads)
EXPANDABLE = "expandable_segments:True"
STEADY_MALLOCS = 0.5  # cudaMalloc calls per steady step: the cache never settles
FRAGMENTED = 0.30  # inactive split-block bytes / reserved bytes ...
NEAR_CAPACITY = 0.80  # ... that matter when the reserved peak is this close to the capacity


@dataclass(frozen=True)
class AllocatorStrain:
    """What the caching allocator's figures show (each None/0 when they do not show it)."""

    place: str
    conf: str  # the job's PYTORCH_CUDA_ALLOC_CONF ("" when unset)
    var: str  # the variable it was read from (PyTorch reads both names)
    retries: int  # allocations retried after freeing the cache, the whole run
    mallocs_per_step: Optional[float]  # cudaMalloc calls per steady step, when >= STEADY_MALLOCS
    fragmentation: Optional[float]  # when >= FRAGMENTED near the capacity
    stranded_bytes: Optional[int]  # reserved bytes in split blocks (fragmentation x reserved)
    oom_cached_bytes: Optional[int]  # at an out-of-memory error: cached, not allocated, when
    # at least the request
    oom_requested_bytes: Optional[int]

    @property
    def suggested_conf(self) -> str:
        """The job's configuration with expandable segments added."""
        return f"{self.conf},{EXPANDABLE}" if self.conf else EXPANDABLE

    @property
    def severity(self) -> str:
        return "high" if self.retries or self.oom_cached_bytes else "medium"


def job_conf(profile) -> Tuple[str, str]:
    """(the variable, the allocator configuration the job ran with): PYTORCH_CUDA_ALLOC_CONF,
    or PYTORCH_ALLOC_CONF where only that one was set; "" when neither was."""
    env_vars = profile.env.env_vars or {}
    if env_vars.get(CONF_VAR) or not env_vars.get(OTHER_CONF_VAR):
        return CONF_VAR, env_vars.get(CONF_VAR) or ""
    return OTHER_CONF_VAR, env_vars[OTHER_CONF_VAR]


def allocator_strain(profile) -> Optional[AllocatorStrain]:
    """The strain on a PyTorch job's CUDA caching allocator, None when its figures show none
    or expandable segments are already on."""
    m = memory_summary(profile)
    if m is None or not on_gpu(m) or not m.caching_allocator:
        return None
    var, conf = job_conf(profile)
    if any(EXPANDABLE.lower() in text.replace(" ", "").lower() for text in (conf, m.strategy)):
        return None  # (the strategy holds the configuration the job's CUDA start read: one
        # the script set itself in os.environ too)
    mallocs = m.system_allocs_per_step if enough_steps(profile) else None
    mallocs = mallocs if mallocs is not None and mallocs >= STEADY_MALLOCS else None
    near = (m.peak_reserved_share or 0.0) >= NEAR_CAPACITY
    fragmented = m.fragmentation if near and (m.fragmentation or 0.0) >= FRAGMENTED else None
    stranded = (int(fragmented * m.peak_reserved_bytes)
                if fragmented is not None and m.peak_reserved_bytes else None)
    oom_cached, requested = _oom_cached(m.oom)
    if not (m.alloc_retries or mallocs or fragmented or oom_cached):
        return None
    return AllocatorStrain(m.place, conf, var, m.alloc_retries, mallocs, fragmented, stranded,
                           oom_cached, requested)


def _oom_cached(oom) -> Tuple[Optional[int], Optional[int]]:
    """(bytes cached but free at an out-of-memory error, the request) when the cache held at
    least the request: it did not fit for want of a contiguous block; else (None, None)."""
    if oom is None or oom.reserved_bytes is None or oom.allocated_bytes is None:
        return None, None
    cached = oom.reserved_bytes - oom.allocated_bytes
    if not oom.requested_bytes or cached < oom.requested_bytes:
        return None, None
    return cached, oom.requested_bytes


@rule
def cuda_allocator_config(profile) -> Optional[Advice]:
    """CUDA caching allocator (#13, PyTorch)

    The caching allocator retried after freeing its cache, kept calling cudaMalloc in steady
    steps, ran out with enough memory cached, or strands memory in split blocks near the
    device's capacity: expandable segments.
    """
    s = allocator_strain(profile)
    if s is None:
        return None
    code = writer(profile)
    change = "\n".join([
        code.env(s.var, s.suggested_conf, "segments grow in place instead of one "
                 "cudaMalloc per new block size"),
        code.comment(f"or first thing in the script, before torch uses the GPU:\n"
                     f"os.environ[{s.var!r}] = {s.suggested_conf!r}")])
    return Advice(
        id="cuda-allocator-config", source=13, severity=s.severity,
        confidence="medium" if s.retries or s.oom_cached_bytes else "low",
        title=_title(s), evidence=_evidence(s), change=change, expected_gain=_gain(s),
        figures={"place": s.place, "var": s.var, "conf": s.conf,
                 "suggested_conf": s.suggested_conf,
                 "alloc_retries": s.retries, "mallocs_per_step": s.mallocs_per_step,
                 "fragmentation": s.fragmentation, "stranded_bytes": s.stranded_bytes,
                 "oom_cached_bytes": s.oom_cached_bytes})


def _title(s: AllocatorStrain) -> str:
    if s.oom_cached_bytes:
        return (f"Out of GPU memory with {human_bytes(s.oom_cached_bytes)} cached but in "
                f"pieces too small")
    if s.retries:
        return f"PyTorch's CUDA allocator ran out and flushed its cache {s.retries} times"
    if s.mallocs_per_step:
        return (f"{s.mallocs_per_step:.1f} cudaMalloc calls per step: the allocator's cache "
                f"never settles")
    return f"{s.fragmentation:.0%} of the reserved GPU memory is stranded in split blocks"


def _evidence(s: AllocatorStrain) -> str:
    seen = []
    if s.oom_cached_bytes:
        seen.append(f"the out-of-memory error asked for {human_bytes(s.oom_requested_bytes)} "
                    f"while {human_bytes(s.oom_cached_bytes)} was reserved but not allocated")
    if s.retries:
        seen.append(f"{s.retries} allocations were retried after a failed cudaMalloc, each "
                    f"after freeing every cached block (num_alloc_retries)")
    if s.mallocs_per_step:
        seen.append(f"the steady steps made {s.mallocs_per_step:.1f} cudaMalloc calls each")
    if s.fragmentation:
        seen.append(f"{s.fragmentation:.0%} of the reserved memory sat in inactive split "
                    f"blocks (about {human_bytes(s.stranded_bytes or 0)}) with the reserved "
                    f"peak near the device's capacity")
    conf = f"{s.var}={s.conf}" if s.conf else f"{CONF_VAR} unset"
    return f"On {s.place}, {'; '.join(seen)} ({conf})."


def _gain(s: AllocatorStrain) -> str:
    parts = []
    if s.retries or s.mallocs_per_step:
        parts.append("fewer cudaMalloc calls and cache flushes, each of which stalls the "
                     "step; the profile does not time them, so no speedup is predicted: "
                     "`paddletune tune` measures it (its PYTORCH_CUDA_ALLOC_CONF knob)")
    if s.oom_cached_bytes or s.stranded_bytes:
        freed = s.oom_cached_bytes or s.stranded_bytes
        parts.append(f"up to {human_bytes(freed)} of cached memory usable again (room for a "
                     f"larger batch, or no out-of-memory error)")
    return "; ".join(parts)
