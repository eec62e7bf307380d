"""PADDLETUNE_OVERRIDES' `backends` section for a PyTorch job: cuDNN's algorithm search and
TF32 matrix products, imposed without editing the script, so that `paddletune tune` can
measure the change advice #28 (cudnn-benchmark, tf32-matmul) proposes:

    PADDLETUNE_OVERRIDES='{"backends": {"cudnn_benchmark": true, "matmul_allow_tf32": true}}'

Each is set as the job starts. A script usually sets these itself before its training loop,
after that: so as the first training step ends, a value the script changed is put back to the
override's (the first step ran with the script's, and is warm-up), and the script's value is
what the override changed (`was`). A script that changes them again later is not followed. On
a machine without CUDA neither setting does anything: each is skipped, saying so.

`cpu_autocast: false` enters the script's torch.autocast("cpu") contexts disabled (its
float32 math where the CPU has no kernels for the autocast's dtype: advice #28,
cpu-autocast-slow); `true` is the script's own autocast, changed in nothing. Where no CPU
autocast was made by the end of the first training step, it is skipped, saying so. An
autocast inside a torch.compile'd function is Dynamo's own, which it makes without calling
the class: the override does not reach it."""

import functools
from typing import Callable, Dict, List, Tuple

import torch

# override key -> (read the setting, set it): torch.backends.cudnn.benchmark and
# torch.backends.cuda.matmul.allow_tf32
SETTINGS: Dict[str, Tuple[Callable[[], bool], Callable[[bool], None]]] = {
    "cudnn_benchmark": (
        lambda: bool(torch.backends.cudnn.benchmark),
        lambda value: setattr(torch.backends.cudnn, "benchmark", value)),
    "matmul_allow_tf32": (
        lambda: bool(torch.backends.cuda.matmul.allow_tf32),
        lambda value: setattr(torch.backends.cuda.matmul, "allow_tf32", value)),
}
SECTION = "backends"


def has_cuda() -> bool:
    return torch.cuda.is_available()


CPU_AUTOCAST = "cpu_autocast"


class BackendOverrides:
    """The `backends` overrides of one run (`state`: eager.overrides.Overrides)."""

    def __init__(self, state):
        self.state = state
        self.wanted = {key: value for key, value in state.wanted(SECTION).items()
                       if key in SETTINGS}
        self.cpu_autocast = state.wanted(SECTION).get(CPU_AUTOCAST)  # (None: not asked)
        self._cpu_autocast_made = False

    def install(self) -> List[Callable[[], None]]:
        """Apply them; the undo actions that restore the job's values."""
        undo = self._install_cpu_autocast()
        if not self.wanted:
            return undo
        if not has_cuda():
            for key, value in self.wanted.items():
                self.state.skip(SECTION, key, value, "not-supported",
                                "no CUDA device: cuDNN and cuBLAS do not run")
            self.wanted = {}
            return undo
        for key, value in self.wanted.items():
            read, write = SETTINGS[key]
            was = read()
            undo.append(lambda write=write, was=was: write(was))
            if was == value:
                self.state.skip(SECTION, key, value, "same-value", "the job's own value")
            else:
                write(value)
                self.state.apply(SECTION, key, value, was)
        return undo

    def _install_cpu_autocast(self) -> List[Callable[[], None]]:
        """`cpu_autocast: false`: each torch.autocast("cpu") the script makes is made
        disabled (torch.cpu.amp.autocast and the decorator form included); the undo."""
        if self.cpu_autocast is None:
            return []
        if self.cpu_autocast:
            self.state.skip(SECTION, CPU_AUTOCAST, True, "same-value",
                            "the script's own autocast")
            return []
        autocast = torch.amp.autocast_mode.autocast
        made = autocast.__init__

        @functools.wraps(made)  # (torch.compile binds the arguments by its signature)
        def disabled_on_the_cpu(ctx, *args, **kwargs):
            made(ctx, *args, **kwargs)
            if getattr(ctx, "device", None) == "cpu" and getattr(ctx, "_enabled", False):
                ctx._enabled = False
                if not self._cpu_autocast_made:  # (said once: an autocast is made each step)
                    self._cpu_autocast_made = True
                    self.state.apply(SECTION, CPU_AUTOCAST, False, True)

        autocast.__init__ = disabled_on_the_cpu
        return [lambda: setattr(autocast, "__init__", made)]

    def first_step_done(self):
        """Put back what the script changed before its first step ended."""
        if self.cpu_autocast is False and not self._cpu_autocast_made:
            self.state.skip(SECTION, CPU_AUTOCAST, False, "no-autocast",
                            "the job made no torch.autocast('cpu') before its first training "
                            "step ended")
        for key, value in self.wanted.items():
            read, write = SETTINGS[key]
            now = read()
            if now != value:
                write(value)
                self.state.apply(SECTION, key, value, now)
        self.wanted = {}
