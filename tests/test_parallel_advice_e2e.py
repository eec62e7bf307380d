"""The ParallelExecutor advice (#10, #11, #12, Reduce) checked by running the change, in real
subprocesses of `paddletune profile` on tests/pejob.py. What each change must move is checked
where it is deterministic (ops per step, update ops per step, drops, thread busy shares);
step times are compared in benchmarks/bench_parallel.py, not here (they flake on a loaded
2-core machine)."""

import os
import subprocess
import sys
from pathlib import Path

from paddletune.advisors import parallel, threads
from paddletune.profile import load

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "pejob.py"
TIMEOUT_S = 300


def profile(tmp_path, name, args, ops=False, job=JOB, **flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGS_")}
    env.update({f"FLAGS_{k}": str(v) for k, v in flags.items()})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["OPENBLAS_NUM_THREADS"] = "1"
    out = tmp_path / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "paddletune", "profile", "-q", "-o", str(out)]
    done = subprocess.run(cmd + (["--ops"] if ops else []) + [str(job), "--", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return load(out)


def test_one_thread_for_a_sequential_model(tmp_path):
    args = ["--places", "1", "--steps", "60"]
    before = profile(tmp_path, "t4", args + ["--threads", "4"])
    advice = parallel.num_threads(before)
    assert advice is not None and advice.figures["suggested_threads"] == 1
    assert before.summary.parallel.concurrency < parallel.SERIAL
    after = profile(tmp_path, "t1", args + ["--threads", "1"])
    p0, p1 = before.summary.parallel, after.summary.parallel
    assert p1.threads == 1 and parallel.num_threads(after) is None
    # the idle threads are gone: the one thread spends most of the step in ops (step time
    # itself is left to benchmarks/bench_parallel.py: on a loaded 2-core machine it flakes)
    assert p1.thread_busy_mean > 2 * p0.thread_busy_mean


def test_drop_scope_every_step_then_the_suggested_value(tmp_path):
    # GC off and no memory_optimize: the local scopes hold every temporary until a drop
    args = ["--places", "2", "--threads", "2", "--steps", "60", "--keep-temporaries"]
    before = profile(tmp_path, "d1", args + ["--drop", "1"], eager_delete_tensor_gb=-1)
    drop = before.summary.parallel.drop
    assert drop.every == 1 and drop.count == 60 and drop.variables_max > 20
    advice = parallel.drop_scope_cost(before)
    assert advice is not None, drop
    n = advice.figures["suggested_every"]
    assert n > 1 and advice.figures["held_bytes"] == drop.held_bytes_max
    after = profile(tmp_path, "dn", args + ["--drop", str(n)], eager_delete_tensor_gb=-1)
    d = after.summary.parallel.drop
    assert d.every == n and d.count == 60 // n
    assert d.share < drop.share / 2  # the drops' time falls with their number
    assert d.held_bytes_max <= 1.5 * drop.held_bytes_max  # what it costs in memory


def test_fusions_predict_the_op_count(tmp_path):
    args = ["--places", "2", "--threads", "2", "--steps", "30", "--layers", "3"]
    before = profile(tmp_path, "plain", args)
    advice = parallel.parallel_fusions(before)
    flags = sorted(advice.figures["fusions"])
    assert "fuse_all_optimizer_ops" in flags and "fuse_all_reduce_ops" in flags
    after = profile(tmp_path, "fused", args + ["--fuse", ",".join(flags)])
    p = after.summary.parallel
    assert sorted(p.fused) == flags
    assert p.ops_per_step == advice.figures["predicted_ops_per_step"]
    assert parallel.parallel_fusions(after) is None


def test_reduce_runs_each_update_once(tmp_path):
    args = ["--places", "2", "--threads", "2", "--steps", "30", "--model", "mlp"]
    before = profile(tmp_path, "allreduce", args, ops=True)
    assert not before.warnings  # (the all-reduce ops' records fit the schema: an op's index)
    advice = threads.reduce_strategy(before)
    assert advice is not None and advice.figures["optimizer_ops"] == ["momentum"]
    after = profile(tmp_path, "reduce", args + ["--reduce"], ops=True)

    def updates(p):
        ops = p.summary.ops
        row = next(r for r in ops.by_type if r.type == "momentum")
        return row.count / ops.steps, row.total_s / ops.steps

    (n0, _), (n1, t1) = updates(before), updates(after)
    assert n1 == n0 / 2  # each parameter updated on one place (the time it saves:
    assert t1 > 0  # benchmarks/bench_parallel.py, "pe 2p 2t reduce" against "pe 2p 2t")
    assert threads.reduce_strategy(after) is None


def test_drop_scope_seen_in_the_steps_when_the_drop_itself_is_cheap(tmp_path):
    """tests/dropjob.py waits 20 ms in each drop's event (a device synchronisation's stand-in)
    after the runtime has timed the drop itself (microseconds): the drops' cost is found in
    the steps that drop, and the advice fires on it."""
    args = ["--drop", "4", "--drop-ms", "20", "--step-ms", "0", "--steps", "120"]
    before = profile(tmp_path, "wait", args, job=ROOT / "tests" / "dropjob.py")
    drop = before.summary.parallel.drop
    # (bounds a loaded 2-core machine keeps: the wait is at least 20 ms whatever the load;
    # the steps around it take ~1 ms each on a quiet machine, several on a busy one)
    assert drop.every == 4 and drop.count == 30 and drop.wall_s_mean < 0.010
    assert drop.step_excess_s is not None and drop.step_excess_s > 0.015, drop
    assert drop.cost_s_mean == drop.step_excess_s and drop.share > parallel.DROP_HIGH
    advice = parallel.drop_scope_cost(before)
    assert advice is not None and advice.severity == "high", drop
    assert advice.figures["suggested_every"] >= 100 and advice.expected_speedup > 1.25
