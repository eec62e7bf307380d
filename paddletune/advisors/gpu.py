"""docs/advice.md #8, #13 (a GPU pool), #14, #24: advice only a GPU profile can back. Every
rule needs the main program's steps on a CUDAPlace; those reading op times need them measured
on the device (CUDA events: the ops probe's `timing` is "cuda_event", see
runtime/gpu_timing.py; or a PyTorch job's kernels through torch.profiler: "cupti"), since
host clocks around asynchronous launches time the launch, not the
kernel.

- #13 cudaMalloc a visible share of the step: the same figures as the CPU rule (memory.py's
  allocation_figures), with the GPU pool's flags (fraction 0 -> 0.92, or auto_growth; at the
  cap, FLAGS_gpu_memory_limit_mb);
- #14 convolutions (matmuls) at least FLAG_SHARE of the GPU op time with
  FLAGS_cudnn_exhaustive_search (FLAGS_enable_cublas_tensor_op_math) off in the recorded flags;
- #8 conv2d_transpose at batch 1, or global pool2d, with use_cudnn on, at least DOMINANT of the
  GPU op time (the op's attrs come from the program record);
- #24 NVML utilisation of the place's GPU below LOW_UTIL_PERCENT, explained either by the data
  (the step's input share at least DATA_SHARE: a faster reader) or by a small batch (batch at
  most SMALL_BATCH or the device busy under BUSY_LOW of the compute time, and memory to spare:
  a bigger batch); one or the other, whichever the evidence supports.

paddletune's runtime accepts the #14 flags and `use_cudnn` without effect so far (convolution
is im2col + a CuPy matmul): a change it ignores could not be verified by measuring it (`paddletune
tune` would find no gain), so #8 and #14 stay silent until the runtime acts on what they name
(`acts_on`: the job's source declares the flag or the attr as a knob). Their gain
is bounded by the measured share, not predicted.
"""

from typing import List, Optional

from ..profile.figures import GpuFigures, OpFigures
from ..profile.records import ProgramOp
from .base import Advice, rule
from .facts import (declares_knob, enough_steps, human_bytes, main_loader, main_ops,
                    main_steps, ms, names, op_types_share, writer)
from .input import async_reader_code, overlap_figures, overlap_gain
from .memory import FULL, allocation_advice, allocation_figures, on_gpu, speedup_words

CONV_TYPES = ("conv2d", "depthwise_conv2d", "conv2d_transpose", "depthwise_conv2d_transpose",
              "conv3d", "conv3d_transpose")
MATMUL_TYPES = ("mul", "matmul", "matmul_v2", "fc", "bmm")
FLAG_SHARE = 0.30  # #14: share of GPU op time in the flag's ops that makes it worth a word
DOMINANT = 0.25  # #8: share of GPU op time of the cuDNN-slow ops that counts as dominating
LOW_UTIL_PERCENT = 50.0  # #24: mean NVML utilisation below this is low
MIN_UTIL_SAMPLES = 3
DATA_SHARE = 0.20  # #24: input share of the step that explains the idle GPU
SMALL_BATCH = 32  # #24: a batch this small rarely fills a GPU
BUSY_LOW = 0.5  # #24: device op time below this share of compute time: launch-bound


def acts_on(profile, name: str) -> bool:
    """Whether the job's framework acts on `name` (a FLAGS_* flag, or an op attr): its source
    declares it as a knob (a setting it ignores is not one)."""
    return declares_knob(profile, f"flag.{name}" if name.startswith("FLAGS_")
                         else f"op_attr.{name}")


def gpu_place(profile) -> Optional[str]:
    """The main program's place when it is a GPU ("CUDAPlace(0)"), else None."""
    places = [s.place for s in main_steps(profile) if s.place]
    return places[-1] if places and places[-1].startswith("CUDAPlace") else None


DEVICE_TIMINGS = {"cuda_event", "cupti"}  # op times taken on the device


