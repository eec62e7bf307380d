"""The kernel plan: a Program compiled once for one feed/fetch signature.

A plan numbers every variable (a slot in a Python list), resolves each op's kernel, attrs and
input/output slots ahead of time, and lists which persistables it reads from and writes back to
the scope. It also decides, once, how memory is reused during a step:

- Garbage collection (FLAGS_eager_delete_tensor_gb >= 0, Paddle's default): a temporary is
  dropped right after the last op that needs its *value*. If a later op needs only its shape
  (a grad rule's `shape_only` inputs), a ShapeOnly stand-in takes its place.
- Inplace: an op declaring `inplace={out: in}` is a candidate to write `out` into `in`'s
  buffer when `in` is a temporary (not persistable, fed or fetched) whose value no later op
  needs. At run time the executor grants it only if no other array shares that buffer
  (`exclusive()`), so a kernel returning a view can never be corrupted by a later reuse.
Persistables and fetch targets are never freed or reused.
"""

import math
import sys
import weakref

import numpy as np

from .errors import FeedError, where
from .framework import EMPTY_VAR_NAME
from .lod import sharing, uses_lod
from .ops.registry import get_op_def


class ShapeOnly:
    """Stands in for a freed array whose shape/dtype (and LoD) a later op still reads."""

    __slots__ = ("shape", "dtype", "lod")

    def __init__(self, shape, dtype, lod=()):
        self.shape, self.dtype, self.lod = shape, dtype, lod

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"ShapeOnly({list(self.shape)}, {self.dtype})"


def shape_only(value):
    if value is None:
        return None
    return ShapeOnly(value.shape, value.dtype, getattr(value, "lod", ()))


def exclusive(value, xp=np):
    """True when `value` is an array of the place's array module `xp` (NumPy's, or CuPy's on a
    GPU) that owns its memory and only the executor's slot holds it. References counted: the
    slot, this function's argument, getrefcount's argument."""
    return (type(value) is xp.ndarray and value.base is None
            and sys.getrefcount(value) <= 3)


class KernelCtx:
    """What a kernel may use besides its inputs and attrs. Control-flow kernels also get the
    step's variables (`env`, indexed by `slots[name]`) and their sub-block's compiled ops
    (`sub`)."""

    __slots__ = ("xp", "rng", "want", "op", "place", "inplace", "env", "sub", "slots")

    def __init__(self, xp, rng, want, op, place):
        self.xp, self.rng, self.want, self.op, self.place = xp, rng, want, op, place
        self.inplace = ()  # output slots allowed to reuse their input, this call
        self.env = self.sub = self.slots = None

    def reuse(self, out_slot, array, shape, dtype):
        """`array` when the kernel may write `out_slot` into it (granted, same shape/dtype)."""
        if out_slot in self.inplace and array.shape == shape and array.dtype == dtype:
            return array
        return None


class PlanOp:
    """One compiled op: kernel, context, attrs, input/output slots and memory actions."""

    __slots__ = ("fn", "ctx", "attrs", "ins1", "insN", "outs1", "outsN", "op", "index", "type",
                 "role", "frees", "shrinks", "inplace", "tag", "kernel_sets")

    def __setattr__(self, name, value):
        # a kernel replaced after the plan was specialised (a test's or a benchmark's
        # wrapper): the plan's specialised step no longer stands for it (Plan.special)
        if name == "fn":
            sets = getattr(self, "kernel_sets", None)
            if sets is not None:
                sets[0] += 1
        object.__setattr__(self, name, value)

    def __init__(self, op, index, slot_of, xp, rng, place):
        opdef = get_op_def(op.type)
        self.op, self.index, self.type, self.role = op, index, op.type, op.role
        self.fn = opdef.fn
        self.attrs = op.attrs
        dup_in = {s.name for s in opdef.inputs if s.duplicable}
        dup_out = {s.name for s in opdef.outputs if s.duplicable}
        self.ins1 = tuple((k, slot_of[v[0]]) for k, v in op.inputs.items()
                          if k not in dup_in and v and v[0] != EMPTY_VAR_NAME)
        self.insN = tuple((k, tuple(slot_of.get(n, 0) for n in v))
                          for k, v in op.inputs.items() if k in dup_in)
        self.outs1 = tuple((k, slot_of[v[0]]) for k, v in op.outputs.items()
                           if k not in dup_out and v and v[0] != EMPTY_VAR_NAME)
        self.outsN = tuple((k, tuple(-1 if n == EMPTY_VAR_NAME else slot_of.get(n, -1)
                                     for n in v))
                           for k, v in op.outputs.items() if k in dup_out and v)
        want = frozenset(k for k, _ in self.outs1) | frozenset(
            k for k, idx in self.outsN if any(i >= 0 for i in idx))
        self.ctx = KernelCtx(xp, rng, want, op, place)
        self.frees = ()  # slots dropped after this op (their last use)
        self.shrinks = ()  # slots replaced by a ShapeOnly after this op
        self.inplace = ()  # (output slot name, input slot number) candidates
        self.tag = "activations"  # memory category of what this op allocates
        self.kernel_sets = None  # the plan's count of kernels replaced (Plan.special)


