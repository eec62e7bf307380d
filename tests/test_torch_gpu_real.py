"""PyTorch's GPU paths on a real CUDA device (skipped without one: CPU CI; the logic is tested
on fakes in tests/test_device_time.py and tests/test_cuda_allocator.py): the steps timed with
CUDA events against a loop whose idle time is known, and a real out-of-memory error's figures."""

import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs PyTorch with a CUDA device")

GIB = 1 << 30


def test_cuda_events_split_each_step_into_idle_and_busy():
    from paddletune.sources.device_clock import steps_on
    from paddletune.sources.torch import gpu
    sent = []
    clock = steps_on(gpu.TORCH_CUDA, 0, sent.append)
    weights = torch.randn(2048, 2048, device="cuda")
    batch = torch.randn(512, 2048)
    sleep_s, steps = 0.004, 60
    for step in range(steps):
        time.sleep(sleep_s)  # the host is late with the next batch: the device idles
        clock.mark_start()
        x = batch.to("cuda", non_blocking=False)
        for _ in range(20):
            x = torch.tanh(x @ weights)
        clock.step_ended(step)
        torch.cuda.synchronize()  # (as a loss.item() would)
    clock.close()
    final = sent[-1]
    print("device totals", final)
    assert final["steps"] == steps - 1 and final["copied"] == steps - 1
    idle_per_step = final["idle_s"] / final["copied"]
    busy_per_step = final["busy_s"] / final["copied"]
    assert idle_per_step >= 0.8 * sleep_s, final  # the sleep, and the host's own work
    assert busy_per_step > 0 and final["cycle_s"] == pytest.approx(
        final["idle_s"] + final["busy_s"], rel=1e-6)


def test_a_real_out_of_memory_error_gives_the_allocators_figures():
    from paddletune.probes.memory import oom_record
    from paddletune.sources.torch.source import TorchSource
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("memory_oom", seen.append)
    total = torch.cuda.get_device_properties(0).total_memory
    held = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    try:
        with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        source.out_of_memory(caught.value)
    finally:
        del held
    record = oom_record(0.0, seen[0])
    print("oom record", record)
    assert record.place == "CUDAPlace(0)" and record.capacity_bytes == total
    assert record.requested_bytes == pytest.approx(2 * total, rel=0.01)
    assert record.allocated_bytes >= 64 << 20 and record.reserved_bytes >= record.allocated_bytes


def test_ops_on_the_gpu_are_their_kernels_device_time():
    """--ops on CUDA: torch.profiler's windows read each top-level op's kernels (CUPTI),
    timing "cupti"; an op that launched none is not listed."""
    from paddletune.sources.torch.source import TorchSource
    source = TorchSource()
    source.begin()
    ops = []
    source.subscribe("op_end", ops.append)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(25 * 256, 1024),
                                          torch.randint(0, 10, (25 * 256,)))
    with source.running():
        for x, y in torch.utils.data.DataLoader(data, batch_size=256):
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    by_type = {}
    for op in ops:
        by_type.setdefault(op.type, []).append(op.t_end - op.t_begin)
    print("ops on the GPU", {t: (len(d), sum(d) / len(d)) for t, d in by_type.items()})
    assert {o.step for o in ops} == set(range(10, 20))
    assert all(o.timing == "cupti" and o.t_end > o.t_begin for o in ops)
    assert {"aten::linear", "AddmmBackward0"} <= set(by_type), by_type
