"""layers.conv3d as Fluid 1.8 builds it: the parameter conv3d_0.w_0 [M, C/groups, kd, kh, kw],
6 paddings [front, back, top, bottom, left, right], NDHWC input, and values equal to a direct
sum over each window (Paddle 1.8's conv3d kernel, checked on the same data with Paddle's
conv3d: identical). Gradients: tests/cases/conv_ops.py and test_conv_nn_grad's double-grad
checks."""

import itertools

import numpy as np

import runtime as fluid


def _direct(x, w, strides, pads):
    """NCDHW convolution summed window by window; pads are (low, high) per dimension."""
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    ksize = w.shape[2:]
    size = [(n - k) // s + 1 for n, k, s in zip(xp.shape[2:], ksize, strides)]
    out = np.zeros((x.shape[0], w.shape[0]) + tuple(size))
    for cell in itertools.product(*map(range, size)):
        at = tuple(slice(c * s, c * s + k) for c, s, k in zip(cell, strides, ksize))
        patch = xp[(slice(None), slice(None)) + at]
        out[(slice(None), slice(None)) + cell] = np.einsum("ncdhw,mcdhw->nm", patch, w)
    return out


def _run(build, feed):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), main


def test_conv3d_channels_last_asymmetric_padding():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 4, 3, 3))  # NDHWC
    w = rng.standard_normal((4, 3, 2, 1, 3))

    def build():
        xv = fluid.data("x", [2, 5, 4, 3, 3], "float64")
        return [fluid.layers.conv3d(
            xv, 4, [2, 1, 3], stride=[1, 2, 1], padding=[1, 0, 0, 1, 1, 2], bias_attr=False,
            param_attr=fluid.initializer.NumpyArrayInitializer(w), data_format="NDHWC")]

    (out,), main = _run(build, {"x": x})
    assert [p.name for p in main.all_parameters()] == ["conv3d_0.w_0"]
    expected = _direct(x.transpose(0, 4, 1, 2, 3), w, [1, 2, 1], [(1, 0), (0, 1), (1, 2)])
    assert out.shape == (2, 5, 3, 4, 4)
    np.testing.assert_allclose(out, expected.transpose(0, 2, 3, 4, 1), rtol=1e-10)
    op = [o for o in main.global_block().ops if o.type == "conv3d"][0]
    assert op.attr("paddings") == [1, 0, 0, 1, 1, 2]


def test_conv3d_same_padding_bias_and_default_init():
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4, 5)).astype("float32")

    def build():
        xv = fluid.data("x", [1, 2, 3, 4, 5], "float32")
        y = fluid.layers.conv3d(xv, 8, 3, stride=2, padding="SAME")
        return [y, "conv3d_0.w_0", "conv3d_0.b_0"]

    (out, w, b), main = _run(build, {"x": x})
    assert out.shape == (1, 8, 2, 2, 3)  # SAME: ceil(size / stride)
    assert w.shape == (8, 2, 3, 3, 3) and b.shape == (8,)
    # Fluid's default: Normal(0, sqrt(2 / (kd * kh * kw * C)))
    assert abs(w.std() - (2.0 / (27 * 2)) ** 0.5) < 0.05
    # SAME with stride 2 pads (1, 1), (0, 1), (1, 1) here: an odd total puts the extra at the end
    expected = _direct(x.astype("float64"), w.astype("float64"), [2, 2, 2],
                       [(1, 1), (0, 1), (1, 1)])
    np.testing.assert_allclose(out, expected + b.reshape(1, 8, 1, 1, 1), rtol=1e-4, atol=1e-5)
