"""--ops for a Paddle 3 dynamic-graph job: paddle.profiler in windows of training steps (the
schedule, the costs and the one-profiler rule: sources/eager/op_windows.py), read as
paddle.profiler's Operator summary lists the ops. (A static-graph job's ops come from
static_ops.py, anchored on each Executor.run.)

What an op is: an outermost `Operator` event of the training thread, under Paddle's op name
as the static graph's ops are named: the forward's `matmul`, `relu`,
`cross_entropy_with_softmax` (Paddle's "matmul dygraph"), the backward's grad nodes
(`matmul_grad`: Paddle's "Global_MatmulGradNode"; `grad_accumulation`), the update's `adam`,
`sgd` (in-place `adam_`). Layer ranges (`Forward`: Linear, Conv2D), the Python API's own
ranges, the backward's and the update's are looked through; the DataLoader's range is left
out (its time is the step's read time), and so are other threads' events (the DataLoader's
reading thread). On a GPU each op's time is its kernels' (CUPTI, through paddle.profiler).

A script's own paddle.profiler.Profiler: the hooks guard Profiler.__init__ (Paddle keeps one
profiler at a time: a second cannot even be made while the first lives)."""

import re
import time
from typing import Dict, List, Optional, Tuple

from ..eager.bus import OpEnd
from ..eager.op_windows import (BACKWARD, FORWARD, OPTIMIZE, TopOp, Window, clock_offset,
                                ops_of_window, tightest)
from .static_ops import op_type as static_op_type, write_nothing

ANCHOR = "paddletune::ops_window"  # our range: its start on both clocks
LEFT_OUT = ("Dataloader",)  # event types whose time is not an op's
ROLES = {"Backward": BACKWARD, "Optimization": OPTIMIZE}  # event types: their ops' role
DEVICE_WORK = ("Kernel", "Memcpy", "Memset")
_GRAD_NODE = re.compile(r"^(?:Global_)?(?P<op>\w+?)GradNode(?:Final)?$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")

_perf = time.perf_counter


def event_type(node) -> str:
    """A node's TracerEventType name ("Operator")."""
    return str(node.type).rpartition(".")[2]


def dygraph_op_type(name: str) -> str:
    """An Operator event's name as the profile names ops: "matmul dygraph" -> "matmul",
    "adam_ dygraph" -> "adam", "Global_MatmulGradNode" -> "matmul_grad",
    "Global_GradNodeAccumulation" -> "grad_accumulation"."""
    name = name.split(" ", 1)[0]
    grad = _GRAD_NODE.match(name)
    if grad:
        return _snake(grad.group("op")) + "_grad"
    if name.startswith("Global_"):
        return _snake(name[len("Global_"):])
    return static_op_type(name)


def _snake(camel: str) -> str:
    return _CAMEL.sub("_", camel).lower()


def top_level(nodes: Dict[int, object], anchor_name: str = ANCHOR
              ) -> Tuple[List[Tuple[TopOp, object]], Optional[object]]:
    """The top-level ops of the training thread (the one that ran the anchor `anchor_name`),
    by start, each with its event node, and the anchor's node (None: not found, nothing to
    read)."""
    for thread, root in nodes.items():
        anchor = _find(root, anchor_name)
        if anchor is not None:
            out: List[Tuple[TopOp, object]] = []
            _collect(root, thread, out)
            out.sort(key=lambda pair: pair[0].start_ns)
            return out, anchor
    return [], None


def _find(root, name: str):
    stack = [root]
    while stack:
        node = stack.pop()
        if node.name == name:
            return node
        stack.extend(node.children_node)
    return None


def _collect(root, thread: int, out: List[Tuple[TopOp, object]]):
    """The outermost Operator events under `root` (their role from the ranges above them),
    DataLoader ranges left out."""
    stack = [(root, FORWARD)]
    while stack:
        node, role = stack.pop()
        kind = event_type(node)
        if kind == "Operator":
            out.append((TopOp(dygraph_op_type(node.name), role, thread, node.start_ns,
                              node.end_ns), node))
        elif kind not in LEFT_OUT:
            role = ROLES.get(kind, role)
            stack.extend((child, role) for child in node.children_node)


def add_device_time(op: TopOp, node):
    """The op's kernels: the device events of the CUDA runtime calls in its subtree."""
    stack = [node]
    while stack:
        node = stack.pop()
        stack.extend(node.children_node)
        for runtime in getattr(node, "runtime_node", ()):
            for work in runtime.device_node:
                if event_type(work) in DEVICE_WORK:
                    op.add_kernel(work.start_ns, work.end_ns)


class PaddleRecorder:
    """paddle.profiler, one window at a time (eager/op_windows.py's Recorder)."""

    name = "paddle.profiler"

    def __init__(self):
        self.profiler = None
        self.device = False
        self._around = (0.0, 0.0, 0.0)  # perf_counter before, inside and after the anchor
        self._anchor = ANCHOR  # its name (the tightest of a few: op_windows.tightest)

    def start(self, device: bool) -> float:
        import paddle.profiler as profiler
        targets = [profiler.ProfilerTarget.CPU]
        if device:
            targets.append(profiler.ProfilerTarget.GPU)
        prof = profiler.Profiler(targets=targets, on_trace_ready=write_nothing)
        prof.start()
        try:
            self._anchor, self._around = tightest(self._anchored, ANCHOR)
        except Exception:
            prof.stop()  # (no window without its anchor; the profiler not left on)
            raise
        self.profiler, self.device = prof, device
        return self._around[1]

    @staticmethod
    def _anchored(name: str) -> Tuple[float, float, float]:
        import paddle.profiler as profiler
        anchor = profiler.RecordEvent(name)
        t_before = _perf()
        anchor.begin()
        t_anchor = _perf()
        anchor.end()
        return t_before, t_anchor, _perf()

    def stop(self, t_open: float, ends: Tuple[Tuple[int, float, float], ...], t_anchor: float,
             slots: Dict[Tuple[str, int], int]) -> List[OpEnd]:
        profiler, self.profiler = self.profiler, None  # (Paddle makes a new one only once
        profiler.stop()  # this one is gone)
        result = profiler.profiler_result
        pairs, anchor = top_level(result.get_data() if result is not None else {},
                                  self._anchor)
        if anchor is None or not ends:
            return []
        if self.device:
            for op, node in pairs:
                add_device_time(op, node)
        tops = [op for op, _ in pairs]
        window = Window(t_open, ends, anchor.start_ns, anchor.start_ns / 1e9 - clock_offset(
            anchor.start_ns, anchor.end_ns, *self._around))
        return ops_of_window(tops, window, slots, self.device)
