"""What limits what a PyTorch job's profile covers, found as the script runs (installed by
hooks.py; each function returns what undoes it):

* torch.compile (and Module.compile, which calls it): the steps, the DataLoader and the
  threads are measured as usual, but --check-nan's per-module forward hook splits the
  compiled graph at every module (Dynamo breaks the graph on its host calls): with it, the
  job runs a less compiled model than without (--ops reads torch.profiler, which splits
  nothing). One `scope` event per compiled target (records.CompiledEvent).
* torch.distributed.init_process_group and DistributedDataParallel: the profile covers this
  process, one rank; the gradient all-reduce runs inside the step's compute. One `scope`
  event each (records.DistributedEvent) with the backend, the rank and the world size.
"""

from typing import Callable, List, Optional

import torch

from ...profile.records import CompiledEvent, DistributedEvent

MAX_COMPILED = 8  # compiled targets recorded one by one (a script may compile in a loop)
HIDDEN_WHY = {"check_nan": "--check-nan"}


def watch_scope(emit: Callable, hidden: tuple,
                before_compile: Callable[[], None] = lambda: None) -> List[Callable[[], None]]:
    """Patch torch.compile and torch.distributed so each call sends its record to `emit`;
    `hidden`: the session's options that cannot see inside a compiled graph;
    `before_compile` runs before each torch.compile call. Returns the undo functions."""
    return [*_watch_compile(emit, hidden, before_compile), *_watch_distributed(emit)]


def _setattr(owner, name: str, value) -> Callable[[], None]:
    original = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
    setattr(owner, name, value)
    return lambda: setattr(owner, name, original)


# --- torch.compile ---------------------------------------------------------------------------
def _watch_compile(emit, hidden, before_compile) -> List[Callable[[], None]]:
    original = getattr(torch, "compile", None)
    if original is None:
        return []
    seen = set()

    def compile(model=None, *args, **kwargs):
        # torch.compile(model=None) returns a decorator that calls torch.compile again (this
        # wrapper: it is torch's module global) with the function: recorded then
        if model is not None and not kwargs.get("disable", False):
            before_compile()
            record = compiled_event(model, kwargs, hidden)
            key = (record.target, record.backend, record.mode)
            if key not in seen and len(seen) < MAX_COMPILED:
                seen.add(key)
                emit(record)
        return original(model, *args, **kwargs)

    compile.__wrapped__ = original
    compile.__doc__ = original.__doc__
    return [_setattr(torch, "compile", compile)]


def compiled_event(model, kwargs: dict, hidden: tuple) -> CompiledEvent:
    target = _target_name(model)
    backend = kwargs.get("backend") or "inductor"  # torch's default (None in 2.13)
    backend = backend if isinstance(backend, str) else getattr(
        backend, "__name__", type(backend).__name__)
    mode = kwargs.get("mode")
    fullgraph = bool(kwargs.get("fullgraph", False))
    shown = ", ".join(HIDDEN_WHY[h] for h in hidden)
    message = (f"torch.compile({target}, backend={backend!r}"
               + (f", mode={mode!r}" if mode else "") + "): steps and the DataLoader are "
               "measured as usual; "
               + (f"{shown} put a hook on every module, which splits the compiled graph at "
                  f"each: this run's model was less compiled than without {shown}"
                  if hidden else "what runs inside the compiled graph is not split by module"))
    return CompiledEvent(0.0, target, backend, mode if isinstance(mode, str) else None,
                         fullgraph, tuple(hidden), message)


def _target_name(model) -> str:
    owner = getattr(model, "__self__", None)  # Module.compile compiles its bound _call_impl
    if isinstance(owner, torch.nn.Module):
        return type(owner).__name__
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    return getattr(model, "__qualname__", None) or type(model).__name__


# --- torch.distributed -----------------------------------------------------------------------
def _watch_distributed(emit) -> List[Callable[[], None]]:
    try:
        import torch.distributed as dist
        if not dist.is_available():
            return []
        from torch.distributed import distributed_c10d as c10d
        from torch.nn.parallel import DistributedDataParallel as DDP
    except (ImportError, AttributeError):
        return []
    init = c10d.init_process_group

    def init_process_group(*args, **kwargs):
        out = init(*args, **kwargs)
        emit(distributed_event("init_process_group"))
        return out

    init_process_group.__wrapped__ = init
    ddp_init = DDP.__init__

    def __init__(self, module, *args, **kwargs):
        ddp_init(self, module, *args, **kwargs)
        emit(distributed_event("DistributedDataParallel", type(module).__name__,
                               kwargs.get("process_group")))

    __init__.__wrapped__ = ddp_init
    return [_setattr(dist, "init_process_group", init_process_group),
            _setattr(c10d, "init_process_group", init_process_group),
            _setattr(DDP, "__init__", __init__)]


def distributed_event(call: str, module: Optional[str] = None,
                      group=None) -> DistributedEvent:
    backend, rank, world = _group_figures(group)
    wrapped = f"DistributedDataParallel({module})" if module else call
    if world == 1:
        covers = "rank 0 of 1: the profile covers the whole job"
    elif rank is not None and world is not None:
        covers = (f"rank {rank} of {world}: the profile covers this rank only (the other "
                  f"{world - 1} are not in it)")
    else:
        covers = "the profile covers this process only"
    inside = ("the gradient all-reduce runs inside the step's backward" if module else
              "collective calls run inside the step")
    message = (f"{wrapped}: backend {backend or '?'}, {covers}; {inside}, counted as "
               f"compute, not split out")
    return DistributedEvent(0.0, call, backend, rank, world, module, message)


def _group_figures(group):
    """(backend, rank, world size) of `group` (None: the default group); None for each one
    torch cannot tell."""
    import torch.distributed as dist
    try:
        if not dist.is_initialized():
            return None, None, None
        return (str(dist.get_backend(group)), dist.get_rank(group),
                dist.get_world_size(group))
    except (RuntimeError, ValueError):
        return None, None, None
