"""Program/Block/Variable basics: guards, names, clone, data layers, Variable arithmetic."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import ShapeError


def test_program_guard_routes_layers_and_checks_types():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        fluid.layers.fc(x, 2)
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add"]
    assert sorted(v.name for v in startup.global_block().vars.values()) == ["fc_0.b_0",
                                                                             "fc_0.w_0"]
    assert fluid.default_main_program() is not main
    with pytest.raises(TypeError, match="fluid.Program"):
        with fluid.program_guard("not a program"):
            pass


def test_unique_name_guard_restarts_names():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with fluid.unique_name.guard():
            a = fluid.layers.fc(fluid.data("x", [None, 2]), 2)
        with fluid.unique_name.guard():
            b = fluid.layers.fc(fluid.data("y", [None, 2]), 2)
    assert a.name == b.name


def test_legacy_data_prepends_the_batch_dimension():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = fluid.layers.data("a", [3, 4])
        b = fluid.layers.data("b", [3], append_batch_size=False)
        c = fluid.layers.data("c", [-1, 3])
        d = fluid.data("d", [None, 5], dtype="int64")
    assert a.shape == (-1, 3, 4) and b.shape == (3,) and c.shape == (-1, 3)
    assert d.shape == (-1, 5) and d.dtype == fluid.core.VarDesc.VarType.INT64
    assert d.dtype == "int64" and a.stop_gradient and d.is_data


def test_clone_for_test_flips_is_test_and_copies_ops():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, 3])
        block = main.global_block()
        out = block.create_var(name="o", dtype="float32", shape=[-1, 3])
        block.append_op("scale", inputs={"X": x}, outputs={"Out": out}, attrs={"scale": 2.0})
        block.ops[-1].attrs["is_test"] = False
    test = main.clone(for_test=True)
    assert test.global_block().ops[0].attrs["is_test"] is True
    assert main.global_block().ops[0].attrs["is_test"] is False
    test.global_block().ops[0].attrs["scale"] = 5.0
    assert main.global_block().ops[0].attrs["scale"] == 2.0
    assert test.global_block().var("x") is not main.global_block().var("x")


def test_callsite_points_at_the_user_line():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, 3])
        h = fluid.layers.fc(x, 2)
    op = h.block.ops[0]
    assert op.callsite[0].endswith("test_framework.py")
    assert x.callsite[0].endswith("test_framework.py")


def test_variable_arithmetic_builds_the_right_ops_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2])
        y = fluid.data("y", [None, 2])
        outs = [x + y, x - y, x * y, x / y, x + 1.0, 2.0 - x, 3.0 * x, x / 4.0, 1.0 / y, -x]
    xv = np.array([[1.0, 2.0]], np.float32)
    yv = np.array([[4.0, 8.0]], np.float32)
    got = fluid.Executor().run(main, feed={"x": xv, "y": yv}, fetch_list=outs)
    want = [xv + yv, xv - yv, xv * yv, xv / yv, xv + 1, 2 - xv, 3 * xv, xv / 4, 1 / yv, -xv]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_parameters_need_known_shapes_and_shared_names_must_agree():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, 3])
        with pytest.raises(ShapeError, match="after num_flatten_dims"):
            fluid.layers.fc(fluid.data("seq", [None, None]), 2)
        fluid.layers.fc(x, 2, param_attr="shared")
        with pytest.raises(ShapeError, match="'shared' is shared"):
            fluid.layers.fc(x, 5, param_attr="shared")


def test_unknown_op_type_suggests_a_name():
    block = fluid.Program().global_block()
    with pytest.raises(ShapeError, match="did you mean"):
        block.append_op("elementwise_ad", inputs={}, outputs={})


def test_program_to_string_lists_vars_and_ops():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()), fluid.unique_name.guard():
        fluid.layers.fc(fluid.data("x", [None, 3]), 2, act="relu")
    text = str(main)
    assert "mul(inputs={X=['x'], Y=['fc_0.w_0']}" in text and "relu" in text
    assert "Parameter(fc_0.w_0: shape=[3, 2], dtype=float32, persistable)" in text
