"""The SSA graph: every op of every place (and the gradient-combining ops) as a node with
explicit dependencies on variable versions.

Per place, the program's ops (plus the combine / broadcast nodes, which touch every place) are
walked in program order; a node depends on the last writer of each variable it reads
(read-after-write), a writer on the readers since the last write (write-after-read) and on the
last writer (write-after-write). An op granted an inplace write into a dead input also waits
for every other reader of that input. Garbage collection is by reference count: each use of a
collectable variable (per place) is counted, and the node finishing its last use frees it.
"""

from ..framework import EMPTY_VAR_NAME, OpRole
from ..ops.registry import get_op_def

_BACKWARD, _OPTIMIZE = OpRole.Backward, OpRole.Optimize


class Node:
    """One unit of scheduled work: op(s) of one place, or a combine op over all places."""

    __slots__ = ("id", "type", "place", "ops", "fn", "index", "role", "reads", "writes",
                 "deps", "dependents", "n_deps", "value_uses", "shape_uses", "uses", "combine",
                 "name", "runs")

    def __init__(self, type_, place, ops=(), fn=None, index=-1, role=0, combine=False):
        self.id, self.type, self.place, self.ops, self.fn = -1, type_, place, tuple(ops), fn
        self.index, self.role, self.combine = index, role, combine
        self.reads, self.writes = [], []  # (place, slot) pairs
        self.deps, self.dependents, self.n_deps = set(), [], 0
        self.value_uses, self.shape_uses = (), ()  # flat counter indices (GC)
        self.uses = ()  # (flat index, place, slot) of each of those uses
        self.name = type_
        self.runs = None  # ((op, its runner: runtime/plan.py `runner`), ...), made at first use

    def __repr__(self):
        where = f"place {self.place}" if self.place >= 0 else "all places"
        return f"<Node #{self.id} {self.type} {where}>"


def op_uses(step):
    """(value reads, shape-only reads, writes) slot lists of a PlanOp."""
    shape_slots = get_op_def(step.type).shape_only
    value, shape, writes = [], [], []
    for k, i in step.ins1:
        (shape if k in shape_slots else value).append(i)
    for k, idx in step.insN:
        (shape if k in shape_slots else value).extend(i for i in idx if i >= 0)
    for _, i in step.outs1:
        writes.append(i)
    for _, idx in step.outsN:
        writes.extend(i for i in idx if i >= 0)
    for sub in getattr(step.ctx, "sub", None) or ():  # a control op's sub-block: its ops'
        sub_value, sub_shape, sub_writes = op_uses(sub)  # variables are the op's too
        value += sub_value + sub_shape
        writes += sub_writes
    return value, shape, writes


def link(nodes):
    """Add RAW/WAR/WAW edges walking `nodes` (already in a valid sequential order)."""
    last_writer, readers = {}, {}
    for node in nodes:
        deps = node.deps
        for key in node.reads:
            w = last_writer.get(key)
            if w is not None:
                deps.add(w)
            readers.setdefault(key, []).append(node.id)
        for key in node.writes:
            w = last_writer.get(key)
            if w is not None:
                deps.add(w)
            deps.update(readers.pop(key, ()))
            last_writer[key] = node.id
        deps.discard(node.id)


def add_inplace_edges(nodes, plan_of_place):
    """An op writing an output into a dead input's buffer waits for the input's other readers
    (in program order they all came earlier; in the graph they could still be pending)."""
    readers = {}
    for node in nodes:
        for key in node.reads:
            readers.setdefault(key, []).append(node.id)
        for step in node.ops:
            for _, in_slot in step.inplace:
                key = (node.place, in_slot)
                node.deps.update(r for r in readers.get(key, ()) if r != node.id)
        for key in node.writes:
            readers.pop(key, None)


def gc_counts(nodes, freeable, n_slots):
    """Per node the counter indices of its uses of collectable slots; initial counters
    (value uses incl. writes, all uses)."""
    value_count, any_count = {}, {}
    for node in nodes:
        vals, shapes = [], []
        for p, slot, kind in node_slot_uses(node):
            if (p, slot) not in freeable:
                continue
            idx = p * n_slots + slot
            any_count[idx] = any_count.get(idx, 0) + 1
            if kind == "shape":
                shapes.append(idx)
            else:
                value_count[idx] = value_count.get(idx, 0) + 1
                vals.append(idx)
        node.value_uses, node.shape_uses = tuple(vals), tuple(shapes)
        node.uses = tuple((idx,) + divmod(idx, n_slots) for idx in vals + shapes)
    return value_count, any_count


def node_slot_uses(node):
    if node.ops:
        seen = []
        for step in node.ops:
            value, shape, writes = op_uses(step)
            seen += [(node.place, s, "value") for s in value + writes]
            seen += [(node.place, s, "shape") for s in shape]
        return seen
    return [(p, s, "value") for p, s in dict.fromkeys(node.reads + node.writes)]


def set_op_node_io(node):
    reads, writes = [], []
    for step in node.ops:
        value, shape, outs = op_uses(step)
        reads += [(node.place, s) for s in value + shape]
        writes += [(node.place, s) for s in outs]
    node.reads, node.writes = list(dict.fromkeys(reads)), list(dict.fromkeys(writes))


def gradient_pairs(program, plan):
    """[(param, grad, index of the last backward op writing grad)] in readiness order."""
    block = program.global_block()
    params = {p.name for p in block.all_parameters() if p.trainable}
    last = {}
    for step in plan.steps:
        if step.role & _BACKWARD and not step.role & _OPTIMIZE:
            for name in step.op.output_arg_names:
                if name.endswith("@GRAD") and name[:-5] in params:
                    last[name] = step.index
    pairs = [(g[:-5], g, i) for g, i in last.items() if g != EMPTY_VAR_NAME]
    return sorted(pairs, key=lambda t: (t[2], t[1]))


def is_optimizer_op(step):
    return bool(step.role & _OPTIMIZE) and "Param" in step.op.inputs and "Grad" in step.op.inputs