class Plan:
    """A program compiled for one feed/fetch signature."""

    def __init__(self, program, feed_names, fetch_names, xp, place, gc=True, inplace=True,
                 gc_fraction=1.0, creation_order=False):
        block = program.global_block()
        self.program = program
        self.slot_of = {EMPTY_VAR_NAME: 0}  # never written: an absent optional input reads None
        self.rng = np.random.default_rng(program.random_seed or None)
        for name in feed_names:
            self._slot(name)
        produced, reads = self._number_vars(block, set(feed_names), set())
        self.control_steps = []  # steps (of any block) that run a sub-block: they get the env
        self.lod_mode = uses_lod(program)  # ops share their inputs' LoD (runtime/lod.py)
        order = None
        if creation_order and not feed_names and not reads and len(program.blocks) == 1:
            order = creation_order_of(block.ops)
        self.steps = self._compile_ops(block, xp, place, order)
        for name in fetch_names:
            if name not in produced and name not in feed_names and name not in self.slot_of:
                reads.append(name)
            self._slot(name)
        self.n_slots = len(self.slot_of)
        self.feed_slots = [(self.slot_of[n], block.var(n)) for n in feed_names]
        self.persistable_feeds = [(i, v) for i, v in self.feed_slots if v.persistable]
        self.feed_accepted = [None] * len(self.feed_slots)  # (shape, dtype) taken as it is
        self.feed_in = feed_function(self.feed_slots, self.feed_accepted)
        self.fetch_slots = [self.slot_of[n] for n in fetch_names]
        self.fetch_names = tuple(fetch_names)
        self.reads = self._check_reads(block, reads)
        self.writes = [n for n in dict.fromkeys(produced)
                       if _lookup(program, n) is not None and _lookup(program, n).persistable]
        self.is_startup = not feed_names and not self.reads
        kept = set(feed_names) | set(self.reads) | set(self.writes)
        self.fetched_temporaries = tuple(dict.fromkeys(  # (dropped once fetched: _step)
            self.slot_of[n] for n in fetch_names if n not in kept))
        self._bindings = weakref.WeakKeyDictionary()
        self._last_binding = (lambda: None, None)  # (weak reference to a scope, its binding)
        self.memory_plans = {}  # feed shapes -> memory/arena.py's ShapePlans
        self.plannable = (None, None, False)  # (flags version, pool, whether steps are planned)
        keep = set(fetch_names) | set(feed_names)
        self._skip_unread_grads(block, keep)
        self.gc, self.inplace_enabled = gc, inplace
        self._plan_memory(block, keep, gc, inplace, gc_fraction)
        self.segments = _segments(self.steps, block, self.is_startup)
        self._runs = {}  # free (True/False) -> the segments with each op's runner (`runs`)
        self._straight = None  # the function running every op in order (`straight`)
        self.kernel_sets = [0]  # kernels replaced since compiling (PlanOp.__setattr__)
        for step in self.steps:
            step.kernel_sets = self.kernel_sets
        self._specials = {}  # the inputs' signature -> its Specialized step (`special`)
        self._special = None  # the Specialized step last used
        self.traces = 0  # steps traced to specialise the plan (at most MAX_TRACES)
        # (not with control flow: a sub-block's ops write variables by name, which the
        # trace's account of what each slot holds does not follow)
        self.specializable = (xp is np and not self.lod_mode and not self.is_startup
                              and not self.control_steps
                              and any(get_op_def(s.type).special for s in self.steps))

    def runs(self, free):
        """plan.segments with each op paired with its runner: [(tag, ((op, run), ...))], where
        `run(env, op)` does what executor._run_op(op, env, False, free) does (see `runner`).
        Made at the first step that needs them, once the plan is complete."""
        found = self._runs.get(free)
        if found is None:
            found = self._runs[free] = [(tag, tuple((op, runner(op, free)) for op in ops))
                                        for tag, ops in self.segments]
        return found

    def straight(self):
        """One function `run(plan, env, mem)` running the whole plan as the executor's plain
        loop does with the frees applied (see `straight_function`). Made at the first step that
        needs it, once the plan is complete."""
        if self._straight is None:
            self._straight = straight_function(self.segments)
        return self._straight

    # --- specialised steps ----------------------------------------------------------------
    def special(self, env):
        """The specialised straight-line step (see `trace`) for this step's inputs (the fed
        and read values in `env`), or None: none made yet for them, or the plan cannot be
        specialised. The last one used is checked first: the fed arrays' types, shapes and
        dtypes, and the read values by identity (a persistable replaced by another array is
        looked up by its type, shape and dtype). The step (`run(plan, env, mem)`) checks that
        first look itself, and returns False, having run nothing, where it fails."""
        found = self._special
        if found is not None and found.kernel_sets == self.kernel_sets[0]:
            if found.same(env):
                return found.run
            if found.like(env):
                found.remember(env)
                return found.run
        if not self._specials:
            return None
        sig = self._signature(env)
        found = self._specials.get(sig)
        if found is None or found.kernel_sets != self.kernel_sets[0]:
            return None
        found.remember(env)
        self._special = found
        return found.run

    def _signature(self, env):
        return tuple([_value_sig(env[slot]) for slot in self._sig_slots()])

    def _sig_slots(self):
        return [slot for slot, _ in self.feed_slots] + [self.slot_of[n] for n in self.reads]

    def trace(self, env, mem):
        """Run one step as the straight-line step does (each op's runner), asking each op's
        specialiser (OpDef.special) for its kernel's work on the inputs it gets, and make the
        plan's specialised step for these inputs: the specialised ops' lines and the others'
        kernel calls as straight-line code (`Specialized`). Only ops whose inputs are all fed or
        read arrays, or outputs of specialised ops, are specialised: those inputs' types,
        shapes and dtypes follow from the step's inputs, which the specialised step checks."""
        from .executor import raise_failure
        sig = self._signature(env)
        self.traces += 1
        known = {slot for slot in self._sig_slots() if type(env[slot]) is np.ndarray}
        specials, shrunk = [], {}
        step = None
        try:
            for tag, ops in self.runs(True):
                if mem is not None:
                    mem.phase(tag)
                for step, run in ops:
                    special = _special_for(step, env, known)
                    run(env, step)
                    specials.append(special)
                    outs = [i for _, i in step.outs1] + [i for _, idx in step.outsN
                                                         for i in idx if i >= 0]
                    if special is not None:
                        known.update(outs)
                    else:
                        known.difference_update(outs)
                    known.difference_update(step.frees)
                    for slot in step.shrinks:
                        if slot in known:
                            shrunk[(step.index, slot)] = env[slot]
                if mem is not None:
                    mem.phase_done(tag)
        except Exception as err:
            raise_failure(step, env, self, mem, err)
        if len(self._specials) >= MAX_SPECIALS:
            self._specials.pop(next(iter(self._specials)))
        made = Specialized(self, specials, shrunk, sig, env)
        made.writes_in_place = self._writes_in_place(specials)
        self._specials[sig] = self._special = made

    def _writes_in_place(self, specials):
        """True when every persistable the plan writes is written only by specialised ops
        updating their input's array in place (Special.in_place): the step then leaves each
        scope variable its array, and has none to retag (exec_memory.retag_writes)."""
        writes = {self.slot_of[n] for n in self.writes}
        for step, special in zip(self.steps, specials):
            outs = {i for _, i in step.outs1} | {i for _, idx in step.outsN for i in idx}
            for slot in outs & writes:
                if (special is None or not special.in_place
                        or slot not in {i for _, i in step.ins1}):
                    return False
        return True

    def _skip_unread_grads(self, block, keep):
        """Gradient ops do not compute gradients that no op reads, nobody fetches and no
        scope keeps (Paddle computes every gradient it names; the values are the same, this
        only saves the work). Programs with sub-blocks keep everything: their control ops
        read variables by name."""
        if len(self.program.blocks) > 1:
            return
        read = {n for op in block.ops for n in op.input_arg_names} | keep
        for step in self.steps:
            if not step.type.endswith("_grad"):
                continue
            dead = {k for k, _ in step.outs1 if k.endswith("@GRAD") and
                    _unused(step.op.outputs[k][0], read, self.program)}
            if dead:
                step.outs1 = tuple((k, i) for k, i in step.outs1 if k not in dead)
                step.ctx.want = step.ctx.want - dead

    def _slot(self, name):
        if name not in self.slot_of:
            self.slot_of[name] = len(self.slot_of)

    def _number_vars(self, block, fed, produced, reads=None):
        """Number every variable the ops of `block` (and of their sub-blocks, at the point
        the op holding them runs) use; (names produced, names read before any op wrote them)."""
        reads = [] if reads is None else reads
        for op in block.ops:
            for name in op.input_arg_names:
                if name not in produced and name not in fed and name not in self.slot_of:
                    reads.append(name)
                self._slot(name)
            sub = op.attrs.get("sub_block")
            if hasattr(sub, "ops"):
                self._number_vars(sub, fed, produced, reads)
            for name in op.output_arg_names:
                self._slot(name)
                produced.add(name)
        return produced, reads

    def _compile_ops(self, block, xp, place, order=None):
        order = range(len(block.ops)) if order is None else order
        steps = [PlanOp(block.ops[i], i, self.slot_of, xp, self.rng, place) for i in order]
        for step in steps:
            if self.lod_mode:
                step.fn = sharing(step.type, step.fn)
            if get_op_def(step.type).control:
                sub = step.op.attrs.get("sub_block")
                step.ctx.sub = self._compile_ops(sub, xp, place) if hasattr(sub, "ops") else ()
                step.ctx.slots = self.slot_of
                self.control_steps.append(step)
        return steps

    def bind_env(self, env):
        """Give the control-flow steps this step's variables."""
        for step in self.control_steps:
            step.ctx.env = env

    def _check_reads(self, block, reads):
        """Every value read before any op writes it must be persistable (it comes from the
        scope); anything else had to be fed."""
        for name in reads:
            var = _lookup(block.program, name)
            if var is None:
                raise FeedError(f"variable {name!r} is used by the program but not declared in it")
            if not var.persistable:
                users = [op for op in block.ops if name in op.input_arg_names]
                user = f"op {users[0].type}{users[0].where()}" if users else "a fetch"
                kind = "data variable" if var.is_data else "variable"
                raise FeedError(f"{kind} {name!r}{where(var.callsite)} is needed by {user} but "
                                f"was not fed and no op computes it. Feed it: "
                                f"exe.run(feed={{{name!r}: array, ...}})")
        return reads

    # --- memory plan -------------------------------------------------------------------------
    def _last_uses(self):
        """name -> (index of the last op needing its value, index of its last use at all)."""
        last_value, last_any = {}, {}
        for step in self.steps:
            shape_slots = get_op_def(step.type).shape_only
            for slot, names in step.op.inputs.items():
                for name in names:
                    last_any[name] = step.index
                    if slot not in shape_slots:
                        last_value[name] = step.index
            for name in _sub_block_names(step.op):  # a sub-block's reads and writes
                last_any[name] = last_value[name] = step.index
            for name in step.op.output_arg_names:
                last_any[name] = last_value[name] = step.index
        return last_value, last_any

    def _plan_memory(self, block, keep, gc, inplace, gc_fraction):
        last_value, last_any = self._last_uses()
        temporaries = {n for n in last_any if n != EMPTY_VAR_NAME and n not in keep
                       and n in block.vars and not block.vars[n].persistable}
        # kept for the memory trace, whatever this plan's settings: what GC could free and
        # where, and which outputs inplace could write into which input (for simulations)
        self.last_value_use = {n: last_value[n] for n in temporaries}
        self.inplace_possible = {}
        name_of = {i: n for n, i in self.slot_of.items()}
        frees, shrinks = {}, {}
        for name in _largest_share(temporaries, block, gc_fraction) if gc else ():
            at = last_value[name]
            target = shrinks if last_any[name] > at else frees
            target.setdefault(at, []).append(self.slot_of[name])
        for step in self.steps:
            step.frees = tuple(frees.get(step.index, ()))
            step.shrinks = tuple(shrinks.get(step.index, ()))
            possible = self._inplace_candidates(step, block, temporaries, last_value)
            if possible:
                self.inplace_possible[step.index] = [
                    [step.op.outputs[o][0], name_of[i]] for o, i in possible]
            if inplace:
                step.inplace = possible

    def _inplace_candidates(self, step, block, temporaries, last_value):
        found = []
        for out_slot, in_slot in get_op_def(step.type).inplace.items():
            ins, outs = step.op.inputs.get(in_slot, ()), step.op.outputs.get(out_slot, ())
            if len(ins) != 1 or len(outs) != 1 or outs[0] == EMPTY_VAR_NAME:
                continue
            src, dst = block.vars.get(ins[0]), block.vars.get(outs[0])
            if (ins[0] in temporaries and last_value.get(ins[0]) == step.index
                    and src.shape == dst.shape and src.dtype == dst.dtype):
                found.append((out_slot, self.slot_of[ins[0]]))
        return tuple(found)

    def bind(self, scope):
        """(slot, scope variable) pairs for reads and writes, cached per scope."""
        return self.scope_io(scope).pairs

    def scope_io(self, scope):
        """The plan's reads and writes bound to `scope`'s variables (a ScopeIO, with the
        functions a step loads and stores them with), cached per scope."""
        last_scope, bound = self._last_binding
        if last_scope() is scope:  # (the common case: the scope of the previous step)
            return bound
        bound = self._bindings.get(scope)
        if bound is None:
            reads = [(self.slot_of[n], scope.find_var(n) or scope.var(n)) for n in self.reads]
            writes = [(self.slot_of[n], scope.find_var(n) or scope.var(n)) for n in self.writes]
            bound = self._bindings[scope] = ScopeIO(reads, writes)
        self._last_binding = (weakref.ref(scope), bound)
        return bound


