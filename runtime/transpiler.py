"""fluid.transpiler's memory_optimize / release_memory: deprecated no-ops in Fluid 1.8 (the
executor's garbage collection and inplace reuse do the work; see runtime/plan.py)."""

import warnings


def memory_optimize(input_program, skip_opt_set=None, print_log=False, level=0,
                    skip_grads=True):
    """Does nothing (Paddle 1.6+): garbage collection (FLAGS_eager_delete_tensor_gb=0, the
    default) and BuildStrategy.enable_inplace (default True) are the memory strategies."""
    warnings.warn("paddle.fluid.memory_optimize() is deprecated since 1.6 and does nothing: "
                  "garbage collection (FLAGS_eager_delete_tensor_gb=0) and "
                  "BuildStrategy.enable_inplace are on by default", DeprecationWarning,
                  stacklevel=2)


def release_memory(input_program, skip_opt_set=None):
    """Does nothing (Paddle 1.6+)."""
    warnings.warn("paddle.fluid.release_memory() is deprecated, it would not take any memory "
                  "release on your program", DeprecationWarning, stacklevel=2)


__all__ = ["memory_optimize", "release_memory"]
