"""paddletune.oom.is_oom: out-of-memory errors of every framework recognised, the rest not."""

from types import SimpleNamespace

import pytest

from paddletune.oom import is_oom, oom_cause


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


def _wrapped_oom() -> RuntimeError:
    try:
        try:
            raise OutOfMemoryError(TORCH_TEXT)
        except OutOfMemoryError as oom:
            raise RuntimeError("training step 3 failed") from oom
    except RuntimeError as err:
        return err


def test_is_oom_follows_explicit_cause():
    err = _wrapped_oom()
    assert is_oom(err)
    assert oom_cause(err) is err.__cause__  # the framework's own error, with its figures
    assert oom_cause(ValueError("out of memory")) is None


def test_the_framework_gets_its_own_oom_error_where_the_script_wrapped_it():
    """Source.out_of_memory reads the request from the framework's message and checks its
    type: the session hands it the wrapped error, not the script's."""
    from paddletune.session import _Session
    given = []
    fake = SimpleNamespace(source=SimpleNamespace(out_of_memory=given.append))
    err = _wrapped_oom()
    _Session._pool_at_oom(fake, err)
    _Session._pool_at_oom(fake, err.__cause__)
    assert given == [err.__cause__, err.__cause__]


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


@pytest.mark.parametrize("kind", sorted(OOM_FACTORIES))
def test_every_framework_kind_is_oom(kind):
    assert is_oom(OOM_FACTORIES[kind]())
