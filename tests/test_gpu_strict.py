"""The real models on fluid.CUDAPlace(0) against the strict fake CuPy (tests/strictcupy.py):
device arrays that refuse host arrays mixed into device computations and implicit
device-to-host conversions, as CuPy does. Each model trains a few steps on the GPU place and on
the CPU from the same seed: the losses agree, the fetched values are host NumPy arrays, and the
loss falls."""

import dataclasses
import importlib
import pkgutil

import numpy as np
import pytest

import cases
import fakecupy
import opcheck
import runtime as fluid
from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)
from runtime import backend
from runtime.executor import KernelCtx
from runtime.ops.registry import get_op_def
from runtime.tensor import SelectedRows
from strictcupy import DeviceArray
from test_training import load_example


@pytest.fixture
def fake(monkeypatch):
    fake = fakecupy.FakeCupy(strict_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    return fake


# --- the fake itself ---------------------------------------------------------------------------
def test_device_arrays_refuse_host_arrays_and_implicit_conversion(fake):
    dev = fake.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    host = np.ones((2, 3), np.float32)
    assert isinstance(dev, fake.ndarray) and not isinstance(dev, np.ndarray)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(dev)
    for mixed in (lambda: dev + host, lambda: host * dev, lambda: np.maximum(dev, host),
                  lambda: fake.where(dev > 0, host, dev), lambda: fake.concatenate([dev, host])):
        with pytest.raises(TypeError, match="Unsupported type"):
            mixed()
    with pytest.raises(TypeError):
        dev[...] = host
    out = np.exp(dev) * 2 + np.float32(1)  # NumPy's functions dispatch; scalars are fine
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(out.get(), np.exp(dev.get()) * 2 + 1, rtol=1e-6)
    total = dev.sum()
    assert isinstance(total, DeviceArray) and total.ndim == 0 and float(total) == 15.0
    view = dev.reshape(-1)
    assert view.base is dev and view.data.ptr == dev.data.ptr
    dev[0, fake.asarray(np.array([0, 2]))] = 7  # device and host indices are fine
    view[np.array([1])] = fake.asarray(np.array([5], np.float32))
    assert dev.get().tolist() == [[7, 5, 7], [3, 4, 5]]


def test_device_arrays_take_their_memory_from_cupys_allocator(fake):
    dev = fake.zeros((4, 4), dtype=np.float32)
    assert fake.mallocs[-1] == 64 and ("alloc", 64) in fake.order
    live = len(fake.live)
    del dev
    assert len(fake.live) == live - 1


# --- the models ---------------------------------------------------------------------------------
def _train(place, build, feeds):
    """The loss of each step of `build()`'s program trained on `place`."""
    return fakecupy.train(place, build, feeds)[0]


def _compare(build, feeds):
    cpu = _train(fluid.CPUPlace(), build, feeds)
    fake = backend.cupy_status()[0]
    allocs = len(fake.order)
    gpu = _train(fluid.CUDAPlace(0), build, feeds)
    assert len(fake.order) > allocs  # the GPU run computed with device arrays
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    assert gpu[-1] < gpu[0]


def _batches(x, y, names, batch, steps, seed=1):
    rng = np.random.default_rng(seed)
    return [dict(zip(names, (x[idx], y[idx])))
            for idx in (rng.choice(len(x), batch, replace=False) for _ in range(steps))]


def mlp_model(optimizer, n_train=256, hidden=(32, 16), batch=32, steps=8):
    """(build, feeds) of the mlp example (also trained on a real GPU: test_gpu_ops_real.py)."""
    mlp = load_example("mlp")
    (x, y), _ = mlp.make_data(n_train=n_train, n_test=8)

    def build():
        main, startup, _, loss, _ = mlp.build_program(list(hidden), optimizer, 0.05, seed=2)
        return main, startup, loss
    return build, _batches(x, y, ("img", "label"), batch, steps)


def cnn_model():
    cnn = load_example("cnn")
    (x, y), _ = cnn.make_data(n_train=64, n_test=8)

    def build():
        main, startup, _, loss, _ = cnn.build_program((4, 4), batch_norm=True, lr=0.01, seed=3)
        return main, startup, loss
    return build, _batches(x, y, ("img", "label"), 16, 5)


def word2vec_model(is_sparse, optimizer):
    w2v = load_example("word2vec")
    train, _ = w2v.make_data(n_train=256, n_test=8, dict_size=50)
    rng = np.random.default_rng(4)
    feeds = []
    for _ in range(6):
        idx = rng.choice(256, 32, replace=False)
        feeds.append({k: v[idx] for k, v in train.items()})

    def build():
        lr = 0.05 if optimizer == "adam" else 0.5
        main, startup, _, loss, _ = w2v.build_program(50, 8, is_sparse, optimizer, lr, seed=5)
        return main, startup, loss
    return build, feeds


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_mlp_trains_alike_on_the_gpu(fake, optimizer):
    _compare(*mlp_model(optimizer))


def test_cnn_with_batch_norm_trains_alike_on_the_gpu(fake):
    _compare(*cnn_model())


@pytest.mark.parametrize("is_sparse,optimizer", [(True, "sgd"), (False, "adam"),
                                                 (True, "momentum")])
def test_word2vec_embeddings_train_alike_on_the_gpu(fake, is_sparse, optimizer):
    _compare(*word2vec_model(is_sparse, optimizer))


def test_dropout_sigmoid_and_grad_clip_train_alike_on_the_gpu(fake):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(128, 12)).astype(np.float32)
    y = (x[:, :1] * 2 - x[:, 1:2] > 0).astype(np.int64)

    def build():
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 7
        with fluid.program_guard(main, startup):
            xv = fluid.data(name="x", shape=[None, 12], dtype="float32")
            yv = fluid.data(name="y", shape=[None, 1], dtype="int64")
            h = fluid.layers.fc(input=xv, size=16, act="sigmoid")
            h = fluid.layers.dropout(h, dropout_prob=0.2)
            h = fluid.layers.fc(input=h, size=16, act="tanh")
            probs = fluid.layers.fc(input=h, size=2, act="softmax")
            loss = fluid.layers.mean(fluid.layers.cross_entropy(input=probs, label=yv))
            fluid.optimizer.Adam(
                learning_rate=0.05,
                grad_clip=fluid.clip.GradientClipByGlobalNorm(1.0)).minimize(loss)
        return main, startup, loss
    _compare(build, _batches(x, y, ("x", "y"), 32, 8))


