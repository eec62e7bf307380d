"""The Paddle 3.x source against the real paddle (CPU), in-process: steps, DataLoader passes,
worker timing, the speed-test mode, the overrides, the static graph, Model.fit, and the code
writer's lines."""

import time

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune.profile.records import LoaderConfig  # noqa: E402
from paddletune.profile.schema import decode  # noqa: E402
from paddletune.sources import code_for, source_for  # noqa: E402
from paddletune.sources.eager.overrides import OverrideError  # noqa: E402
from paddletune.sources.paddle.code import PaddleCode  # noqa: E402
from paddletune.sources.paddle.source import (PaddleSource, UnsupportedPaddle,  # noqa: E402
                                               check_version)

EVENTS = ("step_end", "reader_state", "reader_push", "reader_pop")


class Samples(paddle.io.Dataset):
    """Tiny samples; counts __getitem__ calls (in this process) and sleeps in each."""

    def __init__(self, n=32, sleep=0.0):
        self.n, self.sleep, self.calls = n, sleep, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return np.full((4,), i / self.n, "float32"), np.array([i % 2], "int64")


@pytest.fixture(autouse=True)
def dynamic_mode():
    paddle.disable_static()
    yield
    paddle.disable_static()


def started(monkeypatch=None, env=None):
    if monkeypatch is not None:
        if env is None:
            monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
        else:
            monkeypatch.setenv("PADDLETUNE_OVERRIDES", env)
    source = PaddleSource()
    source.begin()
    events = {name: [] for name in EVENTS}
    for name in EVENTS:
        source.subscribe(name, events[name].append)
    return source, events


def train(loader, epochs=1, model=None, optimizer=None, limit=None):
    model = model or paddle.nn.Linear(4, 2)
    optimizer = optimizer or paddle.optimizer.SGD(0.1, parameters=model.parameters())
    steps = 0
    for _ in range(epochs):
        for x, y in loader:
            loss = paddle.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            steps += 1
            if limit is not None and steps >= limit:
                return steps
    return steps


def test_registry_and_info(monkeypatch):
    source = source_for("paddle")
    assert isinstance(source, PaddleSource)
    info = source.info()
    assert info.framework == "paddle" and info.version == f"PaddlePaddle {paddle.__version__}"
    assert info.terms.step == "a training step (optimizer.step)"
    assert "Executor.run" in info.terms.graph_step and info.terms.loader == "paddle.io.DataLoader"
    ids = {k.id for k in info.knobs}
    assert {"reader.num_workers", "reader.batch_size", "reader.prefetch_factor",
            "reader.use_shared_memory", "threads.intra_op", "flag.FLAGS_allocator_strategy",
            "flag.FLAGS_check_nan_inf"} <= ids
    assert all("{value}" in k.how for k in info.knobs)
    flags = source.flags()
    assert flags["FLAGS_allocator_strategy"] == paddle.get_flags(
        ["FLAGS_allocator_strategy"])["FLAGS_allocator_strategy"]
    assert isinstance(source.blas_threads(), int)


def test_version_check():
    check_version("3.3.1")
    check_version("2.6.2")
    check_version("0.0.0")  # a development build
    for bad in ("2.5.0", "1.8.5", "4.0.0"):
        with pytest.raises(UnsupportedPaddle, match="2.6 to 3.x; found " + bad):
            check_version(bad)


