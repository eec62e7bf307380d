"""Control flow: conditional_block and while run a sub-block of the program.

Their kernels get the step's variables (`ctx.env`, indexed by `ctx.slots`) and the sub-block's
compiled ops (`ctx.sub`); the sub-block reads and writes the same variables as the rest of the
step (names are unique in a program), so nothing is copied in or out.

Gradients (`grad_maker`, called by the backward builder): the sub-block's ops are
differentiated into a gradient block, run by conditional_block_grad / while_grad.
- conditional_block_grad runs it when the condition held, else gives zero gradients.
- while records, when its gradient is needed, the inputs and outputs of every body op at every
  iteration (StepScopes); while_grad replays the iterations backwards, restoring each op's
  recorded values before running its gradient op. The gradient with respect to a loop variable
  at the start of an iteration becomes the gradient of its value at the end of the previous
  one; gradients of values read but not written by the body add up over the iterations.
"""


from ..framework import EMPTY_VAR_NAME, grad_var_name
from .registry import defop


def _run(ctx):
    from ..executor import run_ops  # the executor imports the ops
    run_ops(ctx.sub, ctx.env)


def _outputs(ctx, slot):
    env, slots = ctx.env, ctx.slots
    return [env[slots[n]] if n != EMPTY_VAR_NAME else None for n in ctx.op.outputs.get(slot, ())]


def _true(value):
    return bool(value.reshape(-1)[0]) if hasattr(value, "reshape") else bool(value)


# --- conditional_block ----------------------------------------------------------------------------
cond_block = defop("conditional_block", inputs=("Cond*", "Input*?"), outputs=("Out*", "Scope?"),
                   attrs={"sub_block": None, "is_scalar_condition": False})
cond_block.control = True
cond_block.diff_inputs, cond_block.diff_outputs = ("Input",), ("Out",)


def _holds(ins, attrs):
    conds = ins["Cond"]
    if attrs["is_scalar_condition"]:
        return _true(conds[0])
    return all(c is not None and getattr(c, "size", len(c) if isinstance(c, list) else 1) > 0
               for c in conds)


@cond_block.kernel
def _conditional_block(ctx, ins, attrs):
    if _holds(ins, attrs):
        _run(ctx)
    out = {"Out": _outputs(ctx, "Out")}
    if "Scope" in ctx.want:
        out["Scope"] = None
    return out


cond_grad = defop("conditional_block_grad", inputs=("Cond*", "Input*?", "Out*?", "Out@GRAD*?"),
                  outputs=("Input@GRAD*",), attrs={"sub_block": None,
                                                   "is_scalar_condition": False})
cond_grad.control = True
cond_grad.forward_def = cond_block


@cond_grad.kernel
def _conditional_block_grad(ctx, ins, attrs):
    names = ctx.op.outputs.get("Input@GRAD", ())
    for n in names:
        if n != EMPTY_VAR_NAME:
            ctx.env[ctx.slots[n]] = None
    if _holds(ins, attrs):
        _run(ctx)
    grads = _outputs(ctx, "Input@GRAD")
    return {"Input@GRAD": [_or_zeros(ctx.xp, g, x) for g, x in zip(grads, ins["Input"])]}


def _or_zeros(xp, grad, like):
    if grad is not None or like is None or not hasattr(like, "shape") and \
            not isinstance(like, list):  # a rank table, a reader...: no gradient
        return grad
    if isinstance(like, list):
        return [None] * len(like)
    return xp.zeros(like.shape, like.dtype)


def _conditional_block_grad_maker(builder, op):
    grad_block, produced, grad_names = _grad_block(builder, op, op.input("Input"))
    outs = [builder.key_grad_name(builder.key_out(op, n)) if builder.key_out(op, n) in
            builder.ready else EMPTY_VAR_NAME for n in op.output("Out")]
    builder.block.append_op(
        "conditional_block_grad",
        inputs={"Cond": op.input("Cond"), "Input": op.input("Input"), "Out": op.output("Out"),
                "Out@GRAD": outs},
        outputs={"Input@GRAD": grad_names},
        attrs={"sub_block": grad_block, "is_scalar_condition": op.attrs["is_scalar_condition"]})
    return produced


