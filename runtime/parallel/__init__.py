"""The ParallelExecutor: data parallelism over places with threaded SSA-graph scheduling.

`fluid.CompiledProgram(main).with_data_parallel(loss_name=..., places=...)` run by an
Executor, or the legacy `fluid.ParallelExecutor(use_cuda, loss_name, ...)`. See engine.py (a
run), builder.py (the graph: replicas, combining ops, fusions), scheduler.py (the threads).
"""

from .engine import Engine, default_num_threads  # noqa: F401
from .legacy import ParallelExecutor  # noqa: F401
