"""`--ops` for Paddle 3 jobs against the real paddle (CPU): paddle.profiler windows over a
dynamic-graph job's steps (sources/eager/op_windows.py, sources/paddle/profiler_ops.py) and
over a static-graph job's Executor runs (static_ops.py), in-process through the source and
end to end through `paddletune profile --ops`, the report and the fused-loss advice."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune.sources.paddle.source import PaddleSource  # noqa: E402
from test_paddle_source import static_regression  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
       "GLOG_minloglevel": "2"}
ENV.pop("PADDLETUNE_OVERRIDES", None)
CLI = [sys.executable, "-m", "paddletune"]


def cli(procs, args, cwd, timeout=240) -> str:
    """`paddletune *args` in a subprocess (reaped by `procs`): its stdout, once it succeeded."""
    done = procs.run([*CLI, *args], timeout, cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(autouse=True)
def dynamic_mode(monkeypatch):
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    paddle.disable_static()
    yield
    paddle.disable_static()


class Net(paddle.nn.Layer):
    """Two leaf layers in a Sequential, one called twice, one layer held outside it."""

    def __init__(self):
        super().__init__()
        self.body = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.ReLU())
        self.head = paddle.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(paddle.nn.functional.relu(self.body(x)))


def train_steps(model, steps):
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    for _ in range(steps):
        x = paddle.to_tensor(np.ones((3, 4), "float32"))
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()


def _dynamic_job(steps, script_profiler_at=None):
    """`steps` training steps of Net under a PaddleSource with --ops' listener: the events
    by name; with `script_profiler_at`, the script makes and starts its own Profiler before
    that step."""
    import paddle.profiler as profiler
    source = PaddleSource()
    source.begin()
    got = {name: [] for name in ("op_end", "step_end", "scope")}
    for name, sink in got.items():
        source.subscribe(name, sink.append)
    model = Net()
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    own = None
    with source.running():
        for step in range(steps):
            if step == script_profiler_at:
                own = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                                        on_trace_ready=lambda prof: None)
                own.start()
            loss = model(paddle.to_tensor(np.ones((3, 4), "float32"))).sum()
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
    if own is not None:
        own.stop()
    return got


def test_windows_of_steps_announce_the_forward_backward_and_update_ops():
    got = _dynamic_job(25)
    assert got["scope"] == []
    assert sorted({o.step for o in got["op_end"]}) == list(range(10, 20))  # a whole window
    for step in range(10, 20):
        mine = [o for o in got["op_end"] if o.step == step]
        types = [o.type for o in mine]
        # Net: Linear (matmul, add), ReLU, functional relu, Linear; sum; then the backward
        # and SGD's update, under paddle's op names
        assert types[:6] == ["matmul", "add", "relu", "relu", "matmul", "add"], types
        for kind in ("matmul_grad", "relu_grad", "sgd"):
            assert kind in types, types
        end = got["step_end"][step]
        assert all(end.t_begin <= o.t_begin <= o.t_end <= end.t_end for o in mine)
        assert all(o.timing == "host" and o.program_id == 0 for o in mine)
    roles = {o.type: o.role for o in got["op_end"]}
    assert (roles["matmul"], roles["matmul_grad"], roles["sgd"]) == (0, 1, 2)


def test_no_window_without_a_listener_and_the_profiler_guard_is_removed():
    import paddle.profiler as profiler
    init = profiler.Profiler.__dict__["__init__"]
    source = PaddleSource()
    source.begin()
    with source.running():
        assert profiler.Profiler.__dict__["__init__"] is init  # nobody asked for ops
    ops = []
    source.subscribe("op_end", ops.append)
    with source.running():
        assert profiler.Profiler.__dict__["__init__"] is not init
        train_steps(Net(), 12)
    assert profiler.Profiler.__dict__["__init__"] is init
    assert {o.step for o in ops} == {10, 11}  # the window open at the job's end, announced
    count = len(ops)
    train_steps(Net(), 12)  # after the job: nothing more
    assert len(ops) == count


def test_a_scripts_own_profiler_ends_the_windows_and_says_why():
    got = _dynamic_job(20, script_profiler_at=14)
    assert {o.step for o in got["op_end"]} == {10, 11, 12, 13}  # the open window's
    [why] = got["scope"]  # (the dynamic graph's timer says why; the static one is silent)
    assert why.probe == "ops" and "its own paddle.profiler.Profiler" in why.message


def test_paddles_op_names_as_the_profile_names_them():
    from paddletune.sources.paddle.profiler_ops import dygraph_op_type
    assert [dygraph_op_type(n) for n in (
        "matmul dygraph", "adam_ dygraph", "Global_MatmulGradNode",
        "Global_CrossEntropyWithSoftmaxGradNode", "Global_Conv2dGradNodeFinal",
        "Global_GradNodeAccumulation")] == [
        "matmul", "adam", "matmul_grad", "cross_entropy_with_softmax_grad", "conv2d_grad",
        "grad_node_accumulation"]


def _op_steps(path) -> str:
    """What a failure needs to say: the steps whose ops the profile holds, with their ops'
    first start and last end, against each step's own span (the step clock, seconds)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    spans = {d["step"]: (round(d["t_s"], 4), round(d["t_s"] + d["wall_s"], 4))
             for d in lines if d["type"] == "step"}
    timed = {d["step"]: (round(min(o[2] for o in d["ops"]), 4),
                         round(max(o[2] + o[3] for o in d["ops"]), 4))
             for d in lines if d["type"] == "ops"}
    return f"ops by step {timed}; the steps {spans}"


