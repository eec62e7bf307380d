"""Executor.run(use_prune=True), as Fluid 1.8 has it: run only what the fetches (and the
optimizer ops) need, given what is fed.

fetch_list may hold Variables and names, and also optimizer ops (an Operator, a list of them,
or the (ops, params_grads) tuple minimize() returns): those select which optimizers run and
turn pruning on. Without them, every optimizer op of the program is kept. The pruned program
is cached per (program, feed names, fetch list); fed variables the pruned program no longer
uses are dropped from the feed.
"""

import copy

from .framework import OpRole, Operator, Variable


def split_fetch_list(fetch_list):
    """(variables and names to fetch, optimizer ops named in fetch_list)."""
    for item in fetch_list or ():  # (a loop, not all() over a generator: once a step)
        if type(item) is not str and type(item) is not Variable:
            break
    else:
        return list(fetch_list or ()), []  # the common case: nothing to unpack
    fetches, ops = [], []

    def take(item):
        if isinstance(item, Operator):
            if not item.role & OpRole.Optimize:
                raise TypeError("The operator in fetch_list is not an optimize_op")
            ops.append(item)
        elif isinstance(item, (Variable, str)):
            fetches.append(item)
        else:
            raise TypeError(f"The item in fetch_list should be str, variable or optimize_op, but "
                            f"recieved {type(item)}.")

    for item in fetch_list or ():
        if isinstance(item, list):
            for inner in item:
                take(inner)
        elif isinstance(item, tuple):  # what Optimizer.minimize returns: (ops, params_grads)
            for inner in item[0]:
                take(inner)
        else:
            take(item)
    return fetches, ops


def cache_key(program, feed, fetch_list):
    names = feed_names(feed)
    fetched = []
    for item in fetch_list or ():
        if isinstance(item, tuple):
            item = item[0]
        if isinstance(item, list):
            fetched.append(",".join(_name_of(i) for i in item))
        else:
            fetched.append(_name_of(item))
    version = getattr(getattr(program, "_program", program), "_version", 0)
    return (id(program), version, tuple(names), tuple(fetched))


def _name_of(item):
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, Operator):
        return f"op#{id(item)}"
    return str(item)


def feed_names(feed):
    if isinstance(feed, dict):
        return [k.name if isinstance(k, Variable) else k for k in feed]
    names = []
    for each in feed or ():
        names += [k.name if isinstance(k, Variable) else k for k in each]
    return names


def prune_program(program, feed, fetch_list, optimize_ops):
    """The pruned program (a copy; for a CompiledProgram, a copy holding the pruned one)."""
    compiled = hasattr(program, "_program") and hasattr(program, "with_data_parallel")
    origin = program._program if compiled else program
    ops = list(optimize_ops) or [op for block in origin.blocks for op in block.ops
                                 if op.role & OpRole.Optimize]
    pruned = origin._prune_with_input(feed_names(feed), list(fetch_list) + ops)
    if not compiled:
        return pruned
    twin = copy.copy(program)
    twin._program = pruned
    twin._engine = None
    return twin


def update_feed(program, feed):
    """The feed without the variables `program` (pruned) does not have."""
    block = getattr(program, "_program", program).global_block()
    if isinstance(feed, dict):
        return {k: v for k, v in feed.items()
                if (k.name if isinstance(k, Variable) else k) in block.vars}
    return [update_feed(program, each) for each in feed or ()]