# --- the reader's double buffer feeding a CUDAPlace --------------------------------------------
def test_a_double_buffered_data_loader_feeds_the_gpu(fake):
    rng = np.random.default_rng(8)
    x = rng.normal(size=(96, 6)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.int64)

    def run(place):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 9
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            xv = fluid.data(name="x", shape=[None, 6], dtype="float32")
            yv = fluid.data(name="y", shape=[None, 1], dtype="int64")
            logits = fluid.layers.fc(input=xv, size=2)
            loss = fluid.layers.mean(
                fluid.layers.softmax_with_cross_entropy(logits=logits, label=yv))
            fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
            loader = fluid.io.DataLoader.from_generator(feed_list=[xv, yv], capacity=4,
                                                        use_double_buffer=True)
        loader.set_batch_generator(lambda: ((x[i:i + 16], y[i:i + 16]) for i in range(0, 96, 16)),
                                   places=place)
        exe = fluid.Executor(place)
        losses = []
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            for _ in range(2):
                for data in loader():
                    value, = exe.run(main, feed=data, fetch_list=[loss])
                    assert type(value) is np.ndarray
                    losses.append(float(value[0]))
        return losses

    cpu = run(fluid.CPUPlace())
    copies = len(fake.copies)
    gpu = run(fluid.CUDAPlace(0))
    assert len(fake.copies) - copies == 2 * 6 * 2  # x and y of each batch through pinned memory
    assert all(pinned for _, pinned, _ in fake.copies[copies:])
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    assert len(gpu) == 12 and gpu[-1] < gpu[0]