class ScopeIO:
    """A plan's persistables bound to one scope: `reads` and `writes`, [(slot, scope
    variable)], and as straight-line code (each variable and slot written in, no loop):
    `load(env)` puts each read variable's value in its slot, in order, and returns the first
    variable found without a value (None when all have one; the slots after it are not
    loaded); `store(env)` gives each written variable its slot's value and counts the write
    (ScopeVar.writes), in order."""

    __slots__ = ("reads", "writes", "pairs", "load", "store")

    def __init__(self, reads, writes):
        self.reads, self.writes = reads, writes
        self.pairs = (reads, writes)
        load, store = [], []
        for k, (slot, _) in enumerate(reads):
            load += [f"env[{slot}] = v = r{k}.value", "if v is None:", f"    return r{k}"]
        for k, (slot, _) in enumerate(writes):
            store += [f"w{k}.value = env[{slot}]", f"w{k}.writes += 1"]
        # (the variables are the maker's arguments, closed over: no reference cycle keeps
        # them, and their values, alive once the scope or the plan is gone)
        args = [f"r{k}" for k in range(len(reads))] + [f"w{k}" for k in range(len(writes))]
        source = (f"def make({', '.join(args)}):\n"
                  "    def load(env):\n" + "".join(f"        {line}\n" for line in load) +
                  "        return None\n"
                  "    def store(env):\n" + "".join(f"        {line}\n" for line in store) +
                  "        return None\n"
                  "    return load, store\n")
        namespace = {}
        exec(compile(source, f"<scope io of {len(reads)} reads, {len(writes)} writes>", "exec"),
             namespace)
        self.load, self.store = namespace["make"](*[holder for _, holder in reads],
                                                  *[holder for _, holder in writes])