def test_steps_and_reads(monkeypatch):
    source, events = started(monkeypatch)
    loader = paddle.io.DataLoader(Samples(32, sleep=0.003), batch_size=8)
    with source.running():
        steps = train(loader, epochs=2)
    assert steps == 8
    assert [e.step for e in events["step_end"]] == list(range(8))
    assert all(e.read_s > 0 for e in events["step_end"])
    assert all(e.batch_size == 8 and e.place == "CPUPlace" for e in events["step_end"])
    states = [(e.what, e.pass_no) for e in events["reader_state"]]
    assert states == [("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    config = events["reader_state"][0].config
    assert set(config) <= set(LoaderConfig.__dataclass_fields__)
    assert config["num_workers"] == 0 and config["batch_size"] == 8
    assert config["dataset"] == "map"
    assert config["name"].startswith("DataLoader#") and config["capacity"] >= 1
    assert config["places"] == ["CPUPlace"] and config["use_double_buffer"] is True
    assert decode(LoaderConfig, config).batch_size == 8  # the reader probe's record
    assert events["reader_state"][1].batches == 4
    assert len(events["reader_pop"]) == 8
    pushes = events["reader_push"]
    assert len(pushes) == 8 and all(p.worker == -1 for p in pushes)
    assert all(p.produce_s >= 8 * 0.003 for p in pushes)  # 8 samples slept in each
    assert pushes[0].shapes == ((8, 4), (8, 1))


class Stream(paddle.io.IterableDataset):
    """Tiny samples from an iterable dataset."""

    def __iter__(self):
        for i in range(16):
            yield np.full((4,), i / 16, "float32"), np.array([i % 2], "int64")


def test_an_iterable_dataset_is_recorded_as_such(monkeypatch):
    source, events = started(monkeypatch)
    with source.running():
        assert train(paddle.io.DataLoader(Stream(), batch_size=4)) == 4
    assert events["reader_state"][0].config["dataset"] == "iterable"


def test_workers(monkeypatch):
    source, events = started(monkeypatch)
    loader = paddle.io.DataLoader(Samples(32, sleep=0.002), batch_size=4, num_workers=2)
    with source.running():
        steps = train(loader)
    assert steps == 8 and len(events["step_end"]) == 8
    config = events["reader_state"][0].config
    assert config["num_workers"] == 2 and len(config["worker_pids"]) == 2
    assert config["capacity"] == 2 * 2  # prefetch_factor x workers
    assert [e.what for e in events["reader_state"]] == ["start", "end"]
    workers = [p.worker for p in events["reader_push"]]
    assert len(workers) == 8 and set(workers) == {0, 1}
    assert all(p.produce_s >= 4 * 0.002 for p in events["reader_push"])


class Broken(Samples):
    def __getitem__(self, i):
        if i >= 8:
            raise KeyError("no such sample")
        return super().__getitem__(i)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("workers", [0, 1])
def test_error_ends_pass(monkeypatch, workers):
    # (without paddletune, paddle 3.3.1's single-process loader waits forever when the
    # dataset raises: its reading thread dies without closing the queue)
    source, events = started(monkeypatch)
    loader = paddle.io.DataLoader(Broken(16), batch_size=8, num_workers=workers)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with pytest.raises(Exception) as caught, source.running():
        iterator = iter(loader)
        train(iterator, model=model, optimizer=optimizer)
    # paddle stops the workers at the iterator's __del__, but the dead reading thread's
    # exception (pytest keeps it for its warning) still refers to the iterator
    getattr(iterator, "_try_shutdown_all", lambda: None)()
    assert "Blocking queue is killed" in str(caught.value)
    assert [e.what for e in events["reader_state"]] == ["start", "error"]
    detail = events["reader_state"][1].detail
    assert detail.startswith(type(caught.value).__name__)
    if not workers:
        assert "no such sample" in detail
    assert len(events["step_end"]) <= 1  # the killed queue may drop the good batch


def test_speed_test_replays(monkeypatch):
    source, events = started(monkeypatch)
    samples = Samples(64)
    loader = paddle.io.DataLoader(samples, batch_size=4)
    with source.running():
        train(loader, limit=2)
        source.set_speed_test_mode(True)
        iterator = iter(loader)
        first = next(iterator)  # the first batch of a pass is read
        time.sleep(0.3)  # the reading thread fills its queue ahead, then waits
        calls = samples.calls
        again = [next(iterator) for _ in range(5)]
        assert source.speed_test_mode()
        source.set_speed_test_mode(False)
    assert samples.calls == calls  # the reading thread made no more (its queue is full)
    assert all(batch is first for batch in again)
    assert sum(p.speed_test for p in events["reader_pop"]) == 5


def test_the_reading_thread_is_timed_alone(monkeypatch):
    """The speed test's solo phase on paddle's reading thread: the queued batches and 3 more
    taken at once, every batch handed over in order, the 3 made alone reported."""
    source, events = started(monkeypatch)
    solos = []
    source.subscribe("reader_solo", solos.append)
    loader = paddle.io.DataLoader(Samples(64, sleep=0.002), batch_size=2, shuffle=False)
    seen = []
    with source.running():
        for i, (x, _) in enumerate(loader):
            seen.append(round(float(x[0, 0]) * 64))
            if i == 2:
                time.sleep(0.1)  # the reading thread fills its queue ahead
                assert source.measure_producers_alone(3) == 1
                assert source.measure_producers_alone(3) == 0  # one at a time
    assert seen == list(range(0, 64, 2))
    [solo] = solos
    assert solo.batches == 3 and solo.produce_s >= 3 * 2 * 0.002 and solo.cpu_s is not None
    taken_ahead = [p for p in events["reader_pop"] if p.speed_test]
    assert len(taken_ahead) >= 4 and all(p.wait_s == 0 for p in taken_ahead)


def test_worker_processes_are_not_timed_alone(monkeypatch):
    source, _ = started(monkeypatch)
    loader = paddle.io.DataLoader(Samples(16), batch_size=4, num_workers=1)
    with source.running():
        for i, _ in enumerate(loader):
            if i == 1:
                assert source.measure_producers_alone(3) == 0


def test_overrides(monkeypatch):
    source, events = started(monkeypatch, '{"reader": {"num_workers": 2, "batch_size": 16, '
                                          '"pin_memory": true}}')
    with source.running():
        loader = paddle.io.DataLoader(Samples(32), batch_size=8)
        assert loader.num_workers == 2 and loader.batch_size == 16
        steps = train(loader)
        fixed = paddle.io.DataLoader(
            Samples(8), batch_sampler=paddle.io.BatchSampler(Samples(8), batch_size=4))
        assert fixed.batch_sampler.batch_size == 4
    assert steps == 2
    assert events["reader_state"][0].config["num_workers"] == 2
    report = source.overrides()
    applied = {(a.key, a.value, a.was) for a in report["applied"]}
    assert ("num_workers", 2, 0) in applied and ("batch_size", 16, 8) in applied
    skipped = {(s.key, s.code) for s in report["skipped"]}
    assert ("pin_memory", "not-supported") in skipped
    assert ("batch_size", "fixed-batch") in skipped


def test_thread_override(monkeypatch):
    source, _ = started(monkeypatch, '{"threads": {"intra_op": 2, "inter_op": 2}}')
    before = source.blas_threads()
    with source.running():
        assert source.blas_threads() == 2
    report = source.overrides()
    assert [(a.key, a.value) for a in report["applied"]] == [("intra_op", 2)]
    assert [(s.key, s.code) for s in report["skipped"]] == [("inter_op", "not-supported")]
    assert source.blas_threads() == before


def test_the_scripts_own_thread_count_is_known_and_the_speed_test_can_change_it(monkeypatch):
    """Paddle has no getter for its CPU math threads: the hooks track the script's own
    core.set_num_threads, and set_math_threads (the speed test's one-thread window) sets them
    and gives the count back."""
    from paddle.base import core
    source, _ = started(monkeypatch)
    before, paddles_own = source.blas_threads(), core.set_num_threads
    with source.running():
        assert core.set_num_threads is not paddles_own  # (tracked)
        core.set_num_threads(2)
        assert source.blas_threads() == 2
        assert source.set_math_threads(1) == 2 and source.blas_threads() == 1
        assert source.set_math_threads(2) == 1 and source.blas_threads() == 2
        core.set_num_threads(before)
    assert source.set_math_threads(1) is None  # the hooks are gone: nothing changed
    assert core.set_num_threads is paddles_own


def test_an_override_keeps_its_thread_count_against_the_scripts_own_call(monkeypatch):
    from paddle.base import core
    source, _ = started(monkeypatch, '{"threads": {"intra_op": 1}}')
    with source.running():
        core.set_num_threads(2)  # the script's own count: the override's stays
        assert source.blas_threads() == 1
    report = source.overrides()
    assert [(a.key, a.value, a.was) for a in report["applied"]] == [("intra_op", 1, 2)]
    assert not [s for s in report["skipped"] if s.key == "intra_op"]  # (not "same value" too)


def test_bad_override(monkeypatch):
    monkeypatch.setenv("PADDLETUNE_OVERRIDES", '{"reader": {"num_workers": -1}}')
    source = PaddleSource()
    with pytest.raises(OverrideError, match="num_workers"):
        source.begin()


def test_hooks_removed(monkeypatch):
    from paddle.io.dataloader import dataloader_iter as it
    owners = [(paddle.optimizer.Optimizer, "step"), (paddle.optimizer.Optimizer, "minimize"),
              (paddle.optimizer.Adam, "step"), (paddle.amp.GradScaler, "step"),
              (paddle.static.Executor, "run"), (paddle.io.DataLoader, "__init__"),
              (paddle.io.DataLoader, "__iter__"),
              (it._DataLoaderIterSingleProcess, "__next__"),
              (it._DataLoaderIterMultiProcess, "__next__"),
              (it._DataLoaderIterMultiProcess, "_init_workers"), (it, "_worker_loop")]
    before = {(o, n): o.__dict__.get(n, "missing") for o, n in owners}
    flag = paddle.get_flags(["FLAGS_check_nan_inf"])
    source, _ = started(monkeypatch)
    with source.running(check_nan=True):
        assert paddle.optimizer.Optimizer.__dict__["step"] is not before[
            (paddle.optimizer.Optimizer, "step")]
        assert it.__dict__["_worker_loop"] is not before[(it, "_worker_loop")]
        assert paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"] is True
    assert {(o, n): o.__dict__.get(n, "missing") for o, n in owners} == before
    assert paddle.get_flags(["FLAGS_check_nan_inf"]) == flag


def test_nan_check(monkeypatch):
    source, events = started(monkeypatch)
    found = []
    source.subscribe("nan_inf", found.append)
    with pytest.raises(RuntimeError, match="NAN or INF"), source.running(check_nan=True):
        paddle.log(paddle.to_tensor([-1.0, 1.0]))
    assert found and found[0]["op_type"] == "log" and found[0]["n_nan"] == 1
    with source.running():  # the check is off again
        paddle.log(paddle.to_tensor([-1.0, 1.0]))


def test_scaler_and_minimize_count_once(monkeypatch):
    source, events = started(monkeypatch)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.Adam(parameters=model.parameters())
    scaler = paddle.amp.GradScaler(init_loss_scaling=8.0)
    x = paddle.ones([2, 4])
    with source.running():
        for _ in range(3):
            scaler.scale(model(x).mean()).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.clear_grad()
        for _ in range(2):
            loss = model(x).mean()
            loss.backward()
            optimizer.minimize(loss)
            optimizer.clear_grad()
        other = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        model(x).mean().backward()
        other.step()  # a second optimizer steps inside the same training step
    assert len(events["step_end"]) == 5


def test_model_fit(monkeypatch):
    source, events = started(monkeypatch)
    with source.running():
        net = paddle.nn.Sequential(paddle.nn.Linear(4, 2))
        model = paddle.Model(net)
        model.prepare(paddle.optimizer.SGD(0.1, parameters=net.parameters()),
                      paddle.nn.CrossEntropyLoss())
        model.fit(Samples(32), batch_size=8, epochs=2, verbose=0)
    assert len(events["step_end"]) == 8
    assert [e.what for e in events["reader_state"]].count("start") == 2


def static_regression(features=4, hidden=None):
    """A static-graph regression (built in static mode): x [N, features] through an fc of
    `hidden` units with relu (none: straight) to one output, the mean squared error to
    y [N, 1] minimized by SGD; (main, startup, loss)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, features], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        h = paddle.static.nn.fc(x, hidden, activation="relu") if hidden else x
        loss = paddle.mean((paddle.static.nn.fc(h, 1) - y) ** 2)
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def train_static(source, steps=4):
    """static_regression's startup run, then `steps` runs of its main program, under the
    source's hooks; (its loss, whether it was built in PIR)."""
    with source.running():
        paddle.enable_static()
        main, startup, loss = static_regression()
        pir = paddle.framework.in_pir_mode()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed = {"x": np.ones((3, 4), "float32"), "y": np.zeros((3, 1), "float32")}
        for _ in range(steps):
            exe.run(main, feed=feed, fetch_list=[loss])
        paddle.disable_static()
    return loss, pir


def test_static_graph(monkeypatch):
    source, events = started(monkeypatch)
    loss, pir = train_static(source)
    records = events["step_end"]
    assert [r.is_startup for r in records] == [True, False, False, False, False]
    steps = records[1:]
    assert [r.step for r in steps] == [0, 1, 2, 3]
    assert all(r.batch_size == 3 and r.compute_s > 0 and r.place == "CPUPlace" for r in steps)
    assert steps[0].feed_names == ("x", "y") and steps[0].n_ops > 0
    # the loss has no name in paddle 3's PIR: the op that makes it is named instead
    assert steps[0].fetch_names == ("pd_op.mean" if pir else loss.name,), steps[0].fetch_names
    assert len({r.program_id for r in steps}) == 1 and records[0].program_id != steps[0].program_id


def test_the_hooks_time_themselves_and_not_paddles_work(monkeypatch):
    """own_cost: the hooks' time on the training thread, the probes' callbacks there
    included (each sleeps here, its time kept), paddle's own read of a batch and its static
    run (each slowed by SLOW_S here) not."""
    slow_s = 0.05
    called = []

    def callback(event):  # a probe's callback, run by the hooks
        t0 = time.perf_counter()
        time.sleep(0.004)
        called.append(time.perf_counter() - t0)

    source, _ = started(monkeypatch)
    assert source.own_cost() is None  # nothing ran yet
    source.subscribe("step_end", callback)
    source.subscribe("reader_pop", callback)
    loader = paddle.io.DataLoader(Samples(32, sleep=slow_s / 8), batch_size=8)
    with source.running():
        assert train(loader) == 4
    own = source.own_cost()
    # the 8 callbacks counted, the 4 reads' 4 x SLOW_S not (the margin: the hooks' own work)
    assert len(called) == 8 and sum(called) <= own < sum(called) + slow_s, (own, called)

    run = paddle.static.Executor.run

    def slow_run(*args, **kwargs):  # paddle's own work, as the hooks see it
        time.sleep(slow_s)
        return run(*args, **kwargs)

    monkeypatch.setattr(paddle.static.Executor, "run", slow_run)
    source, _ = started(monkeypatch)
    source.subscribe("step_end", callback)
    called.clear()
    train_static(source)
    own = source.own_cost()  # 5 runs (the startup's too), their 5 x SLOW_S left out
    assert len(called) == 5 and sum(called) <= own < sum(called) + slow_s, (own, called)


def test_code_writer():
    writer = code_for("paddle")
    assert isinstance(writer, PaddleCode) and writer.module_alias == "paddle"
    config = LoaderConfig(name="DataLoader#0", num_workers=0, batch_size=32, capacity=2)
    outputs = [
        writer.set_flag("FLAGS_eager_delete_tensor_gb", 0.0, "free early"),
        writer.blas_threads("OMP_NUM_THREADS", 2),
        writer.loader(config, num_workers=3, capacity=12, use_double_buffer=True,
                      pin_memory=True),
        writer.async_loader(["image", "label"], "CUDAPlace(0)", "loss"),
        writer.async_loader(["a.b"], "CPUPlace", "loss"),
        writer.shard_note(),
        writer.build_strategy({"enable_inplace": True, "reduce_strategy": "Reduce"}),
        writer.build_strategy({"enable_inplace": True}, data_parallel=False),
        writer.exec_strategy({"num_threads": 2, "num_iteration_per_drop_scope": 10}),
        writer.layer_call("pool2d", pool_size=2),
        writer.optimizer("Momentum", {"learning_rate": "0.1", "momentum": "0.9"}, "SGD",
                         "faster"),
        writer.gradient_clip(5.0, "gradients explode"),
        writer.nan_guard("log"),
        writer.fused_softmax_cross_entropy("logits", "label", return_softmax=True),
        writer.fetch_every("loss", ["acc"], 10),
        writer.fetch_every("loss", [], 10),
        writer.sample_filter(0, 0),
        writer.reader_filter(1),
    ]
    for text in outputs:
        assert "fluid" not in text
        compile(text.replace("export ", "# export "), "x", "exec")
    loader = outputs[2]
    assert "num_workers=3" in loader and "prefetch_factor=4" in loader
    assert "use_buffer_reader=True" in loader and "batch_size=32" in loader
    assert "paddle.set_flags({'FLAGS_eager_delete_tensor_gb': 0.0})" in outputs[0]
    assert "grad_clip=" in outputs[11] and "ClipGradByGlobalNorm(clip_norm=5.0)" in outputs[11]
    assert "paddle.nn.functional.cross_entropy(logits, label)" in outputs[13]
    assert writer.nan_guard("no_such_op") is None


def test_code_writer_imports_no_paddle():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys; import paddletune.sources.paddle."
                          "code; print('paddle' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_memory_probe_listens_to_step_ends_only_where_paddle_has_a_cuda_device(
        monkeypatch):
    """Source.may_send: a Paddle without a CUDA device sends no memory_step, so the memory
    probe puts no callback on every step's end (the training thread's cost)."""
    from paddletune.probes.base import Clock
    from paddletune.probes.memory import MemoryProbe
    for built, devices, listeners in ((False, 0, 0), (True, 0, 0), (True, 1, 1)):
        monkeypatch.setattr(paddle.device, "is_compiled_with_cuda", lambda: built)
        monkeypatch.setattr(paddle.device.cuda, "device_count", lambda: devices)
        source = PaddleSource()
        assert source.may_send("memory_step") is bool(listeners)
        assert source.may_send("device_time") is bool(listeners)
        assert source.may_send("step_end")
        probe = MemoryProbe([].append, Clock(), source).start()
        assert (source.subscribers("step_end"), source.subscribers("memory_step")) == (
            listeners, 1)
        probe.stop()


def test_an_evaluation_loop_between_epochs_is_left_out_of_the_steps(monkeypatch):
    """A pass of a second DataLoader run out between two optimizer steps (an evaluation
    loop under no_grad) is left out of the step it fell in; the training loader's passes,
    which hold steps, are not (sources/eager/steps.py)."""
    source, events = started(monkeypatch)
    train_loader = paddle.io.DataLoader(Samples(16), batch_size=8)
    eval_loader = paddle.io.DataLoader(Samples(16, sleep=0.01), batch_size=8)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with source.running():
        train(train_loader, model=model, optimizer=optimizer)
        with paddle.no_grad():
            for x, _ in eval_loader:
                model(x)
        train(train_loader, model=model, optimizer=optimizer)
    ends = [e for e in events["reader_state"] if e.what == "end"]
    assert [(e.loader_id, e.eval_s is not None) for e in ends] == [(0, False), (1, True),
                                                                    (0, False)]
    evaluation = ends[1]
    assert evaluation.eval_read_s >= 16 * 0.01 and evaluation.eval_s >= evaluation.eval_read_s
    steps = events["step_end"]
    assert len(steps) == 4 and steps[2].eval_s == evaluation.eval_s
    assert [s.eval_s for i, s in enumerate(steps) if i != 2] == [0.0] * 3
    assert steps[2].read_s < 0.01 and steps[2].t_end - steps[2].t_begin < 16 * 0.01


def test_an_evaluation_loop_left_by_a_break_is_left_out_of_the_steps(monkeypatch):
    """An evaluation loop under no_grad that stops after two batches (a `break`): the pass
    ends as the loop turns back to the training loader, and what it took is left out of
    the step it fell in (StepTimer's runs read without gradients). The same two batches
    read with gradients on stay in the step."""
    source, events = started(monkeypatch)
    train_loader = paddle.io.DataLoader(Samples(16), batch_size=8)
    eval_loader = paddle.io.DataLoader(Samples(48, sleep=0.01), batch_size=8)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())

    def evaluate():
        for i, (x, _) in enumerate(eval_loader):
            if i == 2:
                break
            model(x)

    with source.running():
        train(train_loader, model=model, optimizer=optimizer)
        with paddle.no_grad():
            evaluate()
        train(train_loader, model=model, optimizer=optimizer)
        evaluate()  # (gradients on)
        train(train_loader, model=model, optimizer=optimizer)
    (left,) = [e for e in events["reader_state"] if e.what == "left"]
    assert (left.loader_id, left.batches) == (1, 3)
    assert left.eval_read_s >= 24 * 0.01 and left.eval_s >= left.eval_read_s
    steps = events["step_end"]
    assert len(steps) == 6 and steps[2].eval_s == left.eval_s
    assert [s.eval_s for i, s in enumerate(steps) if i != 2] == [0.0] * 5
    assert steps[2].read_s < 0.01 and steps[2].t_end - steps[2].t_begin < 24 * 0.01
    assert steps[4].read_s >= 24 * 0.01  # (read with gradients on: in the step)


