"""The GPU advisors (paddletune/advisors/gpu.py: #8, #13 on a GPU, #14, #24) on synthetic
profiles: each fires on a GPU profile with its measured evidence quoted, and stays silent on the
same job on a CPU place, with host-timed ops, or when tuned."""

import pytest

from paddletune import advisors
from paddletune.advisors import gpu, memory
from paddletune.profile import load
from profiles import (make_profile, memory_records, nvml_samples, ops_records_in_steps,
                      step_records)

GPU = "CUDAPlace(0)"
CONV_NET = [("conv2d", 0.004), ("relu", 0.0005), ("pool2d", 0.0005), ("mul", 0.001),
            ("conv2d_grad", 0.006), ("mul_grad", 0.001), ("momentum", 0.0005)]
MLP = [("mul", 0.003), ("relu", 0.0005), ("mul_grad", 0.004), ("momentum", 0.0005)]


def _steps(place=GPU, **kwargs):
    rows = step_records(**kwargs)
    for row in rows:
        row["place"] = place
    return rows


def _program(ops, attrs=None):
    """A program record of `ops` [(type, dur)], op i with attrs[i] when given."""
    records = []
    for i, (op_type, _dur) in enumerate(ops):
        op = {"type": op_type, "role": 1 if op_type.endswith("_grad") else 0,
              "inputs": {"X": [f"v{i}"]}, "outputs": {"Out": [f"v{i + 1}"]}}
        if attrs and i in attrs:
            op["attrs"] = attrs[i]
        records.append(op)
    return {"type": "program", "t": 0.05, "program": 1, "compile_s": 0.001, "ops": records}


def _ops(steps, ops, timing="cuda_event"):
    rows = ops_records_in_steps(steps, ops)
    if timing != "host":
        for r in rows:
            r["timing"] = timing
    probe = {"type": "probe", "name": "ops", "available": True, "reason": None,
             "overhead_s": 0.001, "in_step": True, "result": {"op_types": 4, "timing": timing}}
    return rows + [probe]


def _profile(tmp_path, ops=CONV_NET, place=GPU, timing="cuda_event", attrs=None, flags=None,
             extra=(), **step_kwargs):
    steps = _steps(place, **step_kwargs)
    records = [_program(ops, attrs), *_ops(steps, ops, timing), *extra]
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=records,
                        env={"flags": flags or {}})
    return load(path)


def _ids(profile, rule):
    return [a.id for a in advisors.advise(profile, [rule])]


@pytest.fixture
def runtime_acts(monkeypatch):
    """#8 and #14 as they will be once the runtime acts on the flags and use_cudnn."""
    monkeypatch.setattr(gpu, "acts_on", lambda profile, name: True)


# --- #14 ----------------------------------------------------------------------------------------
def test_conv_heavy_gpu_job_gets_cudnn_exhaustive_search(tmp_path, runtime_acts):
    (advice,) = advisors.advise(_profile(tmp_path), [gpu.gpu_math_flags])
    assert advice.id == "cudnn-exhaustive-search" and advice.source == 14
    assert "FLAGS_cudnn_exhaustive_search=True" in advice.change
    assert "74.1%" in advice.evidence and "CUDA events" in advice.evidence
    assert advice.figures["share"] == pytest.approx(10 / 13.5)
    assert "workspace" in advice.expected_gain and advice.severity == "medium"


def test_matmul_heavy_gpu_job_gets_tensor_op_math_with_its_precision_cost(tmp_path, runtime_acts):
    (advice,) = advisors.advise(_profile(tmp_path, MLP), [gpu.gpu_math_flags])
    assert advice.id == "cublas-tensor-op-math"
    assert "FLAGS_enable_cublas_tensor_op_math=True" in advice.change
    assert "precision" in advice.expected_gain


def test_math_flags_silent_when_on_on_cpu_or_host_timed(tmp_path, runtime_acts):
    on = {"FLAGS_cudnn_exhaustive_search": True}
    assert _ids(_profile(tmp_path, flags=on), gpu.gpu_math_flags) == []
    assert _ids(_profile(tmp_path, place="CPUPlace"), gpu.gpu_math_flags) == []
    assert _ids(_profile(tmp_path, timing="host"), gpu.gpu_math_flags) == []