def feed_function(feed_slots, accepted):
    """`feed_in(feed, env)` for a plan's `feed_slots` [(slot, variable)] as straight-line code:
    when every fed value is a NumPy array of the shape and dtype the plan took one as it is
    before (`accepted`, filled by executor._accepted_feed), puts each in its slot and returns
    (their shapes, in order; the batch size: the first dimension of the first of them that
    has one, else None); else returns None, having put nothing in `env` (the executor then
    checks each value: executor._feed_values)."""
    lines = ["def feed_in(feed, env):"]
    for k, (_, var) in enumerate(feed_slots):
        lines += [f"    v{k} = feed[{var.name!r}]",
                  f"    if type(v{k}) is not ndarray:", "        return None",
                  f"    s{k} = v{k}.shape",
                  f"    if accepted[{k}] != (s{k}, v{k}.dtype):", "        return None"]
    lines += [f"    env[{slot}] = v{k}" for k, (slot, _) in enumerate(feed_slots)]
    batch = "None"
    for k in reversed(range(len(feed_slots))):
        batch = f"s{k}[0] if s{k} else {batch}"
    shapes = "(" + "".join(f"s{k}, " for k in range(len(feed_slots))) + ")"
    lines.append(f"    return {shapes}, {batch}")
    namespace = {"ndarray": np.ndarray, "accepted": accepted}
    exec(compile("\n".join(lines) + "\n", f"<feed of {len(feed_slots)} variables>", "exec"),
         namespace)
    return namespace["feed_in"]


