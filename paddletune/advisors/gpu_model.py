"""docs/advice.md #28: the model's precision, and the GPU's fast paths for it, read from the
model's census (records.ModelEvent: the leaf modules of the first training step, the parameters by
dtype, autocast, the convolutions' input layout, the GPU's compute capability and the GPU math
settings then in force; the PyTorch and Paddle 3 sources record it):

- cudnn-benchmark: convolutions with cuDNN's algorithm search off;
- tf32-matmul: float32 matrix products on an Ampere or newer GPU with TF32 off;
- mixed-precision: float32 convolutions or matrix products on a GPU with Tensor Cores (compute
  capability 7.0 and newer) without autocast;
- channels-last: convolutions under autocast on NCHW inputs;
- float64-model (on the CPU too): most parameters float64, often by accident (NumPy's default
  dtype carried into the model);
- cpu-autocast-slow: the model under torch.autocast("cpu") to a dtype this CPU has no oneDNN
  kernels for (bfloat16 without AVX-512 or AMX): 2.8-8.7x slower steps than float32.

The profile holds no device time per layer, so none of these predicts its gain: each says what
bounds it and how to measure it. Each is silent where the framework's code writer cannot write
the change (a framework without the setting).
"""

from typing import Dict, List, Optional, Tuple

from ..profile.records import ModelEvent
from ..sources.eager.census import conv_op, matmul_op
from .base import Advice, rule
from .facts import enough_steps, main_loader, ms, script, writer
from .gpu import gpu_place

CONV_WORD = "Conv"  # Conv1d/2d/3d, ConvTranspose2d, LazyConv2d, ...
MATMUL_MODULES = ("Linear", "Bilinear", "LazyLinear", "MultiheadAttention", "LSTM", "GRU",
                  "RNN", "MultiHeadAttention", "SimpleRNN")  # (the last two: Paddle's)
TENSOR_CORES = (7, 0)  # Volta: float16 Tensor Cores
TF32_CORES = (8, 0)  # Ampere: TF32 and bfloat16
DTYPE_SHARE = 0.5  # of the parameter elements: the model's dtype (float32, float64)


def model_on_gpu(profile) -> Optional[Tuple[ModelEvent, str, Optional[Tuple[int, int]]]]:
    """(the model's census, its GPU place, the compute capability) of a GPU job with a census
    and steady steps; None otherwise."""
    census = profile.last_event("model")
    place = gpu_place(profile)
    if census is None or place is None or not enough_steps(profile):
        return None
    return census, place, capability_of(census.capability)


def capability_of(text: Optional[str]) -> Optional[Tuple[int, int]]:
    try:
        major, minor = (text or "").split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def layer_calls(census: ModelEvent) -> Dict[str, int]:
    """{"convolutions": calls, "matrix products": calls} of the first step."""
    convs = sum(n for name, n in census.modules.items() if CONV_WORD in name or conv_op(name))
    matmuls = sum(n for name, n in census.modules.items()
                  if name in MATMUL_MODULES or matmul_op(name))  # (ops: a static program's)
    return {"convolutions": convs, "matrix products": matmuls}


def float32_share(census: ModelEvent) -> float:
    total = sum(census.params.values())
    return census.params.get("float32", 0) / total if total else 0.0


def _seen(census: ModelEvent, place: str) -> str:
    return f"the model's first training step on {place}: {census.message}"


def _calls(n: int, what: str) -> str:
    return f"{n} {what} call{'s' if n != 1 else ''}"


INPUT_BOUND = 0.5  # input share of the step above which the model's speed matters less


def _severity(profile, severity: str) -> str:
    """`severity`, lowered to low while the step mostly waits for data (the input advice
    comes first)."""
    share = profile.summary.input_share or 0.0
    return "low" if share >= INPUT_BOUND else severity


def _measure(profile, change: str) -> str:
    return (f"not predicted (the profile has no device time per layer): at most the "
            f"{change} layers' share of the step is at stake; measure it: profile the job "
            f"again with the change (paddletune profile {script(profile)}) and compare the "
            f"two reports' samples/s")


@rule
def gpu_model_math(profile) -> List[Advice]:
    """the GPU's fast paths for the model (#28)

    cuDNN autotuning, TF32, mixed precision, channels_last, from the model's census.
    """
    found = model_on_gpu(profile)
    if found is None:
        return []
    census, place, capability = found
    calls = layer_calls(census)
    out = [_cudnn_benchmark(profile, census, place, calls),
           _tf32(profile, census, place, capability, calls),
           _mixed_precision(profile, census, place, capability, calls),
           _channels_last(profile, census, place, capability, calls)]
    return [a for a in out if a is not None]


def _setting_off(profile, census: ModelEvent, setting: Optional[str]) -> bool:
    """Whether the setting named `setting` was recorded off: by the census, else (a profile
    from before the census recorded settings) in the settings the profile lists."""
    settings = census.settings or profile.env.flags or {}
    return setting is not None and settings.get(setting) is False


