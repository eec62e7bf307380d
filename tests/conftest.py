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


# --- processes a test starts -----------------------------------------------------------------------
def _default_sigint():
    """In a child, before it execs: SIGINT back to its default, whatever this process does
    with it (a runner started under nohup, or CI, may ignore it; the child would inherit that
    and never see a Ctrl-C a test sends it)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Procs:
    """Processes a test starts: each in a process group of its own, SIGINT at its default;
    `reap()` kills every group still there (a timeout, a failed assertion, Ctrl-C)."""

    def __init__(self):
        self.started = []

    def popen(self, command, **kwargs):
        import subprocess
        proc = subprocess.Popen(command, start_new_session=True, preexec_fn=_default_sigint,
                                **kwargs)
        self.started.append(proc)
        return proc

    def run(self, command, timeout, **kwargs):
        """subprocess.run's CompletedProcess, the whole group killed at `timeout`."""
        import subprocess
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = self.popen(command, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise
        return subprocess.CompletedProcess(command, proc.returncode, out, err)

    @staticmethod
    def kill(proc):
        import signal
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.communicate(timeout=10)
        except Exception:  # noqa: BLE001  (pipes of a killed group: nothing more to read)
            pass

    def reap(self):
        for proc in self.started:
            if proc.poll() is None:
                self.kill(proc)
            else:  # the leader exited: its group may not have
                import signal
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def procs():
    """Start a test's processes through this; whatever they left is killed at its end."""
    started = Procs()
    try:
        yield started
    finally:
        started.reap()


LEAK_GRACE_S = 3.0  # a process a test stopped may take a moment to exit


@pytest.fixture(autouse=True)
def no_leaked_processes():
    """A test leaves no process of its own running: the descendants it started that are
    still alive after a grace period are killed and the test fails, naming them (one leaked
    `paddletune profile` once wrote 1.2 GB and failed a dozen later tests)."""
    import time

    import psutil
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        leaked = [p for p in _alive(me.children(recursive=True)) if p.pid not in before]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if leaked:
        names = [_describe(p) for p in leaked]
        for p in leaked:
            try:
                p.kill()
            except psutil.Error:
                pass
        pytest.fail(f"the test left {len(leaked)} process(es) running: {'; '.join(names)}")


def _alive(processes):
    import psutil
    out = []
    for p in processes:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _describe(p):
    import psutil
    try:
        return f"pid {p.pid}: {' '.join(p.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {p.pid}"
