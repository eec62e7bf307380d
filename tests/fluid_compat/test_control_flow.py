"""Control flow and LoDTensorArray (Fluid 1.8's cond, case, switch_case, while_loop, While,
Switch, ConditionalBlock, array_write/read/length): forward values as Paddle gives them, and
gradients through them against central finite differences (tests/opcheck.py)."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers


def _run(fetch, feed=None):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe.run(fluid.default_main_program(), feed=feed or {}, fetch_list=fetch)


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


def test_cond_picks_the_branch_and_returns_structures():
    a = L.fill_constant([1], "float32", 0.23)
    b = L.fill_constant([1], "float32", 0.25)
    pred = L.less_than(a, b)
    one = L.cond(pred, lambda: L.fill_constant([1, 2], "int32", 1),
                 lambda: L.fill_constant([1, 2], "int32", 2))
    pair = L.cond(L.logical_not(pred),
                  lambda: (L.fill_constant([1], "float32", 1.0), a),
                  lambda: (L.fill_constant([1], "float32", 2.0), b))
    none = L.cond(pred, lambda: None)
    out = _run([one, pair[0], pair[1]])
    assert none is None
    np.testing.assert_array_equal(out[0], [[1, 1]])
    assert out[1][0] == 2.0 and out[2][0] == pytest.approx(0.25)


def test_cond_mismatched_branches_raise_value_error():
    pred = L.fill_constant([1], "bool", True)
    with pytest.raises(ValueError, match="Incompatible return values"):
        L.cond(pred, lambda: L.fill_constant([1], "float32", 1.0), lambda: None)
    with pytest.raises(TypeError):
        L.cond(L.fill_constant([1], "float32", 1.0), lambda: None)


def test_case_and_switch_case_follow_paddles_defaults():
    x = L.fill_constant([1], "float32", 0.3)
    y = L.fill_constant([1], "float32", 0.1)
    fns = [lambda k=k: L.fill_constant([1], "int32", k) for k in (1, 2, 3)]
    out_1 = L.case([(L.less_than(y, x), fns[0]), (L.less_than(x, y), fns[1])], default=fns[2])
    out_2 = L.case([(L.less_than(x, y), fns[1]), (L.equal(x, y), fns[2])])  # last is default
    index = L.fill_constant([1], "int32", 2)
    out_3 = L.switch_case(index, {1: fns[0], 2: fns[1]}, default=fns[2])
    out_4 = L.switch_case(index, [(0, fns[0]), (4, fns[1]), (7, fns[2])])  # max key: default
    assert [int(v[0]) for v in _run([out_1, out_2, out_3, out_4])] == [1, 3, 2, 3]


def test_while_loop_and_while_block():
    i = L.fill_constant([1], "int64", 0)
    ten = L.fill_constant([1], "int64", 10)
    total = L.fill_constant([1], "float32", 0.0)
    i_out, total_out = L.while_loop(lambda i, s: L.less_than(i, ten),
                                    lambda i, s: [L.increment(i, in_place=False), s + 1.5],
                                    [i, total])
    j = L.fill_constant([1], "int64", 0)
    acc = L.fill_constant([1], "float32", 1.0)
    cond = L.less_than(j, L.fill_constant([1], "int64", 4))
    loop = L.While(cond)
    with loop.block():
        L.assign(acc * 2.0, acc)
        L.increment(j)
        L.less_than(j, L.fill_constant([1], "int64", 4), cond=cond)
    out = _run([i_out, total_out, acc])
    assert out[0][0] == 10 and out[1][0] == pytest.approx(15.0) and out[2][0] == 16.0


def test_arrays_write_read_length():
    x = L.fill_constant([2], "float32", 3.0)
    zero = L.zeros([1], "int64")
    one = L.ones([1], "int64")
    arr = L.array_write(x, zero)
    L.array_write(x * 2.0, one, array=arr)
    back = L.array_read(arr, one)
    length = L.array_length(arr)
    out = _run([back, length, arr])
    np.testing.assert_array_equal(out[0], [6.0, 6.0])
    assert out[1][0] == 2 and len(out[2]) == 2


def test_switch_runs_the_first_true_case():
    lr = L.create_global_var(shape=[1], value=0.0, dtype="float32", persistable=True)
    step = L.fill_constant([1], "float32", 5.0)
    with L.Switch() as switch:
        with switch.case(L.less_than(step, L.fill_constant([1], "float32", 3.0))):
            L.assign(L.fill_constant([1], "float32", 1.0), lr)
        with switch.case(L.less_than(step, L.fill_constant([1], "float32", 8.0))):
            L.assign(L.fill_constant([1], "float32", 2.0), lr)
        with switch.default():
            L.assign(L.fill_constant([1], "float32", 3.0), lr)
    assert _run([lr])[0][0] == 2.0


def _x():
    return fluid.data("x", [3], "float64")


@pytest.mark.parametrize("flag", [True, False])
def test_cond_gradient_matches_finite_differences(flag):
    def build():
        x = _x()
        pred = L.fill_constant([1], "bool", flag)
        y = L.cond(pred, lambda: L.exp(x) * x, lambda: L.square(x) * 3.0)
        return L.reduce_sum(y * y)
    check_program_gradient(build, {"x": np.array([0.3, -0.7, 1.1])}, ["x"])


def test_nested_cond_gradient():
    def build():
        x = _x()
        a = L.fill_constant([1], "float64", 1.0)
        inner = lambda: L.cond(L.less_than(a, L.fill_constant([1], "float64", 2.0)),
                               lambda: x * x, lambda: x)
        y = L.cond(L.less_than(L.fill_constant([1], "float64", 0.0), a), inner, lambda: x * 5.0)
        return L.reduce_sum(L.sin(y) if hasattr(L, "sin") else y * y)
    check_program_gradient(build, {"x": np.array([0.3, -0.7, 1.1])}, ["x"])


def test_while_loop_gradient_through_loop_variable_and_weights():
    def build():
        x = _x()
        w = fluid.data("w", [3], "float64")
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        _, h = L.while_loop(lambda i, h: L.less_than(i, n),
                            lambda i, h: [L.increment(i, in_place=False), L.tanh(h * w + x)],
                            [i, x])
        return L.reduce_sum(h * h)
    check_program_gradient(build, {"x": np.array([0.3, -0.7, 1.1]),
                                   "w": np.array([0.9, 1.2, -0.4])}, ["x", "w"])


def test_array_gradient_inside_a_while_loop():
    def build():
        x = _x()
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        arr = L.array_write(x, i)
        cond = L.less_than(i, n)
        loop = L.While(cond)
        with loop.block():
            prev = L.array_read(arr, i)
            L.increment(i)
            L.array_write(prev * x + 1.0, i, array=arr)
            L.less_than(i, n, cond=cond)
        return L.reduce_sum(L.array_read(arr, i))
    check_program_gradient(build, {"x": np.array([0.3, -0.7, 1.1])}, ["x"])


@pytest.mark.parametrize("branch", [0, 2])
def test_select_output_then_select_input_gradient(branch):
    def build():
        x = _x()
        mask = L.fill_constant([1], "int32", branch)
        outs = [fluid.default_main_program().current_block().create_var(dtype="float64")
                for _ in range(3)]
        L.select_output(x, outs, mask)
        y = L.select_input(outs, mask)
        return L.reduce_sum(y * y * 0.5)
    grads = check_program_gradient(build, {"x": np.array([0.3, -0.7, 1.1])}, ["x"])
    np.testing.assert_allclose(grads[0], [0.3, -0.7, 1.1])