def _cudnn_benchmark(profile, census, place, calls) -> Optional[Advice]:
    code = writer(profile)
    setting, change = code.cudnn_autotune_setting, code.cudnn_autotune()
    if change is None or not calls["convolutions"] or not _setting_off(profile, census, setting):
        return None
    varying = _varying_feeds(profile)
    caveat = (f"; the batches' shapes vary ({', '.join(varying)}): cuDNN times its "
              f"algorithms again for each new shape, so pad or bucket them to few shapes "
              f"first" if varying else "")
    return Advice(
        id="cudnn-benchmark", source=28, severity="low" if varying else _severity(
            profile, "medium"),
        confidence="low",
        title=f"{_calls(calls['convolutions'], 'convolution')} a step with cuDNN's "
              f"algorithm search off",
        evidence=(f"{_seen(census, place)}; {setting} is False: cuDNN runs its "
                  f"default algorithm for each convolution instead of the fastest for its "
                  f"shape" + caveat + "."),
        change=change,
        expected_gain=_measure(profile, "convolution") + "; the first step of each input "
                      "shape is slower (the search)",
        figures={"convolutions": calls["convolutions"], "varying_feeds": varying,
                 "place": place})


def _varying_feeds(profile) -> List[str]:
    """The main DataLoader's fed tensors whose shape varies between batches."""
    loader = main_loader(profile)
    shapes = loader.shapes if loader is not None else {}
    return sorted(name for name, s in shapes.items() if s.varying or s.rank_varies)


def _tf32(profile, census, place, capability, calls) -> Optional[Advice]:
    code = writer(profile)
    setting, change = code.tf32_setting, code.tf32_matmul()
    if (change is None or capability is None or capability < TF32_CORES or census.autocast
            or not calls["matrix products"] or float32_share(census) < DTYPE_SHARE
            or not _setting_off(profile, census, setting)):
        return None
    return Advice(
        id="tf32-matmul", source=28, severity=_severity(profile, "medium"),
        confidence="low",
        title=f"float32 matrix products on a compute-capability {census.capability} GPU "
              f"without TF32",
        evidence=(f"{_seen(census, place)}; {setting} is False: "
                  f"{_calls(calls['matrix products'], 'matrix-product')} a step run in full "
                  f"float32 instead of on the Tensor "
                  f"Cores (TF32: float32's range, a 10-bit mantissa; convolutions use it "
                  f"already by default)."),
        change=change,
        expected_gain=_measure(profile, "matrix-product") + "; the cost: products rounded to "
                      "TF32's precision (check the loss curve)",
        figures={"matrix_products": calls["matrix products"], "capability": census.capability,
                 "place": place})


def _mixed_precision(profile, census, place, capability, calls) -> Optional[Advice]:
    heavy = calls["convolutions"] + calls["matrix products"]
    bf16 = capability is not None and capability >= TF32_CORES
    change = writer(profile).mixed_precision(bf16)
    if (change is None or capability is None or capability < TENSOR_CORES or census.autocast
            or not heavy or float32_share(census) < DTYPE_SHARE):
        return None
    dtype = "bfloat16" if bf16 else "float16 (with loss scaling)"
    return Advice(
        id="mixed-precision", source=28, severity=_severity(profile, "medium"),
        confidence="low",
        title="A float32 model without autocast on a GPU with Tensor Cores",
        evidence=(f"{_seen(census, place)}: {_calls(heavy, 'convolution and matrix-product')}"
                  f" a step run in float32, {float32_share(census):.0%} of the parameters are "
                  f"float32, and no layer ran under autocast."),
        change=change,
        expected_gain=_measure(profile, "convolution and matrix-product") + f"; in {dtype} "
                      f"their activations also take half the memory (a larger batch fits); "
                      f"the cost: reduced precision (check the loss curve)",
        figures={"layers": heavy, "float32_share": float32_share(census), "bf16": bf16,
                 "place": place})


def _channels_last(profile, census, place, capability, calls) -> Optional[Advice]:
    device = "cuda" + place[len("CUDAPlace"):].replace("(", ":").rstrip(")")
    change = writer(profile).channels_last(device)
    if (change is None or not calls["convolutions"] or census.conv_channels_last is not False
            or not census.autocast or capability is None or capability < TENSOR_CORES):
        return None
    return Advice(
        id="channels-last", source=28, severity="low", confidence="low",
        title="Convolutions under autocast on NCHW inputs",
        evidence=(f"{_seen(census, place)}: the convolutions ran in reduced precision on "
                  f"NCHW (channels-first) inputs; cuDNN's Tensor Core kernels work in NHWC "
                  f"(channels_last) and transpose NCHW tensors around each convolution."),
        change=change,
        expected_gain=_measure(profile, "convolution"),
        figures={"convolutions": calls["convolutions"], "place": place})


