"""The op registry: each op's forward kernel, shape inference and gradient rule, side by side.

An op is declared once:

    mul = defop("mul", inputs=("X", "Y"), outputs=("Out",), attrs={"x_num_col_dims": 1, ...})

    @mul.kernel
    def _mul(ctx, ins, attrs): ...          # -> {"Out": array}

    @mul.infer
    def _mul_shape(ic): ...                 # build-time shapes; ic.fail(...) on bad input

    @mul.grad(uses=("X", "Y"))
    def _mul_grad(ctx, ins, attrs): ...     # ins: forward inputs/outputs named in `uses` plus
                                            # "Out@GRAD"; returns {"X@GRAD": ..., "Y@GRAD": ...}

Slot specs: "X" one variable, "X*" a list (duplicable), "X?" optional (dispensable).

Memory: `defop(..., inplace={"Out": "X"})` says the kernel may write Out into X's buffer. The
executor grants it per call (`"Out" in ctx.inplace`) only when X is a temporary that nothing
else uses afterwards and no other array shares its memory; kernels then pass `out=x`. A grad
rule's `shape_only` inputs are read only for their shape (Paddle's "no need buffer" inputs).
A kernel gets `ctx` (array module `ctx.xp`, random generator `ctx.rng`, the set of output slots
actually wanted `ctx.want`, and the Operator `ctx.op`), a dict of input arrays by slot (lists for
duplicable slots, None for missing optional ones) and the op's attrs.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

from ..errors import ShapeError, where
from ..framework import EMPTY_VAR_NAME, GRAD_SUFFIX

REGISTRY: Dict[str, "OpDef"] = {}


@dataclass(frozen=True)
class Slot:
    name: str
    duplicable: bool = False
    dispensable: bool = False

    @staticmethod
    def parse(spec):
        name = spec.rstrip("*?")
        return Slot(name, "*" in spec, "?" in spec)


@dataclass
class OpDef:
    """Everything the runtime knows about one op type."""

    type: str
    inputs: Tuple[Slot, ...]
    outputs: Tuple[Slot, ...]
    attrs: dict = field(default_factory=dict)
    fn: Optional[Callable] = None
    infer_fn: Optional[Callable] = None
    grad_def: Optional["OpDef"] = None
    forward_def: Optional["OpDef"] = None  # set on grad ops
    diff_inputs: Tuple[str, ...] = ()  # input slots that receive gradients
    diff_outputs: Tuple[str, ...] = ()  # output slots whose gradients the grad op reads
    grad_uses: Tuple[str, ...] = ()  # forward input/output slots the grad kernel reads
    grad_var_type: Optional[Callable] = None  # (slot, attrs) -> VarType of that input's grad
    inplace: Dict[str, str] = field(default_factory=dict)  # output slot -> input slot it may reuse
    shape_only: Tuple[str, ...] = ()  # input slots read only for their shape/dtype
    random: bool = False  # draws from ctx.rng
    grad_maker: Optional[Callable] = None  # control flow: (builder, op) -> [(name, grad name)]
    control: bool = False  # runs a sub-block: its kernel gets ctx.sub (compiled ops), ctx.env
    no_grad_reason: str = ""
    special: Optional[Callable] = None  # (step, ins) -> Special or None (`specialize`)
    special_for: Optional[Callable] = None  # the kernel `special` stands for

    # --- declaration decorators ----------------------------------------------------------
    def kernel(self, fn):
        self.fn = fn
        return fn

    def infer(self, fn):
        self.infer_fn = fn
        return fn

    def specialize(self, fn):
        """Declare the op's specialiser (after its kernel): `fn(step, ins)` gives a Special,
        the kernel's work for inputs like `ins` (the values it is about to get, by slot) as
        straight-line code, or None where the kernel must run as it is. See Special."""
        self.special, self.special_for = fn, self.fn
        return fn

    def grad(self, uses=(), inputs=None, outputs=None, var_type=None, shape_only=(),
             inplace=None):
        """Declare the gradient rule. inputs: slots that get gradients (default: all inputs);
        outputs: slots whose gradients flow in (default: all outputs); shape_only: slots of
        `uses` the grad kernel reads only for .shape/.dtype (their memory can be freed before
        the grad op runs; the kernel then gets a ShapeOnly stand-in); inplace: {grad output:
        grad input} buffers the grad kernel may reuse (see OpDef.inplace)."""
        def decorate(fn):
            self.diff_inputs = tuple(inputs if inputs is not None else
                                     [s.name for s in self.inputs])
            self.diff_outputs = tuple(outputs if outputs is not None else
                                      [s.name for s in self.outputs])
            self.grad_uses = tuple(uses)
            self.grad_var_type = var_type
            slot_of = {s.name: s for s in self.inputs + self.outputs}
            grad_inputs = [Slot(u, slot_of[u].duplicable, True) for u in self.grad_uses]
            grad_inputs += [Slot(o + GRAD_SUFFIX, slot_of[o].duplicable, True)
                            for o in self.diff_outputs]
            grad_outputs = [Slot(i + GRAD_SUFFIX, slot_of[i].duplicable, True)
                            for i in self.diff_inputs]
            gdef = OpDef(self.type + "_grad", tuple(grad_inputs), tuple(grad_outputs),
                         dict(self.attrs), fn, _infer_grad, forward_def=self,
                         random=self.random, inplace=dict(inplace or {}),
                         shape_only=tuple(shape_only))
            self.grad_def = gdef
            REGISTRY[gdef.type] = gdef
            return fn
        return decorate

    # --- used when an op is appended to a block ------------------------------------------
    def check_slots(self, op):
        known = {s.name for s in self.inputs}
        for slot in op.inputs:
            if slot not in known:
                raise ShapeError(f"op {self.type} has no input slot {slot!r}; its inputs are "
                                 f"{sorted(known)}{where(op.callsite)}")
        for s in self.inputs:
            names = [n for n in op.inputs.get(s.name, ()) if n != EMPTY_VAR_NAME]
            if not names and not s.dispensable:
                raise ShapeError(f"op {self.type} needs input {s.name!r}{where(op.callsite)}")
            if len(names) > 1 and not s.duplicable:
                raise ShapeError(f"op {self.type} input {s.name!r} takes one variable, "
                                 f"got {len(names)}{where(op.callsite)}")
        known_out = {s.name for s in self.outputs}
        for slot in op.outputs:
            if slot not in known_out:
                raise ShapeError(f"op {self.type} has no output slot {slot!r}; its outputs are "
                                 f"{sorted(known_out)}{where(op.callsite)}")

    def infer_shapes(self, op):
        if self.infer_fn is not None:
            self.infer_fn(InferCtx(op, self))


def _infer_grad(ic):
    """Grad ops: the backward builder creates their outputs with the forward shapes; an
    output made without a shape gets its input's (X@GRAD like X, or like the incoming
    Out@GRAD when X is not an input of the grad op)."""
    incoming = [s.name for s in ic.opdef.inputs if s.name.endswith(GRAD_SUFFIX)]
    for slot, names in ic.op.outputs.items():
        base = slot[:-len(GRAD_SUFFIX)]
        sources = ic.inputs(base) or (ic.inputs(incoming[0]) if len(incoming) == 1 else [])
        x_shape = ic.input("XShape") if base == "X" and not ic.inputs(base) else None
        for i, name in enumerate(names):
            if name == EMPTY_VAR_NAME or i >= len(sources):
                continue
            var = ic.block._find_var_recursive(name)
            if var is not None and var.shape is None:
                src = sources[i] if len(sources) > 1 else sources[0]
                var.shape = tuple(x_shape.shape[1:]) if x_shape is not None else src.shape
                var.dtype = src.dtype


class Special:
    """An op's kernel specialised, when a plan is compiled for its inputs' types, shapes and
    dtypes, into lines of code that the plan's straight-line step runs in place of the kernel
    call (runtime/plan.py, `Plan.special`): `{Slot}` names an input or output slot's variable
    (`{X}`, `{Out}`, `{X@GRAD}`), `{k_name}` the constant `consts[name]`, `{t0}`.. `{t3}`
    locals (set to None after the op). The lines must make the NumPy calls the kernel makes
    for such inputs, in its order (the same results bit for bit, and the same allocations for
    the step's memory plan), assign every output the op has, and keep nothing alive longer
    than the kernel would (temporaries in `{tN}` locals are dropped with the op). Only what
    the inputs' types, shapes and dtypes decide can be decided here: anything that depends on
    their values stays in the lines."""

    __slots__ = ("lines", "consts", "aliasing", "in_place")

    def __init__(self, lines, consts=None, aliasing=False, in_place=False):
        self.lines, self.consts = tuple(lines), dict(consts or {})
        self.aliasing = aliasing  # the lines are right where an output is an input's variable
        self.in_place = in_place  # such an output keeps the input's array (updated in place)


def defop(type, inputs=(), outputs=(), attrs=None, inplace=None, random=False):
    """Declare an op type; returns its OpDef for the kernel/infer/grad decorators."""
    if type in REGISTRY:
        raise ValueError(f"op {type!r} is registered twice")
    opdef = OpDef(type, tuple(Slot.parse(s) for s in inputs),
                  tuple(Slot.parse(s) for s in outputs), dict(attrs or {}),
                  inplace=dict(inplace or {}), random=random)
    REGISTRY[type] = opdef
    return opdef


def get_op_def(type):
    try:
        return REGISTRY[type]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(type, list(REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ShapeError(f"unknown op type {type!r}{hint}") from None


class InferCtx:
    """Build-time view of an op for shape inference: its input Variables and attrs."""

    def __init__(self, op, opdef):
        self.op = op
        self.opdef = opdef
        self.block = op.block
        self.attrs = op.attrs

    def input(self, slot):
        names = [n for n in self.op.inputs.get(slot, ()) if n != EMPTY_VAR_NAME]
        return self.block._var_recursive(names[0]) if names else None

    def inputs(self, slot):
        return [self.block._var_recursive(n) for n in self.op.inputs.get(slot, ())
                if n != EMPTY_VAR_NAME]

    def has_output(self, slot):
        return bool(self.op.outputs.get(slot))

    def attr(self, name):
        return self.op.attrs[name]

    def set_output(self, slot, shape, dtype, index=0, type=None, lod_level=None):
        names = self.op.outputs.get(slot, ())
        if index >= len(names) or names[index] == EMPTY_VAR_NAME:
            return
        var = self.block._var_recursive(names[index])
        if var.persistable and var.shape is not None:
            return  # an op updating a parameter/state in place keeps its declared shape
        var.shape = tuple(int(d) for d in shape) if shape is not None else None
        var.dtype = dtype
        if type is not None:
            var.type = type
        if lod_level is not None:
            var.lod_level = lod_level

    def same_as(self, out_slot="Out", in_slot="X"):
        x = self.input(in_slot)
        self.set_output(out_slot, x.shape, x.dtype, lod_level=x.lod_level)

    def fail(self, message):
        raise ShapeError(f"{self.op.type}: {message}{where(self.op.callsite)}")

    def check(self, condition, message):
        if not condition:
            self.fail(message)

    def describe(self, slot):
        var = self.input(slot)
        return f"{slot}={var.name!r} with shape {list(var.shape)}" if var else f"{slot}=None"


def infer_same_as(in_slot="X", out_slot="Out"):
    def infer(ic):
        ic.same_as(out_slot, in_slot)
    return infer


def dims_match(a, b):
    """Two dimensions agree when equal or either is unknown (-1)."""
    return a == b or a < 0 or b < 0


def shape_product(shape):
    total = 1
    for d in shape:
        if d < 0:
            return -1
        total *= d
    return total


class _FwdCtx:
    """The context a forward kernel gets when a second-order rule re-runs it."""

    __slots__ = ("xp", "rng", "want", "op", "place", "inplace")

    def __init__(self, ctx, want):
        self.xp, self.rng, self.op, self.place = ctx.xp, ctx.rng, ctx.op, ctx.place
        self.want, self.inplace = frozenset(want), ()

    def reuse(self, *args):
        return None


def linear_grad_grad(opdef):
    """Second-order rule of an op linear in its differentiable inputs (jointly), whose
    gradient rule reads none of their values: the gradient of its grad op with respect to the
    incoming Out@GRAD is the op itself applied to the gradients arriving for X@GRAD (zeros
    where none arrive); nothing flows back to the forward inputs."""
    gdef = opdef.grad_def
    d_outs = [o + GRAD_SUFFIX for o in opdef.diff_outputs]  # the grad op's Out@GRAD inputs
    d_ins = [i + GRAD_SUFFIX for i in opdef.diff_inputs]  # the grad op's X@GRAD outputs
    uses = tuple(s.name for s in gdef.inputs if s.name not in d_outs)

    def rule(ctx, ins, attrs):
        fwd = {}
        for s in opdef.inputs:
            if s.name in opdef.diff_inputs:
                fwd[s.name] = _incoming(ctx.xp, ins.get(s.name + GRAD_SUFFIX + GRAD_SUFFIX),
                                        ins.get(s.name), s.duplicable)
            else:
                fwd[s.name] = ins.get(s.name)
        out = opdef.fn(_FwdCtx(ctx, opdef.diff_outputs), fwd, attrs)
        return {o + GRAD_SUFFIX + GRAD_SUFFIX: out[o] for o in opdef.diff_outputs
                if o + GRAD_SUFFIX + GRAD_SUFFIX in ctx.want}

    gdef.grad(uses=uses, inputs=d_outs, outputs=d_ins)(rule)
    return opdef


def _incoming(xp, grad, like, duplicable):
    """The gradient that arrived for an X@GRAD output, or zeros shaped like X."""
    if duplicable:
        grads = grad if grad is not None else [None] * len(like or ())
        return [g if g is not None else xp.zeros(x.shape, x.dtype)
                for g, x in zip(grads, like or grads)]
    if grad is not None:
        return grad
    return xp.zeros(like.shape, like.dtype)
