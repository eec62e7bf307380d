"""NaN/Inf checking that goes on: FLAGS_check_nan_inf_level=1 in the runtime (each op output
with NaN/Inf printed and sent as an event, training continues), and `paddletune profile
--check-nan-continue` recording them (the first MAX_NAN_EVENTS one by one, then counted)."""

import numpy as np
import pytest

import runtime as fluid
from paddletune.advisors import nan as nan_rule
from paddletune.profile import load
from paddletune.session import MAX_NAN_EVENTS
from runtime.errors import FlagError
from test_profile_cli import profile, write_script


def test_level_1_reports_each_nan_output_and_training_goes_on(capfd):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2])
        out = fluid.layers.mean(fluid.layers.log(x))
    exe = fluid.Executor()
    fluid.set_flags({"FLAGS_check_nan_inf": True, "FLAGS_check_nan_inf_level": 1})
    seen = []
    try:
        with np.errstate(invalid="ignore"), fluid.events.subscribe("nan_inf", seen.append):
            for row in ([1.0, 1.0], [1.0, -1.0], [1.0, 2.0]):
                (v,) = exe.run(main, feed={"x": np.array([row], np.float32)},
                               fetch_list=[out])
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False, "FLAGS_check_nan_inf_level": 0})
    assert np.isfinite(v).all()  # the third step ran, and its result is finite again
    assert [(d["op_type"], d["step"], d["n_nan"]) for d in seen] == [("log", 1, 1),
                                                                     ("mean", 1, 1)]
    err = capfd.readouterr().err
    assert err.count("FLAGS_check_nan_inf (level 1, training goes on): op ") == 2
    assert "op log (#0)" in err and "at step 1; its inputs: x" in err


def test_levels_the_runtime_does_not_implement_are_refused():
    with pytest.raises(FlagError, match=r"FLAGS_check_nan_inf_level: expected a value in "
                                        r"\[0, 1\].*levels 2 and 3.*not implemented"):
        fluid.set_flags({"FLAGS_check_nan_inf_level": 2})


def test_check_nan_continue_records_each_step_and_the_job_finishes(tmp_path):
    """log(-1) at steps 7 and 12: the job finishes (exit 0), each NaN output is recorded with
    its step (log's at 7 and 12; from step 7 on, the NaN gradient has made the weights NaN,
    so every later step has some), and the advice says training went on."""
    script = write_script(tmp_path, """
        def poison(step, x):
            if step in (7, 12):
                x[0, 0] = -1.0  # log(-1) = NaN, for this step only
            return x
        train(20, poison)
        """)
    proc = profile(tmp_path, "-q", "--check-nan-continue", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("FLAGS_check_nan_inf (level 1, training goes on): op log") == 2
    prof = load(tmp_path / "p.jsonl")
    assert prof.options.check_nan_continue and prof.summary.n_steps == 20
    logs = [e for e in prof.events_of("nan_inf") if e.op_type == "log"]
    assert [(e.step, e.n_nan, e.inputs) for e in logs] == [(7, 1, ("x",)), (12, 1, ("x",))]
    advice = nan_rule.nan_inf(prof)
    assert advice.title == "NaN/Inf first produced by log"
    assert "training went on (--check-nan-continue): NaN/Inf in 13 step(s), the last step 19" \
        in advice.evidence


def test_a_diverged_job_records_the_first_outputs_and_counts_the_rest(tmp_path):
    """Once the weights are NaN every op of every step makes NaN: the profile keeps the first
    MAX_NAN_EVENTS outputs one by one and one record counting the rest, not thousands."""
    script = write_script(tmp_path, """
        def poison(step, x):
            if step == 3:
                x[:] = np.inf  # the loss and every gradient become NaN from here on
            return x
        train(60, poison)
        """)
    proc = profile(tmp_path, "-q", "--check-nan-continue", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    events = load(tmp_path / "p.jsonl").events_of("nan_inf")
    one_by_one = [e for e in events if not e.more]
    (totals,) = [e for e in events if e.more]
    assert len(one_by_one) == MAX_NAN_EVENTS and one_by_one[0].step == 3
    assert totals.steps_with == 57 and totals.last_step == 59 and totals.more > 500
    assert totals.message.startswith(f"{totals.more} more NaN/Inf outputs after the first "
                                     f"{MAX_NAN_EVENTS}, counted only; 57 steps had NaN/Inf")
