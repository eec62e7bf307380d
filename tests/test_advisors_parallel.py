"""The ParallelExecutor rules (#10-#12, Reduce vs AllReduce) on synthetic profiles: when each
fires, the value it computes, and when it stays quiet. (test_parallel_advice_e2e.py runs the
changes.)"""

import pytest

from paddletune.advisors import parallel, threads
from paddletune.profile import load
from profiles import make_profile, ops_records, program_record, sched_records, step_records

MB = 1 << 20


def mlp_program(n_layers=3, optimizer="momentum"):
    ops, params = [], []
    for i in range(n_layers):
        w, b = f"fc_{i}.w_0", f"fc_{i}.b_0"
        ops += [("mul", {"X": [f"h{i}"], "Y": [w]}, {"Out": [f"m{i}"]}),
                ("elementwise_add", {"X": [f"m{i}"], "Y": [b]}, {"Out": [f"a{i}"]}),
                ("relu", {"X": [f"a{i}"]}, {"Out": [f"h{i + 1}"]})]
        params += [w, b]
    for p in params:
        ops.append((optimizer, {"Param": [p], "Grad": [f"{p}@GRAD"], "Velocity": [f"{p}_v"],
                                "LearningRate": ["lr"]}, {"ParamOut": [p]}))
    return program_record(ops)


def make(tmp_path, env=None, ops=None, **sched):
    steps = step_records(n_steps=30, wall_s=0.01)
    extra = [mlp_program(), *sched_records(steps, **sched), *(ops or [])]
    env = {"cpu": {"usable_cores": 4, "logical_cores": 4},
           "numpy": {"blas": "openblas", "blas_threads": 1}, **(env or {})}
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra, env=env))


def test_one_thread_when_ops_run_one_at_a_time(tmp_path):
    a = parallel.num_threads(make(tmp_path, threads=4, concurrency=1.05, sched_s=0.0015))
    assert a.id == "num-threads" and a.figures["suggested_threads"] == 1
    assert "exec_strategy.num_threads = 1" in a.change and a.severity == "medium"
    assert parallel.num_threads(make(tmp_path, threads=1, concurrency=1.0)) is None


def test_fewer_threads_than_cores_when_there_are_more(tmp_path):
    a = parallel.num_threads(make(tmp_path, threads=8, concurrency=1.9, sched_s=0.0001))
    assert a.figures["suggested_threads"] == 2 and a.figures["usable_cores"] == 4
    assert "num_threads = 2" in a.change


def test_more_threads_when_ops_wait_with_every_thread_busy(tmp_path):
    busy = dict(threads=2, concurrency=1.9, busy=(0.0095, 0.009))
    a = parallel.num_threads(make(tmp_path, ready_mean=1.6, ready_max=6, **busy))
    assert a.figures["suggested_threads"] == 4  # 2 + ceil(1.6), within 4 cores / 1 BLAS
    assert a.figures["thread_cap"] == 4 and "num_threads = 4" in a.change
    blas2 = {"numpy": {"blas": "openblas", "blas_threads": 2}}
    assert parallel.num_threads(make(tmp_path, env=blas2, ready_mean=1.6, **busy)) is None
    assert parallel.num_threads(make(tmp_path, ready_mean=0.5, **busy)) is None  # no wait


def test_drop_scope_value_and_memory(tmp_path):
    drops = [(i, (0.002, 4 * MB)) for i in range(30)]  # every step: 2 ms of 10 ms
    a = parallel.drop_scope_cost(make(tmp_path, drop_every=1, drops=drops))
    assert a.id == "drop-scope" and a.severity == "medium"
    share = a.figures["drop_share"]
    assert share == pytest.approx(0.06 / 0.34)
    assert a.figures["suggested_every"] == 100  # 1 x 17.6% / 0.2% = 88 -> 100
    assert a.figures["predicted_drop_share"] == pytest.approx(share / 100)
    assert a.expected_speedup == pytest.approx(1 / (1 - share + share / 100))
    assert "num_iteration_per_drop_scope = 100" in a.change and "4.0 MiB" in a.expected_gain
    assert parallel.drop_scope_cost(make(tmp_path, drop_every=100, drops=[(9, (0.002, 0))])) \
        is None  # 0.6% of the time


def _slow_drop_steps(n_steps, dropped, extra_s, jitter_s=0.0002):
    """Training steps of 2 ms (give or take `jitter_s`) where those in `dropped` take
    `extra_s` more (a drop's synchronisation paid inside the step); the times follow."""
    steps = step_records(n_steps=n_steps, wall_s=0.002)
    t = steps[1]["t"]
    for row in steps[1:]:
        row["wall_s"] += jitter_s * ((row["step"] * 7) % 5 - 2) / 2
        row["wall_s"] += extra_s if row["step"] in dropped else 0.0
        row["compute_s"] = row["wall_s"] - row["feed_s"] - row["fetch_s"]
        row["t"], t = t, t + row["wall_s"]
    return steps


