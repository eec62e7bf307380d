"""Build the data-parallel SSA graph from per-place plans: replicate the ops, insert the
gradient-combining ops (AllReduce or Reduce + Broadcast), apply the fusion passes, link."""

import warnings

from ..dtypes import VarType
from ..errors import EnforceNotMet
from ..flags import FLAGS
from ..framework import OpRole
from . import combine, fusion
from .graph import (Node, add_inplace_edges, gc_counts, gradient_pairs, is_optimizer_op, link,
                    set_op_node_io)

ACTS = ("relu", "sigmoid", "tanh", "gelu", "leaky_relu")
FUSABLE_OPTIMIZERS = ("sgd", "momentum", "adam")
_LOSS_SEED = OpRole.Backward | OpRole.Loss


class Graph:
    """Nodes in a valid sequential order, dependency counts, roots, GC counters."""

    def __init__(self, nodes, n_slots, n_places):
        self.nodes, self.n_slots, self.n_places = nodes, n_slots, n_places
        self.n_deps = [n.n_deps for n in nodes]
        self.roots = [n.id for n in nodes if n.n_deps == 0]
        self.value_count = self.any_count = None
        self.write_owner = {}  # persistable name -> place whose copy goes back to the scope
        self.fused = {}
        self.n_combine = sum(1 for n in nodes if n.combine)
        self.sequence = None  # one thread's order and GC drops (scheduler.sequence), once made


def resolve_strategy(bs, n_places):
    """(reduce, fuse_all_reduce, fuse_optimizer) with Paddle's conflict rules."""
    reduce_ = int(bs.reduce_strategy)
    if reduce_ not in (0, 1):
        raise ValueError(f"BuildStrategy.reduce_strategy must be ReduceStrategy.AllReduce (0) or "
                         f"ReduceStrategy.Reduce (1), got {bs.reduce_strategy!r}")
    fuse_ar, fuse_opt = bool(bs.fuse_all_reduce_ops), bool(bs.fuse_all_optimizer_ops)
    if reduce_ == 1 and (fuse_ar or fuse_opt):
        warnings.warn("fuse_all_optimizer_ops and fuse_all_reduce_ops only work with "
                      "ReduceStrategy.AllReduce (as in Paddle); they are off for this "
                      "Reduce-strategy program", RuntimeWarning, stacklevel=4)
        fuse_ar = fuse_opt = False
    if int(bs.gradient_scale_strategy) not in (0, 1, 2):
        raise ValueError(f"BuildStrategy.gradient_scale_strategy must be CoeffNumDevice (0), "
                         f"One (1) or Customized (2), got {bs.gradient_scale_strategy!r}")
    if bs.sync_batch_norm:
        raise EnforceNotMet("BuildStrategy.sync_batch_norm is not supported by this runtime "
                            "(batch statistics stay per place); set it to False")
    return reduce_, fuse_ar, fuse_opt


def build(program, plans, bs, loss_name, freeable):
    n = len(plans)
    plan0 = plans[0]
    block = program.global_block()
    reduce_, fuse_ar, fuse_opt = resolve_strategy(bs, n)
    pairs = gradient_pairs(program, plan0) if n > 1 else []
    scale = int(bs.gradient_scale_strategy)
    seed_index = _seed_index(plan0, loss_name)
    if scale == 0 and n > 1 and seed_index is not None:
        for plan in plans:
            step = plan.steps[seed_index]
            step.attrs = dict(step.attrs, value=step.attrs.get("value", 1.0) / n)
    skip = {seed_index} if scale == 2 and seed_index is not None else set()
    fused = {}
    combines, owners = _combines(pairs, plan0, block, n, reduce_, fuse_ar, fused)
    placement, write_owner = (_placement(plan0, block, owners, pairs) if reduce_ == 1 and n > 1
                              else ({}, {}))
    groups = _elewise_groups(plan0) if bs.fuse_elewise_add_act_ops else {}
    if groups:
        fused["fuse_elewise_add_act_ops"] = sum(len(g) for g in groups.values())
    opt_groups = _optimizer_groups(plan0, block) if fuse_opt else {}
    if opt_groups:
        fused["fuse_all_optimizer_ops"] = sum(len(g) for g in opt_groups.values())
    member = {i for g in list(groups.values()) + list(opt_groups.values()) for i in g}
    nodes = []
    for step in plan0.steps:
        i = step.index
        if i not in skip and (i not in member or i in groups or i in opt_groups):
            for p in range(n):
                if placement.get(i, p) != p:
                    continue
                nodes.append(_op_node(plans[p], p, i, groups, opt_groups))
        for unit in combines.get(i, ()):
            nodes.append(_combine_node(unit, n, i))
    for k, node in enumerate(nodes):
        node.id = k
    link(nodes)
    if plan0.inplace_enabled:
        add_inplace_edges(nodes, plans)
    if bs.enable_backward_optimizer_op_deps:
        _backward_optimizer_deps(nodes)
    if bs.enable_sequential_execution:  # Paddle: ops run one by one in program order
        for a, b in zip(nodes, nodes[1:]):
            b.deps.add(a.id)
    for node in nodes:
        node.deps.discard(node.id)
        node.n_deps = len(node.deps)
    for node in nodes:
        for d in node.deps:
            nodes[d].dependents.append(node.id)
    graph = Graph(nodes, plan0.n_slots, n)
    if freeable:
        graph.value_count, graph.any_count = gc_counts(nodes, freeable, plan0.n_slots)
    graph.write_owner, graph.fused = write_owner, fused
    graph.seed_skipped = bool(skip)
    return graph