def device_ops(profile) -> Optional[OpFigures]:
    """The summary's op figures of a GPU profile when they are device times (CUDA events,
    or torch.profiler's kernels)."""
    ops = profile.summary.ops
    if not gpu_place(profile) or ops is None or not ops.by_type:
        return None
    if DEVICE_TIMINGS & set(ops.timing.split("+")) or any(
            r.timing in DEVICE_TIMINGS for r in profile.ops):
        return ops
    return None


def with_grads(types) -> tuple:
    return tuple(types) + tuple(f"{t}_grad" for t in types)


# --- #13 ----------------------------------------------------------------------------------------
@rule
def gpu_underlying_allocations(profile) -> Optional[Advice]:
    """cudaMalloc (#13, GPU)

    The GPU pool goes to cudaMalloc during steady steps, a visible share of the step.
    """
    f = allocation_figures(profile)
    if f is None or not on_gpu(f.m) or f.m.caching_allocator:
        return None  # (PyTorch's caching allocator: cuda_allocator.py)
    flags = profile.env.flags or {}
    if f.m.strategy == "naive_best_fit":
        code = writer(profile)
        fraction = flags.get("FLAGS_fraction_of_gpu_memory_to_use", 0.92)
        change = "\n".join([
            code.set_flag("FLAGS_fraction_of_gpu_memory_to_use", 0.92,
                          f"one chunk of 92% of the free memory (now {fraction}; 0 makes every "
                          f"allocation a cudaMalloc)"),
            code.comment("or " + code.set_flag("FLAGS_allocator_strategy", "auto_growth",
                                               "grow on demand, keep freed blocks"))])
        gain = (f"~0 cudaMalloc per steady step instead of {f.per_step:.0f}: "
                f"{ms(f.alloc_s)} less per step in the calls alone" + speedup_words(f)
                + ", more without cudaFree's implicit device synchronisation")
        return allocation_advice(f, change, gain, "high", "cudaMalloc")
    change = ("# the pool is held at its cap and gives memory back to grow again: raise "
              "FLAGS_gpu_memory_limit_mb (0: the whole device) or lower the peak (GC / inplace "
              "/ batch size advice)")
    gain = (f"up to {f.speedup:.2f}x steps/s ({ms(f.alloc_s)} less per step)"
            if f.speedup else "unknown")
    return allocation_advice(f, change, gain, "medium", "cudaMalloc")


# --- #14 ----------------------------------------------------------------------------------------
MATH_FLAGS = (  # (flag, op types, what they are, advice id, its cost)
    ("FLAGS_cudnn_exhaustive_search", CONV_TYPES, "convolutions", "cudnn-exhaustive-search",
     "cuDNN tries every algorithm once per input shape (a slow first step per shape) and may "
     "pick ones needing more workspace memory (up to FLAGS_conv_workspace_size_limit MB)"),
    ("FLAGS_enable_cublas_tensor_op_math", MATMUL_TYPES, "matrix multiplications",
     "cublas-tensor-op-math",
     "matmuls run on Tensor Cores (Volta and newer) at reduced precision (TF32: 10 mantissa "
     "bits; check the loss curve)"))


@rule
def gpu_math_flags(profile) -> List[Advice]:
    """cuDNN / cuBLAS speed flags (#14)

    FLAGS_cudnn_exhaustive_search / FLAGS_enable_cublas_tensor_op_math off on a conv- or
    matmul-heavy GPU job.
    """
    ops, flags = device_ops(profile), profile.env.flags
    if ops is None or flags is None:  # flags not recorded: nothing to go on
        return []
    out = []
    for flag, types, what, advice_id, cost in MATH_FLAGS:
        share = op_types_share(profile, with_grads(types))
        if share is None or share < FLAG_SHARE or flags.get(flag) or not acts_on(profile, flag):
            continue
        out.append(Advice(
            id=advice_id, source=14, severity="medium" if share >= 0.5 else "low",
            confidence="low",
            title=f"{what.capitalize()} take {share:.0%} of GPU time with {flag} off",
            evidence=(f"{what} (forward and backward) took {share:.1%} of the "
                      f"{ms(ops.total_s / max(ops.steps, 1))} of device op time per step "
                      f"(CUDA events, {ops.steps} steady steps) on {gpu_place(profile)}, and "
                      f"{flag} is off."),
            change=writer(profile).set_flag(flag, True, cost.split(" (")[0]),
            expected_gain=(f"faster {what}: at most their {share:.0%} of the GPU op time is at "
                           f"stake (no prediction: measure it); the cost: {cost}"),
            figures={"share": share, "flag": flag, "place": gpu_place(profile)}))
    return out


