"""docs/advice.md #1: the training loop waits for data: move data preparation to an async
reader."""

from typing import List, Optional, Sequence

from ..profile.figures import Summary
from ..profile.records import ProgramOp
from ..profile.summarize import HIGHLY_INPUT_BOUND, MIN_STEADY_STEPS, MODERATELY_INPUT_BOUND
from .base import Advice, rule
from .facts import (code_name, enough_steps, is_forward, loss_name, main_loader, main_ops,
                    main_steps, ms, names, script, startup_outputs, writer)

SUGGESTED_STEPS = 50  # what to ask for when a profile has too few steady steps
MIN_INPUT_S = 0.0002  # less input than this per step is loop overhead, not data: low severity


@rule
def input_bound(profile) -> Optional[Advice]:
    """input wait (#1)

    Fires when outside-the-runtime + feed time is a visible share of the step cycle, unless
    the job already feeds through a DataLoader (the reader rules then judge its queue).
    """
    s = profile.summary
    if not enough_steps(profile):
        return _too_few_steps(profile)
    if main_loader(profile) is not None:  # already an async reader: advisors/reader.py judges
        return None                       # it with the queue's own waits (#2-#5)
    share = s.input_share
    if share is None or share < MODERATELY_INPUT_BOUND:
        return None
    f = overlap_figures(s)
    tiny = f["input_s"] < MIN_INPUT_S
    terms = profile.source.terms
    evidence = (f"{share:.1%} of each {ms(f['cycle_s'])} step waits for input: "
                f"{ms(f['outside_s'])} {terms.between} (data preparation and Python "
                f"between {terms.call} calls) + {ms(f['feed_s'])} feeding, against "
                f"{ms(f['rest_s'])} computing and fetching; {s.steady_steps} steady steps.")
    if tiny:
        evidence += (f" At under {ms(MIN_INPUT_S)} per step this is mostly the loop's own "
                     f"overhead, which an async reader does not remove.")
    return Advice(
        id="input-bound", source=1, figures=f, evidence=evidence,
        title=f"Input-bound: {share:.0%} of each step waits for data",
        severity="low" if tiny else "high" if share >= HIGHLY_INPUT_BOUND else "medium",
        change=async_reader_code(profile), expected_speedup=f["speedup"],
        expected_gain=overlap_gain(f),
        confidence="low" if tiny else "high" if s.steady_steps >= 20
        and s.cycle_s.cv <= 0.5 else "medium")


def overlap_figures(s: Summary) -> dict:
    """The step's parts, and the cycle if input overlapped compute + fetch."""
    b, cycle_s = s.breakdown_s, s.cycle_s.mean
    input_s = b.outside_s + b.feed_s
    rest_s = max(cycle_s - input_s, 0.0)  # compute + fetch (+ the run's own overhead)
    new_s = max(rest_s, input_s)
    return {"input_share": s.input_share, "cycle_s": cycle_s, "input_s": input_s,
            "outside_s": b.outside_s, "feed_s": b.feed_s, "compute_s": b.compute_s,
            "fetch_s": b.fetch_s, "rest_s": rest_s, "overlapped_cycle_s": new_s,
            "speedup": cycle_s / new_s if new_s > 0 else None,
            "steady_steps": s.steady_steps}


def overlap_gain(f: dict) -> str:
    if f["speedup"] is None:
        return "unknown (no step time measured)"
    text = (f"up to {f['speedup']:.2f}x steps/s ({ms(f['cycle_s'])} -> "
            f"{ms(f['overlapped_cycle_s'])} per step) if the {ms(f['input_s'])} of input "
            f"overlaps the {ms(f['rest_s'])} of compute and fetch")
    if f["input_s"] > f["rest_s"]:
        text += "; the reader then bounds the step, so make it faster too (more workers)"
    return text


def async_reader_code(profile) -> str:
    """The async DataLoader lines for this job, with its feed variables, place and loss when
    known."""
    fed = [s.feed for s in main_steps(profile) if s.feed]
    feeds = list(fed[0]) if fed else feed_names(main_ops(profile), startup_outputs(profile))
    loss = code_name(loss_name(main_ops(profile)), "loss")
    return writer(profile).async_loader(feeds, _place(profile), loss)


def feed_names(ops: Sequence[ProgramOp], created=()) -> List[str]:
    """Variables the forward pass reads that no op writes and no startup program creates
    (`created`): the data the loop feeds. In a training program the optimizer writes the
    parameters; the learning rate is read only by optimizer ops."""
    written = {n for op in ops for n in names(op.outputs)} | set(created)
    out: List[str] = []
    for op in ops:
        if not is_forward(op):  # backward, optimizer, lr schedule
            continue
        for n in names(op.inputs):
            if n not in written and n not in out and not n.endswith("@GRAD"):
                out.append(n)
    return out


def _place(profile) -> str:
    """The device the training steps ran on ("CPUPlace" when unknown)."""
    places = [s.place for s in profile.steps if not s.startup and s.place]
    return places[-1] if places else "CPUPlace"


def _too_few_steps(profile) -> Optional[Advice]:
    s = profile.summary
    n, steady = s.n_steps, s.steady_steps
    if n == 0:
        return None
    need = max(SUGGESTED_STEPS, s.warmup_steps + MIN_STEADY_STEPS)
    return Advice(
        id="too-few-steps", source=1, severity="info", confidence="high",
        title="Too few steps to judge the step time",
        evidence=(f"only {steady} steady-state step(s) measured ({n} training step(s), "
                  f"{s.warmup_steps} of them warm-up); the input-bound and "
                  f"fetch checks need at least {MIN_STEADY_STEPS}."),
        change=_more_steps(profile, need),
        expected_gain="none by itself: it makes the step-time advice possible",
        figures={"n_steps": n, "steady_steps": steady, "needed": MIN_STEADY_STEPS})


def _more_steps(profile, need: int) -> str:
    limit = profile.options.steps
    if limit is not None and limit < need:
        return f"paddletune profile --steps {need} {script(profile)}"
    return (f"# let the training loop run at least {need} steps (more iterations or data), "
            f"then:\npaddletune profile {script(profile)}")
