"""fluid.gradients / calc_gradient / append_backward as Paddle 1.8 has them."""

import pytest

import runtime as fluid
from runtime import backward


def _param(name, value):
    return fluid.layers.create_parameter(
        name=name, shape=[1], dtype="float32",
        default_initializer=fluid.initializer.Constant(value))


def _run(main, startup, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, fetch_list=fetch, scope=scope)


def test_a_second_gradients_call_does_not_overwrite_the_first():
    """Issue 27: g1 = d(x*x)/dx must stay 6 after g2 = d(x*5)/dx is added (it read 5)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = _param("x", 3.0)
        g1, = fluid.gradients(x * x, x)
        g2, = fluid.gradients(x * 5, x)
    assert g1.name != g2.name
    out = _run(main, startup, [g1, g2])
    assert out[0][0] == 6.0 and out[1][0] == 5.0


def test_calc_gradient_returns_a_variable_for_one_input_and_gradients_a_list():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.create_parameter(dtype="float32", shape=[5, 10])
        y = fluid.layers.create_parameter(dtype="float32", shape=[10, 8])
        out = fluid.layers.mean(fluid.layers.mul(x=x, y=y))
        a = backward.calc_gradient(out, x)
        b = fluid.gradients(out, [x, y])
    assert isinstance(a, fluid.Variable) and isinstance(b, list) and len(b) == 2
    assert [list(v.shape) for v in _run(main, startup, [a] + b)] == [[5, 10], [5, 10], [10, 8]]


@pytest.mark.parametrize("net,x0,expected", [
    # Paddle's test_calc_gradient.TestDoubleGrad: d/dx (x - d(x^2)/dx)^2 = 2x; and
    # d/dx [(dx1)^2 + y^2] with y = x^2, dx1 = 2x: 8x + 4x^3
    ("sub", 3.0, 6.0), ("sum", 1.0, 12.0)])
def test_second_order_gradients(net, x0, expected):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = _param("x", x0)
        if net == "sub":
            grad1, = fluid.gradients(x * x, x)
            grad2, = fluid.gradients((x - grad1) * (x - grad1), x)
        else:
            y = x * x
            dx1, = fluid.gradients(y, x)
            grad2, = fluid.gradients(dx1 * dx1 + y * y, x)
    assert _run(main, startup, [grad2])[0][0] == pytest.approx(expected)


def test_argument_checks_raise_type_error_as_paddle():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 4], dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.fc(x, 2)
        loss = fluid.layers.mean(y)
        for bad in (lambda: fluid.gradients(y.name, x), lambda: fluid.gradients(y, x.name),
                    lambda: fluid.gradients([y], [x], target_gradients=x.name),
                    lambda: fluid.gradients([y], x, no_grad_set=y),
                    lambda: fluid.backward.append_backward(loss.name),
                    lambda: fluid.backward.append_backward(loss, parameter_list="w"),
                    lambda: fluid.backward.append_backward(loss, callbacks=print)):
            with pytest.raises(TypeError):
                bad()


def test_fluid_backward_helpers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x_no_grad", shape=[4, 3], dtype="float32")
        h = fluid.layers.fc(x, 2)
        unused = fluid.layers.fc(x, 2)  # noqa: F841  (not on the loss's path)
        loss = fluid.layers.mean(h)
    assert backward._append_grad_suffix_("a") == "a@GRAD"
    assert backward._strip_grad_suffix_("a@GRAD@RENAME@block0@1") == "a"
    assert "x_no_grad@GRAD" in backward._get_stop_gradients_(main)[0]
    path = backward._find_op_path_(main.global_block(), [loss], [], set())
    assert [op.type for op in path] == ["mul", "elementwise_add", "mean"]
