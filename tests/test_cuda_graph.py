"""Whole-step CUDA graphs (runtime/cuda_graph.py) against the strict fake CuPy, whose stream
capture records kernels without running them and whose graphs replay them (tests/strictcupy.py).
A captured step must train exactly as the CPU does; whatever cannot be captured runs eagerly,
with the reason kept."""

import contextlib

import numpy as np
import pytest

import fakecupy
import runtime as fluid
from fakecupy import CUDARuntimeError, restore_gpu_flags  # noqa: F401  (autouse fixture)
from runtime import cuda_graph, events
from runtime.errors import OpRuntimeError

STEPS = 7


@pytest.fixture
def fake(monkeypatch):
    fake = fakecupy.FakeCupy(strict_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    saved = fluid.get_flags(["FLAGS_new_executor_use_cuda_graph"])
    yield fake
    fluid.set_flags(saved)


def _regression(optimizer="momentum", dropout=False, classify=False):
    def build():
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup):
            x = fluid.layers.data("x", [8])
            h = fluid.layers.fc(x, 16, act="relu")
            if dropout:
                h = fluid.layers.dropout(h, 0.3)
            if classify:
                y = fluid.layers.data("y", [1], dtype="int64")
                loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                    fluid.layers.fc(h, 4), y))
            else:
                y = fluid.layers.data("y", [1])
                loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
            lr = 0.05
            if optimizer == "decay":
                lr = fluid.layers.exponential_decay(0.05, 2, 0.5)
            {"sgd": lambda: fluid.optimizer.SGD(lr), "adam": lambda: fluid.optimizer.Adam(0.01),
             "momentum": lambda: fluid.optimizer.Momentum(lr, 0.9),
             "decay": lambda: fluid.optimizer.Momentum(lr, 0.9)}[optimizer]().minimize(loss)
        return main, startup, loss
    return build


def _feeds(n=STEPS, batch=16, classify=False):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((batch, 8)).astype("float32"),
             "y": (rng.integers(0, 4, (batch, 1)) if classify
                   else rng.standard_normal((batch, 1)).astype("float32"))} for _ in range(n)]


_train = fakecupy.train  # (losses, executor); between(step, exe, main) after each step


@contextlib.contextmanager
def _listening(channel):
    """The runtime's `channel` events, collected while the block runs."""
    records = []
    sub = events.subscribe(channel, records.append)
    try:
        yield records
    finally:
        sub.close()


def _reasons(exe):
    return list(exe._graphs.reasons().values())


# --- the fake's capture ------------------------------------------------------------------------
def test_captured_work_runs_only_when_the_graph_is_launched(fake):
    x = fake.asarray(np.arange(4, dtype=np.float32))
    stream = fake.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        y = x * 2
        x += 1
        graph = stream.end_capture()
    assert x.get().tolist() == [0, 1, 2, 3]  # nothing ran
    assert np.isnan(y.get()).all()  # memory nobody wrote
    graph.launch()
    assert y.get().tolist() == [0, 2, 4, 6] and x.get().tolist() == [1, 2, 3, 4]
    graph.launch()
    assert y.get().tolist() == [2, 4, 6, 8] and x.get().tolist() == [2, 3, 4, 5]


def test_a_host_read_inside_a_capture_raises_and_invalidates_it(fake):
    x = fake.asarray(np.ones(3, np.float32))
    stream = fake.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(CUDARuntimeError, match="StreamCaptureUnsupported"):
            float(x.sum())
        with pytest.raises(CUDARuntimeError, match="Invalidated"):
            stream.end_capture()
    with pytest.raises(RuntimeError, match="default"):
        fake.cuda.Stream.null.begin_capture()


# --- training ----------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam", "decay"])
def test_a_captured_step_trains_exactly_as_the_cpu(fake, optimizer):
    build, feeds = _regression(optimizer), _feeds()
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert gpu == cpu
    assert _reasons(exe) == []
    assert fake.graph_launches == STEPS - cuda_graph.EAGER_STEPS
    assert cpu[-1] < cpu[0]


