"""--ops on PyTorch (paddletune/sources/torch/profiler_ops.py): torch.profiler windows over the
training steps. Unit tests of the window's reading on built events (top-level ops, ranges,
threads, the GPU's kernels, the step clock), the source against real torch on the CPU (the
windows' schedule, the ops announced, the reading left out of the steps, a script's own
profiler), and `profile --ops` end to end (conftest's `procs` reaps the subprocess)."""

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from paddletune.advisors.fusion import module_pairs  # noqa: E402
from paddletune import profile as prof  # noqa: E402
from paddletune.sources.eager import op_windows as ow  # noqa: E402
from paddletune.sources.torch import profiler_ops as po  # noqa: E402
from paddletune.sources.torch.source import TorchSource  # noqa: E402
from test_torch_e2e import cli, records  # noqa: E402

MS = 1_000_000  # nanoseconds


def host(name, start_ms, end_ms, thread=1, range=False, correlation=0):
    return po.HostEvent(name, thread, int(start_ms * MS), int(end_ms * MS), range, correlation)


# --- the window's reading ------------------------------------------------------------------
def test_top_level_ops_look_through_the_scripts_ranges_and_skip_the_loader_and_other_threads():
    events = [
        host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 2, range=True),
        host("aten::stack", 0.5, 1.5),  # inside the loader's range: its read time
        host("forward", 2, 6, range=True),  # the script's own record_function
        host("aten::linear", 2, 4), host("aten::addmm", 2.5, 3.9),  # (inside linear)
        host("aten::relu", 4, 5),
        host("aten::pin_memory", 4, 5, thread=7),  # another thread: not the step's
        host("autograd::engine::evaluate_function: AddmmBackward0", 6, 8, thread=9),
        host("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 8, 9),
        host("Optimizer.step#Adam.step", 9, 12, range=True),
        host("aten::_foreach_add_", 9.5, 10),  # inside the optimizer's range: one op
        host(po.ANCHOR, 0, 0.1, range=True),
    ]
    tops = po.top_level(events, training_thread=1)
    assert [(op.type, op.role) for op in tops] == [
        ("aten::linear", ow.FORWARD), ("aten::relu", ow.FORWARD),
        ("AddmmBackward0", ow.BACKWARD), ("AccumulateGrad", ow.BACKWARD),
        ("Adam.step", ow.OPTIMIZE)]
    assert [op.thread for op in tops] == [1, 1, 9, 1, 1]  # (the engine's thread on a GPU)


def _window(ends_ms, open_ms=0.0, begins_ms=None):
    """A window whose profiler clock reads 0 ns at perf_counter 100 s; each step begins at
    the previous one's end (the window's opening for the first) unless `begins_ms` says."""
    begins_ms = begins_ms or [open_ms] + [t for _, t in ends_ms[:-1]]
    return ow.Window(100 + open_ms / 1e3, tuple(
        (s, 100 + t / 1e3, 100 + b / 1e3) for (s, t), b in zip(ends_ms, begins_ms)), 0, 100.0)


def test_each_op_goes_to_the_step_it_started_in_cut_at_that_steps_end():
    tops = [ow.TopOp("aten::linear", 0, 1, 1 * MS, 2 * MS),
            ow.TopOp("aten::linear", 0, 1, 3 * MS, 4 * MS),
            ow.TopOp("Adam.step", 2, 1, 4 * MS, 9 * MS),  # its range holds the step hooks
            ow.TopOp("aten::linear", 0, 1, 6 * MS, 7 * MS),
            ow.TopOp("aten::linear", 0, 1, 12 * MS, 13 * MS)]  # after the last step: dropped
    slots = {}
    ops = ow.ops_of_window(tops, _window([(10, 5.0), (11, 10.0)]), slots, device=False)
    assert [(o.step, o.index, o.type) for o in ops] == [
        (10, 0, "aten::linear"), (10, 1, "aten::linear"), (10, 2, "Adam.step"),
        (11, 0, "aten::linear")]  # the same op type and rank in a step: the same index
    assert ops[0].t_begin == pytest.approx(100.001) and ops[0].t_end == pytest.approx(100.002)
    assert ops[2].t_end == pytest.approx(100.005)  # cut at step 10's end
    assert all(o.timing == "host" for o in ops)
    assert slots == {("aten::linear", 0): 0, ("aten::linear", 1): 1, ("Adam.step", 0): 2}


