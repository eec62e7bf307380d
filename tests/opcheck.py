"""Harness for checking ops one at a time: forward against a NumPy reference, gradient against
central finite differences (float64).

Op cases are declared in tests/cases/*.py with `case(...)`; tests/test_ops.py runs them all and
also fails when a registered op has no case (so no op can be added untested).

How a case is checked
  1. A one-op Program is built with variables of the case's shapes/dtypes; appending the op
     runs its shape inference, whose output shapes must match what the kernel returns (-1 dims
     match anything).
  2. Forward: the kernel's outputs are compared with `reference(inputs, attrs)`.
  3. Gradient: L = sum_k sum(w_k * out_k) over the differentiable outputs with fixed random
     weights w_k; the grad kernel's input gradients are compared with central differences of L.
"""

import copy
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence

import numpy as np

import runtime as fluid
from runtime.dtypes import VarType
from runtime.executor import KernelCtx
from runtime.framework import GRAD_SUFFIX, Operator
from runtime.ops.registry import get_op_def
from runtime.tensor import SelectedRows

CASES = []


@dataclass
class OpCase:
    op: str
    inputs: Dict[str, object]  # slot -> array, or list of arrays for duplicable slots
    attrs: Dict[str, object] = field(default_factory=dict)
    reference: Optional[Callable] = None  # (inputs, attrs) -> {out slot: expected array}
    grad_inputs: Optional[Sequence[str]] = None  # slots to check (default: float diff inputs)
    check_grad: bool = True
    name: str = ""
    rtol: float = 1e-5
    atol: float = 1e-8
    eps: float = 1e-6
    var_shapes: Dict[str, object] = field(default_factory=dict)  # declared shapes (-1 allowed)
    out_to_in: Dict[str, str] = field(default_factory=dict)  # in-place state: output -> input

    @property
    def id(self):
        return f"{self.op}[{self.name}]" if self.name else self.op


def case(op, inputs, **kwargs):
    c = OpCase(op, inputs, **kwargs)
    CASES.append(c)
    return c


# --- building the op ----------------------------------------------------------------------------
def build_op(c: OpCase):
    """A Program holding just this op, with input variables shaped like the case's arrays."""
    opdef = get_op_def(c.op)
    prog = fluid.Program()
    block = prog.global_block()
    ins = {}
    for slot, value in c.inputs.items():
        values = value if isinstance(value, list) else [value]
        names = []
        for i, v in enumerate(values):
            name = f"{slot}_{i}"
            sparse = isinstance(v, SelectedRows)
            shape = c.var_shapes.get(slot, v.shape if sparse else np.shape(v))
            block.create_var(name=name, shape=shape, dtype=v.dtype if sparse else
                             np.asarray(v).dtype, persistable=False,
                             type=VarType.SELECTED_ROWS if sparse else VarType.LOD_TENSOR)
            names.append(name)
        ins[slot] = names
    outs = {}
    for s in opdef.outputs:
        if s.name.endswith("Out") and s.name[:-3] in ins:  # Paddle's in-place state: XOut is X
            outs[s.name] = list(ins[s.name[:-3]])
            continue
        if s.name in c.out_to_in:  # in-place state under another name (ftrl's ...AccumOut)
            outs[s.name] = list(ins[c.out_to_in[s.name]])
            continue
        n_out = _dup_out_count(c) if s.duplicable else 1
        outs[s.name] = [block.create_var(name=f"{s.name}_{i}").name for i in range(n_out)]
    op = block.append_op(c.op, inputs=ins, outputs=outs, attrs=dict(c.attrs))
    return op, block


def _dup_out_count(c):
    n = c.attrs.get("num") or len(c.attrs.get("sections", ())) or 1
    return n


def ctx_for(op, want):
    return KernelCtx(np, np.random.default_rng(0), frozenset(want), op, fluid.CPUPlace())


