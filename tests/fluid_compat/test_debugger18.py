"""fluid.debugger as Fluid 1.8 prints programs: per block '// block-i  parent-j', the
variables ('Tensor', 'LoDTensor (level=..)', 'SelectedRows', 'TensorArray' with dtype and
shape), then the ops as 'outputs = type(Slot=arg, ...) [{attrs}]' (fill_constant as
'out = value [shape=...]'), gradient variables and ops hidden unless show_backward; and
draw_block_graphviz writes a DOT graph of a block."""

import runtime as fluid
from runtime import debugger
from runtime.dtypes import VarType


def _program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="rows", dtype="float32", shape=[5, 10],
                         type=VarType.SELECTED_ROWS)
        x = fluid.layers.data("x", [3], "float32", lod_level=1)
        y = fluid.layers.fc(x, 2, bias_attr=False)
        one = fluid.layers.fill_constant([1], "float32", 2.5)
        loss = fluid.layers.mean(y * one)
        fluid.backward.append_backward(loss)
    return main


def test_pprint_program_codes_layout():
    text = debugger.pprint_program_codes(_program())
    lines = text.splitlines()
    assert lines[:2] == ["// block-0  parent--1", "// variables"]
    assert "SelectedRows rows (tensor(type=float32, shape=[5, 10]))" in lines
    assert "LoDTensor x (level=1, tensor(type=float32, shape=[-1, 3]))" in lines
    assert "Tensor fc_0.w_0 (tensor(type=float32, shape=[3, 2]))" in lines
    ops = lines[lines.index("// operators") + 1:]
    assert ops[0].startswith("fc_0.tmp_0 = mul(X=x, Y=fc_0.w_0) [{")
    assert "x_num_col_dims=1" in ops[0]
    assert any(line.startswith("fill_constant_0.tmp_0 = 2.5 [shape=[1]]") for line in ops)
    assert not any("@GRAD" in line or "_grad(" in line for line in lines)


def test_show_backward_and_graphviz(tmp_path):
    main = _program()
    text = debugger.pprint_block_codes(main.global_block(), show_backward=True)
    assert "mul_grad(" in text and "fc_0.w_0@GRAD" in text
    path = debugger.draw_block_graphviz(main.global_block(), highlights=["mul"],
                                        path=str(tmp_path / "g.dot"))
    dot = open(path).read()
    assert dot.startswith("digraph G {") and dot.rstrip().endswith("}")
    assert 'label="mul", shape=record' in dot and "color=red" in dot
    assert 'label="fc_0.w_0\\n' in dot  # a parameter: a box with its type
