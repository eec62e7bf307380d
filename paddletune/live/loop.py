"""The dashboard's loop: poll the follower, update the model, draw, at a fixed rate.

`LiveLoop.frame()` does one round (tests and `watch` call it directly); `start()` runs
it on a daemon thread, so that under `profile --live` the drawing never runs inside a
training step. The thread's own CPU time (time.thread_time) is the drawing's measured cost:
`cost()` gives frames, CPU seconds (drawing and rolling advice apart) and the slowest
frame. In a Python job the thread still shares the GIL and the cores with the training
loop; `paddletune profile --live` records the cost as the "dashboard" probe's overhead, so
the report shows its share of the job's step time.
"""

import os
import socket
import threading
import time

from .follow import Follower
from .state import LiveState
from .window import WINDOW_S, LiveModel

ADVICE_EVERY_S = 5.0  # the rolling verdict and advice are recomputed this often (wall clock)
PENDING_EVERY_S = 0.5  # ... and this often while the window has too few steps to tell: a
# job's first seconds, or a whole short job, would otherwise show no verdict at all
STALLED_EXIT_S = 10.0  # `watch` gives up this long after a writer that died without an exit
SUMMARY_WAIT_S = 2.0  # after the exit record, `watch` waits this long for the summary


def _pending(advice) -> bool:
    """No verdict yet, or too few steps for one (LiveModel.refresh_advice's; not one that
    failed: that is tried again at the usual pace)."""
    if advice is None:
        return True
    return advice.error is None and (advice.verdict is None
                                     or advice.verdict.kind == "too-few-steps")


class LiveLoop:
    def __init__(self, path, draw, hz: float = 4.0, window_s: float = WINDOW_S,
                 advice_every_s: float = ADVICE_EVERY_S, live: bool = True, extra=None,
                 final_path=None):
        self.follower = Follower(path)
        self.final_path = final_path  # where `path`, a part file, goes once complete
        self.model = LiveModel(window_s, str(path))
        self.draw, self.period_s, self.live = draw, 1.0 / hz, live
        self.advice_every_s, self.extra = advice_every_s, dict(extra or {})
        self.frames, self.draw_cpu_s, self.advice_cpu_s, self.max_frame_s = 0, 0.0, 0.0, 0.0
        self.advice_runs = 0
        self.error = None  # a frame that raised: the loop stops drawing, the job goes on
        self.last_state = None
        self._restarts, self._advice_at, self._advice_final = 0, None, False
        self._halt = threading.Event()
        self._thread = None
        self._one_frame = threading.Lock()  # the thread's frames and a caller's never overlap

    # --- one round -----------------------------------------------------------------------------
    def frame(self) -> LiveState:
        """Read what was appended, update the model, draw; returns the state drawn."""
        with self._one_frame:
            return self._frame()

    def _frame(self) -> LiveState:
        t0, c0 = time.perf_counter(), time.thread_time()
        if self.final_path is not None:
            self.follower.moved_to(self.final_path)
        records = self.follower.poll()
        if self.follower.restarted != self._restarts:  # a new run rewrote the file
            self._restarts = self.follower.restarted
            self.model.reset()
            self._advice_at, self._advice_final = None, False
        if records and self.model.finished:  # the writer adds the last windows and the
            self._advice_final = False  # summary after the exit record: advise again
        self.model.add(records)
        now = self.model.now(live=self.live)
        if self._advice_due():
            c1 = time.thread_time()
            self.model.refresh_advice(now)
            self.advice_runs += 1
            self.advice_cpu_s += time.thread_time() - c1
        state = self.model.state(now, live=self.live and self.follower.exists,
                                 cost=self.cost(), writer=self.writer_state(), **self.extra)
        self.draw(state)
        self.last_state = state
        self.frames += 1
        self.draw_cpu_s += time.thread_time() - c0
        self.max_frame_s = max(self.max_frame_s, time.perf_counter() - t0)
        return state

    def _advice_due(self) -> bool:
        model = self.model
        if model.header is None or not (model.steps or model.windows or model.finished):
            return False
        if model.finished and not self.follower.at_end:
            return False  # replaying a finished file: advise once, on its end
        if model.finished:
            due = not self._advice_final
            self._advice_final = True
            return due
        wall = time.monotonic()
        every = self.advice_every_s
        if _pending(model.advice):
            every = min(every, PENDING_EVERY_S)
        if self._advice_at is None or wall - self._advice_at >= every:
            self._advice_at = wall
            return True
        return False

    def writer_state(self) -> str:
        """'alive', 'gone' (its pid runs no more on this machine) or 'unknown' (no pid, or
        the job ran on another machine: a profile on a shared file system)."""
        header = self.model.header
        pid = header.pid if header is not None else None
        if pid is None or pid <= 0:
            return "unknown"
        if header.env.host and header.env.host != socket.gethostname():
            return "unknown"
        if pid == os.getpid():
            return "alive"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "gone"
        except OSError:
            return "alive"  # exists, owned by someone else
        return "alive"

    # --- the thread ----------------------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, name="paddletune-dashboard",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop the thread (after its current frame) and return cost()."""
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        return self.cost()

    def _run(self):
        while not self._halt.is_set():
            try:
                self.frame()
            except Exception as err:  # noqa: BLE001  (a drawing bug must not kill the job)
                self.error = f"{type(err).__name__}: {err}"
                return
            self._halt.wait(self.period_s)

    def cost(self) -> dict:
        """What drawing cost so far: CPU seconds of this loop's thread (the advice included),
        frames, the slowest frame's wall time."""
        return {"frames": self.frames, "cpu_s": self.draw_cpu_s,
                "cpu_per_frame_s": self.draw_cpu_s / self.frames if self.frames else None,
                "advice_runs": self.advice_runs, "advice_cpu_s": self.advice_cpu_s,
                "max_frame_s": self.max_frame_s, "hz": 1.0 / self.period_s,
                "error": self.error}


def follow_until_done(loop: LiveLoop, until_finished=True, stalled_exit_s=STALLED_EXIT_S,
                      sleep=time.sleep, clock=time.monotonic) -> LiveLoop:
    """Run `loop`'s frames in this thread until the job finished (its exit record was read,
    and the summary the writer adds after it, the last windows before it: unless the writer
    is gone or SUMMARY_WAIT_S passed), or its writer's process is gone with nothing new for
    `stalled_exit_s` and everything read (a killed job), or KeyboardInterrupt (which
    propagates)."""
    ended_at = None
    while True:
        state = loop.frame()
        if until_finished and loop.model.finished and loop.follower.at_end:
            ended_at = clock() if ended_at is None else ended_at
            if (loop.model.summary is not None or state.writer != "alive"
                    or clock() - ended_at >= SUMMARY_WAIT_S):
                return loop
        idle = state.status.idle_s
        if (stalled_exit_s is not None and idle is not None and idle > stalled_exit_s
                and state.writer == "gone" and loop.follower.at_end):
            return loop
        sleep(loop.period_s)