def test_no_cudnn_or_cublas_advice_while_the_runtime_ignores_what_it_would_change(tmp_path):
    """The runtime records the #14 flags and use_cudnn without acting on them: advice to
    change them could not be verified by measuring, so there is none yet."""
    profile = _profile(tmp_path)  # declares the embedded runtime's knobs, as a session does
    assert not gpu.acts_on(profile, "FLAGS_cudnn_exhaustive_search")
    assert not gpu.acts_on(profile, "FLAGS_enable_cublas_tensor_op_math")
    assert not gpu.acts_on(profile, "use_cudnn")
    assert gpu.acts_on(profile, "FLAGS_fraction_of_gpu_memory_to_use")
    assert _ids(profile, gpu.gpu_math_flags) == []
    assert _ids(_profile(tmp_path, GLOBAL_POOL, attrs=POOL_ATTRS), gpu.cudnn_slow_ops) == []


# --- #8 -----------------------------------------------------------------------------------------
GLOBAL_POOL = [("conv2d", 0.001), ("pool2d", 0.004), ("mul", 0.001), ("pool2d_grad", 0.003),
               ("conv2d_grad", 0.001)]
POOL_ATTRS = {1: {"use_cudnn": True, "global_pooling": True, "pooling_type": "avg"},
              3: {"use_cudnn": True, "global_pooling": True, "pooling_type": "avg"}}


def test_global_pool2d_dominating_with_cudnn_gets_use_cudnn_false(tmp_path, runtime_acts):
    profile = _profile(tmp_path, GLOBAL_POOL, attrs=POOL_ATTRS)
    (advice,) = advisors.advise(profile, [gpu.cudnn_slow_ops])
    assert advice.id == "cudnn-slow-ops" and advice.source == 8
    assert "global pool2d (use_cudnn=True, output v2): 70.0%" in advice.evidence
    assert "global_pooling=True, use_cudnn=False" in advice.change
    assert advice.figures["share"] == pytest.approx(0.7)


def test_conv2d_transpose_fires_only_at_batch_1(tmp_path, runtime_acts):
    ops = [("conv2d_transpose", 0.004), ("relu", 0.001), ("conv2d_transpose_grad", 0.004)]
    attrs = {0: {"use_cudnn": True}, 2: {"use_cudnn": True}}
    at_1 = _profile(tmp_path, ops, attrs=attrs, batch_size=1)
    (advice,) = advisors.advise(at_1, [gpu.cudnn_slow_ops])
    assert "conv2d_transpose at batch 1" in advice.evidence and "batch 1" in advice.evidence
    assert _ids(_profile(tmp_path, ops, attrs=attrs, batch_size=64), gpu.cudnn_slow_ops) == []


def test_cudnn_slow_ops_silent_with_cudnn_off_or_on_cpu(tmp_path, runtime_acts):
    off = {i: {**a, "use_cudnn": False} for i, a in POOL_ATTRS.items()}
    assert _ids(_profile(tmp_path, GLOBAL_POOL, attrs=off), gpu.cudnn_slow_ops) == []
    cpu = _profile(tmp_path, GLOBAL_POOL, attrs=POOL_ATTRS, place="CPUPlace")
    assert _ids(cpu, gpu.cudnn_slow_ops) == []


# --- #13 ----------------------------------------------------------------------------------------
def _alloc_profile(tmp_path, place, strategy="naive_best_fit", allocs=40, alloc_s=0.002):
    steps = _steps(place)
    mem = memory_records(steps, system_allocs=allocs, system_alloc_s=alloc_s,
                         result={"place": place, "strategy": strategy})
    path = make_profile(tmp_path / "m.jsonl", steps=steps, extra=mem,
                        env={"flags": {"FLAGS_fraction_of_gpu_memory_to_use": 0.0}})
    return load(path)


def test_cudamalloc_per_allocation_gets_the_gpu_fraction_flag(tmp_path):
    profile = _alloc_profile(tmp_path, GPU)
    (advice,) = advisors.advise(profile, [gpu.gpu_underlying_allocations])
    assert advice.id == "underlying-allocations" and advice.source == 13
    assert "cudaMalloc" in advice.title and "40 underlying (cudaMalloc)" in advice.evidence
    assert "export FLAGS_fraction_of_gpu_memory_to_use=0.92" in advice.change
    assert "now 0.0" in advice.change and "FLAGS_allocator_strategy=auto_growth" in advice.change
    assert advice.expected_speedup == pytest.approx(0.010 / 0.008)
    assert _ids(profile, memory.underlying_allocations) == []  # one advice, not two