def test_an_update_that_is_not_in_place_is_copied_back(fake, monkeypatch):
    """The decayed learning rate's step counter is written into a new array each step: the
    capture copies it back into the array the graph reads (which the test above shows right)."""
    copied = []
    real = cuda_graph._copy_back

    def spy(*args):
        copied.append(real(*args))
        return copied[-1]
    monkeypatch.setattr(cuda_graph, "_copy_back", spy)
    _train(fluid.CUDAPlace(0), _regression("decay"), _feeds())
    assert len(copied) == 1 and len(copied[0]) >= 1


def test_the_scope_keeps_one_array_per_variable(fake):
    arrays = {}

    def keep(step, exe, main):
        scope = fluid.global_scope()
        for var in main.list_vars():
            if var.persistable and scope.find_var(var.name) is not None:
                arrays.setdefault(var.name, set()).add(id(scope.find_var(var.name).value))
    _train(fluid.CUDAPlace(0), _regression("decay"), _feeds(), keep)
    # from the capture on (step 3), each persistable variable stays in the same array
    assert arrays and all(len(ids) <= cuda_graph.EAGER_STEPS + 1 for ids in arrays.values())


def test_a_new_batch_size_gets_a_graph_of_its_own(fake):
    feeds = _feeds(5, 16) + _feeds(5, 8)
    build = _regression()
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert gpu == cpu
    assert fake.graph_launches == 2 * (5 - cuda_graph.EAGER_STEPS)


def test_a_variable_written_from_outside_rebuilds_the_graph(fake):
    """Setting a parameter from outside (loading a checkpoint, another program) replaces the
    array the graph reads: the next step runs eagerly and the graph is captured again."""
    def reset(step, exe, main):
        if step == 3:
            name = main.global_block().all_parameters()[0].name
            tensor = fluid.global_scope().find_var(name).get_tensor()
            tensor.set(np.full(tensor.shape(), 0.01, np.float32), fluid.CUDAPlace(0)
                       if exe.place != fluid.CPUPlace() else exe.place)
    build, feeds = _regression(), _feeds(9)
    cpu, _ = _train(fluid.CPUPlace(), build, feeds, reset)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds, reset)
    assert gpu == cpu
    assert _reasons(exe) == []
    # steps 3-4 replayed; step 5 eager (invalidated); step 6 captured again, 6-9 launched
    assert fake.graph_launches == 2 + 4


# --- what runs eagerly, and why ----------------------------------------------------------------
def test_an_op_that_reads_back_runs_eagerly_with_the_reason(fake):
    """Without CuPy's compiler the fake has no fused kernels: the generic cross entropy reads
    the labels' range back, which a capture refuses."""
    build, feeds = _regression(classify=True), _feeds(classify=True)
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert gpu == cpu
    reason, = _reasons(exe)
    assert "softmax_with_cross_entropy" in reason and "capturing" in reason
    assert fake.graph_launches == 0


def test_random_ops_are_never_captured(fake):
    gpu, exe = _train(fluid.CUDAPlace(0), _regression(dropout=True), _feeds())
    reason, = _reasons(exe)
    assert "dropout" in reason and "random" in reason
    assert fake.graph_launches == 0


def test_the_flag_turns_capture_off(fake):
    fluid.set_flags({"FLAGS_new_executor_use_cuda_graph": False})
    _train(fluid.CUDAPlace(0), _regression(), _feeds())
    assert fake.graph_launches == 0


