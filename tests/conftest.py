import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def tmux(tmp_path):
    """A private tmux server with one 100 x 30 window (tests/tmuxpane.py), killed after."""
    from tmuxpane import Tmux
    session = Tmux(tmp_path)
    yield session
    session.close()


@pytest.fixture(autouse=True)
def nvml_released():
    """Every test gives back what it acquired of NVML (probes/nvml.py counts its users): a
    leaked hold keeps NVML initialised and hides a missing pynvml from later tests. Only a
    machine with an NVIDIA driver can leak one (elsewhere NVML never initialises)."""
    yield
    from paddletune.probes import nvml
    refs = nvml._state["refs"]
    if refs:
        nvml._state.update(refs=1)
        nvml.release()
        pytest.fail(f"this test left NVML held ({refs} acquire() without release())")