def test_profile_ops_of_a_paddle_cnn_reach_the_report(procs, tmp_path):
    out = tmp_path / "ops.jsonl"
    cli(procs, ["profile", "--ops", "--out", str(out),
                str(REPO / "examples" / "paddle" / "cnn.py"), "--steps", "30"], REPO)
    summary = json.loads(cli(procs, ["report", "--json", str(out)], REPO, 120))
    ops = summary["ops"]
    counts = {row["type"]: row["count"] for row in ops["by_type"]}
    timed = ops["steps"]
    assert timed >= 10, _op_steps(out)  # (a window: steps 10-19)
    # examples/paddle/cnn.py per step: 2 Conv2D, 2 ReLU, 2 MaxPool2D, 1 Linear, and their
    # gradients; Adam updates its 6 parameters
    for kind, per_step in (("conv2d", 2), ("conv2d_grad", 2), ("relu", 2), ("pool2d", 2),
                           ("matmul", 1)):
        assert counts.get(kind) == per_step * timed, (kind, counts)
    assert counts.get("adam", 0) >= timed, counts
    assert ops["timing"] == "host"
    text = cli(procs, ["report", str(out)], REPO, 120)
    assert "conv2d_grad" in text


SOFTMAX_JOB = '''
import paddle
from paddle import nn
model = nn.Sequential(nn.Linear(8, 4), nn.Softmax())
loss_fn = nn.CrossEntropyLoss(USE_SOFTMAX)
optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
for step in range(20):
    x, y = paddle.randn([16, 8]), paddle.randint(0, 4, [16, 1])
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
'''


@pytest.mark.parametrize("use_softmax", [True, False])
def test_a_softmax_before_paddles_cross_entropy_is_advised_only_if_it_is_doubled(
        procs, tmp_path, use_softmax):
    """paddle.nn.CrossEntropyLoss applies its own softmax unless use_softmax=False (then it
    takes probabilities): a Softmax layer before it is a double softmax only in the first
    case, and the model's census says which (the fusion advice, #9, reads its pairs): no
    --ops needed."""
    script = tmp_path / "job.py"
    script.write_text(SOFTMAX_JOB.replace("USE_SOFTMAX", f"use_softmax={use_softmax}"))
    out = tmp_path / "p.jsonl"
    cli(procs, ["profile", "-q", "--out", str(out), str(script)], tmp_path)
    advice = cli(procs, ["advise", "--json", str(out)], tmp_path, 120)
    found = [a for a in json.loads(advice) if a["id"] == "unfused-softmax-cross-entropy"]
    if use_softmax:
        assert len(found) == 1 and found[0]["severity"] == "high", found
        assert "paddle.nn.CrossEntropyLoss()" in found[0]["change"]
    else:
        assert found == []


# --- the static graph: paddle.profiler windows (sources/paddle/static_ops.py) --------------------
def _run_static(steps, before=None):
    from paddletune.sources.paddle import static_ops
    source = PaddleSource()
    source.begin()
    ops, ends, scope = [], [], []
    source.subscribe("op_end", ops.append)
    source.subscribe("step_end", ends.append)
    source.subscribe("scope", scope.append)
    paddle.enable_static()
    try:
        main, startup, loss = static_regression(hidden=8)
        exe = paddle.static.Executor(paddle.CPUPlace())
        feed = {"x": np.ones((3, 4), "float32"), "y": np.zeros((3, 1), "float32")}
        with source.running():
            if before is not None:
                before()
            exe.run(startup)
            for _ in range(steps):
                exe.run(main, feed=feed, fetch_list=[loss])
    finally:
        paddle.disable_static()
    return ops, [e for e in ends if not e.is_startup], scope, static_ops