def test_per_op_timing_samples_eager_steps_between_replays(fake):
    """--ops: one step in OPS_EVERY of a captured signature runs eagerly with each op timed;
    the others replay (the op figures come from eager steps, the step times mostly from
    replays)."""
    steps = 2 + 1 + 2 * cuda_graph.OPS_EVERY  # warm-up, capture, two rounds of replays
    build, feeds = _regression(), _feeds(steps)
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    with _listening("op_end") as records:
        gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert gpu == cpu and _reasons(exe) == []
    timed = sorted({r.step for r in records if r.program_id == records[-1].program_id})
    # steps 0 and 1 (warm-up) and one in OPS_EVERY after the capture (step 2)
    assert timed == [0, 1, 2 + cuda_graph.OPS_EVERY, 2 + 2 * cuda_graph.OPS_EVERY]
    assert fake.graph_launches == steps - len(timed)


def test_nan_checks_run_steps_eagerly(fake):
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    try:
        _train(fluid.CUDAPlace(0), _regression(), _feeds())
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False})
    assert fake.graph_launches == 0


# --- memory ------------------------------------------------------------------------------------
def test_the_graphs_memory_is_the_places_and_goes_back_when_the_executor_closes(fake):
    from runtime import memory
    _, exe = _train(fluid.CUDAPlace(0), _regression(), _feeds())
    pool = memory.pool_for(fluid.CUDAPlace(0))
    assert pool.by_tag.get("cuda_graph", 0) > 0
    exe.close()
    import gc
    gc.collect()
    assert pool.by_tag.get("cuda_graph", 0) == 0
    assert cuda_graph._RETIRED == []


def test_fetches_are_host_copies_not_the_graphs_buffers(fake):
    with fluid.unique_name.guard():
        main, startup, loss = _regression()()
    weight = main.global_block().all_parameters()[0].name
    exe = fluid.Executor(fluid.CUDAPlace(0))
    seen = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for feed in _feeds():
            seen.append(exe.run(main, feed=feed, fetch_list=[weight])[0])
    assert fake.graph_launches > 0
    assert all(type(v) is np.ndarray for v in seen)
    assert not any(np.array_equal(a, b) for a, b in zip(seen, seen[1:]))  # each step moved it


def test_each_graph_has_a_cublas_workspace_of_its_own_in_its_memory(fake):
    """The matrix products' cuBLAS workspace is the graph's: made from its pool at the
    capture's first product (so counted in its bytes, and gone with it), and another
    executor's graph has another: graphs replayed at once on two streams share none."""
    from runtime import gemm
    build, feeds = _regression(), _feeds()
    graphs = []
    for _ in range(2):
        losses, exe = _train(fluid.CUDAPlace(0), build, feeds)
        captured, = exe._graphs.captured()
        graphs.append(captured)
    first, second = (g.workspace for g in graphs)
    assert first.nbytes == second.nbytes == gemm.WORKSPACE_BYTES
    assert first.data.ptr != second.data.ptr
    assert all(g.nbytes >= gemm.WORKSPACE_BYTES for g in graphs)
    assert losses == _train(fluid.CPUPlace(), build, feeds)[0]


def test_batched_matmuls_are_captured_and_train_as_on_the_cpu(fake):
    """Attention-like products of stacks (and their gradients) go to one strided-batched cuBLAS
    GEMM each inside the capture, where CuPy would refuse its own."""
    def build():
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup):
            x = fluid.layers.data("x", [4, 8])
            y = fluid.layers.data("y", [1])
            query = fluid.layers.fc(x, 8, num_flatten_dims=2)
            weights = fluid.layers.softmax(fluid.layers.matmul(query, x, transpose_y=True))
            mixed = fluid.layers.matmul(weights, x)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(mixed, 1),
                                                                    y))
            fluid.optimizer.SGD(0.05).minimize(loss)
        return main, startup, loss
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.standard_normal((16, 4, 8)).astype("float32"),
              "y": rng.standard_normal((16, 1)).astype("float32")} for _ in range(STEPS)]
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert _reasons(exe) == [] and len(exe._graphs.captured()) == 1
    np.testing.assert_allclose(gpu, cpu, rtol=1e-6)
    assert cpu[-1] < cpu[0]


