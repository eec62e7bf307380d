"""What every framework's model census (records.ModelEvent; torch/census.py,
paddle/census.py) makes alike: the record from what was counted, with its one-sentence
message. Pure Python: imports no framework."""

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from ...profile.records import ModelEvent

TOP = 6  # the most-called layers the message names
MAX_PAIRS = 64  # distinct back-to-back leaf pairs counted, at most
# a static-graph program's census counts ops by type: convolutions by prefix (conv2d,
# conv2d_transpose, conv3d, depthwise_conv2d, ...), matrix products by name
CONV_OPS = ("conv", "depthwise_conv")
MATMUL_OPS = frozenset(("matmul", "matmul_v2", "mul", "fc", "bmm"))


def conv_op(name: str) -> bool:
    return name.startswith(CONV_OPS)


def matmul_op(name: str) -> bool:
    return name in MATMUL_OPS


@dataclass
class Counted:
    """What a census counted, and how its message words it."""

    lead: Optional[str]  # what was counted, in words ("leaf module calls in the first step")
    modules: Mapping[str, int]  # calls (or ops) by class (or type)
    autocast: bool
    autocast_words: Tuple[str, str]  # (off, on): ("autocast off", "autocast on")
    convs: Tuple[int, int]  # convolutions seen, and of them in the fast layout
    conv_words: Tuple[str, str, str]  # ("convolution inputs", "channels_last", "NCHW")
    pairs: Mapping[str, int] = field(default_factory=dict)  # LeafPairs.counts
    cpu_autocast: Optional[str] = None  # the dtype of the CPU's autocast a leaf ran under
    cpu_kernels: Optional[bool] = None  # whether the CPU has kernels for that dtype


class LeafPairs:
    """The leaf calls that ran back to back, by their names, counted
    ("Softmax>CrossEntropyLoss": 1; at most MAX_PAIRS distinct pairs)."""

    def __init__(self):
        self.counts: Dict[str, int] = {}
        self._last: Optional[str] = None

    def called(self, name: str):
        if self._last is not None:
            key = f"{self._last}>{name}"
            if key in self.counts or len(self.counts) < MAX_PAIRS:
                self.counts[key] = self.counts.get(key, 0) + 1
        self._last = name


class StepCensus:
    """A census sent as the job's first training step ends; a framework's subclass counts
    (`_counted`), reads the optimizer's parameters and the device (`_read`), and unhooks."""

    emit = None  # (the record's receiver, set by the subclass)

    def unhook(self):
        raise NotImplementedError

    def _counted(self) -> Counted:
        raise NotImplementedError

    def _read(self, optimizer, place: str):
        """(the parameters by dtype, the GPU's compute capability, the GPU math settings)."""
        raise NotImplementedError

    def step_done(self, optimizer, place: str):
        """The first training step ended: unhook and send the census (none when reading the
        parameters or the device fails: the census never breaks the job's step)."""
        self.unhook()
        try:
            params, capability, settings = self._read(optimizer, place)
        except Exception:  # noqa: BLE001
            return
        self.emit(model_event(self._counted(), params, capability, settings))


def top_calls(lead: str, calls: Mapping[str, int]) -> str:
    """"lead: Conv2d x4, ReLU x4, ..." of the TOP most-called."""
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:TOP]
    return (f"{lead}: " + ", ".join(f"{name} x{n}" for name, n in top)
            + (", ..." if len(calls) > len(top) else ""))


def model_event(counted: Counted, params: Dict[str, int], capability: Optional[str],
                settings: Dict[str, object]) -> ModelEvent:
    seen, fast = counted.convs
    return ModelEvent(0.0, dict(counted.modules), params, counted.autocast,
                      (fast == seen) if seen else None, capability, settings,
                      message(counted, params, capability), pairs=dict(counted.pairs),
                      cpu_autocast=counted.cpu_autocast, cpu_kernels=counted.cpu_kernels)


def message(counted: Counted, params: Dict[str, int], capability: Optional[str]) -> str:
    parts = [counted.lead] if counted.lead else []
    parts.append("parameters: " + (", ".join(f"{n:,} {dtype}" for dtype, n in params.items())
                                   or "none"))
    parts.append(counted.autocast_words[counted.autocast])
    if counted.cpu_autocast:
        parts.append(f"the CPU's autocast in {counted.cpu_autocast}"
                     + {True: "", False: " (no oneDNN kernels for it on this CPU)",
                        None: ""}[counted.cpu_kernels])
    seen, fast = counted.convs
    if seen:
        what, fast_layout, other_layout = counted.conv_words
        parts.append(f"{what} " + (fast_layout if fast == seen else
                                   f"{other_layout} ({seen - fast} of {seen})"))
    if capability:
        parts.append(f"GPU compute capability {capability}")
    return "; ".join(parts)