def test_an_evaluation_in_eval_mode_with_no_grad_only_around_its_forward_is_left_out(
        monkeypatch):
    """`model.eval()`, then two batches of the evaluation loader, each forward under
    no_grad (the batches asked for with gradients on), then `model.train()`: the model's
    mode says it is an evaluation, left out of the step it fell in."""
    source, events = started(monkeypatch)
    train_loader = paddle.io.DataLoader(Samples(16), batch_size=8)
    eval_loader = paddle.io.DataLoader(Samples(48, sleep=0.01), batch_size=8)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with source.running():
        train(train_loader, model=model, optimizer=optimizer)
        model.eval()
        for i, (x, _) in enumerate(eval_loader):
            if i == 2:
                break
            with paddle.no_grad():
                model(x)
        model.train()
        train(train_loader, model=model, optimizer=optimizer)
    (left,) = [e for e in events["reader_state"] if e.what == "left"]
    assert (left.loader_id, left.batches) == (1, 3)
    steps = events["step_end"]
    assert steps[2].eval_s == left.eval_s and steps[2].read_s < 0.01
    assert paddle.nn.Layer.train.__name__ == "train"  # (the hooks are off again)


def test_a_new_optimizer_each_fold_and_an_lbfgs_closure_are_training(monkeypatch):
    """K-fold training (a model, an optimizer and a DataLoader per fold): each fold's
    optimizer takes the steps over at its second step, so its passes are training. An
    L-BFGS closure that reads a whole pass inside step() is training too
    (StepTimer.stepping)."""
    source, events = started(monkeypatch)
    with source.running():
        for _ in range(2):
            assert train(paddle.io.DataLoader(Samples(16), batch_size=4)) == 4
        model = paddle.nn.Linear(4, 2)
        lbfgs = paddle.optimizer.LBFGS(parameters=model.parameters(), max_iter=2)
        loader = paddle.io.DataLoader(Samples(8), batch_size=4)

        def closure():
            lbfgs.clear_grad()
            for x, y in loader:
                loss = paddle.nn.functional.cross_entropy(model(x), y)
                loss.backward()
            return loss

        for _ in range(3):
            lbfgs.step(closure)
    steps = events["step_end"]
    assert len(steps) == 4 + 3 + 2  # (a new optimizer's first step ends at its second)
    assert all(s.eval_s == 0.0 for s in steps)
    ends = [e for e in events["reader_state"] if e.what == "end"]
    assert len(ends) >= 2 + 3 and all(e.eval_s is None for e in ends)


