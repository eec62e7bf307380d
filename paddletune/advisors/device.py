"""A GPU job's data-side advice bounded by what the device measured (the summary's device
figures: CUDA events, PyTorch or Paddle 3 on a GPU).

The host's clock sees a step wait for its batch; with kernels queued asynchronously the GPU
may meanwhile still run the step before. Only the device's own idle time, between one step's
end and the next step's first host-to-device copy, is time a faster input pipeline can take
away: a step cannot get shorter than the device's busy time. So no data-side change is
predicted above 1 / (1 - idle share); a prediction above it is lowered to it, and says so,
its range (Advice.expected_range) ending there.

Not with gradient accumulation (a training step taking more than one DataLoader batch: the
main loader's batches per step, ACCUMULATION_BATCHES or more): the device's idle time is
measured only before the step's first batch reaches it, while the waits for the step's
other batches fall inside what it counts busy; the idle share then understates what a
faster input pipeline can save, and no bound is set.
"""

from dataclasses import replace
from typing import Optional

from .ranges import MODEL_ERROR

DATA_SIDE = ("input-bound", "reader-starved", "reader-thread-gil", "reader-data-cost",
             "reader-speed-test", "double-buffer-off", "prefetch-factor", "gpu-underused-data")
# (not pin-memory: its gain is the copy's own time, which the device counts as busy)
MIN_STEPS = 5  # device-timed steps (with a copy) that make the bound worth trusting
ACCUMULATION_BATCHES = 1.5  # batches per step from which steps take more than one batch


def device_cap(profile) -> Optional[float]:
    """The most a data-side change can speed the job up, from the device's idle share;
    None without enough device-timed steps, or when a step takes several batches."""
    d = profile.summary.device
    if d is None or d.idle_share is None or d.copied_steps < MIN_STEPS or d.idle_share >= 1:
        return None
    if accumulates_batches(profile):
        return None
    return 1.0 / (1.0 - d.idle_share)


def accumulates_batches(profile) -> bool:
    """Whether the training steps take more than one of the main DataLoader's batches each
    (gradient accumulation); False when unknown (no loader, or its steps not the main
    program's)."""
    loader = profile.summary.main_loader
    per_step = loader.consumer.batches_per_step if loader is not None else None
    return per_step is not None and per_step >= ACCUMULATION_BATCHES


def bounded_by_device(profile, advice):
    """`advice` with its predicted speedup (and range) at most device_cap, when it is
    data-side advice predicting more."""
    if advice.id not in DATA_SIDE or advice.expected_speedup is None:
        return advice
    cap = device_cap(profile)
    if cap is None or advice.expected_speedup <= cap:
        return advice
    idle = profile.summary.device.idle_share
    words = (f"; at most {cap:.2f}x on this GPU: it idled {idle:.1%} of each step waiting for "
             f"the host (CUDA events), the rest of the host's wait overlapped its work on the "
             f"step before")
    bounds = advice.expected_range
    if bounds is None:  # (the model's error below the bound, as ranges.py states it)
        bounds = (cap / (1.0 + MODEL_ERROR[advice.confidence]), cap)
    else:
        low, high = bounds
        bounds = (min(low, cap), cap if high is None else min(high, cap))
    return replace(advice, expected_speedup=cap, expected_range=bounds,
                   expected_gain=advice.expected_gain + words,
                   figures={**advice.figures, "device_cap": cap,
                            "speedup_before_device_cap": advice.expected_speedup})
