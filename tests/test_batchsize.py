"""Tests for paddletune.batchsize: OOM recognition and the largest-batch-size search."""

import math
import pickle
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddletune.batchsize import (
    NoBatchSizeFits,
    SearchResult,
    find_max_batch_size,
    is_oom,
)


# Framework look-alikes: matched by class name, no framework imported.
class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError
    pass


class ResourceExhaustedError(Exception):  # Paddle / TensorFlow
    pass


class PoolOutOfMemory(MemoryError):  # runtime's pool
    pass


class EnforceNotMet(Exception):  # Paddle 1.x carries the error type in its text
    pass


TORCH_TEXT = ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
              "capacity; 13.12 GiB already allocated; 1.02 GiB free; 13.50 GiB reserved)")
PADDLE_TEXT = ("Out of memory error on GPU 0. Cannot allocate 1.2GB memory on GPU 0, "
               "available memory is only 500MB.")

OOM_FACTORIES = {
    "memoryerror": lambda: MemoryError(),
    "memoryerror-subclass": lambda: PoolOutOfMemory("pool exhausted: 1048576 bytes requested"),
    "torch-class": lambda: OutOfMemoryError(TORCH_TEXT),
    "torch-text": lambda: RuntimeError(TORCH_TEXT),
    "paddle-class": lambda: ResourceExhaustedError("Out of memory"),
    "paddle-text": lambda: RuntimeError(PADDLE_TEXT),
}


class FakeAllocator:
    """Capacity ``capacity_bytes``; a trial at size n needs ``fixed + n * per_sample`` bytes."""

    def __init__(self, capacity_bytes, per_sample_bytes, fixed_bytes=0, make_oom=MemoryError):
        self.capacity_bytes = capacity_bytes
        self.per_sample_bytes = per_sample_bytes
        self.fixed_bytes = fixed_bytes
        self.make_oom = make_oom
        self.sizes = []

    def __call__(self, n):
        self.sizes.append(n)
        need_bytes = self.fixed_bytes + n * self.per_sample_bytes
        if need_bytes > self.capacity_bytes:
            raise self.make_oom()


@st.composite
def searches(draw):
    """(capacity, per_sample, fixed, start, max_size, error kind) with an answer >= 1."""
    answer = draw(st.integers(1, 5000))
    per_sample = draw(st.integers(1, 10_000))
    fixed = draw(st.integers(0, 10**6))
    capacity = fixed + answer * per_sample + draw(st.integers(0, per_sample - 1))
    start = draw(st.one_of(st.just(answer), st.just(answer + 1), st.integers(1, 4 * answer + 8),
                           st.integers(1, 10**6)))
    max_size = draw(st.one_of(st.none(), st.integers(start, start + 2 * answer + 4),
                              st.just(start)))
    kind = draw(st.sampled_from(sorted(OOM_FACTORIES)))
    return capacity, per_sample, fixed, start, max_size, kind


@settings(max_examples=300, deadline=None)
@given(searches())
def test_search_finds_exact_largest_size(case):
    capacity, per_sample, fixed, start, max_size, kind = case
    trial = FakeAllocator(capacity, per_sample, fixed, OOM_FACTORIES[kind])
    answer = (capacity - fixed) // per_sample
    expected = answer if max_size is None else min(answer, max_size)

    result = find_max_batch_size(trial, start=start, max_size=max_size)

    assert result.best == expected
    assert result.first_failure == (None if expected == max_size else expected + 1)
    assert [t.size for t in result.trials] == trial.sizes
    assert len(set(trial.sizes)) == len(trial.sizes)  # never the same size twice
    for size, outcome, seconds in result.trials:
        assert outcome == ("ok" if size <= answer else "oom")
        assert seconds >= 0
    assert len(result.trials) <= 2 * math.log2(max(expected, start)) + 4


@pytest.mark.parametrize("start", [1, 2, 7, 8, 9, 64, 1000])
def test_start_at_over_and_under_the_answer(start):
    trial = FakeAllocator(capacity_bytes=8 * 100 + 5, per_sample_bytes=100)
    result = find_max_batch_size(trial, start=start)
    assert (result.best, result.first_failure) == (8, 9)
    assert result.trials[0].size == start


def test_max_size_reached_without_oom():
    result = find_max_batch_size(lambda n: None, start=3, max_size=20)
    assert (result.best, result.first_failure) == (20, None)
    assert [t.size for t in result.trials] == [3, 6, 12, 20]
    assert [t.outcome for t in result.trials] == ["ok"] * 4


@pytest.mark.parametrize("kind", sorted(OOM_FACTORIES))
def test_search_with_each_framework_error(kind):
    trial = FakeAllocator(capacity_bytes=300, per_sample_bytes=10, make_oom=OOM_FACTORIES[kind])
    assert find_max_batch_size(trial, start=4).best == 30


def test_non_oom_error_propagates_unchanged():
    boom = ValueError("bad shape at size 8")

    def trial(n):
        if n == 8:
            raise boom

    with pytest.raises(ValueError) as info:
        find_max_batch_size(trial, start=1)
    assert info.value is boom
    assert info.traceback[-1].name == "trial"