def _seed_index(plan, loss_name):
    if not loss_name:
        return None
    target = loss_name + "@GRAD"
    for step in plan.steps:
        if step.role == _LOSS_SEED and step.op.output_arg_names == [target]:
            return step.index
    return None


def _combines(pairs, plan, block, n, reduce_, fuse_ar, fused):
    """{op index: [combine units to run right after it]}, {param: owner place}."""
    units, owners = {}, {}
    slot = plan.slot_of
    if not pairs:
        return units, owners
    if reduce_ == 1:
        for k, (param, grad, at) in enumerate(pairs):
            owner = k % n
            owners[param] = owner
            units.setdefault(at, []).append(combine.Reduce(slot[grad], owner, n))
        last_write = {}
        for step in plan.steps:
            for name in step.op.output_arg_names:
                if name in owners:
                    last_write[name] = step.index
        for param, at in last_write.items():
            units.setdefault(at, []).append(combine.Broadcast(slot[param], owners[param], n))
        return units, owners
    dense = [(p, g, at) for p, g, at in pairs if block.vars[g].type != VarType.SELECTED_ROWS]
    sparse = [t for t in pairs if t not in dense]
    for _, g, at in sparse if fuse_ar else pairs:
        units.setdefault(at, []).append(combine.AllReduce([slot[g]], n))
    if fuse_ar:
        groups = _fuse_groups(dense, block)
        for group in groups:
            at = max(t[2] for t in group)
            units.setdefault(at, []).append(combine.FusedAllReduce([slot[g] for _, g, _ in group],
                                                                   n))
        fused["fuse_all_reduce_ops"] = len(dense) - len(groups)
    return units, owners


def _fuse_groups(dense, block):
    """Paddle's grouping: by layer (the parameter name before its first '.'), then merged up
    to FLAGS_fuse_parameter_memory_size MB, then FLAGS_fuse_parameter_groups_size groups."""
    by_layer = {}
    for t in dense:
        by_layer.setdefault(t[0].split(".", 1)[0] if "." in t[0] else "@UNKNOWN", []).append(t)
    groups = list(by_layer.values())
    limit_mb = FLAGS.get("fuse_parameter_memory_size")
    if limit_mb > 0:
        merged, size = [[]], 0
        for g in groups:
            merged[-1] = merged[-1] + g
            size += sum(_nbytes(block.vars[x[1]]) for x in g)
            if size >= limit_mb * (1 << 20):
                merged.append([])
                size = 0
        groups = [g for g in merged if g]
    per = FLAGS.get("fuse_parameter_groups_size")
    if per != 1:
        per = len(groups) if per == -1 else max(per, 1)
        groups = [sum(groups[i:i + per], []) for i in range(0, len(groups), per)]
    return [sorted(g, key=lambda t: t[2]) for g in groups if g]


def _nbytes(var):
    numel = 1
    for d in var.shape or ():
        numel *= max(int(d), 1)
    return numel * (var.dtype.itemsize if var.dtype is not None else 4)


def _placement(plan, block, owners, pairs):
    """Reduce strategy: ops that depend on a reduced gradient run on its owner place only."""
    grad_owner = {g: owners[p] for p, g, _ in pairs}
    ready_at = {}
    for p, g, at in pairs:
        ready_at.setdefault(at, []).append(g)
    taint, placement, write_owner = {}, {}, {}
    for step in plan.steps:
        op = step.op
        found = {taint[n] for n in op.input_arg_names if n in taint}
        if is_optimizer_op(step) and op.inputs["Param"][0] in owners:
            found.add(owners[op.inputs["Param"][0]])
        if len(found) > 1:
            raise EnforceNotMet(
                f"ReduceStrategy.Reduce cannot run op {step.type} (#{step.index}){op.where()}: it "
                f"combines gradients of parameters owned by different places (e.g. gradient "
                f"clipping by global norm). Use BuildStrategy.ReduceStrategy.AllReduce")
        if found:
            owner = found.pop()
            placement[step.index] = owner
            for name in op.output_arg_names:
                var = block.vars.get(name)
                if var is not None and var.persistable:
                    write_owner[name] = owner
                else:
                    taint[name] = owner
        for g in ready_at.get(step.index, ()):
            taint[g] = grad_owner[g]
    for param in owners:
        write_owner.pop(param, None)  # parameters are broadcast: every copy is current
    return placement, write_owner