@rule
def model_float64(profile) -> Optional[Advice]:
    """a float64 model (#28)

    Most of the optimizer's parameters are float64.
    """
    census = profile.last_event("model")
    change = writer(profile).float32_model()
    if census is None or change is None or not enough_steps(profile):
        return None
    total = sum(census.params.values())
    share = census.params.get("float64", 0) / total if total else 0.0
    if share < DTYPE_SHARE:
        return None
    place = gpu_place(profile)
    where = (f"on a GPU ({place}) float64 runs at 1/2 (data-centre GPUs) to 1/64 (most "
             f"others) of float32's rate" if place else
             "on the CPU a float32 product does twice the work per instruction (twice the "
             "numbers in each SIMD register)")
    return Advice(
        id="float64-model", source=28, severity="high" if place else "medium",
        confidence="medium",
        title=f"{share:.0%} of the model's parameters are float64",
        evidence=(f"{census.message}. {census.params.get('float64', 0):,} of the optimizer's "
                  f"{total:,} parameter elements are float64, so the layers compute in float64; "
                  f"{where}. Training rarely needs it; a NumPy array's default dtype carried "
                  f"into the model is the usual cause."),
        change=change,
        expected_gain=(_float64_bound(profile) + "; and half the memory for the parameters, "
                       "their gradients, optimizer state and activations; measure it: profile "
                       f"the job again with the change (paddletune profile {script(profile)}) "
                       "and compare the two reports' samples/s"),
        figures={"float64_share": share, "params": dict(census.params), "place": place})


FLOAT64_COST = 2.0  # a float64 layer's time over float32's on the CPU: 2.06-2.07x measured
# on the reference MLP (benchmarks/bench_float64.py, 1 and 2 threads)


def _compute_faster(profile, factor: float) -> Optional[float]:
    """Steps/s factor if the step's compute ran `factor` x faster and the rest (the wait for
    data) did not change; None where the step's compute time is not measured."""
    s = profile.summary
    compute, cycle = s.breakdown_s.compute_s, s.cycle_s.mean
    if not compute or not cycle or compute > cycle:
        return None
    return cycle / (cycle - compute * (1 - 1 / factor))


def _float64_bound(profile) -> str:
    """The most the step can gain: its compute at float32's rate (none of the rest)."""
    bound = _compute_faster(profile, FLOAT64_COST)
    if bound is None:
        return "not predicted (the step's compute time is not measured)"
    compute = profile.summary.breakdown_s.compute_s
    return (f"up to {bound:.2f}x steps/s if the step's {ms(compute)} of compute were all "
            f"float64 layers, run at float32's rate (on the CPU {FLOAT64_COST:.0f}x faster: an "
            f"MLP's float64 step took 2.06x its float32 step, benchmarks/bench_float64.py; on "
            f"a GPU more); "
            f"not predicted beyond that bound (the profile has no time per layer)")


AUTOCAST_COST = (2.78, 8.73)  # a step under the CPU's autocast to bfloat16 over the same
# step in float32, on a CPU without oneDNN's bfloat16 kernels (AVX2): a small CNN's and an
# MLP's (benchmarks/bench_cpu_autocast.py, 1 thread; the products are 10-60x slower alone)


@rule
def cpu_autocast_slow(profile) -> Optional[Advice]:
    """the CPU's autocast without kernels for its dtype (#28)

    The model ran under torch.autocast("cpu") on a CPU where oneDNN has no kernels for the
    dtype: the products and convolutions run on reference kernels, slower than float32.
    """
    census = profile.last_event("model")
    if census is None or not census.cpu_autocast or census.cpu_kernels is not False \
            or gpu_place(profile) is not None or not enough_steps(profile):
        return None
    dtype = census.cpu_autocast
    change = writer(profile).cpu_autocast_off(dtype)
    low, high = (_compute_faster(profile, cost) for cost in AUTOCAST_COST)
    if change is None:
        return None
    compute = profile.summary.breakdown_s.compute_s
    return Advice(
        id="cpu-autocast-slow", source=28, severity=_severity(profile, "high"),
        confidence="medium",
        title=f"Autocast to {dtype} on a CPU without {dtype} kernels",
        evidence=(f"{census.message}. The model's first training step ran under "
                  f"torch.autocast('cpu') to {dtype}, and oneDNN has no {dtype} kernels on "
                  f"this CPU (they need AVX-512 or AMX): PyTorch runs the matrix products and "
                  f"convolutions in {dtype} on reference kernels, slower than in float32, and "
                  f"adds the casts around them."),
        change=change,
        expected_speedup=low, expected_range=(low, high) if low is not None else None,
        expected_gain=(f"{low:.2f}x to {high:.2f}x steps/s if the step's {ms(compute)} of "
                       f"compute ran at float32's rate: a step under this autocast took "
                       f"{AUTOCAST_COST[0]:.2f}x (a small CNN) to {AUTOCAST_COST[1]:.2f}x (an "
                       f"MLP) the float32 step on such a CPU "
                       f"(benchmarks/bench_cpu_autocast.py); measure it: profile the job "
                       f"again with the change (paddletune profile {script(profile)}) and "
                       f"compare the two reports' samples/s"
                       if low is not None else _measure(profile, "autocast")),
        figures={"cpu_autocast": dtype, "cpu_kernels": False, "compute_s": compute,
                 "speedup_low": low, "speedup_high": high})
