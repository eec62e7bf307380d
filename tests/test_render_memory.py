"""The report's Memory section: exact text from a fixed-width console."""

from paddletune.profile import load
from profiles import make_profile, memory_records, step_records
from test_render_reader import render, section

MB = 1 << 20


def test_memory_section(tmp_path):
    steps = step_records()
    extra = memory_records(steps, step_peak=8 * MB, capacity=64 * MB, system_allocs=2,
                           system_alloc_s=0.001)
    lines = section(render(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)),
                    "Memory:")
    assert lines == [
        "Memory: CPUPlace pool · auto_growth · capacity 64.0 MiB",
        "peak allocated  8.0 MiB (12.5% of capacity)",
        "peak reserved   16.0 MiB (25.0% of capacity); 2.00x the allocated peak",
        "at the peak     parameters 1.0 MiB · optimizer state 1.0 MiB · activations 2.0 MiB · "
        "gradients 1.0",
        "                MiB · optimizer temporaries 3.0 MiB",
        "phase peaks     forward 5.0 MiB · backward 7.0 MiB · optimizer 8.0 MiB (allocated, "
        "highest per",
        "                phase)",
        "step peak       8.0 MiB at most within one step (39 steady steps)",
        "system allocs   2.0 underlying allocations per step (1.00 ms, 10.0% of the step) for 80 "
        "pool",
        "                requests",
        "fragmentation   25% (cached free 1.0 MiB; 0% = one free block)",
        "GC / inplace    GC on · inplace off",
        "batch sizes     64 → 8.0 MiB (step peak by batch size)",
        # fixed: 1 MiB parameters + 1 MiB state; 1.5 x (5 - 2) MiB forward activations / 64
        "batch model     step peak ≈ 2.0 MiB + 72.0 KiB per sample (parameters and optimizer "
        "state fixed, the",
        "                rest scaled from the phase peaks at the one batch size measured); "
        "largest batch",
        "                leaving 10.0% free: 790 (peak ~57.5 MiB)",
    ]


def test_memory_section_with_oom(tmp_path):
    steps = step_records()
    oom = {"requested": 4 * MB, "allocated": 60 * MB, "capacity": 64 * MB, "free": 2 * MB,
           "op_type": "mul", "op_index": 7, "batch_size": 64, "fit_batch_size": 48}
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps,
                                extra=memory_records(steps, oom=oom)), width=200)
    assert ("out of memory   op mul (#7) asked for 4.0 MiB with 2.0 MiB left (allocated "
            "60.0 MiB, capacity 64.0 MiB, batch 64); a batch of about 48 would fit") in lines


def test_no_memory_figures_says_so(tmp_path):
    lines = render(make_profile(tmp_path / "p.jsonl"), width=200)
    assert ("Memory: no figures (the memory probe saw no run on a CPU place; GPU places have "
            "no pool here, and older profiles have no memory records)") in lines
