"""End to end in a real subprocess: profiling examples/mlp.py writes memory figures into the
summary and a Memory section into the report."""

import subprocess
import sys
from pathlib import Path

from paddletune.profile import load
from paddletune.profile.records import MemoryPool, MemoryStep

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


def test_mlp_profile_has_memory_figures(tmp_path):
    done = subprocess.run([sys.executable, "-m", "paddletune", "profile", "--steps", "20",
                           "-o", "p.jsonl", str(ROOT / "examples" / "mlp.py"), "--",
                           "--steps", "20"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Memory: CPUPlace pool" in done.stderr
    assert "peak allocated" in done.stderr and "phase peaks" in done.stderr
    assert "held at peak    during op" in done.stderr
    profile = load(tmp_path / "p.jsonl")
    m = profile.summary.memory
    params = 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)  # float32 weights+biases
    assert m.capacity_bytes > 0
    assert m.peak_allocated_bytes > params
    assert m.by_category_at_peak.parameters >= params
    assert m.phase_peaks.forward_bytes > 0 and m.phase_peaks.backward_bytes > 0
    assert m.batch_points and m.batch_points[0][0] == 64
    peak = m.at_step_peak
    assert peak.op.type and peak.largest_live[0][1] >= peak.largest_live[-1][1] > 0
    assert m.batch_model.how == "one point" and m.batch_model.largest_batch > 64
    steps = profile.records("memory", MemoryStep)
    assert len(steps) == 20  # training steps only: the startup run is left out
    pool = profile.records("memory", MemoryPool)[-1]
    assert pool.peak_allocated_bytes == m.peak_allocated_bytes
