"""runtime: a NumPy/CuPy re-creation of the PaddlePaddle Fluid 1.x static-graph engine.

Use it as Fluid: `import runtime as fluid`. Programs are built with `fluid.layers`, trained
with `fluid.optimizer`, run by `fluid.Executor`. Names, signatures and defaults follow Fluid
1.8 (with the 1.5 names kept); where Fluid was clumsy the difference is documented where it
lives.
"""

from . import flags as _flags_module
from . import ops  # registers every op
from . import (backward, clip, core, dtypes, events, initializer, io, layers, optimizer,
               regularizer, unique_name)
from . import contrib, install_check, nets, transpiler
from . import metrics
from .layers import device as _device  # noqa: F401  (fluid.layers.device)
from .transpiler import memory_optimize, release_memory
from .version import require_version
from . import memory
from .backward import append_backward, gradients
from .compiler import BuildStrategy, CompiledProgram, ExecutionStrategy
from .data_feeder import DataFeeder
from .dtypes import convert_dtype
from .executor import Executor
from .flags import FLAGS, get_flags, set_flags
from .framework import (Operator, Parameter, Program, Variable, default_main_program,
                        default_startup_program, in_dygraph_mode, name_scope, program_guard)
from .layers.io import data
from .layers.nn import embedding_v2 as embedding
from .parallel import ParallelExecutor
from .param_attr import ParamAttr, WeightNormParamAttr
from .place import (CPUPlace, CUDAPinnedPlace, CUDAPlace, cpu_places, cuda_pinned_places,
                    cuda_places)
from .scope import Scope, global_scope, scope_guard
from .tensor import LoDTensor, create_lod_tensor, create_random_int_lodtensor
from .tensor import LoDTensor as Tensor  # fluid.Tensor: Paddle's name for the same holder
from .core import LoDTensorArray

is_compiled_with_cuda = core.is_compiled_with_cuda

__all__ = [
    "Program", "Variable", "Parameter", "Operator", "program_guard", "default_main_program",
    "default_startup_program", "name_scope", "unique_name", "ParamAttr", "WeightNormParamAttr",
    "initializer", "regularizer", "clip", "layers", "optimizer", "io", "core", "data",
    "embedding", "Executor", "CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "cpu_places",
    "cuda_places", "cuda_pinned_places", "Scope", "global_scope", "scope_guard", "LoDTensor",
    "create_lod_tensor", "create_random_int_lodtensor", "DataFeeder", "append_backward",
    "gradients", "set_flags",
    "get_flags", "FLAGS", "events", "is_compiled_with_cuda", "CompiledProgram",
    "BuildStrategy", "ExecutionStrategy", "memory", "ParallelExecutor", "nets", "contrib",
    "memory_optimize", "release_memory", "transpiler", "Tensor", "require_version",
    "LoDTensorArray", "install_check", "metrics",
]
