"""PyTorch's CUDA caching allocator (advisors/cuda_allocator.py, #13 for PyTorch on a GPU) on
synthetic profiles: the advice fires on each kind of strain the memory figures show, with the
figures quoted and PYTORCH_CUDA_ALLOC_CONF written for the job's own configuration; it stays
silent on a settled cache, on a CPU or a Paddle pool, and with expandable segments already on;
tune gets the knob and tries the advice first."""

import pytest

from paddletune import advisors
from paddletune.advisors import cuda_allocator, gpu
from paddletune.profile import load
from paddletune.tune import proposals
from paddletune.tune import space as sp
from profiles import make_profile, memory_records, source_info, step_records

GIB = 1 << 30
SETTLED = {"place": "CUDAPlace(0)", "strategy": "caching", "capacity": 80 * GIB,
           "peak_allocated": 20 * GIB, "peak_reserved": 24 * GIB, "fragmentation": 0.05,
           "retries": 0}


def _profile(tmp_path, pool=None, conf=None, system_allocs=0, oom=None, framework="torch",
             name="p.jsonl"):
    pool = {**SETTLED, **(pool or {})}
    steps = step_records()
    for row in steps:
        row["place"] = pool["place"]
    memory = memory_records(steps, system_allocs=system_allocs, oom=oom, result=pool)
    env_vars = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf is not None else {}
    return load(make_profile(tmp_path / name, steps=steps, extra=memory,
                             env={"env_vars": env_vars}, source=source_info(framework)))


def _advice(profile):
    return advisors.advise(profile, [cuda_allocator.cuda_allocator_config])


def test_retries_after_flushing_the_cache_get_expandable_segments(tmp_path):
    (advice,) = _advice(_profile(tmp_path, {"retries": 7}))
    assert advice.id == "cuda-allocator-config" and advice.source == 13
    assert advice.severity == "high" and advice.confidence == "medium"
    assert "flushed its cache 7 times" in advice.title
    assert "7 allocations were retried" in advice.evidence
    assert "PYTORCH_CUDA_ALLOC_CONF unset" in advice.evidence
    assert advice.change.splitlines()[0].startswith(
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert "os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'" in advice.change
    assert advice.expected_speedup is None and "paddletune tune" in advice.expected_gain


def test_the_jobs_own_configuration_is_kept_and_expandable_segments_added(tmp_path):
    (advice,) = _advice(_profile(tmp_path, {"retries": 1}, conf="max_split_size_mb:128"))
    assert advice.figures["suggested_conf"] == "max_split_size_mb:128,expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128)" in advice.evidence


def test_a_job_configured_through_the_other_name_keeps_it(tmp_path):
    """PyTorch reads PYTORCH_ALLOC_CONF too: a job that set only that one gets it changed."""
    steps = step_records()
    for row in steps:
        row["place"] = "CUDAPlace(0)"
    memory = memory_records(steps, result={**SETTLED, "retries": 2})
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=memory,
                                env={"env_vars": {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}},
                                source=source_info("torch")))
    (advice,) = _advice(profile)
    assert advice.change.startswith(
        "export PYTORCH_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True")
    knob = sp.build_space(profile).knobs["PYTORCH_CUDA_ALLOC_CONF"]
    assert (knob.key, knob.current) == ("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")


def test_steady_cudamalloc_calls_get_a_medium(tmp_path):
    (advice,) = _advice(_profile(tmp_path, system_allocs=2))
    assert advice.severity == "medium" and advice.confidence == "low"
    assert "2.0 cudaMalloc calls per step" in advice.title
    assert advice.figures["mallocs_per_step"] == pytest.approx(2.0)


def test_fragmentation_counts_only_near_the_capacity(tmp_path):
    near = {"fragmentation": 0.4, "peak_reserved": 70 * GIB, "peak_allocated": 60 * GIB}
    (advice,) = _advice(_profile(tmp_path, near))
    assert "40% of the reserved GPU memory is stranded" in advice.title
    assert advice.figures["stranded_bytes"] == int(0.4 * 70 * GIB)
    assert "28.0 GiB" in advice.expected_gain
    far = {"fragmentation": 0.4, "peak_reserved": 30 * GIB}
    assert _advice(_profile(tmp_path, far, name="far.jsonl")) == []


