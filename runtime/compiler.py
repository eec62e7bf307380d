"""fluid.CompiledProgram, BuildStrategy and ExecutionStrategy (Paddle 1.8 fields and defaults).

What a CompiledProgram changes today is memory: `build_strategy.enable_inplace` (default True,
as in Paddle 1.6+) lets an op write its output into a dead input's buffer, and
`memory_optimize` (default: on only when GC is off) frees dead temporaries so the pool reuses
their buffers for later variables of the same size; FLAGS_memory_fraction_of_eager_deletion
applies here, as it does to Paddle's ParallelExecutor only. Unlike Paddle 1.5, fetched
variables never need `persistable=True`: fetch targets are never freed or reused, and a fetch
is a copy. `with_data_parallel` (any number of places: CPU_NUM or places=) runs the program
as Paddle's ParallelExecutor does (runtime/parallel: the feed split over the places, gradients
combined by AllReduce or Reduce, ops scheduled on ExecutionStrategy.num_threads threads, local
scopes dropped every num_iteration_per_drop_scope steps); without it, the single-place plan runs.
"""

from . import overrides
from .flags import FLAGS
from .framework import Program
from .place import cpu_places, cuda_places, is_gpu


class _Strategy:
    """Attribute bag with Paddle's defaults; unknown attributes are errors, not silently kept."""

    _defaults = {}

    def __init__(self):
        for name, value in self._defaults.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._defaults:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}; known: "
                                 f"{', '.join(sorted(self._defaults))}")
        object.__setattr__(self, name, value)

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults)
        return f"{type(self).__name__}({fields})"


class BuildStrategy(_Strategy):
    class ReduceStrategy:
        AllReduce = 0
        Reduce = 1

    class GradientScaleStrategy:
        CoeffNumDevice = 0
        One = 1
        Customized = 2

    _defaults = {
        "reduce_strategy": 0, "gradient_scale_strategy": 0, "fuse_all_optimizer_ops": False,
        "fuse_all_reduce_ops": None, "enable_inplace": True, "memory_optimize": None,
        "enable_backward_optimizer_op_deps": True, "fuse_elewise_add_act_ops": False,
        "fuse_relu_depthwise_conv": False, "fuse_broadcast_ops": None,
        "enable_sequential_execution": False, "remove_unnecessary_lock": True,
        "sync_batch_norm": False, "debug_graphviz_path": "", "num_trainers": 1,
        "trainer_id": 0, "mkldnn_enabled_op_types": (), "cache_runtime_context": False,
        # Paddle 1.8 fuses batch_norm + activation into one cuDNN kernel; the results are the
        # same, so the flag is accepted and the ops run as they are
        "fuse_bn_act_ops": False,
        # Fluid 1.8's field (async SSA graph executor, for parameter-server training); the
        # graph runs the same way with either value
        "async_mode": False,
    }


class ExecutionStrategy(_Strategy):
    _defaults = {"num_threads": 0, "num_iteration_per_drop_scope": 100,
                 "num_iteration_per_run": 1, "use_thread_barrier": False,
                 "allow_op_delay": False, "use_experimental_executor": True, "_dry_run": False,
                 "use_cuda": True}  # Fluid 1.8's field; the places passed decide the device


class CompiledProgram:
    """A Program with a BuildStrategy: `exe.run(CompiledProgram(main, build_strategy=bs), ...)`."""

    def __init__(self, program_or_graph, build_strategy=None):
        if not isinstance(program_or_graph, Program):
            raise TypeError(f"CompiledProgram needs a fluid.Program, got "
                            f"{type(program_or_graph).__name__}")
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise TypeError("build_strategy must be a fluid.BuildStrategy")
        self._program = program_or_graph
        self._build_strategy = build_strategy or BuildStrategy()
        self._exec_strategy = None
        self._places = None
        self._loss_name = None
        self._share_vars_from = None
        self._engine = None
        self._overridden = False  # PADDLETUNE_OVERRIDES applied to the strategies

    def with_data_parallel(self, loss_name=None, build_strategy=None, exec_strategy=None,
                           share_vars_from=None, places=None):
        """Run data-parallel over `places` (default: CPU_NUM CPU places), as Paddle 1.8."""
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise TypeError("build_strategy must be a fluid.BuildStrategy")
        if exec_strategy is not None and not isinstance(exec_strategy, ExecutionStrategy):
            raise TypeError("exec_strategy must be a fluid.ExecutionStrategy")
        if share_vars_from is not None and not isinstance(share_vars_from, CompiledProgram):
            raise TypeError("share_vars_from must be a data-parallel fluid.CompiledProgram")
        if build_strategy is not None:
            self._build_strategy = build_strategy
        self._exec_strategy = exec_strategy or ExecutionStrategy()
        self._loss_name = loss_name.name if hasattr(loss_name, "name") else loss_name
        self._share_vars_from = share_vars_from
        if places is not None and not isinstance(places, (list, tuple)):
            places = [places]  # one place (Paddle 1.8 accepts it)
        self._places = list(places) if places is not None else cpu_places()
        self._default_places = places is None  # Paddle: the executor's kind of device decides
        if not self._places:
            raise ValueError("with_data_parallel needs at least one place")
        self._engine = None
        self._overridden = False
        return self

    def _options(self):
        bs = self._build_strategy
        gc_on = FLAGS.get("eager_delete_tensor_gb") >= 0
        memory_optimize = (not gc_on) if bs.memory_optimize is None else bool(bs.memory_optimize)
        return (bool(bs.enable_inplace), FLAGS.get("memory_fraction_of_eager_deletion"),
                memory_optimize)

    def _data_parallel(self):
        return self._places is not None

    @property
    def _is_data_parallel(self):
        """Fluid 1.8's attribute: True after with_data_parallel (helpers of Paddle's tests read
        it to decide how many feeds a run takes)."""
        return self._data_parallel()

    def _get_engine(self, executor=None):
        if self._engine is None:
            if self._default_places and executor is not None and is_gpu(executor.place):
                self._places = cuda_places()  # not CPU plans over the scope's device arrays
            from .parallel.engine import Engine
            self._engine = Engine(self._program, self._places, self._build_strategy,
                                  self._exec_strategy, self._loss_name)
        return self._engine

    def _run_with_executor(self, executor, feed=None, fetch_list=None, scope=None,
                           return_numpy=True, return_merged=True):
        if not self._overridden:  # PADDLETUNE_OVERRIDES, once the strategies are final
            overrides.apply_strategies(self._build_strategy, self._exec_strategy,
                                       data_parallel=self._data_parallel())
            self._overridden = True
        if self._exec_strategy is not None and self._exec_strategy._dry_run:
            return []  # Paddle's dry run builds the graph and runs no op
        if self._data_parallel():
            return self._get_engine(executor).run(executor._id, feed, fetch_list, scope,
                                                  return_numpy, return_merged, self._options())
        if isinstance(feed, (list, tuple)) and len(feed) == 1:
            feed = feed[0]
        return executor._run_program(self._program, feed, fetch_list, scope, return_numpy,
                                     self._options())
