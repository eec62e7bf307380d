"""Data-parallel CompiledProgram runs: results equal to the single-place Executor (AllReduce,
Reduce, 1-3 places, fusions on/off), fetch merging, feed splitting, num_threads, local-scope
drops, op errors, threads, the legacy ParallelExecutor API, and learning."""

import gc
import threading
import warnings

import numpy as np
import pytest

import runtime as fluid
from test_parallel_models import build, data, strategy, train
from runtime import events
from runtime.errors import FeedError, OpRuntimeError

ALLCLOSE = dict(rtol=2e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _quiet_blas_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ParallelExecutor: .* BLAS threads", RuntimeWarning)
        yield


def _same(a, b):
    la, pa = a
    lb, pb = b
    np.testing.assert_allclose(la, lb, **ALLCLOSE)
    assert len(pa) == len(pb)
    for x, y in zip(pa, pb):
        np.testing.assert_allclose(x, y, **ALLCLOSE)


@pytest.mark.parametrize("opt", ["momentum", "adam"])
@pytest.mark.parametrize("places", [1, 2, 3])
@pytest.mark.parametrize("reduce_", [0, 1])
def test_equal_to_the_executor(opt, places, reduce_):
    want = train(0, opt=opt)
    _same(train(places, opt=opt, bs=strategy(reduce_strategy=reduce_)), want)


@pytest.mark.parametrize("fusions", [
    dict(fuse_all_reduce_ops=True),
    dict(fuse_all_optimizer_ops=True),
    dict(fuse_all_optimizer_ops=True, fuse_all_reduce_ops=True, fuse_elewise_add_act_ops=True),
    dict(fuse_elewise_add_act_ops=True, enable_inplace=False, memory_optimize=False),
    dict(enable_backward_optimizer_op_deps=False),
    dict(enable_sequential_execution=True),
])
@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_fusions_change_nothing_numerically(fusions, opt):
    want = train(0, opt=opt)
    _same(train(2, opt=opt, bs=strategy(**fusions)), want)


def test_fused_counts_and_scheduler_figures():
    records, drops = [], []
    es = fluid.ExecutionStrategy()
    es.num_threads = 3
    bs = strategy(fuse_all_optimizer_ops=True, fuse_all_reduce_ops=True,
                  fuse_elewise_add_act_ops=True)
    with events.subscribe("sched_step", records.append), \
            events.subscribe("drop_scope", drops.append):
        train(2, steps=2, opt="adam", bs=bs, es=es)
    r = records[-1]
    assert r.fused == {"fuse_all_optimizer_ops": 6, "fuse_all_reduce_ops": 3,
                       "fuse_elewise_add_act_ops": 8}
    assert r.num_places == 2 and r.num_threads == 3 and r.reduce_strategy == "AllReduce"
    assert len(r.busy_s) == 3 and len(r.place_s) == 2 and r.ops_run > 0
    assert r.wall_s > 0 and r.concurrency > 0 and r.ready_max >= 1 and r.ready_mean > 0
    assert r.combine_s > 0 and r.sched_s >= 0 and not r.dropped and not drops
    assert r.num_iteration_per_drop_scope == 100


def test_fusions_off_under_reduce_with_a_warning():
    with pytest.warns(RuntimeWarning, match="only work with ReduceStrategy.AllReduce"):
        got = train(2, bs=strategy(reduce_strategy=1, fuse_all_optimizer_ops=True))
    _same(got, train(0))


def test_fetch_merge_shapes():
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, y = data(12)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(2))
    logits = main.global_block().ops[-1]  # any fetchable variable works; use the loss and x
    del logits
    merged = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, "x"], scope=scope)
    assert merged[0].shape == (2,) and merged[1].shape == (12, 16)
    split = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, "x"], scope=scope,
                    return_merged=False)
    assert [a.shape for a in split[0]] == [(1,), (1,)]
    assert [a.shape for a in split[1]] == [(6, 16), (6, 16)]
    tensors = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope,
                      return_numpy=False)
    assert isinstance(tensors[0], fluid.LoDTensor) and np.array(tensors[0]).shape == (2,)


def test_one_place_fetches_are_the_callers_own_copies():
    """With one place the merge hands out the fetched copy itself: it must not be a buffer the
    next step reuses or updates, and the scope's own values stay untouched."""
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, y = data(12)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(1))
    first = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, "fc_0.w_0"], scope=scope)
    kept = [a.copy() for a in first]
    first[1][:] = 123.0
    assert not np.any(scope.find_var("fc_0.w_0").value == 123.0)
    for _ in range(3):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, "fc_0.w_0"], scope=scope)
    np.testing.assert_array_equal(first[0], kept[0])
    assert first[0].shape == (1,)