# --- the place's device, not the current one --------------------------------------------------
def _small_program(seed=9):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        xv = fluid.data(name="x", shape=[None, 6], dtype="float32")
        yv = fluid.data(name="y", shape=[None, 1], dtype="int64")
        hidden = fluid.layers.fc(input=xv, size=8, act="relu")
        logits = fluid.layers.fc(input=hidden, size=2)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits=logits, label=yv))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    return main, startup, xv, yv, loss


def test_values_loaded_or_set_for_the_second_gpu_live_on_it(monkeypatch, tmp_path):
    fake = fakecupy.FakeCupy(devices=2, strict_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    rng = np.random.default_rng(10)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.int64)

    def run(place):
        main, startup, xv, yv, loss = _small_program()
        exe = fluid.Executor(place)
        losses = []
        scope = fluid.Scope()
        with fluid.scope_guard(scope):
            exe.run(startup)
            fluid.io.save_persistables(exe, str(tmp_path / repr(place)), main)
            fluid.io.load_persistables(exe, str(tmp_path / repr(place)), main)  # io.load
            tensor = scope.find_var("fc_0.w_0").get_tensor()
            tensor.set(np.array(tensor), place)  # LoDTensor.set(array, place)
            fed = fluid.LoDTensor()
            fed.set(x, place)
            for _ in range(3):
                value, = exe.run(main, feed={"x": fed, "y": y}, fetch_list=[loss])
                losses.append(float(value[0]))
        return losses

    gpu = run(fluid.CUDAPlace(1))
    assert 1 in fake.devices_entered
    np.testing.assert_allclose(gpu, run(fluid.CPUPlace()), rtol=1e-5, atol=1e-6)


def test_data_parallel_on_a_gpu_executor_says_it_is_not_implemented(fake):
    main, startup, _, _, loss = _small_program()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
        with pytest.raises(NotImplementedError, match="GPU places"):  # not CPU plans over
            exe.run(compiled, feed={"x": np.zeros((4, 6), np.float32),  # device arrays
                                    "y": np.zeros((4, 1), np.int64)}, fetch_list=[loss])


# --- every op case's kernels on device arrays ---------------------------------------------------
for _mod in pkgutil.iter_modules(cases.__path__):
    importlib.import_module(f"cases.{_mod.name}")
GRAD_CASES = [c for c in opcheck.CASES if c.check_grad and get_op_def(c.op).grad_def is not None]


def _device(fake, value):
    if isinstance(value, list):
        return [_device(fake, v) for v in value]
    if isinstance(value, SelectedRows):
        return SelectedRows(fake.asarray(value.ids), fake.asarray(value.value),
                            value.full_height)
    if isinstance(value, dict):
        return {k: _device(fake, v) for k, v in value.items()}
    return fake.asarray(value) if isinstance(value, np.ndarray) else value


def _host(value, what):
    """The host copy of a kernel's output, which must live on the device."""
    if isinstance(value, list):
        return [_host(v, what) for v in value]
    if isinstance(value, SelectedRows):
        return SelectedRows(_host(value.ids, what), _host(value.value, what), value.full_height)
    if value is None:
        return None
    assert isinstance(value, DeviceArray), f"{what} is a {type(value).__name__}, not on the device"
    return value.get()


def _assert_same(got, want, what, rtol=1e-12, atol=1e-12):
    if isinstance(want, list):
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{what}[{i}]", rtol, atol)
    elif want is not None:
        g, w = opcheck.dense(got), opcheck.dense(want)
        assert g.shape == w.shape and g.dtype == w.dtype, what
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)


def _gpu_ctx(fake):
    return lambda op, want: KernelCtx(fake, np.random.default_rng(0), frozenset(want), op,
                                      fluid.CUDAPlace(0))


def forward_on_device(xp, monkeypatch, c):
    """(the CPU's outputs, the outputs of the same kernel on `xp`'s device arrays) of case c
    (also run on a real GPU: test_gpu_ops_real.py)."""
    op, _ = opcheck.build_op(c)
    want = opcheck.run_forward(c, op)
    monkeypatch.setattr(opcheck, "ctx_for", _gpu_ctx(xp))
    return want, opcheck.run_forward(c, op, _device(xp, c.inputs))