def _checked_mean(monkeypatch):
    """The mean op defers a device-side check (as the fused cross entropy's label check does,
    which the fake cannot compile): its input must stay below 100."""
    from runtime import device_checks
    from runtime.ops.registry import get_op_def
    mean = get_op_def("mean")
    original = mean.fn

    def checked(ctx, ins, attrs):
        x = ins["X"]
        device_checks.defer(ctx.op, (x > 100).astype("int32").sum().reshape(1),
                            lambda count: f"{count} values above 100")
        return original(ctx, ins, attrs)
    monkeypatch.setattr(mean, "fn", checked)


def test_a_replayed_step_reads_its_fetches_and_checks_with_no_device_read(fake, monkeypatch):
    """The graph copies the fetched loss and each deferred check's flag into pinned host memory
    at its end: after the step's stream wait the host reads them there, not from the device."""
    _checked_mean(monkeypatch)
    build, feeds = _regression(), _feeds()
    reads = []
    losses, exe = _train(fluid.CUDAPlace(0), build, feeds,
                         between=lambda step, exe, main: reads.append(fake.host_reads))
    assert len(exe._graphs.captured()) == 1 and _reasons(exe) == []
    per_step = np.diff(reads).tolist()
    assert per_step[-3:] == [0, 0, 0], per_step  # replayed steps
    assert per_step[0] >= 2, per_step  # an eager step reads its check and its fetch back
    assert losses == _train(fluid.CPUPlace(), build, feeds)[0]


def test_a_failed_check_in_a_replayed_step_names_its_op(fake, monkeypatch):
    _checked_mean(monkeypatch)
    feeds = _feeds()
    feeds[-1]["y"][3, 0] = 1e4  # its squared error is far above 100
    with pytest.raises(OpRuntimeError, match=r"op mean.*1 values above 100"):
        _train(fluid.CUDAPlace(0), _regression(), feeds)
    assert fake.graph_launches == STEPS - cuda_graph.EAGER_STEPS  # the last step replayed


# --- the profile -------------------------------------------------------------------------------
def test_the_profile_says_what_was_captured_and_what_runs_eagerly(fake):
    from paddletune.probes.base import Clock
    from paddletune.probes.step import StepProbe
    from paddletune.profile.records import CudaGraphEvent
    from paddletune.sources.fluid.source import FluidSource
    sink = []
    probe = StepProbe(sink.append, Clock(t0=0.0), FluidSource()).start()
    try:
        _train(fluid.CUDAPlace(0), _regression(), _feeds())
        _train(fluid.CUDAPlace(0), _regression(dropout=True), _feeds())
    finally:
        probe.stop()
    captured, eager = [r for r in sink if isinstance(r, CudaGraphEvent)]
    assert captured.captured and captured.graph_bytes > 0 and captured.feed == "16x8, 16x1"
    assert "captured into a CUDA graph" in captured.message
    assert not eager.captured and eager.graph_bytes == 0
    assert "run eagerly" in eager.message and "dropout" in eager.message


def test_the_memory_probe_sees_every_step_the_graph_holding_its_memory(fake):
    with _listening("memory_step") as records:
        _train(fluid.CUDAPlace(0), _regression(), _feeds())
    main = [r for r in records if r.program_id == records[-1].program_id]
    assert len(main) == STEPS
    replayed = main[-1]
    assert replayed.by_tag["cuda_graph"] > 0
    assert replayed.step_peak == replayed.allocated  # the graph's memory held throughout


# --- what the graph holds stays its own --------------------------------------------------------
def test_the_graphs_pool_gives_no_memory_back_while_the_graph_lives(fake):
    """Arrays freed during the capture leave wholly free chunks in the graph's pool; the
    captured kernels still use those addresses, so none may go back to the place's pool."""
    from runtime import memory
    _, exe = _train(fluid.CUDAPlace(0), _regression("adam"), _feeds())
    place = memory.pool_for(fluid.CUDAPlace(0))
    captured, = exe._graphs.captured()
    assert captured.pool.n_frees > 0  # arrays did die during the capture ...
    assert captured.pool.n_system_frees == 0  # ... and their chunks stayed the graph's
    assert all(place.owns(chunk) for chunk in captured.pool._chunks)
    assert fake.frees_while_capturing == []


