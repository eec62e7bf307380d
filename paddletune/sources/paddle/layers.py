"""--ops for a Paddle dynamic-graph job: each leaf `paddle.nn.Layer`'s call (a layer without
sublayers: Linear, Conv2D, ReLU, ...) is timed on the host and announced as one op_end, its
layer's class as the op type, as the PyTorch source does with leaf modules.

The hook is `paddle.nn.Layer.__call__` itself (the only `__call__` in paddle.nn's layers),
patched for the job's run: paddle has no global forward hook, and a forward pre/post hook on
every layer would switch each call to paddle's slower hooked path. The backward pass and the
optimizer's update stay in the step's compute, not split by layer. Why layers and not
paddle.profiler's per-kernel events: docs/frameworks.md ("--ops").

A layer whose class name would say something else than what it does is named for what it
does: paddle's `CrossEntropyLoss(use_softmax=False)` takes probabilities, unlike PyTorch's
CrossEntropyLoss, so after a Softmax it is no double softmax (the fusion advice, #9, reads the
op types)."""

import time
from typing import Callable

import paddle

from ..eager.bus import Bus, OpEnd
from ..eager.steps import StepTimer

_perf = time.perf_counter


def time_leaf_layers(bus: Bus, timer: StepTimer, patch: Callable) -> None:
    """Patch paddle.nn.Layer.__call__ (through `patch(owner, name, replacement)`, which
    restores it) to announce each leaf layer's call on `bus` as an op of the current step."""
    original = paddle.nn.Layer.__call__
    index = [0, -1]  # the next op's index in the step, the step it belongs to

    def __call__(layer, *inputs, **kwargs):
        if layer._sub_layers:  # not a leaf: its leaves are timed
            return original(layer, *inputs, **kwargs)
        t_begin = _perf()
        out = original(layer, *inputs, **kwargs)
        t_end = _perf()
        step = timer.steps
        if index[1] != step:
            index[0], index[1] = 0, step
        bus.emit("op_end", OpEnd(0, step, index[0], op_type(layer), 0, t_begin, t_end))
        index[0] += 1
        return out

    __call__.__wrapped__ = original
    __call__.__doc__ = original.__doc__
    patch(paddle.nn.Layer, "__call__", __call__)


def op_type(layer) -> str:
    """The op type of a leaf layer's call: its class's name, and for a CrossEntropyLoss that
    applies no softmax, that it does not."""
    name = type(layer).__name__
    if name == "CrossEntropyLoss" and getattr(layer, "use_softmax", True) is False:
        return "CrossEntropyLoss(use_softmax=False)"
    return name
