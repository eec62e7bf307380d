"""The --speed-test switcher: windows counted in training steps of the first program only, and
the flag always turned back off."""

import runtime
from runtime import events
from paddletune.session import Options, _SpeedTest
from paddletune.sources.fluid import FluidSource


class FakeSession:
    def __init__(self):
        self.events = []
        self.source = FluidSource()

    def event(self, kind, **fields):
        self.events.append((fields["phase"], fields["step"]))


def step(program, startup=False):
    return events.StepRecord(1, program, 0, 0.0, 0.01, 0.0, 0.01, 0.0, 4, 5, 0, 0, (),
                             "CPUPlace", startup)


def test_windows_count_only_the_training_program_and_the_flag_ends_off():
    session = FakeSession()
    session.source.blas_threads = lambda: 1  # (no one-thread window: tested below)
    st = _SpeedTest(session, Options("train.py", warmup=2, speed_test=3))
    flag = "FLAGS_reader_queue_speed_test_mode"
    try:
        st.on_step(step(0, startup=True))
        for _ in range(5):
            st.on_step(step(1))
            st.on_step(step(2))  # an evaluation program after each training step
        assert session.events == [("baseline", 2), ("ceiling", 5)]
        assert runtime.get_flags([flag])[flag] is True
        for _ in range(3):
            st.on_step(step(1))
        assert session.events[-1] == ("done", 8)
        assert runtime.get_flags([flag])[flag] is False
    finally:
        st.finish()
        runtime.set_flags({flag: False})


class SoloSource:
    """A source whose one thread producer reports its timing alone when told."""

    def __init__(self, asked=1, threads=None):
        self.asked, self.requests, self.threads = asked, [], threads
        self.set_threads = []

    def blas_threads(self):
        return self.threads

    def set_math_threads(self, n):
        previous, self.threads = self.threads, n
        self.set_threads.append(n)
        return previous

    def set_speed_test_mode(self, on):
        return False

    def measure_producers_alone(self, batches):
        self.requests.append(batches)
        return self.asked


class Recording(FakeSession):
    def __init__(self, source):
        self.events, self.source, self.records, self.messages = [], source, [], []
        self.cpu, self.thread_cpu = [], []

    def event(self, kind, **fields):
        if "phase" in fields:
            self.events.append((fields["phase"], fields["step"]))
            self.messages.append(fields["message"])
            self.cpu.append(fields["cpu_s"])
            self.thread_cpu.append(fields["thread_cpu_s"])
        else:
            self.records.append(kind(t_s=0.0, **fields))


def test_a_solo_phase_lasts_until_each_loader_asked_has_reported():
    session = Recording(SoloSource(asked=2))
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    for _ in range(5):
        st.on_step(step(1))
    assert session.events == [("baseline", 1), ("ceiling", 3), ("solo", 5)]
    assert session.source.requests == [8]
    st.on_solo(events.ReaderSolo(0, 1, 1.0, 8, 0.08, 0.04))
    st.on_step(step(1))  # one loader still holds batches taken ahead: still solo
    assert session.events[-1] == ("solo", 5)
    st.on_solo(events.ReaderSolo(1, 1, 1.0, 0, 0.0, None))  # one made none alone
    st.on_step(step(1))
    assert session.events[-1] == ("done", 7)
    assert all(isinstance(c, float) for c in session.cpu)  # the process's CPU at each
    assert session.cpu == sorted(session.cpu)
    # the training thread's CPU too (the switches run on it, in its step's end)
    assert all(isinstance(c, float) for c in session.thread_cpu)
    assert session.thread_cpu == sorted(session.thread_cpu)
    [solo] = session.records  # (the loader that made none records nothing)
    assert (solo.loader, solo.batches) == (0, 8)
    assert solo.s_per_batch == 0.01 and solo.cpu_s_per_batch == 0.005
    assert "10.00 ms per batch" in solo.message


def test_a_solo_phase_ends_without_reports_and_at_the_jobs_end():
    session = Recording(SoloSource())
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    for _ in range(5 + 499):
        st.on_step(step(1))
    assert session.events[-1] == ("solo", 5)
    st.on_step(step(1))
    assert session.events[-1] == ("done", 505)
    assert session.messages[-1] == ("speed test: done (1 DataLoader(s) asked to time their "
                                    "producer alone did not report)")
    ended = Recording(SoloSource())
    st = _SpeedTest(ended, Options("train.py", warmup=1, speed_test=2))
    for _ in range(5):
        st.on_step(step(1))
    st.finish()
    assert ended.events[-2:] == [("solo", 5), ("done", 5)]


def test_no_solo_phase_where_no_loader_could_be_asked():
    session = Recording(SoloSource(asked=0))
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    for _ in range(5):
        st.on_step(step(1))
    assert session.events[-1] == ("done", 5)


def test_several_math_threads_get_a_one_thread_ceiling_window_then_their_count_back():
    source = SoloSource(asked=1, threads=2)
    session = Recording(source)
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    for _ in range(5):
        st.on_step(step(1))
    assert session.events[-1] == ("solo", 5) and source.set_threads == []
    st.on_solo(events.ReaderSolo(0, 1, 1.0, 8, 0.08, 0.04))
    for _ in range(3):
        st.on_step(step(1))
    assert session.events == [("baseline", 1), ("ceiling", 3), ("solo", 5),
                              ("one_thread", 6), ("done", 8)]
    assert source.set_threads == [1, 2] and source.threads == 2
    assert session.messages[3] == ("speed test: the no-data ceiling again with 1 math thread "
                                   "(of 2) for 2 steps")
    # the job ending inside that window gives the threads back too
    source = SoloSource(asked=0, threads=4)
    ended = Recording(source)
    st = _SpeedTest(ended, Options("train.py", warmup=1, speed_test=2))
    for _ in range(6):
        st.on_step(step(1))
    assert ended.events[-1] == ("one_thread", 5)
    st.finish()
    assert ended.events[-1] == ("done", 6) and source.threads == 4
    st.finish()  # idempotent
    assert len(ended.events) == 4


def test_the_one_thread_window_re_reads_batches_and_leaves_the_flag_as_it_found_it():
    session = FakeSession()
    session.source.blas_threads = lambda: 2
    threads = []
    session.source.set_math_threads = lambda n: threads.append(n) or 2
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    flag = "FLAGS_reader_queue_speed_test_mode"
    try:
        for _ in range(5):
            st.on_step(step(1))
        assert session.events[-1] == ("one_thread", 5)  # (no DataLoader: no solo phase)
        assert runtime.get_flags([flag])[flag] is True and threads == [1]
        st.on_step(step(1))
        st.on_step(step(1))
        assert session.events[-1] == ("done", 7)
        assert runtime.get_flags([flag])[flag] is False and threads == [1, 2]
    finally:
        st.finish()
        runtime.set_flags({flag: False})


def test_a_switch_from_another_thread_has_no_training_thread_cpu():
    """The job's end can finish the speed test from another thread (a signal, the session's
    teardown): its switch gives the process's CPU only."""
    import threading
    session = Recording(SoloSource(asked=0))
    st = _SpeedTest(session, Options("train.py", warmup=1, speed_test=2))
    for _ in range(3):
        st.on_step(step(1))
    assert session.events[-1] == ("ceiling", 3)
    other = threading.Thread(target=st.finish)
    other.start()
    other.join()
    assert session.events[-1][0] == "done"
    assert session.thread_cpu[-1] is None and isinstance(session.cpu[-1], float)