def pad_batch(samples):  # (a collate function of the script's own)
    return [paddle.to_tensor(np.stack([x for x, _ in samples])),
            paddle.to_tensor(np.stack([y for _, y in samples]))]


def test_a_loaders_other_arguments_are_recorded_and_kept_in_the_code(monkeypatch):
    """shuffle, collate_fn and a batch sampler of the script's (LoaderConfig.args) are kept
    in the advice's DataLoader line, or named above it."""
    source, events = started(monkeypatch)
    loaders = [
        paddle.io.DataLoader(Samples(8), batch_size=4, shuffle=True, collate_fn=pad_batch),
        paddle.io.DataLoader(Samples(8), batch_sampler=paddle.io.DistributedBatchSampler(
            Samples(8), batch_size=4, num_replicas=1, rank=0)),
        paddle.io.DataLoader(Samples(8), batch_size=4),
    ]
    with source.running():
        for loader in loaders:
            next(iter(loader))
    args = [s.config["args"] for s in events["reader_state"] if s.what == "start"]
    assert args == [["shuffle=True", "collate_fn=pad_batch"], ["batch_sampler"], []]
    code = PaddleCode()
    line = code.loader(LoaderConfig(batch_size=4, args=tuple(args[0])), num_workers=2)
    assert line == ("loader = paddle.io.DataLoader(dataset, batch_size=4, shuffle=True, "
                    "collate_fn=pad_batch, num_workers=2)")
    named = code.loader(LoaderConfig(args=tuple(args[1])), num_workers=2)
    assert named.splitlines() == [
        "# batch_sampler: the script's own object, passed as the script passes it",
        "loader = paddle.io.DataLoader(dataset, batch_sampler=batch_sampler, num_workers=2)"]
    # the batch size the source reads from the sampler is left out of the call (paddle
    # asserts batch_size/shuffle/drop_last are not set with a batch_sampler)
    sampled = code.loader(LoaderConfig(batch_size=4, drop_last=True, args=tuple(args[1])),
                          num_workers=2)
    assert "batch_size" not in sampled and "drop_last" not in sampled
    dataset = Samples(8)
    scope = {"paddle": paddle, "dataset": dataset,
             "batch_sampler": paddle.io.BatchSampler(dataset, batch_size=4)}
    exec(sampled, scope)
    assert len(list(scope["loader"].batch_sampler)) == 2


