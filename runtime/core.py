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
from .tensor import LoDTensor as Tensor  # noqa: F401
from .lod import LoDRankTable  # noqa: F401


class EOFException(EnforceNotMet):
    """Raised by Executor.run in non-iterable reader mode when a pass has no more data;
    catch it, call reader.reset(), and start the next pass."""


def get_cuda_device_count_or_zero():
    return get_cuda_device_count()


class _Globals:
    """core.globals(): the FLAGS as a mapping ('FLAGS_x' keys), reading and writing FLAGS.
    Flags this runtime does not define are kept here, with no effect."""

    def __init__(self):
        self._other = {}

    def __getitem__(self, name):
        from .flags import FLAGS
        if name in FLAGS:
            return FLAGS.get(name)
        return self._other[name]

    def __setitem__(self, name, value):
        from .flags import FLAGS, set_flags
        if name in FLAGS:
            set_flags({name: value})
        else:
            self._other[name] = value

    def __contains__(self, name):
        from .flags import FLAGS
        return name in FLAGS

    def keys(self):
        from .flags import FLAGS, PREFIX
        return [PREFIX + f.name for f in FLAGS]


_GLOBALS = _Globals()


def globals():  # noqa: A001  (Paddle's name)
    return _GLOBALS


class LoDTensorArray(list):
    """core.LoDTensorArray: a list of LoDTensors (what a LOD_TENSOR_ARRAY variable holds)."""

    def append(self, tensor):
        super().append(tensor)

    def _move_to_list(self):
        return list(self)
