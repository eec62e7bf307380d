"""A private tmux server for the tests that run a live display for real: one 100 x 30 window
whose screen and scrollback the test reads (capture-pane). Skipped where tmux is missing;
the `tmux` fixture is conftest.py's."""

import os
import shlex
import shutil
import subprocess
import time

import pytest

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """A private tmux server (its own socket) with one 100 x 30 window."""

    def __init__(self, tmp_path):
        self.socket = f"paddletune-test-{os.getpid()}-{time.monotonic_ns()}"
        self.tmp_path = tmp_path

    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, check=check)

    def start(self, command):
        # the trap keeps the shell going after a Ctrl-C that kills the job (the job itself
        # gets the default SIGINT handling: a trapped signal is reset in a child)
        # after the command: its status, and whether it left the terminal echoing input
        shell = (f"trap 'true' INT; cd {shlex.quote(str(self.tmp_path))} && {command}; "
                 f"echo EXIT=$?; stty -a | grep -qw -- -echo && echo ECHO=off || echo ECHO=on; "
                 f"sleep 120")
        self.tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", shell)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "t", check=False).stdout

    def history(self):
        """Everything the window showed on its normal screen, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-400").stdout

    def wait_for(self, predicate, timeout_s=90, what="the screen"):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{self.screen()}")

    def close(self):
        self.tmux("kill-server", check=False)