# --- #8 -----------------------------------------------------------------------------------------
def _cudnn_slow(op: ProgramOp, batch) -> Optional[str]:
    """Why cuDNN is the slow choice for this op of the program record, or None."""
    if not op.attrs.get("use_cudnn"):
        return None
    base = op.type[:-len("_grad")] if op.type.endswith("_grad") else op.type
    if base == "conv2d_transpose" and batch == 1:
        return "conv2d_transpose at batch 1"
    if base == "pool2d" and op.attrs.get("global_pooling"):
        return "global pool2d"
    return None


LAYER_CALLS = {  # why cuDNN is slow -> (the layer, the arguments that avoid it)
    "conv2d_transpose at batch 1": ("conv2d_transpose", {"use_cudnn": False}),
    "global pool2d": ("pool2d", {"global_pooling": True, "use_cudnn": False})}


@rule
def cudnn_slow_ops(profile) -> Optional[Advice]:
    """cuDNN-slow ops (#8)

    conv2d_transpose at batch 1 or global pool2d with use_cudnn on, dominating GPU op time.
    """
    ops = device_ops(profile)
    program = main_ops(profile)
    if ops is None or not program or not acts_on(profile, "use_cudnn"):
        return None
    batch = _batch_size(profile)
    shares = {}  # why -> (share of GPU op time, forward ops' outputs)
    for row in ops.top:
        op = program[row.index] if row.index < len(program) else None
        why = _cudnn_slow(op, batch) if op and op.type == row.type else None
        if why is not None:
            share, outs = shares.get(why, (0.0, []))
            if not op.type.endswith("_grad"):
                outs = outs + names(op.outputs)[:1]
            shares[why] = (share + row.share, outs)
    total = sum(share for share, _ in shares.values())
    if total < DOMINANT:
        return None
    parts = "; ".join(f"{why} (use_cudnn=True{', output ' + ', '.join(outs) if outs else ''}): "
                      f"{share:.1%}" for why, (share, outs) in shares.items())
    return Advice(
        id="cudnn-slow-ops", source=8, severity="medium" if total >= 0.4 else "low",
        confidence="low",
        title=f"cuDNN ops known to be slow take {total:.0%} of GPU time",
        evidence=(f"of the device op time (CUDA events, {ops.steps} steady steps, batch "
                  f"{batch}) on {gpu_place(profile)}: {parts}. Paddle's playbook: cuDNN is "
                  f"slower than Paddle's own kernels for these."),
        change="\n".join(f"{_layer_call(profile, why)}  # for the layer(s) above"
                         for why in shares),
        expected_gain=(f"faster {', '.join(shares)}: at most their {total:.0%} of the GPU op "
                       f"time is at stake (no prediction: measure it)"),
        figures={"share": total, "by_case": {k: v[0] for k, v in shares.items()},
                 "batch_size": batch, "place": gpu_place(profile)})


def _layer_call(profile, why: str) -> str:
    layer, args = LAYER_CALLS[why]
    return writer(profile).layer_call(layer, **args)


def _batch_size(profile) -> Optional[int]:
    """The steady steps' median batch size (None: unknown)."""
    throughput = profile.summary.throughput
    return throughput.batch_size if throughput is not None else None


# --- #24 ----------------------------------------------------------------------------------------
def place_gpu_samples(profile, place: str) -> Optional[GpuFigures]:
    """The summary's NVML figures of the place's GPU (the only one sampled, or the one with the
    place's index), None without enough utilisation samples."""
    gpus = profile.summary.gpus
    index = int(place[place.index("(") + 1:-1]) if "(" in place else 0
    gpu = gpus[0] if len(gpus) == 1 else next((g for g in gpus if g.gpu == index), None)
    util = gpu.util_percent if gpu is not None else None
    return gpu if util is not None and util.n >= MIN_UTIL_SAMPLES else None


