"""ADVICE.md #1: the training loop waits for data: move data preparation to an async reader."""

from typing import List, Optional

from ..summary import HIGHLY_INPUT_BOUND, MIN_STEADY_STEPS, MODERATELY_INPUT_BOUND
from .base import Advice, rule
from .facts import (code_name, enough_steps, loss_name, main_loader, main_ops, ms, names,
                    startup_outputs)

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
    share = s.get("input_share")
    if share is None or share < MODERATELY_INPUT_BOUND:
        return None
    f = overlap_figures(s)
    tiny = f["input_s"] < MIN_INPUT_S
    evidence = (f"{share:.1%} of each {ms(f['cycle_s'])} step waits for input: "
                f"{ms(f['outside_s'])} outside the runtime (data preparation and Python "
                f"between exe.run calls) + {ms(f['feed_s'])} feeding, against "
                f"{ms(f['rest_s'])} computing and fetching; {s['steady_steps']} steady steps.")
    if tiny:
        evidence += (f" At under {ms(MIN_INPUT_S)} per step this is mostly the loop's own "
                     f"overhead, which an async reader does not remove.")
    return Advice(
        id="input-bound", source=1, figures=f, evidence=evidence,
        title=f"Input-bound: {share:.0%} of each step waits for data",
        severity="low" if tiny else "high" if share >= HIGHLY_INPUT_BOUND else "medium",
        change=async_reader_code(profile), expected_speedup=f["speedup"],
        expected_gain=overlap_gain(f),
        confidence="low" if tiny else "high" if s["steady_steps"] >= 20
        and s["cycle_s"]["cv"] <= 0.5 else "medium")


def overlap_figures(s: dict) -> dict:
    """The step's parts, and the cycle if input overlapped compute + fetch."""
    b, cycle_s = s["breakdown_s"], s["cycle_s"]["mean"]
    input_s = b["outside"] + b["feed"]
    rest_s = max(cycle_s - input_s, 0.0)  # compute + fetch (+ the run's own overhead)
    new_s = max(rest_s, input_s)
    return {"input_share": s["input_share"], "cycle_s": cycle_s, "input_s": input_s,
            "outside_s": b["outside"], "feed_s": b["feed"], "compute_s": b["compute"],
            "fetch_s": b["fetch"], "rest_s": rest_s, "overlapped_cycle_s": new_s,
            "speedup": cycle_s / new_s if new_s > 0 else None,
            "steady_steps": s["steady_steps"]}


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
    """The DataLoader lines for this job, with its feed variables and place when known."""
    fed = [s.get("feed") for s in profile.steps
           if s.get("program") == profile.summary.get("main_program") and s.get("feed")]
    feeds = fed[0] if fed else feed_names(main_ops(profile), startup_outputs(profile))
    usable = bool(feeds) and all(n.isidentifier() for n in feeds)
    loss = code_name(loss_name(main_ops(profile)), "loss")
    lines = ["# reader: your generator yielding one batch (a list of arrays) per iteration"]
    if not usable:
        named = f" ({', '.join(map(repr, feeds))})" if feeds else ""
        lines.append(f"# feed_list: your fluid.data variables{named}")
    return "\n".join(lines + [
        f"loader = fluid.io.DataLoader.from_generator(feed_list="
        f"[{', '.join(feeds) if usable else 'image, label'}], capacity=8, iterable=True)",
        f"loader.set_batch_generator(reader, places={_place(profile)})",
        "for data in loader():",
        f"    exe.run(main_program, feed=data, fetch_list=[{loss}])"])


def feed_names(ops: List[dict], created=()) -> List[str]:
    """Variables the forward pass reads that no op writes and no startup program creates
    (`created`): the data the loop feeds. In a training program the optimizer writes the
    parameters; the learning rate is read only by optimizer ops."""
    written = {n for op in ops for n in names(op.get("outputs"))} | set(created)
    out: List[str] = []
    for op in ops:
        if int(op.get("role") or 0) & 0xFF:  # backward, optimizer, lr schedule
            continue
        for n in names(op.get("inputs")):
            if n not in written and n not in out and not n.endswith("@GRAD"):
                out.append(n)
    return out


def _place(profile) -> str:
    places = [s.get("place") for s in profile.steps if not s.get("startup") and s.get("place")]
    place = places[-1] if places else "CPUPlace"
    return f"fluid.{place}" if "(" in place else f"fluid.{place}()"


def _too_few_steps(profile) -> Optional[Advice]:
    s = profile.summary
    n, steady = s.get("n_steps") or 0, s.get("steady_steps") or 0
    if n == 0:
        return None
    need = max(SUGGESTED_STEPS, (s.get("warmup_steps") or 0) + MIN_STEADY_STEPS)
    return Advice(
        id="too-few-steps", source=1, severity="info", confidence="high",
        title="Too few steps to judge the step time",
        evidence=(f"only {steady} steady-state step(s) measured ({n} training step(s), "
                  f"{s.get('warmup_steps') or 0} of them warm-up); the input-bound and "
                  f"fetch checks need at least {MIN_STEADY_STEPS}."),
        change=_more_steps(profile, need),
        expected_gain="none by itself: it makes the step-time advice possible",
        figures={"n_steps": n, "steady_steps": steady, "needed": MIN_STEADY_STEPS})


def _more_steps(profile, need: int) -> str:
    limit = profile.options.get("steps")
    if limit is not None and limit < need:
        return f"paddletune profile --steps {need} {_script(profile)}"
    return (f"# let the training loop run at least {need} steps (more iterations or data), "
            f"then:\npaddletune profile {_script(profile)}")


def _script(profile) -> str:
    argv = (profile.header.get("command") or {}).get("argv") or ["train.py"]
    return " ".join(str(a) for a in argv)
