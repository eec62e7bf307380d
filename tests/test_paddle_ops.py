"""`--ops` for Paddle 3 dynamic-graph jobs against the real paddle (CPU): each leaf
paddle.nn.Layer's call is one op of its step (sources/paddle/layers.py), in-process through
the source and end to end through `paddletune profile --ops` and the report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune.sources.paddle.source import PaddleSource  # noqa: E402

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


def test_each_leaf_layer_call_is_an_op_of_its_step():
    source = PaddleSource()
    source.begin()
    ops, steps = [], []
    source.subscribe("op_end", ops.append)
    source.subscribe("step_end", steps.append)
    with source.running():
        train_steps(Net(), 3)
    assert len(steps) == 3
    for step in range(3):
        mine = [o for o in ops if o.step == step]
        # the leaves in call order: Sequential and Net are not leaves; functional.relu is
        # not a layer
        assert [(o.index, o.type) for o in mine] == [(0, "Linear"), (1, "ReLU"), (2, "Linear")]
        end = steps[step]
        assert all(end.t_begin <= o.t_begin <= o.t_end <= end.t_end for o in mine)
        assert all(o.timing == "host" and o.program_id == 0 for o in mine)


def test_layers_are_not_timed_without_a_listener_and_the_hook_is_removed():
    call = paddle.nn.Layer.__dict__["__call__"]
    source = PaddleSource()
    source.begin()
    with source.running():
        assert paddle.nn.Layer.__dict__["__call__"] is call  # nobody asked for ops
    ops = []
    source.subscribe("op_end", ops.append)
    with source.running():
        assert paddle.nn.Layer.__dict__["__call__"] is not call
        train_steps(Net(), 1)
    assert paddle.nn.Layer.__dict__["__call__"] is call
    assert ops
    count = len(ops)
    train_steps(Net(), 1)  # after the job: nothing more
    assert len(ops) == count


def test_a_layer_that_raises_records_no_op_and_raises_unchanged():
    class Broken(paddle.nn.Layer):
        def forward(self, x):
            raise ValueError("bad input")

    source = PaddleSource()
    source.begin()
    ops = []
    source.subscribe("op_end", ops.append)
    with source.running(), pytest.raises(ValueError, match="bad input"):
        Broken()(paddle.ones([1]))
    assert ops == []


def test_profile_ops_of_a_paddle_cnn_reach_the_report(procs, tmp_path):
    out = tmp_path / "ops.jsonl"
    cli(procs, ["profile", "--ops", "--out", str(out),
                str(REPO / "examples" / "paddle" / "cnn.py"), "--steps", "30"], REPO)
    summary = json.loads(cli(procs, ["report", "--json", str(out)], REPO, 120))
    ops, steady = summary["ops"], summary["steady_steps"]
    counts = {row["type"]: row["count"] for row in ops["by_type"]}
    # examples/paddle/cnn.py's leaves, per step: 2 Conv2D, 2 ReLU, 2 MaxPool2D, 1 Linear
    assert counts == {"Conv2D": 2 * steady, "ReLU": 2 * steady, "MaxPool2D": 2 * steady,
                      "Linear": steady}, counts
    assert ops["timing"] == "host" and ops["steps"] == steady
    text = cli(procs, ["report", str(out)], REPO, 120)
    assert "Conv2D" in text and "MaxPool2D" in text


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
    case, and the op types say which (the fusion advice, #9, reads them)."""
    script = tmp_path / "job.py"
    script.write_text(SOFTMAX_JOB.replace("USE_SOFTMAX", f"use_softmax={use_softmax}"))
    out = tmp_path / "p.jsonl"
    cli(procs, ["profile", "-q", "--ops", "--out", str(out), str(script)], tmp_path)
    advice = cli(procs, ["advise", "--json", str(out)], tmp_path, 120)
    found = [a for a in json.loads(advice) if a["id"] == "unfused-softmax-cross-entropy"]
    if use_softmax:
        assert len(found) == 1 and found[0]["severity"] == "high", found
        assert "paddle.nn.CrossEntropyLoss()" in found[0]["change"]
    else:
        assert found == []


# --- the static graph: paddle.profiler windows (sources/paddle/static_ops.py) --------------------
def _static_program():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        hidden = paddle.static.nn.fc(x, 8, activation="relu")
        loss = paddle.mean((paddle.static.nn.fc(hidden, 1) - y) ** 2)
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


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
        main, startup, loss = _static_program()
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
    for step, end in enumerate(ends):
        mine = [o for o in ops if o.step == step]
        assert sorted(o.index for o in mine) == sorted(o.index for o in first)  # stable
        assert all(end.t_begin <= o.t_begin <= o.t_end <= end.t_end for o in mine)
        assert all(o.program_id == end.program_id for o in mine)


def test_static_graph_ops_give_way_to_a_scripts_own_profiler(tmp_path, monkeypatch):
    import paddle.profiler as profiler
    monkeypatch.chdir(tmp_path)  # (the script's profiler writes its trace here)
    mine = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
    try:
        ops, ends, scope, _ = _run_static(3, before=mine.start)
    finally:
        mine.stop()
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
