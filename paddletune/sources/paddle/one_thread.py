"""While one of our paddle.profiler windows is open, Paddle's static-graph executor runs its
ops in order on the calling thread, not on its pool of worker threads.

Why: paddle.profiler's host event recorder (phi::HostEventRecorder, Paddle 3.3) registers a
thread the first time that thread records an event by appending to one shared vector, with
no lock. The executor (PirInterpreter) runs a program's ops on several worker threads, so
under a profiler two workers' first events at once, or one beside Profiler.stop reading that
vector, corrupt it: a segfault in `RecordEvent::End` or in `Profiler::Stop`'s
`GatherEvents`, or `std::bad_alloc`. Each new program (each executor has its own pool)
registers new threads: a process running 100 fresh programs, each under a profiler, died in
5 of 5 runs (in 2 of 4 under our windows before this); with the ops on the calling thread,
none of 5 x 100. (The dynamic graph's windows need none of this: its ops run on the calling
thread, and a to_static program ran 3 x 100 fresh under a profiler without a crash.)

How: FLAGS_enable_pir_in_executor_trace_run, which the executor reads at each run (its
"trace" mode, the one Paddle's inference and oneDNN programs run in). The job's results are
the same bit for bit (checked step by step, switching mode mid-job), and a small CPU job's
step took the same time either way (2.25 ms on 2 cores). The script's own value is put back
when the window closes. A Paddle without the flag is left as it is."""

from typing import Optional

FLAG = "FLAGS_enable_pir_in_executor_trace_run"


class OneThreadRuns:
    """The executor's trace mode for the span of one profiler window (begin ... end)."""

    def __init__(self):
        self._saved: Optional[bool] = None  # the script's value while ours is set

    def begin(self):
        if self._saved is not None:
            return
        import paddle
        try:
            saved = bool(paddle.get_flags([FLAG])[FLAG])
            paddle.set_flags({FLAG: True})
        except (ValueError, KeyError, TypeError, AttributeError):  # (a Paddle without it)
            return
        self._saved = saved

    def end(self):
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        import paddle
        paddle.set_flags({FLAG: saved})