def test_ops_of_an_evaluation_left_out_of_a_step_are_not_its():
    """Step 11 began at 8 ms, after an evaluation pass (5-8 ms) left out of it: the pass's
    ops are not the step's, and the step's own ops keep their ranks."""
    tops = [ow.TopOp("aten::linear", 0, 1, 1 * MS, 2 * MS),
            ow.TopOp("aten::linear", 0, 1, 6 * MS, 7 * MS),  # the evaluation's
            ow.TopOp("aten::linear", 0, 1, 9 * MS, 9.5 * MS)]
    ops = ow.ops_of_window(tops, _window([(10, 5.0), (11, 10.0)], begins_ms=[0.0, 8.0]), {},
                           device=False)
    assert [(o.step, o.index, o.t_begin) for o in ops] == [
        (10, 0, pytest.approx(100.001)), (11, 0, pytest.approx(100.009))]


def test_ops_before_the_window_opened_are_not_a_steps():
    tops = [ow.TopOp("aten::relu", 0, 1, 1 * MS, 2 * MS),
            ow.TopOp("aten::relu", 0, 1, 3 * MS, 4 * MS)]
    ops = ow.ops_of_window(tops, _window([(4, 5.0)], open_ms=2.5), {}, device=False)
    assert [o.t_begin for o in ops] == [pytest.approx(100.003)]


def test_on_a_gpu_an_ops_time_is_its_kernels_and_ops_without_kernels_are_left_out():
    events = [host("aten::linear", 1, 3, correlation=11),
              host("aten::addmm", 1.5, 2.5, correlation=12),  # (inside linear: it launched)
              host("aten::view", 3, 3.1, correlation=13),  # launches nothing
              host("autograd::engine::evaluate_function: AddmmBackward0", 4, 5, thread=9,
                   correlation=14)]
    device = [po.DeviceWork(int(2.0 * MS), int(2.4 * MS), 12),
              po.DeviceWork(int(2.5 * MS), int(2.6 * MS), 12),
              po.DeviceWork(int(6.0 * MS), int(6.5 * MS), 14),
              po.DeviceWork(int(7.0 * MS), int(7.5 * MS), 99)]  # launched by nothing seen
    tops = po.top_level(events, training_thread=1)
    po.add_device_time(tops, events, device)
    ops = ow.ops_of_window(tops, _window([(3, 10.0)]), {}, device=True)
    assert [(o.type, o.timing) for o in ops] == [("aten::linear", "cupti"),
                                                 ("AddmmBackward0", "cupti")]
    linear, backward = ops
    assert linear.t_begin == pytest.approx(100.002)  # its first kernel's start
    assert linear.t_end - linear.t_begin == pytest.approx(0.0005)  # 0.4 + 0.1 ms of kernels
    assert backward.t_end - backward.t_begin == pytest.approx(0.0005)


@pytest.mark.parametrize("steps_done, reading_s, expected", [
    (20, 0.001, ow.WINDOW),  # cheap to read: WINDOW steps apart
    (20, 0.050, 20),  # dear, early in the job: no more than the steps run so far
    (5000, 0.050, 990),  # later: the budget's (50 ms / 5% of 1 ms steps, less the 10 read)
])
def test_the_gap_between_windows(steps_done, reading_s, expected):
    assert ow.gap(10, 0.010, reading_s, steps_done) == expected


# --- the source against real torch ------------------------------------------------------------
class Softmaxed(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return torch.softmax(self.body(x), dim=1)


def _train(steps, script_profiler_at=None):
    """`steps` training steps under a TorchSource with --ops' listener; the events by name.
    With `script_profiler_at`, the script starts its own profiler before that step."""
    source = TorchSource()
    source.begin()
    got = {name: [] for name in ("op_end", "step_end", "scope")}
    for name, sink in got.items():
        source.subscribe(name, sink.append)
    torch.manual_seed(0)
    model = Softmaxed()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 8),
                                          torch.randint(0, 4, (steps * 8,)))
    own = None
    with source.running():
        for step, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_size=8)):
            if step == script_profiler_at:
                own = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                own.start()
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if own is not None:
        own.stop()
        got["script's own"] = own.profiler.kineto_results.events()
    return got


