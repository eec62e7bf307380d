"""Executor behaviour: feed/fetch checks and their messages, scopes, plan caching, NaN checks,
and the event hooks."""

import warnings

import numpy as np
import pytest

import runtime as fluid
from runtime import events
from runtime.errors import (FeedError, FetchError, NanInfError, OpRuntimeError, ShapeError,
                            UninitializedVariableError)

HERE = "test_executor.py"


@pytest.fixture
def net():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4])
        y = fluid.data("label", [None, 1], dtype="int64")
        logits = fluid.layers.fc(x, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((2, 4), np.float32), "label": np.array([[0], [2]], np.int64)}
    return main, startup, exe, scope, feed, loss


def test_missing_feed_names_the_variable_and_the_fix(net):
    main, _, exe, scope, feed, loss = net
    with pytest.raises(FeedError) as err:
        exe.run(main, feed={"x": feed["x"]}, fetch_list=[loss], scope=scope)
    msg = str(err.value)
    assert "'label'" in msg and "feed" in msg and HERE in msg


def test_wrong_dtype_says_expected_actual_and_astype(net):
    main, _, exe, scope, feed, loss = net
    with pytest.raises(FeedError, match=r"float32.*float64.*astype\('float32'\)"):
        exe.run(main, feed=dict(feed, x=feed["x"].astype(np.float64)), scope=scope)


def test_wrong_shape_and_missing_trailing_dim(net):
    main, _, exe, scope, feed, loss = net
    with pytest.raises(FeedError, match=r"\[-1, 4\].*\[2, 5\]"):
        exe.run(main, feed=dict(feed, x=np.ones((2, 5), np.float32)), scope=scope)
    with pytest.raises(FeedError, match=r"reshape\(-1, 1\)"):
        exe.run(main, feed=dict(feed, label=np.array([0, 2], np.int64)), scope=scope)


def test_the_feed_checks_hold_after_steps_that_took_the_feed_as_it_is(net):
    """A fed array of the shape and dtype a step took as it is skips the checks at the next
    step: any other shape or dtype is still checked, whatever came before."""
    main, _, exe, scope, feed, loss = net
    for _ in range(2):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    with pytest.raises(FeedError, match=r"\[-1, 4\].*\[2, 5\]"):
        exe.run(main, feed=dict(feed, x=np.ones((2, 5), np.float32)), scope=scope)
    with pytest.raises(FeedError, match=r"float32.*float64.*astype\('float32'\)"):
        exe.run(main, feed=dict(feed, x=feed["x"].astype(np.float64)), scope=scope)
    with pytest.raises(FeedError, match=r"reshape\(-1, 1\)"):
        exe.run(main, feed=dict(feed, label=np.array([0, 2], np.int64)), scope=scope)
    with pytest.raises(OpRuntimeError, match=r"label value -1 \(at row 1\)"):
        exe.run(main, feed=dict(feed, label=np.array([[0], [-1]], np.int64)), scope=scope)
    bigger = {"x": np.ones((3, 4), np.float32), "label": np.array([[0], [1], [2]], np.int64)}
    assert exe.run(main, feed=bigger, fetch_list=[loss], scope=scope)[0].shape == (1,)


def test_a_declaration_changed_in_place_is_checked_again_after_steps():
    """VarDesc.set_shape and set_need_check_feed change a variable without changing the
    program: the next feed is checked against the new declaration."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        z = fluid.layers.data("z", [4])
        out = [fluid.layers.scale(x, 2.0), fluid.layers.scale(z, 2.0)]
    exe = fluid.Executor(fluid.CPUPlace())
    # z, a layers.data variable, takes any shape: (2, 5) against its declared [-1, 4]
    feed = {"x": np.ones((2, 4), np.float32), "z": np.ones((2, 5), np.float32)}
    for _ in range(2):
        exe.run(main, feed=feed, fetch_list=out)
    x.desc.set_shape([-1, 5])
    with pytest.raises(FeedError, match=r"'x'.*\(-1, 5\).*\[2, 4\]"):
        exe.run(main, feed=feed, fetch_list=out)
    x.desc.set_shape([-1, 4])
    exe.run(main, feed=feed, fetch_list=out)
    z.desc.set_need_check_feed(True)
    with pytest.raises(FeedError, match=r"'z'.*\(-1, 4\).*\[2, 5\]"):
        exe.run(main, feed=feed, fetch_list=out)


def test_a_variable_changed_in_place_after_steps_changes_the_plan():
    """Making an intermediate persistable (through its desc or the attribute) between runs
    changes the program: the next run keeps it in the scope instead of collecting it, as
    Paddle's executor, which prepares the program again, does. Setting a field to the value it
    has keeps the cached plan."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        hidden = fluid.layers.fc(x, 3)
        doubled = fluid.layers.scale(hidden, 2.0)
        loss = fluid.layers.mean(doubled)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((2, 4), np.float32)}
    for _ in range(2):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert scope.find_var(hidden.name) is None
    version = main._version
    hidden.persistable = False
    doubled.desc.set_shape(doubled.shape)
    assert main._version == version
    hidden.desc.set_persistable(True)
    assert main._version > version
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    kept = np.array(scope.find_var(hidden.name).get_tensor())
    assert kept.shape == (2, 3)
    doubled.persistable = True
    (out,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(np.array(scope.find_var(doubled.name).get_tensor()),
                               2 * np.array(scope.find_var(hidden.name).get_tensor()))
    np.testing.assert_allclose(out, np.array(scope.find_var(doubled.name).get_tensor()).mean(),
                               rtol=1e-6)


def test_a_layers_data_feed_of_another_dtype_is_cast_after_steps_took_it_as_it_is():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [2])  # (no feed check: a value of another dtype is cast)
        out = fluid.layers.scale(x, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    for value in (np.ones((1, 2), np.float32), np.ones((1, 2), np.float32),
                  np.array([[1.5, 2.5]], np.float64)):
        (got,) = exe.run(main, feed={"x": value}, fetch_list=[out])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, 2 * value.astype(np.float32))