# --- op runners ------------------------------------------------------------------------------
_FACTORIES = {}  # an op's signature (see `runner`) -> the function making its runners


def runner(step, free):
    """A function `run(env, step)` doing exactly what executor._run_op(step, env, False, free)
    does for this op (grant inplace reuse, gather the inputs into a dict in the same order,
    call `step.fn` (looked up at each call), store the outputs in order, then the frees and
    shrinks when `free`), with the slots written into the code: no loops over the op's slot
    tuples and no comprehension frame per op. The inputs' dict and the kernel's result stay
    referenced until the runner returns, as they do in _run_op. Ops with duplicable inputs or
    outputs use _run_op itself. One code object per signature (slot names, numbers of frees
    and shrinks, inplace or not), shared by every op and plan with that signature."""
    if step.insN or step.outsN:
        from .executor import _run_op

        def run(env, op, _free=bool(free)):
            _run_op(op, env, False, _free)
        return run
    frees, shrinks = (step.frees, step.shrinks) if free else ((), ())
    signature = (tuple(k for k, _ in step.ins1), tuple(k for k, _ in step.outs1), len(frees),
                 len(shrinks), bool(step.inplace))
    factory = _FACTORIES.get(signature)
    if factory is None:
        factory = _FACTORIES[signature] = _runner_factory(*signature)
    return factory(*(i for _, i in step.ins1), *(i for _, i in step.outs1), *frees, *shrinks)


