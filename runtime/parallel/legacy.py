"""fluid.ParallelExecutor, the Fluid 1.x API over CompiledProgram.with_data_parallel."""

import warnings

from ..compiler import CompiledProgram
from ..framework import default_main_program
from ..place import cpu_places, cuda_places


class ParallelExecutor:
    """`ParallelExecutor(use_cuda, loss_name, main_program=None, share_vars_from=None,
    exec_strategy=None, build_strategy=None, num_trainers=1, trainer_id=0, scope=None)`;
    `.run(fetch_list, feed=None, feed_dict=None, return_numpy=True)` runs one step over all
    places (CPU_NUM CPU places, or every GPU) and returns the fetches merged over places."""

    def __init__(self, use_cuda, loss_name=None, main_program=None, share_vars_from=None,
                 exec_strategy=None, build_strategy=None, num_trainers=1, trainer_id=0,
                 scope=None):
        if num_trainers != 1 or trainer_id != 0:
            raise NotImplementedError(f"multi-node training (num_trainers={num_trainers}, "
                                      f"trainer_id={trainer_id}) is not supported; this runtime "
                                      f"runs one trainer")
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise TypeError("share_vars_from must be a fluid.ParallelExecutor")
        from ..executor import Executor
        from ..scope import global_scope
        self._places = cuda_places() if use_cuda else cpu_places()
        program = main_program if main_program is not None else default_main_program()
        self._compiled = CompiledProgram(program, build_strategy).with_data_parallel(
            loss_name=loss_name, build_strategy=build_strategy, exec_strategy=exec_strategy,
            share_vars_from=share_vars_from._compiled if share_vars_from else None,
            places=self._places)
        self._scope = scope if scope is not None else global_scope()
        self._exe = Executor(self._places[0])
        self._local_scopes_live = False  # Paddle creates them on the first run after a drop

    @property
    def device_count(self):
        return len(self._places)

    def run(self, fetch_list, feed=None, feed_dict=None, return_numpy=True):
        if feed is None and feed_dict is not None:
            warnings.warn("ParallelExecutor.run(feed_dict=...) is deprecated; use feed=",
                          DeprecationWarning, stacklevel=2)
            feed = feed_dict
        self._local_scopes_live = True
        return self._exe.run(self._compiled, feed=feed, fetch_list=fetch_list, scope=self._scope,
                             return_numpy=return_numpy)

    def drop_local_exe_scopes(self):
        """Drop the temporaries the local scopes hold now (Paddle 1.6+'s spelling)."""
        if self._compiled._engine is not None:
            self._compiled._engine.drop_local_scopes(self._exe._id)
        self._local_scopes_live = False

    drop_local_exec_scopes = drop_local_exe_scopes  # the name this runtime used first

    def _need_create_local_exe_scopes(self):
        """Whether the next run starts with fresh local scopes (none yet, or just dropped)."""
        return not self._local_scopes_live

    def close(self):
        if self._compiled._engine is not None:
            self._compiled._engine.close()
