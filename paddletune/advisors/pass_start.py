"""docs/advice.md #31: a DataLoader's workers started, or woken, at every pass.

What is measured (sources/eager/loaders.py, `asked`, `start` and `first_batch`): each
pass's start-up, the loop's iter() before its first batch request
(records.ReaderStart.startup_s): the framework forking the pass's worker processes, or waking
persistent ones. PyTorch's spawn and forkserver workers start a new interpreter each, whose
imports and unpickling of the dataset the loop waits through in its first next(), after
iter() returned: their pass's start-up adds the first batch's wait beyond the mean wait of
the pass's other batches (ReaderStart.first_wait_s, profile/reader_figures.pass_starts;
seconds a pass where forked workers take milliseconds). The first pass always starts them,
so its start-up is what a pass costs without persistent workers.

- Workers not kept (persistent_workers=False) whose later passes each start them again: the
  change keeps them (PyTorch's workers then wait for the next pass's indices; the predicted
  start-up is none). Not advised for Paddle, whose persistent workers cost more (below).
- Persistent workers whose waking costs more than starting them did: the change stops
  keeping them, predicted to cost the first pass's start-up. Paddle 3.3.1 waits 0.5 s in each
  later pass's iter() with persistent_workers=True (500.3-500.5 ms a pass against 19-31 ms
  to fork 2 workers, 2-core VM, 2026-11-30).

The time saved per pass is weighed against the pass: a training loader's start-up lands in
the step that takes the pass's first batch, so the gain is the steps' (pass time over pass
time less the saving); an evaluation loader's passes are left out of the steps, so its gain
is the run's."""

from typing import Optional

from .base import Advice, rule
from .evaluation import KEEPS_WORKERS, eval_loader
from .facts import ms, writer

LOW_SHARE, MEDIUM_SHARE, HIGH_SHARE = 0.05, 0.15, 0.3  # of a pass's time, saved
WAKE_OVER_START = 2.0  # persistent workers' waking this many times their first start: slow


@rule
def worker_start_per_pass(profile) -> Optional[list]:
    """the workers' start at every pass (#31)

    Fires when a DataLoader's worker processes cost each later pass at least 5% of its time
    to start (not kept between passes: PyTorch) or to wake (kept, where waking them costs
    more than starting them did).
    """
    s = profile.summary
    if s.reader is None:
        return None
    out = []
    for f in s.reader.loaders:
        figures = _figures(profile, f)
        if figures is not None and figures["saved_share"] >= LOW_SHARE:
            out.append(_advice(profile, f, figures))
    return out


def _figures(profile, f) -> Optional[dict]:
    """The start-up a later pass takes now and with the change, and what it saves (None: no
    change to make)."""
    starts = f.pass_starts
    if (not f.config.num_workers or starts is None or starts.later_s is None
            or not starts.pass_s or starts.first_s is None):
        return None
    if f.config.persistent_workers:
        if starts.later_s < WAKE_OVER_START * starts.first_s:
            return None
        change, predicted_s = False, starts.first_s
    elif profile.source.framework in KEEPS_WORKERS:
        change, predicted_s = True, 0.0
    else:
        return None
    saved_s = starts.later_s - predicted_s
    evaluation = f.evaluation
    figures = {"loader": f.loader, "persistent_workers": bool(f.config.persistent_workers),
               "suggested_persistent_workers": change,
               "start_method": f.config.start_method,
               "in_first_batch": starts.in_first_batch, "first_s": starts.first_s,
               "later_s": starts.later_s, "later_passes": starts.later,
               "pass_s": starts.pass_s, "predicted_start_s": predicted_s,
               "saved_s_per_pass": saved_s, "saved_share": saved_s / starts.pass_s,
               "evaluation": evaluation}
    if not evaluation:
        figures["speedup"] = starts.pass_s / (starts.pass_s - saved_s)
    return figures


def _advice(profile, f, figures: dict) -> Advice:
    share = figures["saved_share"]
    name = f.name or f"DataLoader#{f.loader}"
    doing = "waking" if figures["persistent_workers"] else "starting"
    return Advice(
        id="worker-start-per-pass", source=31,
        title=(f"{doing.capitalize()} {name}'s workers takes {figures['later_s'] * 1e3:,.0f} "
               f"ms a pass ({share:.0%} of it)"),
        severity="high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE
        else "low",
        confidence="medium" if figures["persistent_workers"] else "high",
        evidence=_evidence(name, f, figures, doing), change=_change(profile, f, figures),
        expected_gain=_gain(figures), expected_speedup=figures.get("speedup"),
        figures=figures)


def _evidence(name: str, f, figures: dict, doing: str) -> str:
    kept = ("its persistent workers" if figures["persistent_workers"]
            else f"its {f.config.num_workers} worker process(es), not kept between passes")
    what = f"the loop's iter() of {name}"
    if figures["in_first_batch"]:
        what = (f"the start of {name}'s passes (its iter(), and the wait for the first batch "
                f"beyond the pass's other batches' mean: its "
                f"{figures['start_method'] or 'spawn'} workers start a new interpreter "
                f"each inside the first next())")
    return (f"{what} took {ms(figures['first_s'])} on the first pass "
            f"and {ms(figures['later_s'])} on {_later(figures['later_passes'])}, "
            f"{doing} {kept}: {figures['saved_share']:.0%} of such a pass's "
            f"{ms(figures['pass_s'])}.")


def _later(n: int) -> str:
    return "the later one" if n == 1 else f"each of the {n} later ones"


def _change(profile, f, figures: dict) -> str:
    code = writer(profile)
    keep = figures["suggested_persistent_workers"]
    line = code.loader(f.config, persistent_workers=keep)
    if figures["evaluation"]:
        line = eval_loader(line)
    if keep:
        return line
    why = code.comment("its persistent workers take longer to wake than to start")
    return f"{line}\n{why}"


def _gain(figures: dict) -> str:
    saving = (f"each later pass {ms(figures['saved_s_per_pass'])} shorter "
              f"({ms(figures['later_s'])} -> {ms(figures['predicted_start_s'])} to start: "
              + ("the workers kept)" if figures["suggested_persistent_workers"]
                 else "as the first pass started them)"))
    if figures["evaluation"]:
        return f"the evaluation passes, not the steps: {saving}"
    return f"up to {figures['speedup']:.2f}x steps/s over a pass: {saving}"