def test_an_oom_with_enough_memory_cached_is_fragmentation(tmp_path):
    oom = {"place": "CUDAPlace(0)", "requested": 2 * GIB, "allocated": 70 * GIB,
           "reserved": 76 * GIB, "capacity": 80 * GIB, "batch_size": 64}
    (advice,) = _advice(_profile(tmp_path, oom=oom))
    assert advice.severity == "high"
    assert "with 6.0 GiB cached" in advice.title
    assert "asked for 2.0 GiB while 6.0 GiB was reserved" in advice.evidence
    short = {**oom, "reserved": 71 * GIB}  # 1 GiB cached: the request did not fit anyway
    assert _advice(_profile(tmp_path, oom=short, name="short.jsonl")) == []


def test_silent_on_a_settled_cache_the_cpu_a_paddle_pool_or_with_expandable_segments(tmp_path):
    assert _advice(_profile(tmp_path)) == []
    on = _profile(tmp_path, {"retries": 3}, conf="expandable_segments:True", name="on.jsonl")
    assert _advice(on) == []
    in_script = _profile(tmp_path, {"retries": 3,  # (set in os.environ by the script itself)
                                    "strategy": "caching (expandable_segments:True)"},
                         name="in_script.jsonl")
    assert _advice(in_script) == []
    cpu = _profile(tmp_path, {"retries": 3, "place": "CPUPlace"}, name="cpu.jsonl")
    assert _advice(cpu) == []
    paddle = _profile(tmp_path, {"retries": 3, "strategy": "auto_growth"}, framework="paddle",
                      name="paddle.jsonl")
    assert _advice(paddle) == []


def test_the_paddle_gpu_rule_leaves_the_caching_allocator_to_this_one(tmp_path):
    profile = _profile(tmp_path, system_allocs=40)
    assert advisors.advise(profile, [gpu.gpu_underlying_allocations]) == []
    assert [a.id for a in _advice(profile)] == ["cuda-allocator-config"]


def test_tune_gets_the_knob_and_tries_the_advice_first(tmp_path):
    profile = _profile(tmp_path, {"retries": 2}, conf="max_split_size_mb:128")
    space = sp.build_space(profile)
    knob = space.knobs["PYTORCH_CUDA_ALLOC_CONF"]
    assert knob.section == "env" and knob.current == "max_split_size_mb:128"
    assert knob.alternatives() == ["max_split_size_mb:128,expandable_segments:True"]
    tried, _ = proposals.proposals(_advice(profile), space)
    assert tried == [("cuda-allocator-config", {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"})]
    setting = dict(tried[0][1])
    assert sp.to_env(setting, space) == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}
    assert sp.code_lines(setting, space) == [
        "export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True"]
    assert "PYTORCH_CUDA_ALLOC_CONF" not in sp.build_space(_profile(
        tmp_path, name="settled.jsonl")).knobs


def test_a_space_spec_names_the_variable_for_a_pytorch_job_only():
    space = sp.Space(framework="torch")
    sp.apply_spec(space, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert space.knobs["PYTORCH_CUDA_ALLOC_CONF"].values == ("expandable_segments:True",)
    with pytest.raises(sp.SpaceError, match="unknown knob 'PYTORCH_CUDA_ALLOC_CONF'"):
        sp.apply_spec(sp.Space(framework="paddle"), "PYTORCH_CUDA_ALLOC_CONF=x")


# --- a PyTorch job's CUDA out-of-memory error as a memory record ------------------------------
def test_the_request_is_read_from_pytorchs_message():
    from paddletune.sources.torch import gpu as torch_gpu
    message = ("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of "
               "79.19 GiB of which 1.20 GiB is free.")
    assert torch_gpu.requested_bytes(message) == int(2.5 * GIB)
    assert torch_gpu.requested_bytes("Tried to allocate 20.00 MiB (GPU 0)") == 20 << 20
    assert torch_gpu.requested_bytes("CUDA error: out of memory") is None
    assert torch_gpu.requested_bytes("Tried to allocate 512 bytes") == 512
    assert torch_gpu.requested_bytes("Cannot allocate 12.500000kB memory") == 12800


def test_a_cuda_oom_sends_the_allocators_figures(monkeypatch):
    """torch's CUDA queries faked (no GPU here; tests/test_torch_gpu_real.py runs it on one):
    the event's figures become the MemoryOom record the OOM advice reads."""
    import torch

    from paddletune.probes.memory import oom_record
    from paddletune.sources.torch.source import TorchSource
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "mem_get_info", lambda d: (1 * GIB, 80 * GIB))
    monkeypatch.setattr(cuda, "memory_allocated", lambda d: 70 * GIB)
    monkeypatch.setattr(cuda, "memory_reserved", lambda d: 76 * GIB)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda d: 72 * GIB)
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("memory_oom", seen.append)
    source.timer.read(0.0, 0.0, 256)
    source.out_of_memory(ValueError("not an out-of-memory error"))
    assert seen == []
    source.out_of_memory(cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 "
                                               "GiB. GPU 0 has a total capacity of 80 GiB"))
    record = oom_record(1.0, seen[0])
    assert (record.place, record.requested_bytes, record.allocated_bytes,
            record.reserved_bytes, record.capacity_bytes, record.free_bytes,
            record.peak_bytes, record.batch_size) == (
        "CUDAPlace(0)", 2 * GIB, 70 * GIB, 76 * GIB, 80 * GIB, 1 * GIB, 72 * GIB, 256)


