"""fluid.layers.StaticRNN (Fluid 1.8): an RNN over the first dimension of its step inputs.

    rnn = fluid.layers.StaticRNN()
    with rnn.step():
        word = rnn.step_input(x)               # x: [seq_len, batch, ...]; word: x[t]
        prev = rnn.memory(init=h0)             # or memory(shape=[-1, d], batch_ref=x)
        hidden = fluid.layers.fc([word, prev], size=d, act='relu')
        rnn.update_memory(prev, hidden)
        rnn.step_output(hidden)
    outputs = rnn()                            # [seq_len, batch, d]

Difference from Paddle: Paddle runs the step block in a `recurrent` op; here, when the block
closes, its ops are unrolled into the parent block once per time step (x[t] is a slice of x,
the memory at step t is the updated value of step t-1, the outputs are stacked). The results
and gradients are the same; the sequence length must be known when the program is built
(x.shape[0] >= 0), as it is for the data StaticRNN is used with."""

import contextlib

from .. import unique_name
from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import slice as slice_, squeeze, stack

__all__ = ["StaticRNN"]


class StaticRNN:
    BEFORE_RNN_BLOCK, IN_RNN_BLOCK, AFTER_RNN_BLOCK = 0, 1, 2

    def __init__(self, name=None):
        self.helper = LayerHelper("static_rnn", name=name)
        self.memories = {}  # pre-memory name -> [init var, pre var, updated var]
        self.inputs = []  # (step var, outer var)
        self.outputs = []
        self.results = []
        self.status = StaticRNN.BEFORE_RNN_BLOCK
        self.seq_len = None

    @contextlib.contextmanager
    def step(self):
        program = self.helper.main_program
        self.status = StaticRNN.IN_RNN_BLOCK
        block = program._create_block()
        try:
            yield
        finally:
            program._rollback()
        self.status = StaticRNN.AFTER_RNN_BLOCK
        self._unroll(block)

    def _assert_in_rnn_block_(self, method):
        if self.status != StaticRNN.IN_RNN_BLOCK:
            raise ValueError(f"You must invoke {method} in rnn block")

    # --- declaring the step -------------------------------------------------------------------
    def memory(self, init=None, shape=None, batch_ref=None, init_value=0.0,
               init_batch_dim_idx=0, ref_batch_dim_idx=1):
        """The value carried between steps: `init` at step 0, or init_value filled to `shape`
        with the batch size taken from batch_ref."""
        self._assert_in_rnn_block_("memory")
        if init is None:
            if shape is None or batch_ref is None:
                raise ValueError("if init is None, memory at least need shape and batch_ref")
            init = self._boot(shape, batch_ref, init_value, init_batch_dim_idx,
                              ref_batch_dim_idx)
        elif not isinstance(init, Variable):
            raise TypeError("StaticRNN.memory: init must be a Variable")
        block = self.helper.main_program.current_block()
        pre = block.create_var(name=unique_name.generate(f"{self.helper.name}@mem"),
                               dtype=init.dtype, shape=init.shape)
        self.memories[pre.name] = [init, pre, None]
        return pre

    def _boot(self, shape, batch_ref, value, init_dim, ref_dim):
        outer = dict((step.name, x) for step, x in self.inputs).get(batch_ref.name, batch_ref)
        program = self.helper.main_program
        parent = program.block(program.current_block().parent_idx)
        boot = parent.create_var(name=unique_name.generate(f"{self.helper.name}@memory_boot"),
                                 shape=list(shape), dtype=outer.dtype)
        parent.append_op("fill_constant_batch_size_like", inputs={"Input": [outer]},
                         outputs={"Out": [boot]},
                         attrs={"value": float(value), "shape": list(shape),
                                "dtype": boot.dtype, "input_dim_idx": ref_dim,
                                "output_dim_idx": init_dim})
        return boot

    def step_input(self, x):
        """x[t] at step t (x: [seq_len, ...])."""
        self._assert_in_rnn_block_("step_input")
        if not isinstance(x, Variable):
            raise TypeError("step input takes a Variable")
        if self.seq_len is None:
            self.seq_len = x.shape[0]
        elif x.shape[0] != -1 and self.seq_len != x.shape[0]:
            raise ValueError("Static RNN only take fix seq_len input")
        block = self.helper.main_program.current_block()
        step = block.create_var(name=unique_name.generate(f"{x.name}@step"), dtype=x.dtype,
                                shape=list(x.shape[1:]))
        self.inputs.append((step, x))
        return step

    def step_output(self, o):
        self._assert_in_rnn_block_("step_output")
        if not isinstance(o, Variable):
            raise TypeError("step output takes a Variable")
        self.outputs.append(o)

    def output(self, *outputs):
        for o in outputs:
            self.step_output(o)

    def update_memory(self, mem, var):
        """The memory `mem` holds `var` at the next step."""
        if not isinstance(mem, Variable) or not isinstance(var, Variable):
            raise TypeError("update memory should take variables")
        if mem.name not in self.memories:
            raise ValueError(f"{mem.name} is not a memory of this StaticRNN")
        self.memories[mem.name][2] = var

    def __call__(self, *args, **kwargs):
        if self.status != StaticRNN.AFTER_RNN_BLOCK:
            raise ValueError("RNN output can only be retrieved after rnn block")
        if not self.results:
            raise ValueError("RNN has no output")
        return self.results[0] if len(self.results) == 1 else self.results

    # --- unrolling ------------------------------------------------------------------------------
    def _unroll(self, block):
        if self.seq_len is None or self.seq_len < 0:
            raise ValueError("StaticRNN: the step inputs' first dimension (the sequence length) "
                             "must be known when the program is built")
        for name, (_, _, updated) in self.memories.items():
            if updated is None:
                raise ValueError(f"StaticRNN: memory {name} is never updated (update_memory)")
        program = self.helper.main_program
        parent = program.block(block.parent_idx)
        current = {name: init.name for name, (init, _, _) in self.memories.items()}
        per_step = [[] for _ in self.outputs]
        for t in range(self.seq_len):
            rename = dict(current)
            for step, x in self.inputs:
                rename[step.name] = squeeze(slice_(x, axes=[0], starts=[t], ends=[t + 1]),
                                            axes=[0]).name
            for op in block.ops:
                _copy_op(op, parent, block, rename, t)
            current = {name: rename.get(upd.name, upd.name)
                       for name, (_, _, upd) in self.memories.items()}
            for k, out in enumerate(self.outputs):
                per_step[k].append(parent._var_recursive(rename.get(out.name, out.name)))
        self.results = [stack(steps, axis=0) for steps in per_step]
        if block.idx == len(program.blocks) - 1:
            program.blocks.pop()  # nothing refers to the step block any more
            program._bump()


def _copy_op(op, parent, block, rename, t):
    """Append op to the parent block for step t: names of the step block's own variables get
    a per-step suffix, the step inputs and memories their step-t variables."""
    inputs = {slot: [rename.get(n, n) for n in names] for slot, names in op.inputs.items()}
    outputs = {}
    for slot, names in op.outputs.items():
        new = []
        for name in names:
            if name in block.vars:
                if name not in rename or rename[name] == name:
                    var = block.vars[name]
                    rename[name] = parent.create_var(
                        name=f"{name}.step_{t}", shape=var.shape, dtype=var.dtype,
                        type=var.type, lod_level=var.lod_level,
                        stop_gradient=var.stop_gradient).name
                new.append(rename[name])
            else:
                new.append(name)
        outputs[slot] = new
    parent.append_op(op.type, inputs=inputs, outputs=outputs,
                     attrs={k: v for k, v in op.attrs.items() if k != "op_role"})
