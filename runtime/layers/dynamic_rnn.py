"""fluid.layers.DynamicRNN (Fluid 1.8): an RNN over LoD sequences of different lengths.

    drnn = fluid.layers.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(sentence)          # this step's element of every sequence
        prev = drnn.memory(shape=[200])           # or memory(init=boot)
        hidden = fluid.layers.fc([word, prev], size=200, act='tanh')
        drnn.update_memory(prev, hidden)
        drnn.output(hidden)
    outputs = drnn()                              # a LoD tensor shaped like the input

It is built, as in Paddle, from a While loop over time steps and the LoD ops: the sequences
are sorted by length (lod_rank_table), cut into one array entry per step
(lod_tensor_to_array), and at step t only the sequences longer than t run (shrink_memory);
array_to_lod_tensor puts the outputs back in the input's order. Gradients flow through all of
it (the While op's and the LoD ops' gradient rules)."""

import contextlib

from .. import unique_name
from ..dtypes import VarType
from ..framework import Variable
from ..layer_helper import LayerHelper
from .lod import array_to_lod_tensor, shrink_memory
from .logic import increment, less_than
from .loops import While, array_read, array_write
from .tensor import fill_constant

__all__ = ["DynamicRNN"]


class DynamicRNN:
    BEFORE_RNN, IN_RNN, AFTER_RNN = 0, 1, 2

    def __init__(self, name=None):
        self.helper = LayerHelper("dynamic_rnn", name=name)
        self.status = DynamicRNN.BEFORE_RNN
        self.lod_rank_table = None
        self.max_seq_len = None
        self.step_idx = None
        self.zero_idx = None
        self.mem_dict = {}
        self.output_array = []
        self.outputs = []
        self.cond = self.helper.create_variable_for_type_inference(dtype="bool")
        self.cond.stop_gradient = False
        self.while_op = While(self.cond)
        self.input_array = []
        self.mem_link = []

    # --- inputs ------------------------------------------------------------------------------
    def step_input(self, x, level=0):
        """This step's element of each sequence of x (sorted longest first)."""
        self._assert_in_rnn_block("step_input")
        if not isinstance(x, Variable):
            raise TypeError("step_input() can only take a Variable as its input.")
        parent = self._parent_block()
        if self.lod_rank_table is None:
            self._make_rank_table(parent, x, level)
        array = parent.create_var(name=unique_name.generate("dynamic_rnn_input_array"),
                                  type=VarType.LOD_TENSOR_ARRAY, dtype=x.dtype)
        self.input_array.append((array, x.dtype))
        parent.append_op("lod_tensor_to_array", inputs={"X": x, "RankTable": self.lod_rank_table},
                         outputs={"Out": array})
        array.lod_level = max(x.lod_level - 1, 0)
        return array_read(array=array, i=self.step_idx)

    def _make_rank_table(self, parent, x, level):
        self.lod_rank_table = parent.create_var(name=unique_name.generate("lod_rank_table"),
                                                type=VarType.LOD_RANK_TABLE)
        self.lod_rank_table.stop_gradient = True
        parent.append_op("lod_rank_table", inputs={"X": x},
                         outputs={"Out": self.lod_rank_table}, attrs={"level": level})
        self.max_seq_len = parent.create_var(
            name=unique_name.generate("dynamic_rnn_max_seq_len"), dtype="int64")
        self.max_seq_len.stop_gradient = False
        parent.append_op("max_sequence_len", inputs={"RankTable": self.lod_rank_table},
                         outputs={"Out": self.max_seq_len})
        self.cond.stop_gradient = True
        parent.append_op("less_than", inputs={"X": self.step_idx, "Y": self.max_seq_len},
                         outputs={"Out": self.cond}, attrs={"force_cpu": True})

    def static_input(self, x):
        """x, the same at every step, reordered like the sequences and cut to those running."""
        self._assert_in_rnn_block("static_input")
        if not isinstance(x, Variable):
            raise TypeError("static_input() can only take a Variable as its input")
        if self.lod_rank_table is None:
            raise RuntimeError("static_input() must be called after step_input().")
        parent = self._parent_block()
        reordered = parent.create_var(
            name=unique_name.generate("dynamic_rnn_static_input_reordered"),
            type=VarType.LOD_TENSOR, dtype=x.dtype)
        parent.append_op("reorder_lod_tensor_by_rank",
                         inputs={"X": [x], "RankTable": [self.lod_rank_table]},
                         outputs={"Out": [reordered]})
        return shrink_memory(reordered, self.step_idx, self.lod_rank_table)

    # --- the loop ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def block(self):
        if self.status != DynamicRNN.BEFORE_RNN:
            raise ValueError("rnn.block() can only be invoke once")
        self.step_idx = fill_constant(shape=[1], dtype="int64", value=0, force_cpu=True)
        self.step_idx.stop_gradient = False
        self.status = DynamicRNN.IN_RNN
        with self.while_op.block():
            yield
            increment(x=self.step_idx, value=1.0, in_place=True)
            for new_mem, mem_array in self.mem_link:
                array_write(x=new_mem, i=self.step_idx, array=mem_array)
            less_than(x=self.step_idx, y=self.max_seq_len, force_cpu=True, cond=self.cond)
        self.status = DynamicRNN.AFTER_RNN
        for array in self.output_array:
            self.outputs.append(array_to_lod_tensor(x=array, table=self.lod_rank_table))

    def __call__(self, *args, **kwargs):
        if self.status != DynamicRNN.AFTER_RNN:
            raise ValueError("Output of the dynamic RNN can only be visited outside the rnn "
                             "block.")
        return self.outputs[0] if len(self.outputs) == 1 else self.outputs

    # --- memories and outputs -------------------------------------------------------------------
    def memory(self, init=None, shape=None, value=0.0, need_reorder=False, dtype="float32"):
        """The value carried from the previous step: `init` at step 0 (reordered like the
        sequences when need_reorder), or `value` filled to [batch] + shape."""
        self._assert_in_rnn_block("memory")
        self._init_zero_idx()
        if init is None:
            return self.memory(init=self._filled_init(shape, value, dtype))
        if not isinstance(init, Variable):
            raise TypeError("The input arg `init` of memory() must be a Variable")
        parent = self._parent_block()
        if need_reorder:
            if self.lod_rank_table is None:
                raise ValueError("If set need_reorder to True, make sure step_input be invoked "
                                 "before memory(init=init, need_reordered=True, ...).")
            reordered = parent.create_var(
                name=unique_name.generate("dynamic_rnn_mem_init_reordered"),
                type=VarType.LOD_TENSOR, dtype=init.dtype)
            parent.append_op("reorder_lod_tensor_by_rank",
                             inputs={"X": [init], "RankTable": [self.lod_rank_table]},
                             outputs={"Out": [reordered]})
            init = reordered
        mem_array = parent.create_var(name=unique_name.generate("dynamic_rnn_mem_array"),
                                      type=VarType.LOD_TENSOR_ARRAY, dtype=init.dtype)
        parent.append_op("write_to_array", inputs={"X": init, "I": self.zero_idx},
                         outputs={"Out": mem_array})
        current = array_read(array=mem_array, i=self.step_idx)
        current = shrink_memory(x=current, i=self.step_idx, table=self.lod_rank_table)
        self.mem_dict[current.name] = mem_array
        return current

    def _filled_init(self, shape, value, dtype):
        if not self.input_array:
            raise ValueError("step_input should be invoked before memory(shape=..., value=...)")
        parent = self._parent_block()
        init = parent.create_var(name=unique_name.generate("mem_init"), dtype=dtype)
        array, in_dtype = self.input_array[0]
        first = parent.create_var(name=unique_name.generate("in0"), dtype=in_dtype)
        parent.append_op("read_from_array", inputs={"X": [array], "I": [self.zero_idx]},
                         outputs={"Out": [first]})
        parent.append_op("fill_constant_batch_size_like", inputs={"Input": [first]},
                         outputs={"Out": [init]},
                         attrs={"shape": [-1] + list(shape), "value": float(value),
                                "dtype": init.dtype})
        return init

    def update_memory(self, ex_mem, new_mem):
        """The memory `ex_mem` holds `new_mem` at the next step."""
        self._assert_in_rnn_block("update_memory")
        if not isinstance(ex_mem, Variable):
            raise TypeError("The input arg `ex_mem` of update_memory() must be a Variable")
        if not isinstance(new_mem, Variable):
            raise TypeError("The input arg `new_mem` of update_memory() must be a Variable")
        mem_array = self.mem_dict.get(ex_mem.name)
        if mem_array is None:
            raise ValueError("Please invoke memory before update_memory")
        if self.lod_rank_table is None:
            raise ValueError("Please invoke step_input before update_memory")
        self.mem_link.append((new_mem, mem_array))

    def output(self, *outputs):
        """Collect these step values; drnn() gives them as LoD tensors."""
        self._assert_in_rnn_block("output")
        parent = self._parent_block()
        for each in outputs:
            array = parent.create_var(
                name=unique_name.generate(f"{self.helper.name}_output_array_{each.name}"),
                type=VarType.LOD_TENSOR_ARRAY, dtype=each.dtype)
            array_write(x=each, i=self.step_idx, array=array)
            self.output_array.append(array)

    # --- helpers ---------------------------------------------------------------------------
    def _init_zero_idx(self):
        if self.zero_idx is None:
            parent = self._parent_block()
            self.zero_idx = parent.create_var(name=unique_name.generate("zero_idx"),
                                              dtype="int64")
            parent.append_op("fill_constant", outputs={"Out": [self.zero_idx]},
                             attrs={"shape": [1], "dtype": self.zero_idx.dtype, "value": 0.0,
                                    "force_cpu": True})

    def _parent_block(self):
        program = self.helper.main_program
        return program.block(program.current_block().parent_idx)

    def _assert_in_rnn_block(self, method):
        if self.status != DynamicRNN.IN_RNN:
            raise ValueError(f"{method} can only be invoked inside rnn block.")
