"""The memory advice checked against reality: the out-of-memory error's largest batch against a
bisection with real runs under the same cap, the OOM message, the summary's batch model and
advice #17 agreeing, the eval program kept out of the training program's figures, and a
largest batch far beyond the measured one worded as "memory is not the limit"."""

import os
import re
import subprocess
import sys
from pathlib import Path

from paddletune.advisors import memory
from paddletune.profile import load
from paddletune.profile.figures import ModelFigures
from paddletune.profile.memory_model import batch_fit
from paddletune.render.memory import _model

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "memjob.py"
CAP_MB = 28
TIMEOUT_S = 120


def _env(**flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGS_")}
    env.update({f"FLAGS_{k}": str(v) for k, v in flags.items()})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _fits(batch):
    """Whether memjob's MLP trains at `batch` under the cap (a real run, its own process)."""
    done = subprocess.run([sys.executable, str(JOB), "--batches", str(batch), "--steps", "2"],
                          env=_env(cpu_memory_limit_mb=CAP_MB), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0 or "PoolOutOfMemory" in done.stderr, done.stderr[-2000:]
    return done.returncode == 0


def _bisect(lo, hi):
    """The largest batch that fits, to 3%: `lo` fits, `hi` does not."""
    while hi - lo > 0.03 * lo:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits(mid) else (lo, mid)
    return lo


def test_oom_estimate_is_near_the_bisected_truth_and_agrees_with_the_model_and_17(tmp_path):
    out = tmp_path / "oom.jsonl"
    done = subprocess.run([sys.executable, "-m", "paddletune", "profile", "-q", "-o", str(out),
                           str(JOB), "--", "--batches", "64,16384", "--steps", "3"],
                          cwd=tmp_path, env=_env(cpu_memory_limit_mb=CAP_MB),
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 1, done.stderr[-3000:]
    said = re.search(r"the largest that fits is about (\d+)", done.stderr)
    assert said, done.stderr[-3000:]
    estimate = int(said.group(1))
    truth = _bisect(64, 16384)
    # the old estimate scaled the parameters' gradients and the update's temporaries of the
    # batch-64 step by the batch: ~1/8 of the truth
    print(f"cap {CAP_MB} MiB: estimated {estimate}, bisected {truth}")
    assert abs(estimate - truth) <= 0.25 * truth, (estimate, truth)

    m = load(out).summary.memory
    assert m.oom.fit_batch_size == estimate
    model = batch_fit(m)
    assert abs(model.largest(m.capacity_bytes, headroom=0.0) - estimate) <= 0.01 * estimate
    advice = memory.batch_size_memory(load(out))
    assert advice.figures["largest_safe_batch"] == model.largest(m.capacity_bytes)
    assert advice.figures["largest_safe_batch"] < estimate < 16384
    assert f"batch {model.largest(m.capacity_bytes, headroom=0.0)} would just fit" in \
        advice.evidence


def test_eval_program_stays_out_of_the_training_batch_model(tmp_path):
    """examples/mlp.py trains at batch 64, then evaluates its 1000 test samples in one batch
    with the test program: only the training program's batch sizes count."""
    done = subprocess.run([sys.executable, "-m", "paddletune", "profile", "-q", "-o", "p.jsonl",
                           str(ROOT / "examples" / "mlp.py"), "--", "--steps", "12",
                           "--hidden", "384,384"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    m = load(tmp_path / "p.jsonl").summary.memory
    assert [b for b, _ in m.batch_points] == [64]  # not the eval program's 1000
    fed_per_sample = 784 * 4 + 8  # the float32 image and the int64 label
    assert m.batch_model.per_unit_bytes >= fed_per_sample
    assert m.batch_model.largest_batch > 64 * 64
    assert "memory is not the limit" in _model(m.batch_model)


def test_a_largest_batch_far_beyond_the_measured_one_is_worded_as_no_memory_limit():
    model = ModelFigures(5e6, 9e3, "sample", 5e6, "one point", ((64, 9e6),), 0.0, 0.1,
                         16_000_000, 1.4e11)
    words = _model(model)
    assert "memory is not the limit" in words and "throughput stops growing" in words
    assert "16000000" in words  # the figure is kept
    near = ModelFigures(5e6, 9e3, "sample", 5e6, "one point", ((64, 9e6),), 0.0, 0.1, 3000,
                        3e7)
    assert "memory is not the limit" not in _model(near) and "3000" in _model(near)