def test_the_report_says_what_the_caching_allocators_figures_are(tmp_path):
    from test_render_reader import render, section
    steps = step_records()
    memory = memory_records(steps, system_allocs=2, result={**SETTLED, "retries": 3,
                                                            "cached_free": 4 * GIB})
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=memory,
                        source=source_info("torch"))
    lines = " ".join(section(render(path), "Memory:"))
    assert "2.0 cudaMalloc calls per step (counted, not timed) for 80 allocator requests" in lines
    assert "5% of the reserved memory in inactive split blocks (cached free 4.0 GiB)" in lines
    assert "alloc retries   3 (a cudaMalloc failed" in lines


def test_the_allocators_statistics_are_read_through_the_warm_up_and_as_the_job_ends(
        monkeypatch):
    """torch's CUDA queries faked: each warm-up step gets its own cudaMalloc calls (not the
    first steady step read after it), and the last read brings the retries of the job's last
    steps into the pool's figures."""
    import types

    import torch

    from paddletune.sources.torch import gpu as torch_gpu
    cuda = torch.cuda
    mallocs = {"segment.all.allocated": 0, "allocation.all.allocated": 0,
               "num_alloc_retries": 0}
    reads = []

    def memory_stats(device):
        reads.append(device)
        return dict(mallocs)

    monkeypatch.setattr(cuda, "get_device_properties",
                        lambda d: types.SimpleNamespace(total_memory=80 * GIB))
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated",
                 "max_memory_reserved"):
        monkeypatch.setattr(cuda, name, lambda d: GIB)
    monkeypatch.setattr(cuda, "memory_stats", memory_stats)
    memory = torch_gpu.CudaMemory(0)
    got = []
    for step in range(60):
        mallocs["segment.all.allocated"] += 5 if step < 3 else 0  # the cache grows, then not
        mallocs["allocation.all.allocated"] += 10
        got.append(memory.step(step, 32))
    assert [g.system_allocs for g in got[:4]] == [5, 5, 5, 0]
    assert sum(g.system_allocs for g in got[10:]) == 0
    assert len(reads) == torch_gpu.FULL_STATS_FIRST + 1  # and step 50's
    assert got[50].requests == 10 * 41 and got[59].requests == 0
    mallocs["num_alloc_retries"] = 2
    mallocs["segment.all.allocated"] += 1
    last = memory.last(59, 32)
    assert (last.retries, last.system_allocs, last.requests) == (2, 1, 10 * 9)


def test_the_last_read_is_sent_as_the_hooks_are_removed():
    """TorchHooks._last_memory (an undo step of a CUDA job's hooks): one memory_step per
    device, after the last training step, for the pool's figures at the end."""
    from paddletune.sources.torch.hooks import TorchHooks
    from paddletune.sources.torch.source import TorchSource

    class Device:
        def last(self, step, batch_size):
            return ("last", step, batch_size)

    source = TorchSource()
    source.begin()
    sent = []
    source.subscribe("memory_step", sent.append)
    hooks = TorchHooks(source)
    hooks._cuda_memory = {0: Device()}
    hooks._last_memory()
    assert sent == []  # no step yet: nothing to add
    source.timer.read(0.0, 0.0, 16)
    source.timer.step_done("CUDAPlace(0)")
    source.timer.step_done("CUDAPlace(0)")
    hooks._last_memory()
    assert sent == [("last", 1, 16)]
