"""docs/advice.md #1: the training loop waits for data: move data preparation to an async
reader."""

from dataclasses import replace
from typing import List, Optional, Sequence

from ..profile.figures import Summary
from ..profile.records import ProgramOp
from ..profile.summarize import HIGHLY_INPUT_BOUND, MIN_STEADY_STEPS, MODERATELY_INPUT_BOUND
from .base import Advice, rule
from .facts import (code_name, enough_steps, free_cores, is_forward, loss_name, main_loader,
                    main_ops, main_steps, ms, names, script, startup_outputs, system_mean,
                    writer)
from .producers import (ProducerCost, blas_note, cpu_bound_note, gain_severity, plan_figures,
                        size_workers, trainer_cpu_from_steps, trainer_work_bound,
                        transfer_costs, with_sending)

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
    plan = sync_worker_plan(profile)
    tiny = plan["input_s"] < MIN_INPUT_S
    terms = profile.source.terms
    evidence = (f"{share:.1%} of each {ms(plan['cycle_s'])} step waits for input: "
                f"{ms(plan['outside_s'])} {terms.between} (data preparation and Python "
                f"between {terms.call} calls) + {ms(plan['feed_s'])} feeding, against "
                f"{ms(plan['rest_s'])} computing and fetching; {s.steady_steps} steady steps"
                f"{_cpu_evidence(plan)}.")
    if tiny:
        evidence += (f" At under {ms(MIN_INPUT_S)} per step this is mostly the loop's own "
                     f"overhead, which an async reader does not remove.")
    return Advice(
        id="input-bound", source=1, figures=plan, evidence=evidence,
        title=f"Input-bound: {share:.0%} of each step waits for data",
        severity="low" if tiny else gain_severity(
            "high" if share >= HIGHLY_INPUT_BOUND else "medium", plan["speedup"]),
        change=_sync_change(profile, plan), expected_speedup=plan["speedup"],
        expected_gain=_sync_gain(plan),
        confidence="low" if tiny else "high" if s.steady_steps >= 20
        and s.cycle_s.cv <= 0.5 else "medium")


def sync_worker_plan(profile) -> dict:
    """The DataLoader that replaces a synchronous loop's data preparation: the loop's time
    between runs becomes a producer's, sized into workers (advisors/producers.py) against the
    step without it; with the step's parts (overlap_figures)."""
    s = profile.summary
    f = overlap_figures(s)
    cycle_s, input_s = f["cycle_s"], f["input_s"]
    taking_s, sending_s = transfer_costs(profile.source.framework)  # (a batch a step)
    free_s = f["rest_s"] + taking_s  # compute and fetch: the loader's thread converts the feed
    cost = ProducerCost(wall_s=input_s, cpu_s=_loop_cpu_s(profile, cycle_s, f["rest_s"],
                                                          input_s), cpu_share=None)
    if cost.cpu_s and input_s > 0:
        cost = replace(cost, cpu_share=cost.cpu_s / input_s)
    cost = with_sending(cost, sending_s)
    cores = free_cores(profile)
    trainer_cpu_s = trainer_cpu_from_steps(profile, free_s)
    sizing = size_workers(cores, cost, free_s, cycle_s,
                          trainer_work_bound(profile, s.input_share), trainer_cpu_s)
    plan = plan_figures(profile, sizing, cores, cost, cycle_s, free_s, "cycle - input")
    return {**f, **plan, "current_workers": 0, "made_in": "loop", "gil_bound_thread": False,
            "trainer_cpu_s_per_step": trainer_cpu_s}


def _loop_cpu_s(profile, cycle_s: float, free_s: float, input_s: float) -> float:
    """The CPU the loop's data preparation takes per step: the process's CPU per step less
    the step without data at one core, within [a tenth of the time, all of it]; 0 when the
    process CPU was not sampled."""
    process = system_mean(profile, "cpu_percent")
    if process is None or input_s <= 0:
        return 0.0
    spent_s = process / 100 * cycle_s - free_s
    return min(max(spent_s, 0.1 * input_s), input_s)


def _cpu_evidence(plan) -> str:
    if not plan["producer_cpu_s_per_step"]:
        return ""
    return (f"; the preparation keeps {plan['producer_cpu_share']:.0%} of a core busy "
            f"({ms(plan['producer_cpu_s_per_step'])} of CPU per step)")


def _sync_change(profile, plan) -> str:
    code, n = writer(profile), plan["workers"]
    lines = [async_reader_code(profile, n)]
    if n:
        lines.append(code.shard_note())
    return "\n".join([line for line in lines if line] + blas_note(code, plan))


def _sync_gain(plan) -> str:
    if plan["speedup"] is None:
        return "unknown (no step time measured)"
    n, needed = plan["workers"], plan["workers_needed"]
    text = (f"up to {plan['speedup']:.2f}x steps/s ({ms(plan['cycle_s'])} -> "
            f"{ms(plan['predicted_cycle_s'])} per step) with {n} worker process(es) making "
            f"the batches while the model computes")
    if plan["cpu_bound"]:
        text += "; " + cpu_bound_note(plan)
    if needed > n:
        text += (f"; the {ms(plan['input_s'])} of input per step would need {needed} "
                 f"workers, but the cores run {plan['worker_cap']}: make each batch cheaper too")
    return text


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


def async_reader_code(profile, num_workers: int = 0) -> str:
    """The async DataLoader lines for this job, with its feed variables, place and loss when
    known, and `num_workers` worker processes."""
    fed = [s.feed for s in main_steps(profile) if s.feed]
    feeds = list(fed[0]) if fed else feed_names(main_ops(profile), startup_outputs(profile))
    loss = code_name(loss_name(main_ops(profile)), "loss")
    return writer(profile).async_loader(feeds, _place(profile), loss, num_workers)


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