def device_busy_share(profile) -> Optional[float]:
    """Device op time per step over the step's compute time (None without device op times)."""
    ops, b = device_ops(profile), profile.summary.breakdown_s
    if ops is None or b is None or not b.compute_s or not ops.steps:
        return None
    return ops.total_s / ops.steps / b.compute_s


@rule
def gpu_underused(profile) -> Optional[Advice]:
    """GPU utilisation (#24)

    NVML utilisation low, explained by the data or by a small batch.
    """
    place = gpu_place(profile)
    gpu = place_gpu_samples(profile, place) if place and enough_steps(profile) else None
    if gpu is None or gpu.util_percent.mean >= LOW_UTIL_PERCENT:
        return None
    util = gpu.util_percent.mean
    seen = (f"NVML put GPU {gpu.gpu} ({place}) at {util:.0f}% utilisation on average "
            f"over {gpu.util_percent.n} samples")
    if (profile.summary.input_share or 0.0) >= DATA_SHARE:
        return _data_advice(profile, seen, util)
    return _batch_advice(profile, seen, util)


def _data_advice(profile, seen: str, util: float) -> Advice:
    f = overlap_figures(profile.summary)
    loader = main_loader(profile)
    change = (async_reader_code(profile) if loader is None else
              "# the DataLoader's queue runs dry: more producer workers and a larger capacity "
              "(see the reader advice for the numbers)")
    return Advice(
        id="gpu-underused-data", source=24, severity="medium", confidence="high",
        title=f"The GPU is {util:.0f}% busy: {f['input_share']:.0%} of each step waits for data",
        evidence=(f"{seen}, while {f['input_share']:.1%} of each {ms(f['cycle_s'])} step waits "
                  f"for input ({ms(f['input_s'])}) against {ms(f['rest_s'])} computing and "
                  f"fetching: the GPU idles while the batch is prepared."),
        change=change, expected_gain=overlap_gain(f), expected_speedup=f["speedup"],
        figures={"util_percent": util, **f})


def _batch_advice(profile, seen: str, util: float) -> Optional[Advice]:
    batch = _batch_size(profile)
    busy = device_busy_share(profile)
    small = batch is not None and batch <= SMALL_BATCH
    if not batch or not (small or (busy is not None and busy < BUSY_LOW)):
        return None  # utilisation is low for a reason this profile does not show
    m = profile.summary.memory
    peak = m.peak_reserved_share if m is not None else None
    if peak is not None and peak >= FULL:
        return None  # no memory to grow the batch into (the memory advice speaks)
    why = [f"batch {batch}" + (f" (at most {SMALL_BATCH} rarely fills a GPU)" if small else "")]
    if busy is not None:
        why.append(f"the device ran kernels for {busy:.0%} of the step's compute time "
                   f"(CUDA events): the rest is launching small kernels")
    if peak is not None:
        why.append(f"memory peaked at {human_bytes(m.peak_reserved_bytes)} of "
                   f"{human_bytes(m.capacity_bytes)} ({peak:.0%})")
    return Advice(
        id="gpu-underused-batch", source=24, severity="medium",
        confidence="medium" if busy is not None else "low",
        title=f"The GPU is {util:.0f}% busy at batch {batch}: use a bigger batch",
        evidence=f"{seen}, with {'; '.join(why)}; the step waits little for data.",
        change=writer(profile).batch_size(
            batch * 2, "then 4x: keep the largest that raises samples/s (paddletune tune "
                       "measures it); scale the learning rate with it"),
        expected_gain=(f"more samples/s as utilisation rises from {util:.0f}% (fewer, larger "
                       f"kernels per sample); steps/s falls, so judge by samples/s"),
        figures={"util_percent": util, "batch_size": batch, "device_busy_share": busy,
                 "peak_reserved_share": peak})
