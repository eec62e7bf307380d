"""docs/advice.md #26: a CUDA job whose DataLoader hands the loop pageable batches, and whose
loop spends a visible share of its step copying them to the device: pin_memory=True (and a
non_blocking copy).

What is measured: the loop's host time inside the host-to-device copies (the feed part of
the step, timed around Tensor.to / .cuda by the PyTorch source on CUDA) and the bytes they
copied. What is not: the device's copy engine. A copy from pageable memory is staged through
a pinned buffer by the driver and waits for the stream's earlier work, so the feed time is
the copy's cost at most; the gain is stated as a range, and the low end assumes a pinned copy
runs at PINNED_BANDWIDTH times the pageable one."""

from statistics import fmean
from typing import Optional

from .base import Advice, rule
from .facts import (declares_knob, enough_steps, human_bytes, main_loader, main_steps, ms,
                    writer)
from .gpu import gpu_place
from .producers import gain_severity

PIN_SHARE_LOW, PIN_SHARE_MEDIUM = 0.02, 0.05  # feed share of the step: low / medium advice
PINNED_BANDWIDTH = 2.0  # pinned vs pageable host-to-device bandwidth (assumed; it depends on
# the host: about 1.5-3x on PCIe machines), for the low end of the gain
COPY_BOUND_BPS = 1e9  # a feed slower than this many bytes/s mostly waited for the device
KNOB = "reader.pin_memory"


@rule
def pin_memory(profile) -> Optional[Advice]:
    """pinned host memory (#26)

    Fires on a CUDA job whose DataLoader runs with pin_memory=False while the loop's
    host-to-device copies take a visible share of its step.
    """
    place, f = gpu_place(profile), main_loader(profile)
    s = profile.summary
    if place is None or f is None or not enough_steps(profile) or \
            f.config.pin_memory is not False or not declares_knob(profile, KNOB) or \
            s.breakdown_s is None or not s.cycle_s:
        return None
    cycle_s, feed_s = s.cycle_s.mean, s.breakdown_s.feed_s
    share = feed_s / cycle_s if cycle_s else 0.0
    if share < PIN_SHARE_LOW or feed_s >= cycle_s:
        return None
    figures = _figures(profile, cycle_s, feed_s)
    code = writer(profile)
    waited = figures["waited_for_device"]
    return Advice(
        id="pin-memory", source=26,
        title=f"Pin the DataLoader's batches: copies take {share:.0%} of the step",
        severity=gain_severity("medium" if share >= PIN_SHARE_MEDIUM else "low",
                               figures["high_speedup"]),
        confidence="low" if waited else "medium",
        evidence=_evidence(f, place, figures),
        change=f"{code.loader(f.config, pin_memory=True)}\n{code.pinned_copy(place)}",
        expected_gain=_gain(figures, f.config.num_workers or 0),
        expected_speedup=figures["low_speedup"],
        figures=figures)


def _figures(profile, cycle_s: float, feed_s: float) -> dict:
    nbytes = _bytes_per_step(profile)
    bandwidth = nbytes / feed_s if nbytes and feed_s else None
    saved_low = feed_s * (1.0 - 1.0 / PINNED_BANDWIDTH)
    return {"feed_s_per_step": feed_s, "cycle_s": cycle_s, "feed_share": feed_s / cycle_s,
            "feed_bytes_per_step": nbytes, "bytes_per_s": bandwidth,
            "waited_for_device": bandwidth is not None and bandwidth < COPY_BOUND_BPS,
            "assumed_pinned_bandwidth_x": PINNED_BANDWIDTH,
            "low_speedup": cycle_s / (cycle_s - saved_low),
            "high_speedup": cycle_s / (cycle_s - feed_s)}


def _bytes_per_step(profile) -> Optional[float]:
    """The bytes the steady steps recorded in full copied to the device, per step."""
    skip = profile.summary.warmup_steps
    fed = [st.feed_bytes for st in main_steps(profile)[skip:] if st.feed_s > 0]
    return fmean(fed) if fed else None


def _evidence(f, place: str, fig: dict) -> str:
    nbytes, bps = fig["feed_bytes_per_step"], fig["bytes_per_s"]
    copied = f" of {human_bytes(nbytes)}" if nbytes else ""
    rate = f" ({bps / 1e9:.2f} GB/s)" if bps else ""
    text = (f"{f.name or 'the DataLoader'} runs with pin_memory=False on {place}: the loop "
            f"spent {ms(fig['feed_s_per_step'])} per step in host-to-device copies{copied} "
            f"from pageable memory{rate}, {fig['feed_share']:.1%} of its "
            f"{ms(fig['cycle_s'])} step")
    if fig["waited_for_device"]:
        text += ("; at that rate the copies mostly waited for the device's earlier work (a "
                 "copy from pageable memory waits for its stream): pinning moves that wait "
                 "rather than removing it")
    return text + "."


def _gain(fig: dict, workers: int) -> str:
    low, high = fig["low_speedup"], fig["high_speedup"]
    pinning = ("" if workers else "; with num_workers=0 the loop pins each batch itself (one "
               "more host copy), which takes from the gain")
    return (f"{low:.2f}x to {high:.2f}x steps/s: the low end if pinned copies run "
            f"{fig['assumed_pinned_bandwidth_x']:g}x as fast as pageable ones and still block "
            f"the loop (assumed: it depends on the host); the high end if the non_blocking "
            f"copy leaves the loop entirely (all of the {ms(fig['feed_s_per_step'])} "
            f"measured); the time is measured on the loop's thread, not on the device"
            f"{pinning}")