def test_fetch_lists_of_every_kind_after_plain_ones(net):
    main, _, exe, scope, feed, loss = net
    w = main.global_block().var("fc_0.w_0")  # a Parameter (a Variable subclass)
    for fetch_list in ([loss], (loss, "fc_0.w_0"), [w], "fc_0.w_0", loss):
        out = exe.run(main, feed=feed, fetch_list=fetch_list, scope=scope)
        assert len(out) == (2 if isinstance(fetch_list, tuple) else 1)
    # a list inside the list is flattened, as Fluid 1.8's Executor.run does
    out = exe.run(main, feed=feed, fetch_list=[[loss], w], scope=scope)
    assert [a.shape for a in out] == [(1,), (4, 3)]


def test_unknown_feed_and_fetch_names_suggest_close_matches(net):
    main, _, exe, scope, feed, loss = net
    with pytest.raises(FeedError, match="did you mean 'label'"):
        exe.run(main, feed=dict(feed, lable=feed["label"]), scope=scope)
    with pytest.raises(FetchError, match="fc_0.w_0"):
        exe.run(main, feed=feed, fetch_list=["fc_0.w_O"], scope=scope)


def test_running_before_startup_says_run_the_startup_program(net):
    main, _, exe, _, feed, loss = net
    with pytest.raises(UninitializedVariableError, match="startup program"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=fluid.Scope())


def test_label_out_of_range_names_op_value_and_callsite(net):
    main, _, exe, scope, feed, loss = net
    with pytest.raises(OpRuntimeError) as err:
        exe.run(main, feed=dict(feed, label=np.array([[0], [7]], np.int64)), scope=scope)
    msg = str(err.value)
    assert "softmax_with_cross_entropy" in msg and "label value 7" in msg
    assert "[0, 3)" in msg and HERE in msg


def test_the_hard_label_check_reads_every_integer_dtype():
    """One reduction where the labels can be read as unsigned (a negative one is then huge),
    two for the others (big-endian integers): a negative label is never taken as plain."""
    from runtime.ops.loss import _plain_labels
    for dtype in ("int64", "int32", "int16", "int8", ">i8", ">i4", "uint8", ">u2"):
        assert _plain_labels(np.array([[0], [2]], dtype=dtype), 3, -100)
        assert not _plain_labels(np.array([[0], [3]], dtype=dtype), 3, -100)
        assert _plain_labels(np.array([[2], [0]], dtype=dtype)[::-1], 3, -100)  # (a view)
        if np.dtype(dtype).kind == "i":
            assert not _plain_labels(np.array([[0], [-1]], dtype=dtype), 3, -100)


def test_incompatible_shapes_fail_at_build_time_with_callsite():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        a = fluid.data("a", [None, 4])
        b = fluid.data("b", [None, 5])
        with pytest.raises(ShapeError) as err:
            fluid.layers.elementwise_add(a, b)
    assert "elementwise_add" in str(err.value) and HERE in str(err.value)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = fluid.data("a", [None, 4])
        w = fluid.data("w", [5, 2])
        with pytest.raises(ShapeError, match=r"mul.*4 columns.*5 rows"):
            fluid.layers.mul(a, w)


def test_fetch_returns_copies_and_lod_tensors(net):
    main, _, exe, scope, feed, loss = net
    (w,) = exe.run(main, feed=feed, fetch_list=["fc_0.w_0"], scope=scope)
    w[:] = 123.0
    assert not np.any(scope.find_var("fc_0.w_0").value == 123.0)
    (t,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope, return_numpy=False)
    assert isinstance(t, fluid.LoDTensor) and np.array(t).shape == (1,)


def test_program_changed_after_a_run_is_recompiled(net):
    main, startup, exe, scope, feed, loss = net
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    with fluid.program_guard(main, startup):
        doubled = loss * 2.0
    a, b = exe.run(main.clone(for_test=True), feed=feed, fetch_list=[loss, doubled], scope=scope)
    np.testing.assert_allclose(b, 2 * a, rtol=1e-6)