cond_block.grad_maker = _conditional_block_grad_maker


def _grad_block(builder, op, inputs, replayed=False):
    """Differentiate op's sub-block into a new block: the seeds are the gradients the outer
    pass has for op's outputs; each input needing a gradient gets it under the partial name
    the outer pass gives it. Returns (block, [(key, name)], grad names per input)."""
    from ..backward_builder import Builder
    program = builder.program
    sub = op.attrs["sub_block"]
    produced, grad_names, presets = [], [], {}
    for name in inputs:
        if name in builder.requires:
            key = builder.key_in(op, name)
            pname = builder.partial_name(key)
            builder.grad_var(builder.var(name), pname)
            presets[grad_var_name(name)] = pname
            produced.append((key, pname))
            grad_names.append(pname)
        else:
            grad_names.append(EMPTY_VAR_NAME)
    outs = [n for n in op.output("Out") if builder.key_out(op, n) in builder.ready]
    saved = program.current_block_idx
    grad_block = program._create_block(parent_idx=builder.block.idx)
    grad_block.forward_block_idx = sub.idx
    try:
        nested = Builder(grad_block, [sub._var_recursive(n) for n in outs], builder.no_grad,
                         builder.callbacks, force=builder.force, ops=sub.ops, names=presets,
                         fwd_block=sub, replayed=replayed)
        for name in outs:
            outer = builder.block._var_recursive(builder.key_grad_name(builder.key_out(op, name)))
            nested.seed(sub._var_recursive(name), outer)
        nested.build()
    finally:
        program.current_block_idx = saved
    return grad_block, produced, grad_names


# --- while ----------------------------------------------------------------------------------------
while_op = defop("while", inputs=("X*?", "Condition"), outputs=("Out*", "StepScopes?"),
                 attrs={"sub_block": None, "is_test": False})
while_op.control = True
while_op.diff_inputs, while_op.diff_outputs = ("X",), ("Out",)


@while_op.kernel
def _while(ctx, ins, attrs):
    from ..executor import _run_op
    env, slots = ctx.env, ctx.slots
    cond = slots[ctx.op.inputs["Condition"][0]]
    record = attrs.get("_record", False) and not attrs["is_test"]
    steps = []
    while _true(env[cond]):
        if not record:
            _run(ctx)
            continue
        taken = {}
        for i, step in enumerate(ctx.sub):
            before = _values(step, env, inputs=True)
            _run_op(step, env, False, False)
            taken[i] = (before, _values(step, env, inputs=False))
        steps.append(taken)
    out = {"Out": _outputs(ctx, "Out")}
    if "StepScopes" in ctx.want:
        out["StepScopes"] = steps
    return out


def _values(step, env, inputs):
    one, many = (step.ins1, step.insN) if inputs else (step.outs1, step.outsN)
    return ([(i, env[i]) for _, i in one]
            + [(i, env[i]) for _, idx in many for i in idx if i > 0])