def test_static_graph_ops_come_from_paddles_profiler_window_by_window(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = 13  # a whole window and part of the next (announced at the job's end)
    ops, ends, scope, static_ops = _run_static(steps)
    assert scope == []
    assert list(tmp_path.iterdir()) == []  # no trace file left in the job's folder
    assert static_ops.WINDOW < steps
    assert sorted({o.step for o in ops}) == list(range(steps))
    first = sorted((o for o in ops if o.step == 0), key=lambda o: o.index)
    types = [o.type for o in first]
    # the forward, the backward and the update, under paddle's names without pd_op. and "_"
    for kind in ("matmul", "relu", "mean", "matmul_grad", "relu_grad", "sgd"):
        assert kind in types, types
    # a window's reading (after step 9) and the next one's opening: left out of step 10
    # (any other step: only the op timer's bookkeeping of a run, microseconds)
    assert ends[static_ops.WINDOW].paused_s > 10 * ends[5].paused_s > 0
    for step, end in enumerate(ends):
        mine = [o for o in ops if o.step == step]
        assert sorted(o.index for o in mine) == sorted(o.index for o in first)  # stable
        assert all(end.t_begin <= o.t_begin <= o.t_end <= end.t_end for o in mine)
        assert all(o.program_id == end.program_id for o in mine)


def test_static_graph_ops_give_way_to_a_scripts_own_profiler(tmp_path, monkeypatch):
    import paddle.profiler as profiler
    from paddletune.sources.paddle.one_thread import FLAG
    monkeypatch.chdir(tmp_path)  # (the script's profiler writes its trace here)
    # the script's own profiler beside the executor's worker threads is Paddle's race, which
    # crashes this process now and then (sources/paddle/one_thread.py): the script runs its
    # ops on one thread, as a user would to avoid it
    paddle.set_flags({FLAG: True})
    mine = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
    try:
        ops, ends, scope, _ = _run_static(3, before=mine.start)
    finally:
        mine.stop()
        paddle.set_flags({FLAG: False})
    assert len(ends) == 3  # the job ran as it would
    assert ops == []
    why, = scope  # the profile says why there are no op times
    assert why.probe == "ops" and "its own" in why.message and "one profiler" in why.message


def test_profile_ops_of_a_paddle_static_graph_reach_the_report(procs, tmp_path):
    out = tmp_path / "static.jsonl"
    cli(procs, ["profile", "-q", "--ops", "--steps", "30", "--out", str(out),
                str(REPO / "examples" / "paddle" / "static_graph.py")], REPO)
    summary = json.loads(cli(procs, ["report", "--json", str(out)], REPO, 120))
    counts = {row["type"]: row["count"] for row in summary["ops"]["by_type"]}
    steady = summary["steady_steps"]
    # examples/paddle/static_graph.py: two fc layers (matmul + add each) and Adam per parameter
    assert counts["matmul"] == 2 * steady and counts["matmul_grad"] == 2 * steady, counts
    assert counts["adam"] == 4 * steady, counts


FRESH_PROGRAMS_IN_WINDOWS = '''
import time
import numpy as np
import paddle
from paddletune.sources.eager.bus import Bus
from paddletune.sources.paddle.one_thread import FLAG
from paddletune.sources.paddle.static_ops import StaticOps
paddle.enable_static()
bus, ops = Bus(), []
bus.subscribe("op_end", ops.append)
windows = StaticOps(bus)
feed = {"x": np.ones((8, 16), "float32")}
for program in range(PROGRAMS):  # each with its own executor, and its own worker threads
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 16], "float32")
        left = paddle.static.nn.fc(x, 32, activation="relu")  # (two branches: two workers)
        right = paddle.static.nn.fc(x, 32, activation="relu")
        loss = paddle.mean(paddle.static.nn.fc(left + right, 1) ** 2)
        paddle.optimizer.Adam(0.01).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    for step in range(3):
        windows.before_run()
        assert paddle.get_flags([FLAG])[FLAG], "a window is open: the ops on this thread"
        t_begin = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=[loss])
        windows.after_run(id(main), step, t_begin, time.perf_counter())
    windows.close()
    assert not paddle.get_flags([FLAG])[FLAG], "the script's own value once the window closed"
print("ops", len(ops), "unavailable", windows.unavailable)
'''


def test_fresh_programs_in_windows_do_not_crash_paddles_profiler(procs, tmp_path):
    """Paddle's profiler registers each thread's first event without a lock, and each new
    program's executor brings new worker threads: their first events at once, or beside the
    profiler's stop, crash the process (segfault, bad_alloc; our windows before the fix: 2 of
    4 runs of 100 programs). The windows run the ops on the calling thread
    (sources/paddle/one_thread.py)."""
    programs = 200
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_PROGRAMS_IN_WINDOWS.replace("PROGRAMS", str(programs)))
    done = procs.run([sys.executable, str(script)], 240, cwd=tmp_path, env=ENV,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("ops ") and last.endswith("unavailable None"), last
    assert int(last.split()[1]) > 10 * 3 * programs  # every window's ops announced


def test_the_scripts_own_trace_run_value_is_kept(tmp_path, monkeypatch):
    from paddletune.sources.paddle.one_thread import FLAG
    monkeypatch.chdir(tmp_path)
    paddle.set_flags({FLAG: True})
    try:
        _run_static(3)
        assert paddle.get_flags([FLAG])[FLAG] is True
    finally:
        paddle.set_flags({FLAG: False})
    _run_static(3)
    assert paddle.get_flags([FLAG])[FLAG] is False


SELF_PROFILING_JOB = '''
import numpy as np
import paddle
import paddle.profiler as profiler
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 4], "float32")
    loss = paddle.mean(paddle.static.nn.fc(x, 1) ** 2)
    paddle.optimizer.SGD(0.1).minimize(loss)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
# (a profiler beside the executor's worker threads is Paddle's race, which crashes the job now
# and then: sources/paddle/one_thread.py; this job runs its ops on one thread to avoid it)
paddle.set_flags({"FLAGS_enable_pir_in_executor_trace_run": True})
mine = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
mine.start()
for _ in range(12):
    exe.run(main, feed={"x": np.ones((3, 4), "float32")}, fetch_list=[loss])
mine.stop()
'''


def test_a_static_job_that_profiles_itself_gets_ops_na_with_the_reason(procs, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SELF_PROFILING_JOB)
    out = tmp_path / "p.jsonl"
    cli(procs, ["profile", "-q", "--ops", "--out", str(out), str(script)], tmp_path)
    text = " ".join(cli(procs, ["report", str(out)], tmp_path, 120).split())
    assert "Ops: N/A" in text and "one profiler at a time" in text, text


def test_profiler_events_map_onto_their_runs_by_each_runs_own_event():
    """ops_of_runs on a hand-made tree: two runs (a startup run, then step 4), operators on
    two threads, the second run's clock 1 s ahead of the profiler's."""
    from types import SimpleNamespace as Node
    from paddletune.sources.paddle.static_ops import _Run, ops_of_runs

    def node(name, start, end, kind="Operator", children=()):
        return Node(name=name, type=f"TracerEventType.{kind}", start_ns=start, end_ns=end,
                    children_node=list(children))
    main = node("root node", 0, 0, "UserDefined", [
        node("StandaloneExecutor::run", 100, 200, "UserDefined"),
        node("StandaloneExecutor::run", 1000, 2000, "UserDefined")])
    worker = node("root node", 0, 0, "UserDefined", [
        node("pd_op.full", 110, 120),  # the startup run's: no step
        node("pd_op.matmul", 1100, 1300), node("pd_op.add_", 1300, 1400),
        node("pd_op.matmul", 1500, 1600)])
    runs = [_Run(7, None, 50.0, 50.1), _Run(3, 4, 51.0, 52.0)]
    slots = {}
    ops = ops_of_runs({1: main, 2: worker}, runs, slots)
    assert [(o.step, o.index, o.type) for o in ops] == [(4, 0, "matmul"), (4, 1, "add"),
                                                       (4, 2, "matmul")]
    assert ops[0].t_begin == pytest.approx(51.0 + 100e-9)
    assert ops[0].t_end - ops[0].t_begin == pytest.approx(200e-9)
    assert all(o.program_id == 3 for o in ops)
    # the same (type, rank) keeps its index in later windows
    again = ops_of_runs({1: main, 2: worker}, runs, slots)
    assert [o.index for o in again] == [0, 1, 2]
    # a run without its own event: nothing is announced rather than a guess
    assert ops_of_runs({1: main, 2: worker}, runs + [_Run(3, 5, 53.0, 54.0)], {}) == []


def test_the_tightest_of_the_anchors_links_the_clocks():
    """Of the anchors a window records as it opens, the one read between the closest
    perf_counter readings links the profiler's clock to perf_counter (a thread taken off
    its core around one would move the window's ops by the delay)."""
    from paddletune.sources.eager.op_windows import ANCHOR_TRIES, tightest
    widths = iter([0.004, 0.0001, 0.002])
    names = []

    def anchored(name):
        names.append(name)
        width = next(widths)
        return 1.0, 1.0 + width / 2, 1.0 + width

    assert tightest(anchored, "a") == ("a#1", (1.0, 1.00005, 1.0001))
    assert names == [f"a#{i}" for i in range(ANCHOR_TRIES)] == ["a#0", "a#1", "a#2"]
