"""PADDLETUNE_OVERRIDES' `backends` section for a PyTorch job: cuDNN's algorithm search and
TF32 matrix products, imposed without editing the script, so that `paddletune tune` can
measure the change advice #28 (cudnn-benchmark, tf32-matmul) proposes:

    PADDLETUNE_OVERRIDES='{"backends": {"cudnn_benchmark": true, "matmul_allow_tf32": true}}'

Each is set as the job starts. A script usually sets these itself before its training loop,
after that: so as the first training step ends, a value the script changed is put back to the
override's (the first step ran with the script's, and is warm-up), and the script's value is
what the override changed (`was`). A script that changes them again later is not followed. On
a machine without CUDA neither setting does anything: each is skipped, saying so."""

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


class BackendOverrides:
    """The `backends` overrides of one run (`state`: eager.overrides.Overrides)."""

    def __init__(self, state):
        self.state = state
        self.wanted = {key: value for key, value in state.wanted(SECTION).items()
                       if key in SETTINGS}

    def install(self) -> List[Callable[[], None]]:
        """Apply them; the undo actions that restore the job's values."""
        if not self.wanted:
            return []
        if not has_cuda():
            for key, value in self.wanted.items():
                self.state.skip(SECTION, key, value, "not-supported",
                                "no CUDA device: cuDNN and cuBLAS do not run")
            self.wanted = {}
            return []
        undo = []
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

    def first_step_done(self):
        """Put back what the script changed before its first step ended."""
        for key, value in self.wanted.items():
            read, write = SETTINGS[key]
            now = read()
            if now != value:
                write(value)
                self.state.apply(SECTION, key, value, now)
        self.wanted = {}