def _while_grad_maker(builder, op):
    inputs = op.input("X")
    written = set(op.output("Out"))
    for name in op.output("Out"):  # a loop variable's gradient crosses iterations: seed it
        if name in inputs and name in builder.requires:
            builder.out_grad(op, name)
    grad_block, produced, grad_names = _grad_block(builder, op, inputs, replayed=True)
    start_of = {n: g for n, g in zip(inputs, grad_names) if g != EMPTY_VAR_NAME}
    seeds = [[builder.key_grad_name(builder.key_out(op, n)), start_of.get(n)]
             for n in op.output("Out") if builder.key_out(op, n) in builder.ready]
    summed = [g for n, g in start_of.items() if n not in written]
    body = {id(f): i for i, f in enumerate(op.attrs["sub_block"].ops)}
    for gop in grad_block.ops:  # which body op each gradient op differentiates
        forward = getattr(gop, "forward_op", None)
        if forward is not None and id(forward) in body:
            gop.attrs["_body_op"] = body[id(forward)]
    op._set_attr("_record", True)
    if not op.output("StepScopes"):
        scopes = builder.fwd.create_var(name=f"{op.output('Out')[0]}@STEP_SCOPES",
                                        type="step_scopes")
        op.outputs["StepScopes"] = [scopes.name]
    builder.block.append_op(
        "while_grad",
        inputs={"X": inputs, "Out": op.output("Out"), "StepScopes": op.output("StepScopes"),
                "Out@GRAD": [g for g, _ in seeds]},
        outputs={"X@GRAD": grad_names},
        attrs={"sub_block": grad_block, "_seeds": seeds, "_summed": summed})
    return produced


while_op.grad_maker = _while_grad_maker

while_grad = defop("while_grad", inputs=("X*", "Out*?", "StepScopes", "Out@GRAD*?"),
                   outputs=("X@GRAD*",), attrs={"sub_block": None, "_summed": [],
                                                "_seeds": []})
while_grad.control = True
while_grad.forward_def = while_op


@while_grad.kernel
def _while_grad(ctx, ins, attrs):
    env, slots, xp = ctx.env, ctx.slots, ctx.xp
    steps = ins["StepScopes"] or []
    seeds = [(slots[g], slots[start] if start else None) for g, start in attrs["_seeds"]]
    outer = {i: env[i] for i, _ in seeds}
    summed = [slots[g] for g in attrs["_summed"]]
    totals = dict.fromkeys(summed)
    touched = {k for taken in steps[:1] for before, after in taken.values()
               for k, _ in before + after}
    final = {k: env[k] for k in touched}  # the replay restores old values: keep the last ones
    for t in range(len(steps) - 1, -1, -1):
        if t < len(steps) - 1:  # the value at the end of step t is the one t + 1 started with
            for i, start in seeds:
                if start is not None:
                    env[i] = env[start]
                elif not isinstance(outer[i], list):
                    env[i] = _zeros_like(xp, outer[i])
                else:  # an array made in the loop: each step's write reads its own entry
                    env[i] = outer[i]
        for i in summed:
            env[i] = None
        _replay(ctx, env, steps[t])
        for i in summed:
            if env[i] is not None:
                totals[i] = env[i] if totals[i] is None else _add(totals[i], env[i])
    for i in summed:
        env[i] = totals[i]
    produced = {slots[n] for n in ctx.op.outputs.get("X@GRAD", ()) if n != EMPTY_VAR_NAME}
    for i, value in outer.items():  # the outer gradients are not this op's to change
        if i not in produced:
            env[i] = value
    for k, value in final.items():
        env[k] = value
    grads = _outputs(ctx, "X@GRAD")
    return {"X@GRAD": [_or_zeros(xp, g, x) for g, x in zip(grads, ins["X"])]}


def _replay(ctx, env, taken):
    """Run the gradient block once, each gradient op seeing its forward op's recorded values."""
    from ..executor import _run_op
    for g in ctx.sub:
        f = g.attrs.get("_body_op")
        if f is not None and f in taken:
            before, after = taken[f]
            for k, v in before:
                env[k] = v
            for k, v in after:
                env[k] = v
        _run_op(g, env, False, False)


def _add(a, b):
    if isinstance(a, list):
        out = list(a) + [None] * (len(b) - len(a))
        for i, v in enumerate(b):
            if v is not None:
                out[i] = v if out[i] is None else out[i] + v
        return out
    return a + b


def _zeros_like(xp, value):
    if value is None or not hasattr(value, "shape") and not isinstance(value, list):
        return None
    if isinstance(value, list):
        return [xp.zeros_like(v) if v is not None else None for v in value]
    return xp.zeros_like(value)