def _drop_profile(tmp_path, extra_s):
    dropped = set(range(4, 80, 5))
    steps = _slow_drop_steps(80, dropped, extra_s)
    sched = sched_records(steps, drop_every=5, drops=[(i, (1e-5, MB)) for i in dropped])
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=[mlp_program(), *sched],
                             env={"cpu": {"usable_cores": 4, "logical_cores": 4}}))


def test_drop_scope_counts_the_time_the_steps_around_a_drop_lose(tmp_path):
    """A drop nearly free itself (0.01 ms) while each step that drops takes 8 ms more (what a
    device synchronisation or a slow free costs inside the step): the cost is the steps'."""
    profile = _drop_profile(tmp_path, extra_s=0.008)
    d = profile.summary.parallel.drop
    assert d.wall_s_mean == pytest.approx(1e-5)
    assert d.step_excess_s == pytest.approx(0.008, abs=0.0003)
    assert d.cost_s_mean == d.step_excess_s
    training = sum(s.cycle_s for s in profile.steps if not s.startup)
    assert d.share == pytest.approx(16 * d.step_excess_s / training)
    a = parallel.drop_scope_cost(profile)
    assert a.id == "drop-scope" and a.severity == "high"  # 16 x 8 ms of ~0.3 s
    assert f"take {d.step_excess_s * 1e3:.2f} ms more" in a.evidence
    assert "0.01 ms itself" in a.evidence
    assert a.figures["suggested_every"] == _nice_above(5 * d.share / parallel.DROP_TARGET)
    assert a.expected_speedup == pytest.approx(1 / (1 - d.share + a.figures[
        "predicted_drop_share"]))


def test_drop_scope_quiet_when_the_steps_around_a_drop_are_not_slower(tmp_path):
    """Free drops among steps that vary by +-0.2 ms: no excess is claimed, and no advice."""
    profile = _drop_profile(tmp_path, extra_s=0.0)
    d = profile.summary.parallel.drop
    assert d.step_excess_s is None and d.cost_s_mean == pytest.approx(1e-5)
    assert parallel.drop_scope_cost(profile) is None


def _nice_above(n):
    return min(m * 10 ** e for m in (1, 2, 5) for e in range(6) if m * 10 ** e >= n)


def test_fusions_count_the_ops_they_merge(tmp_path):
    a = parallel.parallel_fusions(make(tmp_path, places=2, ops=()))
    f = a.figures["fusions"]
    assert f["fuse_all_optimizer_ops"] == {"ops_now": 12, "ops_after": 2}  # 6 params x 2
    assert f["fuse_all_reduce_ops"] == {"ops_now": 6, "ops_after": 3}  # one per layer
    assert f["fuse_elewise_add_act_ops"] == {"ops_now": 24, "ops_after": 12}
    assert a.figures["predicted_ops_per_step"] == 120 - 10 - 3 - 12
    fused = {"fuse_all_optimizer_ops": 10, "fuse_all_reduce_ops": 5,
             "fuse_elewise_add_act_ops": 12}
    assert parallel.parallel_fusions(make(tmp_path, fused=fused)) is None


def test_reduce_when_updates_take_a_large_share_on_cpu(tmp_path):
    steps = step_records(n_steps=30, wall_s=0.01)
    durations = [("mul", 0.002), ("momentum", 0.003)]
    ops = ops_records([s["step"] for s in steps if not s.get("startup")], durations)
    a = threads.reduce_strategy(make(tmp_path, ops=ops, places=2))
    assert a.id == "reduce-strategy" and a.figures["optimizer_share"] == pytest.approx(0.6)
    assert a.figures["predicted_op_time_saved_share"] == pytest.approx(0.3)
    assert "ReduceStrategy.Reduce" in a.change
    assert threads.reduce_strategy(make(tmp_path, ops=ops, places=2, reduce="Reduce")) is None
    assert threads.reduce_strategy(make(tmp_path, places=2)) is None  # no op timings


def test_no_parallel_advice_without_a_parallel_executor(tmp_path):
    p = load(make_profile(tmp_path / "p.jsonl"))
    for rule in (parallel.num_threads, parallel.drop_scope_cost, parallel.parallel_fusions,
                 threads.reduce_strategy):
        assert rule(p) is None