def test_feed_split_errors_and_per_place_dicts():
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(3))
    x, y = data(2)
    with pytest.raises(FeedError, match="2 sample.*fewer than the 3 places"):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    x, y = data(7)  # uneven: 3 + 2 + 2, as Paddle splits
    out = exe.run(prog, feed={"x": x, "y": y}, fetch_list=["x"], scope=scope,
                  return_merged=False)[0]
    assert [a.shape[0] for a in out] == [3, 2, 2]
    with pytest.raises(FeedError, match="one dict per place"):
        exe.run(prog, feed=[{"x": x, "y": y}] * 2, fetch_list=[loss], scope=scope)
    per_place = [{"x": x[i:i + 2], "y": y[i:i + 2]} for i in (0, 2, 4)]
    out = exe.run(prog, feed=per_place, fetch_list=[loss], scope=scope)
    assert out[0].shape == (3,)
    with pytest.raises(FeedError, match="not a variable"):
        exe.run(prog, feed={"x": x, "y": y, "nope": x}, fetch_list=[loss], scope=scope)


def test_one_place_runs_the_scheduler_too():
    records = []
    with events.subscribe("sched_step", records.append):
        train(1, steps=2)
    assert [r.num_places for r in records] == [1, 1] and records[0].num_threads == 2
    assert not [r for r in records if r.combine_s]


def test_num_threads_default_is_two_per_cpu_place():
    es = fluid.ExecutionStrategy()
    assert es.num_threads == 0
    train(3, steps=1, es=es)
    assert es.num_threads == 6  # Paddle: 2 x places on CPU (4 x on GPU)


@pytest.mark.parametrize("threads", [0, 1])  # (one: the calling thread runs the graph)
@pytest.mark.parametrize("gc_gb, held", [(0.0, "small"), (-1.0, "all")])
def test_drop_scope_events_and_held_bytes(gc_gb, held, threads):
    old = fluid.get_flags(["FLAGS_eager_delete_tensor_gb"])
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    drops, records = [], []
    es = fluid.ExecutionStrategy()
    es.num_iteration_per_drop_scope = 2
    es.num_threads = threads
    try:
        with events.subscribe("drop_scope", drops.append), \
                events.subscribe("sched_step", records.append):
            train(2, steps=5, es=es, bs=strategy(memory_optimize=False))
    finally:
        fluid.set_flags(old)
    assert len(drops) == 2 and [r.dropped for r in records] == [False, True, False, True, False]
    assert [d.step for d in drops] == [1, 3] and all(d.wall_s >= 0 for d in drops)
    feeds_and_fetch = 24 * 16 * 4 + 24 * 8 + 2 * 4  # x, y, the loss (both places)
    if held == "small":  # GC freed the temporaries: the feeds and the fetch target remain
        assert drops[0].held_bytes <= feeds_and_fetch + 64
    else:  # nothing freed: every activation and gradient of both places
        assert drops[0].held_bytes > 4 * feeds_and_fetch and drops[0].variables > 40


def test_drop_local_exec_scopes_now():
    main, startup, loss, _ = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    x, y = data()
    with fluid.scope_guard(scope):
        exe.run(startup)
        pe = fluid.ParallelExecutor(False, loss.name, main_program=main)
        pe.run([loss.name], feed={"x": x, "y": y})
    engine = pe._compiled._engine
    assert engine.held_bytes() > 0
    drops = []
    with events.subscribe("drop_scope", drops.append):
        pe.drop_local_exec_scopes()
    assert engine.held_bytes() == 0 and len(drops) == 1 and drops[0].held_bytes > 0


def test_num_iteration_per_run():
    es = fluid.ExecutionStrategy()
    es.num_iteration_per_run = 3
    steps = []
    with events.subscribe("step_end", steps.append):
        losses, _ = train(2, steps=2, es=es)
    assert len([s for s in steps if not s.is_startup]) == 6
    assert losses[1] < losses[0]


def test_op_error_names_the_op_and_the_executor_stays_usable():
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(2))
    x, y = data(8)
    bad = y.copy()
    bad[5] = 99  # a label outside the 4 classes, on place 1
    with pytest.raises(OpRuntimeError, match=r"(?s)softmax_with_cross_entropy.*place: 1 of 2"):
        exe.run(prog, feed={"x": x, "y": bad}, fetch_list=[loss], scope=scope)
    out = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    assert np.isfinite(out[0]).all()


def test_no_thread_leak():
    gc.collect()  # engines of earlier tests that only a collection frees
    before = threading.active_count()
    for _ in range(3):
        train(2, steps=1)
    gc.collect()
    assert threading.active_count() == before
    main, startup, loss, _ = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    with fluid.scope_guard(scope):
        pe = fluid.ParallelExecutor(False, loss.name, main_program=main)
        x, y = data()
        pe.run([loss], feed={"x": x, "y": y})
    assert threading.active_count() > before
    pe.close()
    assert threading.active_count() == before


def test_legacy_parallel_executor_api(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss, _ = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    x, y = data()
    with fluid.scope_guard(scope):
        exe.run(startup)
        pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main)
        assert pe.device_count == 2
        out = pe.run(fetch_list=[loss.name], feed={"x": x, "y": y})
        assert out[0].shape == (2,)
        with pytest.warns(DeprecationWarning):
            out2 = pe.run([loss.name], feed_dict={"x": x, "y": y})
        assert out2[0].mean() < out[0].mean()
    with pytest.raises(NotImplementedError, match="multi-node"):
        fluid.ParallelExecutor(False, loss.name, main_program=main, num_trainers=2)