def _runner_factory(in_keys, out_keys, n_frees, n_shrinks, inplace):
    ins = [f"i{n}" for n in range(len(in_keys))]
    outs = [f"o{n}" for n in range(len(out_keys))]
    frees = [f"f{n}" for n in range(n_frees)]
    shrinks = [f"s{n}" for n in range(n_shrinks)]
    body = _op_lines(in_keys, ins, out_keys, outs, frees, shrinks, inplace)
    source = (f"def make({', '.join(ins + outs + frees + shrinks)}):\n"
              "    def run(env, op):\n" + "".join(f"        {line}\n" for line in body) +
              "    return run\n")
    namespace = {"exclusive": exclusive, "shape_only": shape_only}
    exec(compile(source, f"<op runner {len(in_keys)}-{len(out_keys)}>", "exec"), namespace)
    return namespace["make"]


def _op_lines(in_keys, ins, out_keys, outs, frees, shrinks, inplace):
    """The statements running the op named `op` in the code, as executor._run_op does (its
    slots given as code: names or numbers). The inputs' dict and the kernel's result stay
    referenced until the frees are done."""
    lines = []
    if inplace:
        lines.append("op.ctx.inplace = [o for o, i in op.inplace if exclusive(env[i], op.ctx.xp)]")
    lines.append("ins = {" + ", ".join(f"{k!r}: env[{i}]" for k, i in zip(in_keys, ins)) + "}")
    lines.append("res = op.fn(op.ctx, ins, op.attrs)")
    lines += [f"env[{o}] = res[{k!r}]" for k, o in zip(out_keys, outs)]
    lines += [f"env[{f}] = None" for f in frees]
    lines += [f"env[{s}] = shape_only(env[{s}])" for s in shrinks]
    return lines


def straight_function(segments):
    """A function `run(plan, env, mem)` that runs the ops of `segments` ([(tag, ops)]) in
    order, each as executor._run_op(op, env, False, True) does, as straight-line code: each
    op's slots written into the code (no loop over the ops or their slot tuples, no call
    per op besides its kernel's). `mem` (a Serving, or None) opens and closes each segment's
    phase; `step.fn` is looked up at each call. A failing op is reported by
    executor.raise_failure. Ops with duplicable inputs or outputs go through _run_op."""
    from .executor import _run_op, raise_failure
    ops, lines = [], []
    for tag, steps in segments:
        lines.append(f"if mem is not None: mem.phase({tag!r})")
        for step in steps:
            lines.append(f"op = ops[{len(ops)}]  # {step.type}")
            ops.append(step)
            if step.insN or step.outsN:
                lines.append("run_op(op, env, False, True)")
                continue
            lines += _op_lines([k for k, _ in step.ins1], [i for _, i in step.ins1],
                               [k for k, _ in step.outs1], [i for _, i in step.outs1],
                               step.frees, step.shrinks, bool(step.inplace))
            lines.append("ins = res = None")
        lines.append(f"if mem is not None: mem.phase_done({tag!r})")
    source = ("def make(ops):\n"
              "    def run(plan, env, mem):\n"
              "        op = None\n"
              "        try:\n"
              "            pass\n" + "".join(f"            {line}\n" for line in lines) +
              "        except Exception as err:\n"
              "            raise_failure(op, env, plan, mem, err)\n"
              "    return run\n")
    namespace = {"exclusive": exclusive, "shape_only": shape_only, "run_op": _run_op,
                 "raise_failure": raise_failure}
    exec(compile(source, f"<plan of {len(ops)} ops>", "exec"), namespace)
    return namespace["make"](tuple(ops))


MAX_SPECIALS = 8  # input signatures whose specialised steps a plan keeps
MAX_TRACES = 32  # steps a plan traces; then it keeps the specialised steps it has


def _value_sig(value):
    if type(value) is np.ndarray:
        return (np.ndarray, value.shape, value.dtype)
    return (type(value),)


def _special_for(step, env, known):
    """The op's Special for the inputs it is about to get, or None (see Plan.trace)."""
    opdef = get_op_def(step.type)
    if (opdef.special is None or step.fn is not opdef.special_for or step.insN or step.outsN
            or step.inplace or opdef.control or any(i not in known for _, i in step.ins1)):
        return None
    try:
        special = opdef.special(step, {k: env[i] for k, i in step.ins1})
    except Exception:  # (a specialiser that cannot read these inputs: the kernel runs)
        return None
    if special is None:
        return None
    text = "".join(special.lines)
    ins = {i for _, i in step.ins1}
    if not special.aliasing and any(i in ins for _, i in step.outs1):
        return None
    if all("{" + k + "}" in text or i in ins for k, i in step.outs1):
        return special
    return None