def test_gpu_pool_at_its_cap_names_the_gpu_limit_flag(tmp_path):
    profile = _alloc_profile(tmp_path, GPU, strategy="auto_growth", allocs=2)
    (advice,) = advisors.advise(profile, [gpu.gpu_underlying_allocations])
    assert "FLAGS_gpu_memory_limit_mb" in advice.change


def test_cpu_and_quiet_pools_get_no_gpu_allocation_advice(tmp_path):
    cpu = _alloc_profile(tmp_path, "CPUPlace")
    assert _ids(cpu, gpu.gpu_underlying_allocations) == []
    assert _ids(cpu, memory.underlying_allocations) == ["underlying-allocations"]
    quiet = _alloc_profile(tmp_path, GPU, allocs=0, alloc_s=0.0)
    assert _ids(quiet, gpu.gpu_underlying_allocations) == []


# --- #24 ----------------------------------------------------------------------------------------
def _util_profile(tmp_path, util, place=GPU, ops=MLP, **step_kwargs):
    return _profile(tmp_path, ops, place=place, extra=nvml_samples(n=5, util_percent=util),
                    **step_kwargs)


def test_low_utilisation_with_data_wait_gets_a_faster_reader(tmp_path):
    profile = _util_profile(tmp_path, 20.0, wall_s=0.010, gap_s=0.005)
    (advice,) = advisors.advise(profile, [gpu.gpu_underused])
    assert advice.id == "gpu-underused-data" and advice.source == 24
    assert "at 20% utilisation on average over 5 samples" in advice.evidence
    assert "waits for input" in advice.evidence and "DataLoader.from_generator" in advice.change
    assert advice.expected_speedup > 1.2


def test_low_utilisation_at_a_small_batch_without_data_wait_gets_a_bigger_batch(tmp_path):
    # 8 ms of device op time in a ~9.3 ms compute: busy, but the batch is small
    profile = _util_profile(tmp_path, 30.0, batch_size=16)
    (advice,) = advisors.advise(profile, [gpu.gpu_underused])
    assert advice.id == "gpu-underused-batch"
    assert "batch 16 (at most 32" in advice.evidence and "BATCH_SIZE = 32" in advice.change
    assert "samples/s" in advice.expected_gain


def test_launch_bound_large_batch_gets_a_bigger_batch_from_the_device_busy_share(tmp_path):
    tiny_kernels = [("mul", 0.001), ("relu", 0.0002), ("mul_grad", 0.001)]
    profile = _util_profile(tmp_path, 30.0, ops=tiny_kernels, batch_size=256)
    (advice,) = advisors.advise(profile, [gpu.gpu_underused])
    assert advice.id == "gpu-underused-batch" and "(CUDA events)" in advice.evidence
    assert advice.figures["device_busy_share"] < gpu.BUSY_LOW


def test_busy_gpu_cpu_place_or_unexplained_low_use_get_no_utilisation_advice(tmp_path):
    assert _ids(_util_profile(tmp_path, 90.0, batch_size=16), gpu.gpu_underused) == []
    cpu = _util_profile(tmp_path, 20.0, place="CPUPlace", gap_s=0.005)
    assert _ids(cpu, gpu.gpu_underused) == []
    # low use at batch 256 with the device busy and no data wait: nothing the profile explains
    assert _ids(_util_profile(tmp_path, 30.0, batch_size=256), gpu.gpu_underused) == []


def test_a_well_tuned_gpu_job_gets_no_gpu_advice(tmp_path):
    on = {"FLAGS_cudnn_exhaustive_search": True, "FLAGS_enable_cublas_tensor_op_math": True}
    profile = _profile(tmp_path, CONV_NET, flags=on, extra=nvml_samples(n=5, util_percent=95.0))
    rules = [gpu.gpu_math_flags, gpu.cudnn_slow_ops, gpu.gpu_underused,
             gpu.gpu_underlying_allocations]
    assert advisors.advise(profile, rules) == []
