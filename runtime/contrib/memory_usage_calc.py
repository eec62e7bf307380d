"""fluid.contrib.memory_usage: Fluid 1.8's estimate of a program's activation memory for a
batch size (every LoD-tensor output of a global-block op counted once, -1 dimensions taken as
the batch size, plus 5-10% for the rest). For what a run really uses, profile it:
`paddletune profile` reports the pool's measured peaks."""

from ..framework import Program

_BYTES = {"float16": 2, "float32": 4, "float64": 8, "int16": 2, "int32": 4, "int64": 8,
          "bool": 1, "uint8": 1, "int8": 1}


def memory_usage(program, batch_size):
    """(lower, upper, unit): the estimate in B, KB or MB."""
    if not isinstance(program, Program):
        raise TypeError(f"Calculating Memory Usage requires Program as its Parameter.But you "
                        f"passed in {type(program)}")
    if batch_size <= 0:
        raise ValueError("The batch size need to be positive.")
    block = program.global_block()
    seen, total = {"@EMPTY@"}, 0.0
    for op in block.ops:
        for name in op.output_arg_names:
            if name in seen:
                continue
            seen.add(name)
            var = block.vars[name]
            if var.type != "lod_tensor":
                continue
            total += _elements(var, batch_size) * _BYTES[var.dtype.name]
    unit = "B"
    for bigger in ("KB", "MB"):
        if total > 1024:
            total /= 1024
            unit = bigger
    return total * 1.05, total * 1.1, unit


def _elements(var, batch_size):
    count, unknown = 1, 0
    for d in var.shape:
        if d < 0:
            unknown += 1
            if unknown > 1:
                raise ValueError(f"Var {var.name} has more than one negative dim.")
            count *= batch_size * (-d)
        else:
            count *= d
    return count
