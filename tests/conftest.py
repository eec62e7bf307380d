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