def test_a_loader_feeding_static_graph_runs_is_training(monkeypatch):
    """Paddle's static-graph steps are Executor.run's, timed outside the step timer: a pass
    that fed them ran out with steps in it (StepTimer.stepped_elsewhere)."""
    source, events = started(monkeypatch)
    loader = paddle.io.DataLoader(Samples(12), batch_size=4)
    with source.running():
        paddle.enable_static()
        main, startup, loss = static_regression()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        for x, y in loader:
            exe.run(main, feed={"x": np.asarray(x), "y": np.asarray(y, "float32")},
                    fetch_list=[loss])
        paddle.disable_static()
    (end,) = [e for e in events["reader_state"] if e.what == "end"]
    assert end.batches == 3 and end.eval_s is None
    assert len([s for s in events["step_end"] if not s.is_startup]) == 3


@pytest.mark.parametrize("persistent", [False, True])
def test_each_pass_times_its_iter_where_the_workers_start(monkeypatch, persistent):
    """ReaderState's start carries the pass's start-up: the loop's iter() (forking the
    workers, or waking persistent ones) to its first batch request, at least what the
    iter() call took here."""
    source, events = started(monkeypatch)
    loader = paddle.io.DataLoader(Samples(8), batch_size=4, num_workers=2,
                                  persistent_workers=persistent)
    took = []
    try:
        with source.running():
            for _ in range(2):
                t0 = time.perf_counter()
                it = iter(loader)
                took.append(time.perf_counter() - t0)
                for _ in it:
                    pass
                del it
    finally:  # (paddle keeps a persistent iterator's workers until shut down)
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator._try_shutdown_all()
    starts = [e for e in events["reader_state"] if e.what == "start"]
    assert len(starts) == 2
    for start, iter_s in zip(starts, took):
        assert iter_s * 0.9 <= start.startup_s < iter_s + 0.5, (start.startup_s, iter_s)