def grads_on_device(xp, monkeypatch, c):
    """(the CPU's gradients, the same grad kernel's on `xp`'s device arrays) of case c."""
    opdef = get_op_def(c.op)
    op, _ = opcheck.build_op(c)
    outputs = opcheck.run_forward(c, op)
    weights = opcheck._loss_weights(opdef, outputs, np.random.default_rng(1))
    slots = opcheck.grad_slots(c, opdef)
    want = opcheck.analytic_grads(c, op, opdef, outputs, weights, slots)
    monkeypatch.setattr(opcheck, "ctx_for", _gpu_ctx(xp))
    on_device = dataclasses.replace(c, inputs=_device(xp, c.inputs))
    return want, opcheck.analytic_grads(on_device, op, opdef, _device(xp, outputs),
                                        _device(xp, weights), slots)


@pytest.mark.parametrize("c", opcheck.CASES, ids=[c.id for c in opcheck.CASES])
def test_every_forward_kernel_runs_on_device_arrays(fake, monkeypatch, c):
    want, got = forward_on_device(fake, monkeypatch, c)
    for slot, value in want.items():
        _assert_same(_host(got[slot], f"{c.id} {slot}"), value, f"{c.id} {slot}")


@pytest.mark.parametrize("c", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_every_grad_kernel_runs_on_device_arrays(fake, monkeypatch, c):
    want, got = grads_on_device(fake, monkeypatch, c)
    for slot, value in want.items():
        _assert_same(_host(got[slot], f"{c.id} {slot}"), value, f"{c.id} {slot}")


def test_inplace_reuse_is_granted_on_the_gpu_and_changes_nothing(fake):
    """A CompiledProgram with enable_inplace: dead temporaries of CuPy's array type are reused
    on the GPU as NumPy's are on the CPU (plan.exclusive takes the place's array module), and
    the losses stay the CPU's."""
    mlp = load_example("mlp")
    (x, y), _ = mlp.make_data(n_train=128, n_test=8)
    feeds = _batches(x, y, ("img", "label"), 32, 4)

    def run(place):
        with fluid.unique_name.guard():
            main, startup, _, loss, _ = mlp.build_program([32, 16], "momentum", 0.05, seed=2)
        exe = fluid.Executor(place)
        build = fluid.BuildStrategy()
        build.enable_inplace, build.memory_optimize = True, False
        compiled = fluid.CompiledProgram(main, build_strategy=build)
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            losses = [float(exe.run(compiled, feed=f, fetch_list=[loss])[0].reshape(-1)[0])
                      for f in feeds]
        plan = next(p for p in exe._plans.values() if p.program is main)
        return losses, {step.type for step in plan.steps if step.ctx.inplace}

    cpu, cpu_granted = run(fluid.CPUPlace())
    gpu, gpu_granted = run(fluid.CUDAPlace(0))
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    assert gpu_granted and gpu_granted == cpu_granted, (gpu_granted, cpu_granted)


def test_the_memory_trace_counts_a_view_as_holding_nothing_on_the_gpu(fake):
    """The traced step (what the memory advice replays) says what each output holds of its
    own: 0 for reshape's view of its input, on the GPU as on the CPU."""
    from runtime import events

    def outputs(place):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [None, 8], "float32")
            h = fluid.layers.fc(x, 8, act="relu")
            flat = fluid.layers.reshape(h, [-1, 4])
            loss = fluid.layers.mean(flat)
        traces = []
        sub = events.subscribe("memory_trace", traces.append)
        try:
            exe = fluid.Executor(place)
            with fluid.scope_guard(fluid.Scope()):
                exe.run(startup)
                for _ in range(3):
                    exe.run(main, feed={"x": np.ones((4, 8), np.float32)}, fetch_list=[loss])
        finally:
            sub.close()
        (trace,) = [t for t in traces if t.program_id == main._uid]
        return {op["type"]: op["outputs"] for op in trace.ops}

    cpu, gpu = outputs(fluid.CPUPlace()), outputs(fluid.CUDAPlace(0))
    assert cpu["reshape2"]["reshape2_0.tmp_0"] == 0 and cpu["mul"]["fc_0.tmp_0"] == 128
    assert gpu == cpu

