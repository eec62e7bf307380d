"""docs/advice.md #29: DataLoader workers whose batches cost the loop a visible share of its
step to take over once made (PyTorch's storage hand-over).

What is measured (sources/torch/handover.py): per batch, the time the loop spent rebuilding
the batch's tensor storages as it unpickled it, inside the DataLoader's __next__. Under the
file_descriptor sharing strategy, Linux's default, each storage costs a round trip to the
worker's resource sharer; file_system opens it by name. The change: file_system, predicted to
leave FILE_SYSTEM_SHARE of the measured hand-over (benchmarks/torch_sharing_strategy.py,
2-core VM, 2026-11-30: the rebuilds 1.4-2.7 ms under file_descriptor against 0.31-0.35 ms
under file_system for a 2-tensor batch, 2.5 against 0.54 ms for 4 tensors; next() as a whole
0.32-0.55 of its file_descriptor time). Where a worker makes a batch in less time than its
hand-over, making the batches in the loop (num_workers=0) is named too."""

from typing import Optional

from ..sources.eager.overrides import SHARING_STRATEGIES
from .base import Advice, rule
from .facts import declares_knob, enough_steps, main_loader, ms, writer
from .producers import gain_severity

HANDOVER_SHARE_LOW, HANDOVER_SHARE_MEDIUM = 0.05, 0.15  # of the step: low / medium advice
FILE_SYSTEM_SHARE = 0.25  # file_system's hand-over as a share of file_descriptor's measured
# one (the rebuilds: 0.12-0.24 in torch_sharing_strategy.py; rounded up)
DEFAULT_STRATEGY = SHARING_STRATEGIES[0]  # file_descriptor: PyTorch's on Linux
KNOB = "multiprocessing.sharing_strategy"


@rule
def worker_hand_over(profile) -> Optional[Advice]:
    """the workers' hand-over (#29)

    Fires when taking the workers' batches, once made, costs the loop at least 5% of its
    step and the job's framework shares tensors by file descriptor (PyTorch's default), or a
    worker makes a batch faster than it is handed over.
    """
    f = main_loader(profile)
    s = profile.summary
    if f is None or not f.handover_s_per_pop or not enough_steps(profile) or not s.cycle_s:
        return None
    figures = _figures(profile, f)
    if figures["share"] < HANDOVER_SHARE_LOW or figures["speedup"] is None:
        return None
    code = writer(profile)
    return Advice(
        id="worker-hand-over", source=29,
        title=(f"Taking each batch from its worker costs {ms(f.handover_s_per_pop)}: "
               f"{figures['share']:.0%} of the step"),
        severity=gain_severity("medium" if figures["share"] >= HANDOVER_SHARE_MEDIUM
                               else "low", figures["speedup"]),
        confidence="medium", evidence=_evidence(f, figures),
        change=_change(code, f, figures), expected_gain=_gain(figures),
        expected_speedup=figures["speedup"], figures=figures)


def _figures(profile, f) -> dict:
    """The hand-over per step, its share, and the change's predicted step: file_system where
    the job shares by file descriptor, else the batches made in the loop where a worker
    makes one faster than it is handed over (None: neither)."""
    cycle_s = profile.summary.cycle_s.mean
    per_step = f.consumer.batches_per_step or 1.0
    handover_s = f.handover_s_per_pop * per_step
    strategy = f.config.sharing_strategy or DEFAULT_STRATEGY
    make_s = f.producer.s_per_batch  # a worker's time to make one (in the loop: about it)
    in_loop = make_s is not None and make_s < f.handover_s_per_pop
    predicted, change = None, None
    if strategy == DEFAULT_STRATEGY and declares_knob(profile, KNOB):
        predicted, change = cycle_s - (1 - FILE_SYSTEM_SHARE) * handover_s, "file_system"
    elif in_loop:  # the loop would wait for each batch it makes, not for its hand-over
        wait_s = f.wait.per_step_s or handover_s
        predicted, change = cycle_s - wait_s + make_s * per_step, "num_workers=0"
    speedup = cycle_s / predicted if predicted and 0 < predicted < cycle_s else None
    return {"handover_s_per_batch": f.handover_s_per_pop, "handover_s_per_step": handover_s,
            "share": handover_s / cycle_s, "cycle_s": cycle_s, "strategy": strategy,
            "worker_s_per_batch": make_s, "in_loop_cheaper": in_loop,
            "suggested_strategy": "file_system" if change == "file_system" else None,
            "suggested_workers": 0 if change == "num_workers=0" else None,
            "predicted_cycle_s": predicted if speedup else None, "speedup": speedup}


def _evidence(f, figures: dict) -> str:
    made = (f"; a worker made a batch in {ms(figures['worker_s_per_batch'])}"
            if figures["worker_s_per_batch"] else "")
    return (f"the {f.batches:,} batches of {f.name or 'the DataLoader'} took the loop "
            f"{ms(figures['handover_s_per_batch'])} each on average to take over from their "
            f"workers once made (their tensors' storage rebuilt from the workers' shared "
            f"memory, {figures['strategy']} sharing): {ms(figures['handover_s_per_step'])} "
            f"per step, {figures['share']:.0%} of the {ms(figures['cycle_s'])} step{made}.")


def _change(code, f, figures: dict) -> str:
    loop = code.loader(f.config, num_workers=0)
    if figures["suggested_strategy"]:
        lines = [code.sharing_strategy("file_system") or code.comment(
            "share tensors by file name (file_system)")]
        if figures["in_loop_cheaper"]:
            lines.append(code.comment(f"or make the batches in the loop, which a worker makes "
                                      f"in less than their hand-over: {loop}"))
        return "\n".join(lines)
    return f"{loop}\n{code.comment('a worker makes each batch in less than its hand-over')}"


def _gain(figures: dict) -> str:
    if figures["suggested_strategy"]:
        how = (f"file_system's hand-over about {FILE_SYSTEM_SHARE:.0%} of file_descriptor's "
               f"(benchmarks/torch_sharing_strategy.py)")
    else:
        how = "the loop making each batch in a worker's time, without the hand-over"
    return (f"up to {figures['speedup']:.2f}x steps/s ({ms(figures['cycle_s'])} -> "
            f"{ms(figures['predicted_cycle_s'])} per step): {how}")