def test_device_feeds_are_copied_into_inputs_of_the_graphs_own(fake):
    """A dataset kept on the device and fed slice by slice: the replays must not write the
    later batches into the slice fed when the step was captured."""
    build = _regression()
    host = _feeds(8)
    on_device = {"x": fake.asarray(np.concatenate([f["x"] for f in host])),
                 "y": fake.asarray(np.concatenate([f["y"] for f in host]))}
    before = {k: v.get() for k, v in on_device.items()}
    feeds = [{k: v[16 * i:16 * (i + 1)] for k, v in on_device.items()} for i in range(8)]
    cpu, _ = _train(fluid.CPUPlace(), build, host)
    gpu, _ = _train(fluid.CUDAPlace(0), build, feeds)
    assert fake.graph_launches > 0
    assert all(np.array_equal(on_device[k].get(), before[k]) for k in before)
    assert gpu == cpu
    assert fake.device_copies == 2 * (fake.graph_launches - 1)  # each replay: one per feed


def test_an_executor_dropped_without_close_gives_its_graphs_memory_back(fake):
    import gc
    from runtime import memory
    _, exe = _train(fluid.CUDAPlace(0), _regression(), _feeds())
    pool = memory.pool_for(fluid.CUDAPlace(0))
    assert pool.by_tag.get("cuda_graph", 0) > 0
    del exe
    gc.collect()
    assert pool.by_tag.get("cuda_graph", 0) == 0


def test_the_executors_own_eager_steps_keep_the_graph(fake):
    """NaN checks make some steps eager; their out-of-place updates (the decayed learning
    rate's counter) go into the arrays the graph reads, so the graph stays valid."""
    def sometimes_checked(step, exe, main):
        fluid.set_flags({"FLAGS_check_nan_inf": step % 3 == 1})
    build, feeds = _regression("decay"), _feeds(12)
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    try:
        gpu, exe = _train(fluid.CUDAPlace(0), build, feeds, sometimes_checked)
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False})
    assert gpu == cpu
    assert _reasons(exe) == [] and len(exe._graphs.captured()) == 1
    # steps 2, 5, 8 and 11 checked (eager), 3 captured: 3, 4, 6, 7, 9 and 10 launched
    assert fake.graph_launches == 6


def test_an_executor_holds_at_most_max_graphs(fake, monkeypatch):
    monkeypatch.setattr(cuda_graph, "MAX_GRAPHS", 2)
    feeds = _feeds(4, 16) + _feeds(4, 8) + _feeds(4, 4) + _feeds(4, 16)
    build = _regression()
    cpu, _ = _train(fluid.CPUPlace(), build, feeds)
    gpu, exe = _train(fluid.CUDAPlace(0), build, feeds)
    assert gpu == cpu
    assert len(exe._graphs.captured()) == 2
    # batch 16's graph was dropped for batch 4's; back to 16: eager steps, then captured again
    assert fake.graph_launches == 4 * (4 - cuda_graph.EAGER_STEPS)


def test_a_graph_pool_keeps_wholly_free_chunks_until_it_is_retired(fake):
    """The case inside a capture: a block freed leaves its chunk wholly free, and a larger
    request would give it back (auto_growth's idle release) while kernels still use it."""
    from runtime import memory
    place = memory.pool_for(fluid.CUDAPlace(0))
    pool = cuda_graph.graph_pool(place)
    small = pool.alloc(3 << 20)
    pool.free(small)
    large = pool.alloc(4 << 20)
    assert pool.n_system_frees == 0 and place.owns(small)
    pool.retire()
    assert place.owns(small) is False  # now it goes back
    pool.free(large)
    assert pool.reserved == 0 and not place.owns(large)
