"""fluid.core: the names Fluid exposes from its C++ core."""

from .backend import gpu_count as get_cuda_device_count  # noqa: F401
from .backend import is_compiled_with_cuda  # noqa: F401
from .dtypes import VarDesc  # noqa: F401
from .errors import EnforceNotMet  # noqa: F401
from .errors import PoolOutOfMemory  # noqa: F401
from .errors import PoolOutOfMemory as MemoryError  # noqa: F401,A001  (Paddle's name)
from .errors import PoolOutOfMemory as ResourceExhaustedError  # noqa: F401
from .place import CPUPlace, CUDAPinnedPlace, CUDAPlace  # noqa: F401
from .scope import Scope  # noqa: F401
from .tensor import LoDTensor, SelectedRows  # noqa: F401


class EOFException(EnforceNotMet):
    """Raised by Executor.run in non-iterable reader mode when a pass has no more data;
    catch it, call reader.reset(), and start the next pass."""


def get_cuda_device_count_or_zero():
    return get_cuda_device_count()