def _elewise_groups(plan):
    """{index of the second op: (i, i+1)} for elementwise_add + activation (forward) and
    activation_grad + elementwise_add_grad (backward) pairs."""
    steps, groups = plan.steps, {}
    for a, b in zip(steps, steps[1:]):
        if a.index in groups or (groups and a.index in {g[0] for g in groups.values()}):
            continue
        if (a.type == "elementwise_add" and b.type in ACTS
                and b.op.inputs.get("X") == a.op.outputs.get("Out")):
            groups[b.index] = (a.index, b.index)
        elif (b.type == "elementwise_add_grad" and a.type in tuple(x + "_grad" for x in ACTS)
              and a.op.outputs.get("X@GRAD") == b.op.inputs.get("Out@GRAD")):
            groups[b.index] = (a.index, b.index)
    return groups


def _optimizer_groups(plan, block):
    """{index of the group's last op: (indices)}: dense sgd/momentum/adam ops with the same
    type, attrs and learning rate, and no other op in between touching their variables."""
    by_key = {}
    for step in plan.steps:
        if step.type not in FUSABLE_OPTIMIZERS or not is_optimizer_op(step):
            continue
        grad = block.vars.get(step.op.inputs["Grad"][0])
        if grad is None or grad.type == VarType.SELECTED_ROWS:
            continue  # sparse gradients are not fused (as in Paddle)
        key = (step.type, tuple(sorted((k, repr(v)) for k, v in step.attrs.items()
                                       if k != "op_role")), tuple(step.op.inputs["LearningRate"]))
        by_key.setdefault(key, []).append(step.index)
    groups = {}
    for idx in by_key.values():
        if len(idx) < 2:
            continue
        touched = {n for i in idx for n in plan.steps[i].op.input_arg_names
                   + plan.steps[i].op.output_arg_names}
        members = set(idx)
        between = [s for s in plan.steps[idx[0]:idx[-1] + 1] if s.index not in members]
        if any(touched & set(s.op.input_arg_names + s.op.output_arg_names) for s in between):
            continue
        groups[idx[-1]] = tuple(idx)
    return groups


def _op_node(plan, p, i, groups, opt_groups):
    step = plan.steps[i]
    if i in opt_groups:
        steps = [plan.steps[j] for j in opt_groups[i]]
        node = Node("fused_" + step.type, p, steps, fn=combine.FusedOptimizer(steps),
                    index=i, role=step.role)
    elif i in groups:
        first, second = [plan.steps[j] for j in groups[i]]
        if step.type.endswith("_grad"):
            kind, fn = "fused_elemwise_activation_grad", fusion.ActivationGradAddGrad(first, second)
        else:
            kind = "fused_elemwise_activation"
            fn = fusion.AddActivation(first, second, fusion.sum_is_internal(plan, first, second))
        node = Node(kind, p, (first, second), fn=fn, index=i, role=step.role)
    else:
        node = Node(step.type, p, (step,), index=i, role=step.role)
    set_op_node_io(node)
    return node


def _combine_node(unit, n, after):
    """A combine unit's node, with the program position of the op it runs after (the one
    whose gradient makes it ready): op records and profiles index it there."""
    node = Node(unit.kind, -1, fn=unit, index=after, combine=True, role=OpRole.Backward)
    if isinstance(unit, combine.Broadcast):
        node.reads = [(unit.owner, unit.slot)]
        node.writes = [(p, unit.slot) for p in range(n) if p != unit.owner]
    elif isinstance(unit, combine.Reduce):
        node.reads = [(p, unit.slots[0]) for p in range(n)]
        node.writes = [(unit.owner, unit.slots[0])]
    else:
        node.reads = [(p, s) for s in unit.slots for p in range(n)]
        node.writes = list(node.reads)
    return node


def _backward_optimizer_deps(nodes):
    """enable_backward_optimizer_op_deps: combine ops run in order, and optimizer ops start
    only after the last combine op (so combining is never delayed by updates)."""
    last = None
    for node in nodes:
        if node.combine and node.type != "broadcast":
            if last is not None:
                node.deps.add(last)
            last = node.id
    if last is None:
        return
    for node in nodes:
        if node.ops and node.role & OpRole.Optimize and node.id > last:
            node.deps.add(last)