def test_windows_announce_the_forward_backward_and_update_ops_of_their_steps():
    got = _train(45)
    steps = sorted({o.step for o in got["op_end"]})
    # the first window: steps 10-19; the second opens 10 to 20 steps later (ow.gap: reading
    # the first against its steps' time, at most the steps done; a loaded machine's slower
    # steps make it 10, a quiet one's 20) and records 10 steps or up to the job's end
    assert steps[:10] == list(range(10, 20)), steps
    second = steps[10:]
    assert second and 31 <= second[0] <= 42, steps
    assert second == list(range(second[0], min(second[0] + 10, 45))), steps
    step_10 = [o for o in got["op_end"] if o.step == 10]
    types = [o.type for o in step_10]
    assert types[:5] == ["aten::linear", "aten::relu", "aten::linear", "aten::softmax",
                         "aten::cross_entropy_loss"], types
    assert {"Adam.zero_grad", "AddmmBackward0", "SoftmaxBackward0", "AccumulateGrad",
            "Adam.step"} <= set(types), types
    assert "aten::stack" not in types  # the DataLoader's collation is its read time
    end = next(e for e in got["step_end"] if e.step == 10)
    assert all(end.t_begin <= o.t_begin <= o.t_end <= end.t_end for o in step_10)
    same = [[(o.index, o.type) for o in got["op_end"] if o.step == s] for s in (11, 19)]
    assert same[0] == same[1] == [(o.index, o.type) for o in step_10]


def test_reading_a_window_is_left_out_of_the_next_step():
    ends = {e.step: e for e in _train(25)["step_end"]}
    assert ends[10].paused_s > 0  # the window opened as step 9 ended
    assert ends[21].paused_s > 0  # the window over 10-20 closed as step 20 ended
    for step in (10, 21):
        assert ends[step].t_begin == pytest.approx(ends[step - 1].t_end + ends[step].paused_s)
    for step in (11, 20, 22):
        assert ends[step].paused_s == 0 and ends[step].t_begin == ends[step - 1].t_end


def test_a_scripts_own_profiler_ends_ours_and_gets_its_events():
    got = _train(30, script_profiler_at=15)
    assert {o.step for o in got["op_end"]} == set(range(10, 15))  # the open window's
    [scope] = got["scope"]
    assert scope.probe == "ops" and "runs one at a time" in scope.message
    names = {e.name() for e in got["script's own"]}
    assert "aten::linear" in names and po.ANCHOR not in names


# --- end to end ----------------------------------------------------------------------------------
SOFTMAX_SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4), nn.Softmax(dim=1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(2048, 8), torch.randint(0, 4, (2048,)))
for x, y in torch.utils.data.DataLoader(data, batch_size=16):
    loss = nn.CrossEntropyLoss()(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_profile_ops_reports_the_ops_and_advises_the_double_softmax(procs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOFTMAX_SCRIPT)
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--ops", "--out", out, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SyncActivityProfilerHandler" not in result.stderr  # kineto's start/stop lines
    assert len(records(out, "ops")) >= 20
    profile = prof.load(out)
    ops = profile.summary.ops
    assert ops is not None and ops.timing == "host"
    assert {"aten::linear", "AddmmBackward0", "SGD.step"} <= {t.type for t in ops.by_type}
    [pair] = module_pairs(profile)
    assert (pair.module, pair.loss, pair.ops) == (
        "Softmax", "CrossEntropyLoss", ("aten::softmax", "aten::cross_entropy_loss"))
    advice = cli(procs, "advise", out)
    assert advice.returncode == 0, advice.stderr
    assert "aten::softmax ran right before aten::cross_entropy_loss" in advice.stdout
    report = cli(procs, "report", out)
    assert "Probe overhead:" in report.stdout and "ops " in report.stdout


def test_the_clocks_are_matched_on_the_anchors_tighter_end():
    """The profiler's clock runs 100 s ahead of perf_counter. The anchor was entered 0.1 ms
    after t_before; its exit came 30 ms late (the thread taken off its core): the start's
    bounds decide, where the range's middle would be 15 ms off and put the window's ops
    two of its steps late."""
    offset = ow.clock_offset(int(101.0001e9), int(101.030e9), 1.0, 1.0002, 1.0301)
    assert offset == pytest.approx(100.0, abs=1e-4)
    entered_late = ow.clock_offset(int(101.030e9), int(101.0302e9), 1.0, 1.0301, 1.0303)
    assert entered_late == pytest.approx(100.0, abs=1e-4)  # (the exit's bounds decide)
    prompt = ow.clock_offset(int(101.0001e9), int(101.0003e9), 1.0, 1.0002, 1.0004)
    assert prompt == pytest.approx(100.0, abs=1e-4)
