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