def test_results_go_back_to_the_scope_and_replaced_values_come_in():
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, y = data()
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(2))
    exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    plain = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0]
    ref, _ = train(0, steps=2)
    np.testing.assert_allclose(plain.item(), ref[1], **ALLCLOSE)
    for p in main.global_block().all_parameters():  # replaced in the scope: every place sees it
        holder = scope.find_var(p.name)
        holder.get_tensor().set(np.zeros_like(holder.value))
    out = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0]
    np.testing.assert_allclose(out, [np.log(4.0)] * 2, rtol=1e-5)


def test_customized_gradient_scale_needs_the_loss_gradient_fed():
    main, startup, loss, _ = build("sgd")
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = strategy(gradient_scale_strategy=2)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, build_strategy=bs,
                                                          places=fluid.cpu_places(2))
    x, y = data()
    with pytest.raises(FeedError, match="Customized.*@GRAD"):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    got = exe.run(prog, feed={"x": x, "y": y, loss.name + "@GRAD": np.array([0.5], "float32")},
                  fetch_list=[loss], scope=scope)
    assert got[0].shape == (2,)


def test_op_end_and_step_events():
    ops, steps = [], []
    with events.subscribe("op_end", ops.append), events.subscribe("step_end", steps.append):
        train(2, steps=1)
    assert any(o.type == "allreduce" for o in ops) and any(o.type == "mul" for o in ops)
    train_steps = [s for s in steps if not s.is_startup]
    assert train_steps[-1].batch_size == 24 and train_steps[-1].place == "CPUPlacex2"


def test_blas_oversubscription_warns_once(monkeypatch):
    from runtime.parallel import edges
    monkeypatch.setattr(edges, "_warned_blas", [])
    monkeypatch.setattr(edges.blas, "get_blas_threads", lambda: 8)
    monkeypatch.setattr(edges, "usable_cores", lambda: 2)
    es = fluid.ExecutionStrategy()
    es.num_threads = 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(2, steps=1, es=es)
        train(2, steps=1, es=es)
    msgs = [str(w.message) for w in caught if "BLAS threads" in str(w.message)]
    assert len(msgs) == 1 and "2 executor threads x 8 BLAS threads" in msgs[0]
    assert "OPENBLAS_NUM_THREADS" in msgs[0] and "2 usable cores" in msgs[0]


def test_a_classifier_learns_data_parallel():
    main, startup, loss, acc = build("adam")
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, y = data(96, seed=3)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(2))
    first = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, acc], scope=scope)
    for _ in range(30):
        last = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss, acc], scope=scope)
    assert last[0].mean() < 0.5 * first[0].mean()
    assert last[1].mean() > max(0.9, first[1].mean())


def test_worker_allocations_come_from_the_pool():
    from runtime import memory
    if not memory.numpy_hook.AVAILABLE:
        pytest.skip(memory.numpy_hook.REASON)
    records = []
    with events.subscribe("memory_step", records.append):
        train(2, steps=2)
    steps = [r for r in records if r.batch_size == 24]
    assert steps and steps[-1].requests > 20 and steps[-1].step_peak > 24 * 16 * 4


@pytest.mark.parametrize("threads", [0, 1])  # (one: the calling thread runs the graph)
def test_an_interrupt_in_a_worker_reaches_the_caller(monkeypatch, threads):
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    es = fluid.ExecutionStrategy()
    es.num_threads = threads
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, exec_strategy=es,
                                                          places=fluid.cpu_places(2))
    x, y = data()
    exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    node = next(n for n in prog._engine._compiled.values().__iter__().__next__().graph.nodes
                if n.type == "mul" and n.place == 1)
    step = node.ops[0]
    original = step.fn

    def interrupted(ctx, ins, attrs):
        raise KeyboardInterrupt

    step.fn = interrupted
    with pytest.raises(KeyboardInterrupt):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    step.fn = original
    assert exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0].shape == (2,)


def test_a_plain_run_in_between_updates_every_place():
    """Parallel, plain, parallel on one scope equals three plain steps: the plain run updates
    the parameters in place and the other places' copies are refreshed from its write count."""
    main, startup, loss, _ = build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, y = data()
    prog = fluid.CompiledProgram(main).with_data_parallel(loss.name, places=fluid.cpu_places(2))
    exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    third = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0]
    ref, _ = train(0, steps=3)
    np.testing.assert_allclose(np.mean(third), ref[2], **ALLCLOSE)


@pytest.mark.parametrize("gc_gb", [1e-6, 1.0])  # batched GC: dropped at once / at step end
def test_batched_gc_changes_nothing_numerically(gc_gb):
    old = fluid.get_flags(["FLAGS_eager_delete_tensor_gb"])
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    try:
        losses, params = train(2, steps=3)
    finally:
        fluid.set_flags(old)
    ref_losses, ref_params = train(0, steps=3)
    np.testing.assert_allclose(losses, ref_losses, **ALLCLOSE)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, **ALLCLOSE)
