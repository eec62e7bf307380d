"""py_func: an op that calls a Python function (fluid.layers.py_func, Fluid 1.8).

The function gets the inputs as LoDTensors (None where an input is absent) and returns None,
one array (or LoDTensor) or a tuple of them, one per output. Its gradient, when a backward
function was given, is another py_func op calling it with the inputs and outputs not listed in
backward_skip_vars, then the gradients of the outputs (None where none flowed in); it returns
one gradient per input (None for an input without one). The callables are kept in a
process-wide table (the attrs hold their index), as in Paddle."""

from ..framework import EMPTY_VAR_NAME
from ..tensor import LoDTensor
from .registry import defop

CALLABLES = []


def register(func):
    """The index under which py_func ops find `func` (-1 for None)."""
    if func is None:
        return -1
    CALLABLES.append(func)
    return len(CALLABLES) - 1


py_func = defop("py_func", inputs=("X*?",), outputs=("Out*?",),
                attrs={"forward_callable_id": -1, "backward_callable_id": -1,
                       "backward_skip_vars": []})


def _as_tensor(value):
    if value is None or isinstance(value, LoDTensor):
        return value
    tensor = LoDTensor()
    tensor._holder.value = value
    return tensor


def _as_array(value, xp):
    if value is None:
        return None
    if isinstance(value, LoDTensor):
        value = value._array()
    return xp.asarray(value)


@py_func.kernel
def _py_func(ctx, ins, attrs):
    func = CALLABLES[attrs["forward_callable_id"]]
    result = func(*[_as_tensor(v) for v in ins.get("X") or ()])
    names = ctx.op.outputs.get("Out", ())
    if not names:
        return {"Out": []}
    if not isinstance(result, (list, tuple)):
        result = (result,)
    if len(result) != len(names):
        raise ValueError(f"py_func: the function returned {len(result)} values for "
                         f"{len(names)} outputs {list(names)}")
    return {"Out": [_as_array(v, ctx.xp) for v in result]}


def _py_func_grad_maker(builder, op):
    backward = op.attrs["backward_callable_id"]
    if backward < 0:  # no backward function: no gradient flows back (Paddle)
        return []
    skip = set(op.attrs.get("backward_skip_vars") or ())
    xs, outs = op.input("X"), op.output("Out")
    inputs = [n for n in xs + outs if n not in skip]
    douts = [builder.key_grad_name(builder.key_out(op, n))
             if builder.key_out(op, n) in builder.ready else EMPTY_VAR_NAME for n in outs]
    produced, grads = [], []
    for name in xs:
        if name in builder.requires:
            key = builder.key_in(op, name)
            pname = builder.partial_name(key)
            builder.grad_var(builder.var(name), pname)
            produced.append((key, pname))
            grads.append(pname)
        else:
            grads.append(EMPTY_VAR_NAME)
    builder.block.append_op("py_func", inputs={"X": inputs + douts}, outputs={"Out": grads},
                            attrs={"forward_callable_id": backward,
                                   "backward_callable_id": -1, "backward_skip_vars": []})
    return produced


py_func.grad_maker = _py_func_grad_maker
py_func.diff_inputs, py_func.diff_outputs = ("X",), ("Out",)

__all__ = ["register"]