class Specialized:
    """A plan's step specialised for one signature of its inputs (Plan.trace): `run(plan,
    env, mem)` runs it as the straight-line step does (`straight_function`), with each
    specialised op's lines in place of its kernel call; `same(env)` checks the inputs as
    Plan.special does."""

    def __init__(self, plan, specials, shrunk, sig, env):
        self.kernel_sets = plan.kernel_sets[0]
        self.sig = sig
        self.feeds = [(slot, type(env[slot]), getattr(env[slot], "shape", None),
                       getattr(env[slot], "dtype", None)) for slot, _ in plan.feed_slots]
        self.read_slots = [plan.slot_of[n] for n in plan.reads]
        self.slots = plan._sig_slots()
        self.known = KnownReads()  # (the generated code's globals hold this, not the
        # Specialized: its functions in its attributes would make a reference cycle, which
        # kept it and its constants alive until Python's cycle collector ran)
        self.remember(env)
        check = _check_lines(self.feeds, self.read_slots)
        self.run = _specialized_function(plan.segments, specials, shrunk, check, self.known)
        self.same = _same_function(check, self.known)

    def remember(self, env):
        """Keep the read values of `env` (weak references) for `same`."""
        self.known.reads = tuple(_weak(env[slot]) for slot in self.read_slots)

    def like(self, env):
        return tuple([_value_sig(env[slot]) for slot in self.slots]) == self.sig


class KnownReads:
    """The read values a Specialized step was made for (`reads`: weak references), as its
    generated check reads them (`known.reads`)."""

    __slots__ = ("reads",)

    def __init__(self):
        self.reads = ()


def _weak(value):
    try:
        return weakref.ref(value)
    except TypeError:  # (a value without weak references: compared by its signature)
        return lambda: _NEVER


_NEVER = object()


def _check_lines(feeds, read_slots):
    """(lines returning False unless the fed values have the recorded types (and the arrays
    the recorded shapes and dtypes: a fed value of another type is not one that a specialised
    op reads, see Plan.trace), and the read values are the recorded ones (weak references in
    `known.reads`), the constants they use)."""
    lines = []
    consts = {"ndarray": np.ndarray}
    for k, (slot, kind, shape, dtype) in enumerate(feeds):
        consts[f"ft{k}"], consts[f"s{k}"], consts[f"d{k}"] = kind, shape, dtype
        if kind is not np.ndarray:
            lines += [f"if type(env[{slot}]) is not ft{k}:", "    return False"]
            continue
        lines += [f"v = env[{slot}]",
                  f"if type(v) is not ndarray or v.shape != s{k} or v.dtype != d{k}:",
                  "    return False"]
    lines.append("r = known.reads")
    checks = [f"env[{slot}] is not r[{k}]()" for k, slot in enumerate(read_slots)]
    if checks:
        lines += ["if " + " or ".join(checks) + ":", "    return False"]
    return lines, consts


def _same_function(check, known):
    """`same(env)`: True when `check` (_check_lines) passes (`known`: the KnownReads)."""
    lines, consts = check
    namespace = dict(consts, known=known)
    source = ("def same(env):\n" + "".join(f"    {line}\n" for line in lines) +
              "    return True\n")
    exec(compile(source, "<specialised step's check>", "exec"), namespace)
    return namespace["same"]


def _specialized_function(segments, specials, shrunk, check, known):
    """straight_function's code with each specialised op's lines (its Special) in place of
    the kernel call; a shrunk value that the trace saw as a known array's is replaced by the
    ShapeOnly made there (its shape and dtype are the signature's). The function returns
    False, having run nothing, where `check` (_check_lines) finds other inputs; else True."""
    from .executor import _run_op, raise_failure
    ops, lines = [], []
    namespace = {"exclusive": exclusive, "shape_only": shape_only, "run_op": _run_op,
                 "raise_failure": raise_failure, "known": known, **check[1]}
    k = 0
    line_ops = []  # the op (its number in ops) of each line of `lines`, or None
    # the Serving's phases (exec_memory.Serving.phase, phase_done) written in
    lines.append("if mem is not None: pool, peaks = mem.pool, mem.peaks")
    line_ops.append(None)
    for tag, steps in segments:
        lines.append(f"if mem is not None: pool.tag = {tag!r}; pool.window_peak = pool.allocated")
        line_ops.append(None)
        for step in steps:
            n = len(ops)
            start = len(lines)
            lines.append(f"# {step.type}")  # (the op failing is found from its lines)
            ops.append(step)
            special = specials[k]
            k += 1
            if special is None:
                lines.append(f"op = ops[{n}]")
                if step.insN or step.outsN:
                    lines.append("run_op(op, env, False, True)")
                    line_ops += [n] * (len(lines) - start)
                    continue
                lines += _op_lines([k_ for k_, _ in step.ins1], [i for _, i in step.ins1],
                                   [k_ for k_, _ in step.outs1], [i for _, i in step.outs1],
                                   step.frees, (), bool(step.inplace))
                lines.append("ins = res = None")
            else:
                names = {key: f"env[{i}]" for key, i in step.ins1}
                names.update({key: f"env[{i}]" for key, i in step.outs1})
                for name, value in special.consts.items():
                    names[f"k_{name}"] = f"k{n}_{name}"
                    namespace[f"k{n}_{name}"] = value
                temps = {f"t{j}": f"t{j}" for j in range(4)}
                body = [line.format_map({**names, **temps}) for line in special.lines]
                lines += body
                used = [t for t in temps if any(t in line for line in body)]
                lines += [f"env[{f}] = None" for f in step.frees]
                if used:
                    lines.append(" = ".join(used) + " = None")
            for s in step.shrinks:
                found = shrunk.get((step.index, s))
                if found is not None:
                    namespace[f"so{n}_{s}"] = found
                    lines.append(f"env[{s}] = so{n}_{s}")
                else:
                    lines.append(f"env[{s}] = shape_only(env[{s}])")
            line_ops += [n] * (len(lines) - start)
        lines += ["if mem is not None:", "    peak = pool.window_peak",
                  f"    if peak > peaks.get({tag!r}, 0): peaks[{tag!r}] = peak"]
        line_ops += [None] * 3
    head = ["def make(ops, failing):", "    def run(plan, env, mem):"]
    head += [f"        {line}" for line in check[0]]
    head += ["        op = None", "        try:", "            pass"]
    first = len(head) + 1  # (the line number of lines[0])
    namespace["failing"] = {first + i: n for i, n in enumerate(line_ops) if n is not None}
    source = ("\n".join(head) + "\n" + "".join(f"            {line}\n" for line in lines) +
              "        except Exception as err:\n"
              "            n = failing.get(err.__traceback__.tb_lineno)\n"
              "            raise_failure(ops[n] if n is not None else op, env, plan, mem, err)\n"
              "        return True\n"
              "    return run\n")
    exec(compile(source, f"<specialised plan of {len(ops)} ops>", "exec"), namespace)
    run = namespace["make"](tuple(ops), namespace["failing"])
    run.source = source
    return run