def test_keyboard_interrupt_propagates():
    def trial(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        find_max_batch_size(trial, start=4)


@pytest.mark.parametrize("start", [1, 16, 5])
def test_nothing_fits_raises_explicit_error(start):
    def trial(n):
        raise RuntimeError(TORCH_TEXT)

    with pytest.raises(NoBatchSizeFits) as info:
        find_max_batch_size(trial, start=start)
    err = info.value
    assert isinstance(err, MemoryError)
    assert "does not fit even at batch size 1" in str(err)
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in str(err)
    assert err.trials[-1].size == 1 and all(t.outcome == "oom" for t in err.trials)
    assert pickle.loads(pickle.dumps(err)).args == err.args


def test_hooks_called_once_per_oom_after_releasing_frames():
    calls = []

    class Big:
        pass

    def trial(n):
        big = Big()  # what a real step's activations would be
        calls.append(("trial", weakref.ref(big)))
        if n > 10:
            raise PoolOutOfMemory(f"{n} does not fit")

    kept = []

    def on_oom(err):
        assert is_oom(err) and err.__traceback__ is not None
        kept.append(err)  # a logging hook may keep the error; its frames must not pin memory
        calls.append(("on_oom", str(err)))

    def cleanup():
        calls.append(("cleanup", calls[-2][1]() is None))  # the Big from the failed trial

    result = find_max_batch_size(trial, start=4, on_oom=on_oom, cleanup=cleanup)
    assert result.best == 10
    ooms = [t.size for t in result.trials if t.outcome == "oom"]
    assert [c[1] for c in calls if c[0] == "on_oom"] == [f"{n} does not fit" for n in ooms]
    assert [c for c in calls if c[0] == "cleanup"] == [("cleanup", True)] * len(ooms)
    kinds = [c[0] for c in calls if c[0] != "trial"]
    assert kinds == ["on_oom", "cleanup"] * len(ooms)


@pytest.mark.parametrize("err", [
    MemoryError(),
    PoolOutOfMemory("x"),
    OutOfMemoryError("anything"),
    RuntimeError(TORCH_TEXT),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:75] . DefaultCPUAllocator: can't allocate "
                 "memory: you tried to allocate 8589934592 bytes. Error code 12"),
    RuntimeError("MPS backend out of memory (MPS allocated: 9.05 GB, other allocations: 0 B)"),
    ResourceExhaustedError("OOM when allocating tensor with shape[64,1024]"),
    RuntimeError(PADDLE_TEXT),
    EnforceNotMet("\n\nC++ Call Stacks (More useful to developers):\n0 ...\n"
                  "ResourceExhaustedError: \n\n" + PADDLE_TEXT),
    MemoryError("ResourceExhaustedError: " + PADDLE_TEXT),  # Paddle 2.x
    RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB."),
    OSError(12, "Cannot allocate memory"),
], ids=repr)
def test_is_oom_recognises(err):
    assert is_oom(err)


def test_is_oom_recognises_numpy_array_memory_error():
    np = pytest.importorskip("numpy")
    exceptions = getattr(np, "_core", None) or np.core
    cls = exceptions._exceptions._ArrayMemoryError
    assert is_oom(cls((2**40,), np.dtype("float64")))


def test_is_oom_follows_explicit_cause():
    try:
        try:
            raise OutOfMemoryError(TORCH_TEXT)
        except OutOfMemoryError as oom:
            raise RuntimeError("training step 3 failed") from oom
    except RuntimeError as err:
        assert is_oom(err)


@pytest.mark.parametrize("err", [
    ValueError("batch_size is too large for the memory you have; lower it"),
    ValueError("out of memory"),  # an argument error, whatever it says
    TypeError("memory_optimize() expects a bool"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
                 "passed in a non-contiguous input."),
    RuntimeError("Expected all tensors to be on the same device"),
    RuntimeError("memory format mismatch in conv2d"),
    RuntimeError("pinned memory is not available"),
    KeyboardInterrupt(),
    SystemExit(1),
    Exception(),
], ids=repr)
def test_is_oom_rejects(err):
    assert not is_oom(err)


def test_is_oom_survives_broken_str():
    class Weird(RuntimeError):
        def __str__(self):
            raise RuntimeError("no")

    assert not is_oom(Weird())


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"start": 0}, ValueError, "start must be >= 1"),
    ({"start": -3}, ValueError, "start must be >= 1"),
    ({"start": 8, "max_size": 4}, ValueError, "max_size must be >= start"),
    ({"start": 1.5}, TypeError, "start must be an int"),
    ({"start": True}, TypeError, "start must be an int"),
    ({"max_size": 10.0}, TypeError, "max_size must be an int"),
])
def test_argument_validation(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        find_max_batch_size(lambda n: None, **kwargs)


def test_trial_must_be_callable():
    with pytest.raises(TypeError, match="trial must be callable"):
        find_max_batch_size(42)


@pytest.mark.parametrize("best, fraction, expected", [
    (10, 0.1, 9), (100, 0.3, 70), (1, 0.5, 1), (7, 0, 7), (3, 0.9, 1), (64, 0.25, 48),
])
def test_headroom(best, fraction, expected):
    assert SearchResult(best=best, first_failure=best + 1).headroom(fraction) == expected


@given(st.integers(1, 10**6), st.integers(0, 99))
def test_headroom_is_largest_size_under_the_bound(best, percent):
    size = SearchResult(best=best, first_failure=None).headroom(percent / 100)
    bound_x100 = best * (100 - percent)
    assert size == max(1, bound_x100 // 100)


@pytest.mark.parametrize("fraction", [-0.1, 1, 1.5])
def test_headroom_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="headroom fraction"):
        SearchResult(best=10, first_failure=11).headroom(fraction)