def run_forward(c: OpCase, op, inputs=None):
    opdef = get_op_def(c.op)
    ins = copy.deepcopy(inputs if inputs is not None else c.inputs)
    for s in opdef.inputs:
        ins.setdefault(s.name, [] if s.duplicable else None)
    want = [s for s, names in op.outputs.items() if names]
    return opdef.fn(ctx_for(op, want), ins, op.attrs)


def dense(value):
    return value.to_dense() if isinstance(value, SelectedRows) else value


# --- checks ----------------------------------------------------------------------------------
def check_infer_shape(c, op, block, outputs):
    for slot, names in op.outputs.items():
        got = outputs.get(slot)
        if got is None:
            continue
        values = got if isinstance(got, list) else [got]
        for name, value in zip(names, values):
            var = block.var(name)
            assert var.shape is not None, f"{c.id}: infer_shape left {slot} without a shape"
            shape = np.shape(dense(value))
            assert len(var.shape) == len(shape) and all(
                d < 0 or d == a for d, a in zip(var.shape, shape)), \
                f"{c.id}: infer_shape says {slot} is {list(var.shape)}, kernel gave {list(shape)}"
            assert var.dtype == dense(value).dtype, \
                f"{c.id}: infer_shape says {slot} is {var.dtype}, kernel gave {dense(value).dtype}"


def check_forward(c: OpCase):
    op, block = build_op(c)
    outputs = run_forward(c, op)
    check_infer_shape(c, op, block, outputs)
    if c.reference is None:
        return
    expected = c.reference(copy.deepcopy(c.inputs), dict(op.attrs))
    for slot, want in expected.items():
        got = outputs[slot]
        if isinstance(want, list):
            for g, w in zip(got, want):
                np.testing.assert_allclose(dense(g), w, rtol=1e-6, atol=1e-9, err_msg=c.id)
        else:
            np.testing.assert_allclose(dense(got), want, rtol=1e-6, atol=1e-9,
                                       err_msg=f"{c.id} output {slot}")


def _loss_weights(opdef, outputs, rng):
    weights = {}
    for slot in opdef.diff_outputs:
        value = outputs.get(slot)
        if value is None:
            continue
        if isinstance(value, list):
            weights[slot] = [rng.standard_normal(np.shape(dense(v))) for v in value]
        else:
            weights[slot] = rng.standard_normal(np.shape(dense(value)))
    return weights


def _loss(opdef, outputs, weights):
    total = 0.0
    for slot, w in weights.items():
        value = outputs[slot]
        if isinstance(value, list):
            total += sum(float(np.sum(dense(v) * wi)) for v, wi in zip(value, w))
        else:
            total += float(np.sum(dense(value) * w))
    return total


def grad_slots(c: OpCase, opdef):
    if c.grad_inputs is not None:
        return list(c.grad_inputs)
    slots = []
    for slot in opdef.diff_inputs:
        value = c.inputs.get(slot)
        if value is None:
            continue
        first = value[0] if isinstance(value, list) else value
        if np.asarray(first).dtype.kind == "f":
            slots.append(slot)
    return slots


def analytic_grads(c, op, opdef, outputs, weights, slots):
    gdef = opdef.grad_def
    ins = {}
    for slot in opdef.grad_uses:
        if slot in c.inputs:
            ins[slot] = copy.deepcopy(c.inputs[slot])
        elif slot in outputs:
            ins[slot] = outputs[slot]
    for slot in opdef.diff_outputs:
        if slot in weights:
            w = weights[slot]
            ins[slot + GRAD_SUFFIX] = [x.astype(np.float64) for x in w] if isinstance(w, list) \
                else w.astype(np.float64)
    for s in gdef.inputs:
        ins.setdefault(s.name, None)
    gouts = {}
    for slot in opdef.diff_inputs:
        value = c.inputs.get(slot)
        n = len(value) if isinstance(value, list) else 1
        gouts[slot + GRAD_SUFFIX] = [f"{slot}@G{i}" if slot in slots else "@EMPTY@"
                                     for i in range(n)]
    gop = Operator(op.block, gdef.type, {k: ["?"] for k in ins}, gouts, op.attrs)
    want = [k for k, v in gouts.items() if any(n != "@EMPTY@" for n in v)]
    return gdef.fn(ctx_for(gop, want), ins, op.attrs)