def creation_order_of(ops):
    """Op indices in an order that keeps every data dependency (read after write, write after
    read or write) and otherwise runs ops listed later first. Fluid prepends initializer ops
    to the startup program, so this runs them in the order the parameters were created: the
    memory pool then lays the parameters out as it did before initializers were prepended,
    which keeps later steps from splitting blocks the layout left fragmented."""
    import heapq
    deps = [set() for _ in ops]
    writer, readers = {}, {}
    for i, op in enumerate(ops):
        for name in op.input_arg_names:
            if name in writer:
                deps[i].add(writer[name])
            readers.setdefault(name, []).append(i)
        for name in op.output_arg_names:
            if name in writer:
                deps[i].add(writer[name])
            deps[i].update(r for r in readers.get(name, ()) if r != i)
            writer[name], readers[name] = i, []
    users = [[] for _ in ops]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [-i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = -heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, -u)
    return order


def _unused(name, read, program):
    if name in read:
        return False
    var = _lookup(program, name)
    return var is None or not var.persistable


def _lookup(program, name):
    """The variable called `name` in any block of the program (None if there is none)."""
    for block in program.blocks:
        var = block.vars.get(name)
        if var is not None:
            return var
    return None


def _sub_block_names(op):
    sub = op.attrs.get("sub_block")
    if not hasattr(sub, "ops"):
        return ()
    names = []
    for inner in sub.ops:
        names.extend(inner.input_arg_names)
        names.extend(inner.output_arg_names)
        names.extend(_sub_block_names(inner))
    return names


def _largest_share(temporaries, block, fraction):
    """The largest `fraction` of the temporaries by declared size (-1 dims count as 1), as
    FLAGS_memory_fraction_of_eager_deletion selects what GC may free."""
    if fraction >= 1.0:
        return temporaries
    def size(name):
        var = block.vars[name]
        numel = 1
        for d in var.shape or ():
            numel *= max(int(d), 1)
        return numel * (var.dtype.itemsize if var.dtype is not None else 4)
    ranked = sorted(temporaries, key=lambda n: (-size(n), n))
    return set(ranked[:int(round(fraction * len(ranked)))])


_ROLE_TAGS = ((1, "gradients"), (2, "optimizer"), (16, "optimizer"))


def _op_tag(step, block, is_startup):
    """Memory category of an op's allocations: what its outputs are (startup) or its role."""
    if is_startup:
        outs = [block.vars.get(n) for n in step.op.output_arg_names]
        return ("parameters" if any(hasattr(v, "trainable") for v in outs if v is not None)
                else "optimizer_state")
    for bit, tag in _ROLE_TAGS:
        if step.role & bit:
            return tag
    return "activations"


def _segments(steps, block, is_startup):
    """[(tag, ops)]: runs of consecutive ops whose allocations share a memory category."""
    segments = []
    for step in steps:
        step.tag = _op_tag(step, block, is_startup)
        if segments and segments[-1][0] == step.tag:
            segments[-1][1].append(step)
        else:
            segments.append((step.tag, [step]))
    return [(tag, tuple(ops)) for tag, ops in segments]
