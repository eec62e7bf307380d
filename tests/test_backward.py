"""append_backward / gradients at the program level: summed shared gradients, stop_gradient,
no_grad_set, fetchable @GRAD variables, and an end-to-end finite-difference check."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import FetchError


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    return main, startup


def _run(main, startup, feed, fetch):
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def test_shared_variable_gradients_are_summed():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3], dtype="float64")
        x.stop_gradient = False
        y = fluid.layers.reduce_sum(x * x + x * 3.0) if hasattr(fluid.layers, "reduce_sum") \
            else fluid.layers.mean(x * x + x * 3.0)
        (gx,) = fluid.gradients([y], [x])
    xv = np.array([1.0, -2.0, 0.5])
    (g,), _ = _run(main, startup, {"x": xv}, [gx])
    scale = 1.0 if hasattr(fluid.layers, "reduce_sum") else 1.0 / 3
    np.testing.assert_allclose(g, (2 * xv + 3) * scale)
    assert any(op.type == "sum" for op in main.global_block().ops), "partials must be summed"


def test_stop_gradient_cuts_the_path_and_no_grad_set_removes_params():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        h = fluid.layers.fc(x, 3, param_attr="w1", bias_attr=False)
        h.stop_gradient = True  # nothing before h gets a gradient
        out = fluid.layers.fc(h, 2, param_attr="w2", bias_attr=False)
        loss = fluid.layers.mean(out)
        pg = fluid.append_backward(loss)
    assert [p.name for p, _ in pg] == ["w2"]
    main2, startup2 = _programs()
    with fluid.program_guard(main2, startup2):
        x = fluid.data("x", [None, 4])
        h = fluid.layers.fc(x, 3, param_attr="w1", bias_attr=False)
        out = fluid.layers.fc(h, 2, param_attr="w2", bias_attr=False)
        pg = fluid.append_backward(fluid.layers.mean(out), no_grad_set={"w2"})
    assert [p.name for p, _ in pg] == ["w1"]


def test_non_trainable_parameter_gets_no_gradient():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        h = fluid.layers.fc(x, 3, param_attr=fluid.ParamAttr(name="frozen", trainable=False))
        pg = fluid.append_backward(fluid.layers.mean(h))
    assert "frozen" not in [p.name for p, _ in pg]


def _mlp_with_shared_weight(main, startup):
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4], dtype="float64")
        y = fluid.data("y", [None, 1], dtype="int64")
        shared = fluid.ParamAttr(name="shared_w")
        h1 = fluid.layers.fc(x, 4, param_attr=shared, act="tanh")
        h2 = fluid.layers.fc(h1, 4, param_attr=shared, act="sigmoid")  # same weight twice
        logits = fluid.layers.fc(h2, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        pg = fluid.append_backward(loss)
    return loss, pg


def test_program_gradients_match_finite_differences():
    """The whole chain (fc, tanh, sigmoid, shared weight, softmax CE, mean) against central
    differences of the loss computed by the executor."""
    main, startup = _programs()
    loss, pg = _mlp_with_shared_weight(main, startup)
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(5, 4)), "y": rng.integers(0, 3, (5, 1))}
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    test_prog = main.clone(for_test=True)
    names = [g.name for _, g in pg]
    grads = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    # main also ran the (absent) optimizer: no update ops, so parameters are unchanged
    for (param, _), grad in zip(pg, grads):
        value = scope.find_var(param.name).value
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            orig = value[idx]
            value[idx] = orig + 1e-6
            plus = exe.run(test_prog, feed=feed, fetch_list=[loss], scope=scope)[0][0]
            value[idx] = orig - 1e-6
            minus = exe.run(test_prog, feed=feed, fetch_list=[loss], scope=scope)[0][0]
            value[idx] = orig
            numeric[idx] = (plus - minus) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9, err_msg=param.name)


def test_grad_of_data_variable_is_explained():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=fluid.Scope())
    with pytest.raises(FetchError, match="stop_gradient"):
        exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=["x@GRAD"])


def test_gradients_with_target_gradients_and_unreachable_input():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2], dtype="float64")
        z = fluid.data("z", [2], dtype="float64")
        y = x * 2.0
        seed = fluid.data("seed", [2], dtype="float64")
        gx, gz = fluid.gradients(y, [x, z], target_gradients=seed)
    assert gz is None
    (g,), _ = _run(main, startup, {"x": np.ones(2), "z": np.ones(2),
                                   "seed": np.array([1.0, 10.0])}, [gx])
    np.testing.assert_allclose(g, [2.0, 20.0])


def test_unused_second_output_gets_zero_gradient():
    """An op with two differentiable outputs, only one reaching the loss (top_k-like cases):
    the other's gradient is zero-filled, not missing."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], dtype="float64")
        x.stop_gradient = False
        a = fluid.layers.relu(x)
        b = fluid.layers.sigmoid(x)
        loss = fluid.layers.mean(a)  # b is not used
        (gx,) = fluid.gradients([loss], [x])
    (g,), _ = _run(main, startup, {"x": np.array([[1.0, -1.0, 2.0]])}, [gx])
    np.testing.assert_allclose(g, [[1 / 3, 0.0, 1 / 3]])
    assert b is not None


def test_backward_ops_carry_the_backward_role_and_layer_callsite():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.SGD(0.1).minimize(loss)
    roles = {op.type: op.role for op in main.global_block().ops}
    assert roles["mul"] == fluid.framework.OpRole.Forward
    assert roles["mul_grad"] == fluid.framework.OpRole.Backward
    assert roles["sgd"] == fluid.framework.OpRole.Optimize
    grad_op = next(op for op in main.global_block().ops if op.type == "mul_grad")
    assert grad_op.callsite[0].endswith("test_backward.py")