def numeric_grad(c, op, opdef, weights, slot, index=None):
    base = copy.deepcopy(c.inputs)
    target = base[slot][index] if index is not None else base[slot]
    grad = np.zeros_like(target, dtype=np.float64)
    flat = target.reshape(-1)
    gflat = grad.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + c.eps
        plus = _loss(opdef, run_forward(c, op, base), weights)
        flat[i] = orig - c.eps
        minus = _loss(opdef, run_forward(c, op, base), weights)
        flat[i] = orig
        gflat[i] = (plus - minus) / (2 * c.eps)
    return grad


def check_gradient(c: OpCase):
    opdef = get_op_def(c.op)
    assert opdef.grad_def is not None, f"{c.op} has no gradient rule"
    for slot, value in c.inputs.items():
        for v in (value if isinstance(value, list) else [value]):
            if np.asarray(v).dtype.kind == "f":
                assert np.asarray(v).dtype == np.float64, f"{c.id}: use float64 inputs"
    op, _ = build_op(c)
    outputs = run_forward(c, op)
    weights = _loss_weights(opdef, outputs, np.random.default_rng(1))
    slots = grad_slots(c, opdef)
    assert slots, f"{c.id}: no differentiable input to check"
    grads = analytic_grads(c, op, opdef, outputs, weights, slots)
    for slot in slots:
        got = grads[slot + GRAD_SUFFIX]
        if isinstance(c.inputs[slot], list):
            for i, g in enumerate(got):
                expected = numeric_grad(c, op, opdef, weights, slot, i)
                np.testing.assert_allclose(dense(g), expected, rtol=c.rtol, atol=c.atol,
                                           err_msg=f"{c.id}: d/d{slot}[{i}]")
        else:
            expected = numeric_grad(c, op, opdef, weights, slot)
            np.testing.assert_allclose(dense(got), expected, rtol=c.rtol, atol=c.atol,
                                       err_msg=f"{c.id}: d/d{slot}")


# --- whole programs (control flow, arrays: ops that only mean something together) ------------
def _with_lods(values, lods):
    """The feed with the arrays named in `lods` as LoDTensors of those sequence lengths."""
    if not lods:
        return values
    out = dict(values)
    for name, lengths in lods.items():
        tensor = fluid.LoDTensor()
        tensor.set(values[name])
        tensor.set_recursive_sequence_lengths(lengths)
        out[name] = tensor
    return out


def check_program_gradient(build, feed, wrt, eps=1e-6, rtol=1e-5, atol=1e-8, lods=None):
    """build() (run inside a fresh program_guard) returns a [1]-shaped float64 loss of the
    fed variables; the gradients fluid.gradients gives for the `wrt` feed names must match
    central finite differences of the loss. `lods` gives some fed arrays a LoD ({name:
    sequence lengths per level}). Returns the analytic gradients."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        loss = build()
        block = main.global_block()
        inputs = [block.var(name) for name in wrt]
        for var in inputs:
            var.stop_gradient = False
        grads = fluid.gradients(loss, inputs)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    fetched = exe.run(main, feed=_with_lods(feed, lods), fetch_list=[loss] + grads,
                      scope=scope, return_numpy=False)[1:]
    analytic = [np.array(g) for g in fetched]

    def loss_at(values):
        out = exe.run(main, feed=_with_lods(values, lods), fetch_list=[loss], scope=scope)
        return float(out[0][0])

    for name, got in zip(wrt, analytic):
        base = {k: np.array(v, copy=True) for k, v in feed.items()}
        flat = base[name].reshape(-1)
        expected = np.zeros(flat.size)
        for i in range(flat.size):
            orig = flat[i]
            flat[i] = orig + eps
            plus = loss_at(base)
            flat[i] = orig - eps
            minus = loss_at(base)
            flat[i] = orig
            expected[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(np.asarray(got).reshape(-1), expected, rtol=rtol, atol=atol,
                                   err_msg=f"d loss / d {name}")
    return analytic