def test_scope_guard_and_separate_scopes(net):
    main, startup, exe, scope, feed, loss = net
    other = fluid.Scope()
    with fluid.scope_guard(other):
        exe.run(startup)
        exe.run(main, feed=feed)
    assert other.find_var("fc_0.w_0") is not None
    assert fluid.global_scope().find_var("fc_0.w_0") is None or fluid.global_scope() is not other


def test_feed_accepts_lists_lodtensors_and_a_single_dict_list(net):
    main, _, exe, scope, feed, loss = net
    tensor = fluid.LoDTensor()
    tensor.set(feed["x"], fluid.CPUPlace())
    exe.run(main, feed=[{"x": tensor, "label": [[0], [1]]}], fetch_list=[loss], scope=scope)
    with pytest.raises(FeedError, match="data-parallel"):
        exe.run(main, feed=[feed, feed], scope=scope)


def test_check_nan_inf_names_the_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2])
        out = fluid.layers.mean(fluid.layers.log(x))
    exe = fluid.Executor()
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    try:
        feed = {"x": np.array([[1.0, -1.0]], np.float32)}
        with np.errstate(invalid="ignore"):
            exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=[out])  # step 0
            seen = []
            with fluid.events.subscribe("nan_inf", seen.append):
                with pytest.raises(NanInfError, match=r"op log .*1 NaN.* at step 1; its "
                                                      r"inputs: x\.") as info:
                    exe.run(main, feed=feed, fetch_list=[out])
        assert (info.value.op_type, info.value.step, info.value.inputs) == ("log", 1, ["x"])
        assert (info.value.n_nan, info.value.n_inf) == (1, 0)
        assert seen == [info.value.details]
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False})
    with np.errstate(invalid="ignore"):
        (v,) = exe.run(main, feed={"x": np.array([[1.0, -1.0]], np.float32)}, fetch_list=[out])
    assert np.isnan(v[0])


def test_step_events_report_timings_and_batch_size(net):
    main, _, exe, scope, feed, loss = net
    records = []
    with events.subscribe("step_end", records.append):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)  # unsubscribed: not recorded
    assert len(records) == 2
    r = records[1]
    assert r.step == records[0].step + 1 and r.batch_size == 2 and not r.is_startup
    assert r.feed_s >= 0 and r.compute_s > 0 and r.fetch_s >= 0
    assert r.wall_s >= r.feed_s + r.compute_s
    assert r.fetch_names == (loss.name,) and r.fetch_bytes == 4


def test_step_events_measure_the_training_thread_off_its_cpu(net, monkeypatch):
    """compute_wait_s: the ops' wall time less the training thread's CPU time in them;
    compute_queued_s: of it, runnable but waiting for a core (Linux's run_delay). An op that
    sleeps 30 ms is off its CPU as a thread blocked on the GIL (or a lock, or a device) is:
    the wait grows by that, and it is not time waiting for a core. (A thread spinning Python
    beside the loop showed the same, 0.43-0.71 of the ops' time blocked against 0.08 alone,
    but by how much moves with the machine's load: once 0.18 against 0.08 in a full run.)"""
    import os
    import time
    from runtime.ops.registry import REGISTRY
    main, _, exe, scope, feed, loss = net
    queued_readable = os.path.exists("/proc/thread-self/schedstat")

    def steps(n, exe=exe):
        records = []
        with events.subscribe("step_end", records.append):
            for _ in range(n):
                exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        for r in records:
            assert 0.0 <= r.compute_wait_s <= r.compute_s
            assert (r.compute_queued_s is not None) == queued_readable
            assert 0.0 <= (r.compute_queued_s or 0.0) <= r.compute_wait_s
        return records

    for _ in range(10):  # (the first runs build the plan)
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    steps(20)
    mean = REGISTRY["mean"]
    original = mean.fn

    def sleeping(ctx, ins, attrs):
        time.sleep(0.03)
        return original(ctx, ins, attrs)

    monkeypatch.setattr(mean, "fn", sleeping)
    sleepy = fluid.Executor(fluid.CPUPlace())  # (a plan takes its kernels as it is built)
    sleepy.run(main, feed=feed, fetch_list=[loss], scope=scope)
    for r in steps(5, sleepy):
        assert r.compute_s >= 0.03
        assert r.compute_wait_s - (r.compute_queued_s or 0.0) >= 0.025, r


def test_op_events_only_while_subscribed(net):
    main, _, exe, scope, feed, loss = net
    ops = []
    with events.subscribe("op_end", ops.append):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    types = [o.type for o in ops]
    assert types == [op.type for op in main.global_block().ops]
    assert all(o.dur_s >= 0 for o in ops)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert len(ops) == len(types)


def test_a_failing_subscriber_is_dropped_with_a_warning(net):
    main, _, exe, scope, feed, loss = net

    def broken(record):
        raise RuntimeError("probe bug")

    sub = events.subscribe("step_end", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert any("probe bug" in str(w.message) for w in caught)
    assert events.subscribers("step_end") == 0
    sub.close()


def test_closed_executor_refuses_to_run(net):
    main, _, exe, scope, feed, loss = net
    exe.close()
    with pytest.raises(RuntimeError, match="closed"):
        exe.run(main, feed=feed, scope=scope)
