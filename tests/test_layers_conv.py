"""Layer-level tests of conv2d, conv2d_transpose, pool2d, adaptive_pool2d, batch_norm and dropout:
shapes, parameters and their names, running statistics, test-mode clones, build-time errors,
an end-to-end gradient check and a tiny CNN that learns."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import ShapeError

THIS_FILE = "test_layers_conv.py"


def _programs(seed=1):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    return main, startup


def _exe(startup):
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return exe, scope


def _value(scope, name):
    return np.array(scope.find_var(name).value).copy()


# --- shapes and parameters ------------------------------------------------------------------
def test_output_shapes_keep_the_unknown_batch():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3, 9, 9])
        same = fluid.layers.conv2d(x, 4, 3, padding=1)
        strided = fluid.layers.conv2d(x, 6, 3, stride=2, dilation=2, padding=[1, 2, 0, 1])
        padded_same = fluid.layers.conv2d(x, 2, 4, stride=2, padding="SAME")
        pooled = fluid.layers.pool2d(same, 2, pool_stride=2)
        ceil = fluid.layers.pool2d(same, 2, pool_stride=2, ceil_mode=True)
        global_avg = fluid.layers.pool2d(same, pool_type="avg", global_pooling=True)
        adaptive = fluid.layers.adaptive_pool2d(same, [3, 2], pool_type="avg")
        up = fluid.layers.conv2d_transpose(x, 5, filter_size=3, stride=2, padding=1)
        bn = fluid.layers.batch_norm(same)
        drop = fluid.layers.dropout(same, 0.3)
    assert same.shape == (-1, 4, 9, 9)
    assert strided.shape == (-1, 6, 4, 3)  # (9+1+2-5)//2+1, (9+0+1-5)//2+1
    assert padded_same.shape == (-1, 2, 5, 5)
    assert pooled.shape == (-1, 4, 4, 4) and ceil.shape == (-1, 4, 5, 5)
    assert global_avg.shape == (-1, 4, 1, 1) and adaptive.shape == (-1, 4, 3, 2)
    assert up.shape == (-1, 5, 17, 17)  # (9-1)*2 - 2 + 3
    assert bn.shape == same.shape and drop.shape == same.shape
    exe, scope = _exe(startup)
    out = exe.run(main, feed={"x": np.zeros((2, 3, 9, 9), "float32")},
                  fetch_list=[strided, pooled, adaptive, up, bn, drop], scope=scope)
    assert [o.shape for o in out] == [(2, 6, 4, 3), (2, 4, 4, 4), (2, 4, 3, 2), (2, 5, 17, 17),
                                      (2, 4, 9, 9), (2, 4, 9, 9)]
    assert all(o.dtype == np.float32 for o in out)


def test_parameter_shapes_names_and_default_initialiser():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 16, 8, 8])
        fluid.layers.conv2d(x, 64, 3)
        fluid.layers.conv2d(x, 8, [3, 1], groups=4, bias_attr=False)
        fluid.layers.conv2d(x, 32, 3, groups=16, use_cudnn=False)  # Fluid picks depthwise
        fluid.layers.conv2d_transpose(x, 6, filter_size=2, groups=2)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"conv2d_0.w_0": (64, 16, 3, 3), "conv2d_0.b_0": (64,),
                      "conv2d_1.w_0": (8, 4, 3, 1),
                      "depthwise_conv2d_0.w_0": (32, 1, 3, 3), "depthwise_conv2d_0.b_0": (32,),
                      "conv2d_transpose_0.w_0": (16, 3, 2, 2), "conv2d_transpose_0.b_0": (6,)}
    assert [op.type for op in main.global_block().ops if "conv" in op.type] == \
        ["conv2d", "conv2d", "depthwise_conv2d", "conv2d_transpose"]
    _, scope = _exe(startup)
    w = _value(scope, "conv2d_0.w_0")
    assert w.std() == pytest.approx(np.sqrt(2 / (3 * 3 * 16)), rel=0.05)  # Normal(0, sqrt(2/fan))
    assert abs(w.mean()) < 0.01 and not _value(scope, "conv2d_0.b_0").any()


def test_conv2d_transpose_derives_the_filter_from_output_size():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 2, 4, 4])
        out = fluid.layers.conv2d_transpose(x, 3, output_size=8, stride=2, padding=1)
    assert main.global_block().var("conv2d_transpose_0.w_0").shape == (2, 3, 4, 4)
    assert out.shape == (-1, 3, 8, 8)


def test_batch_norm_parameters():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3, 4, 4])
        fluid.layers.batch_norm(x, moving_variance_name="bn_var")
    block = main.global_block()
    scale, bias, mean, var = (block.var(n) for n in ("batch_norm_0.w_0", "batch_norm_0.b_0",
                                                     "batch_norm_0.w_1", "bn_var"))
    assert scale.trainable and bias.trainable
    for stat in (mean, var):
        assert stat.shape == (3,) and stat.persistable and stat.stop_gradient
        assert not stat.trainable
    _, scope = _exe(startup)
    for name, expected in (("batch_norm_0.w_0", 1), ("batch_norm_0.b_0", 0),
                           ("batch_norm_0.w_1", 0), ("bn_var", 1)):
        np.testing.assert_array_equal(_value(scope, name), np.full(3, expected, "float32"))


# --- batch_norm and dropout: training versus test clones ----------------------------------------
def test_batch_norm_updates_running_stats_and_the_test_clone_uses_them():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 2, 3, 3])
        y = fluid.layers.batch_norm(x, momentum=0.8)
        test_program = main.clone(for_test=True)
        loss = fluid.layers.mean(fluid.layers.square(y - 1.0))
        fluid.optimizer.SGD(0.5).minimize(loss)
    exe, scope = _exe(startup)
    xv = np.random.default_rng(0).normal(2.0, 3.0, (4, 2, 3, 3)).astype("float32")
    exe.run(main, feed={"x": xv}, fetch_list=[loss], scope=scope)
    batch_mean, batch_var = xv.mean(axis=(0, 2, 3)), xv.var(axis=(0, 2, 3))  # biased
    mean, var = _value(scope, "batch_norm_0.w_1"), _value(scope, "batch_norm_0.w_2")
    np.testing.assert_allclose(mean, 0.2 * batch_mean, rtol=1e-5)
    np.testing.assert_allclose(var, 0.8 + 0.2 * batch_var, rtol=1e-5)
    scale, bias = _value(scope, "batch_norm_0.w_0"), _value(scope, "batch_norm_0.b_0")
    assert not np.allclose(bias, 0)  # the optimizer moved it
    (test_y,) = exe.run(test_program, feed={"x": xv}, fetch_list=[y], scope=scope)
    c = (slice(None), None, None)
    expected = (xv - mean[c]) / np.sqrt(var[c] + 1e-5) * scale[c] + bias[c]
    np.testing.assert_allclose(test_y, expected, rtol=1e-4, atol=1e-5)
    exe.run(test_program, feed={"x": xv}, fetch_list=[y], scope=scope)
    np.testing.assert_array_equal(_value(scope, "batch_norm_0.w_1"), mean)  # test: no update


@pytest.mark.parametrize("impl", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_drops_in_training_and_scales_in_the_test_clone(impl):
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 200])
        y = fluid.layers.dropout(x, 0.25, dropout_implementation=impl)
        test_program = main.clone(for_test=True)
    exe, scope = _exe(startup)
    xv = np.ones((50, 200), "float32")
    (train_a,) = exe.run(main, feed={"x": xv}, fetch_list=[y], scope=scope)
    (train_b,) = exe.run(main, feed={"x": xv}, fetch_list=[y], scope=scope)
    (test_y,) = exe.run(test_program, feed={"x": xv}, fetch_list=[y], scope=scope)
    kept = 1 / 0.75 if impl == "upscale_in_train" else 1.0
    assert set(np.unique(train_a)) == {0.0, np.float32(kept)}
    assert (train_a == 0).mean() == pytest.approx(0.25, abs=0.02)
    assert not np.array_equal(train_a, train_b)  # a new mask every step
    np.testing.assert_allclose(test_y, xv * (1.0 if impl == "upscale_in_train" else 0.75))


def test_dropout_with_a_seed_repeats_its_mask():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 50])
        y = fluid.layers.dropout(x, 0.5, seed=7)
    exe, scope = _exe(startup)
    xv = np.ones((4, 50), "float32")
    a, b = (exe.run(main, feed={"x": xv}, fetch_list=[y], scope=scope)[0] for _ in range(2))
    np.testing.assert_array_equal(a, b)


def test_max_pool_gradient_goes_to_the_first_of_tied_elements():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [1, 1, 2, 4], dtype="float64")
        x.stop_gradient = False
        out = fluid.layers.pool2d(x, 2, pool_stride=2)
        (gx,) = fluid.gradients([out], [x])
    xv = np.array([[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.5, 2.0, 2.0]]]])
    exe, scope = _exe(startup)
    (g,) = exe.run(main, feed={"x": xv}, fetch_list=[gx], scope=scope)
    np.testing.assert_array_equal(g[0, 0], [[1, 0, 0, 1], [0, 0, 0, 0]])


# --- build-time errors ------------------------------------------------------------------------
def test_a_filter_larger_than_the_input_fails_at_build_time_naming_the_layer():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 1, 4, 4])
        with pytest.raises(ShapeError, match=r"conv2d.*output would be empty") as err:
            fluid.layers.conv2d(x, 2, 5)
        assert THIS_FILE in str(err.value)
        with pytest.raises(ShapeError, match=r"pool2d") as err:
            fluid.layers.pool2d(x, 5)
        assert THIS_FILE in str(err.value)


def test_bad_layer_arguments_are_clear_errors():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3, 8, 8])
        with pytest.raises(ValueError, match=r"conv2d: groups=2 .*3 input channels"):
            fluid.layers.conv2d(x, 4, 3, groups=2)
        # NHWC is Paddle 1.8's other layout, supported since issue 27 (it used to be
        # refused); an unknown layout still is
        with pytest.raises(ValueError, match="'NCHW' or 'NHWC'"):
            fluid.layers.conv2d(x, 4, 3, data_format="NCDHW")
        with pytest.raises(ShapeError, match=r"conv2d: input 'flat' must be 4-D"):
            fluid.layers.conv2d(fluid.data("flat", [None, 8]), 4, 3)
        with pytest.raises(ValueError, match="pool_size"):
            fluid.layers.pool2d(x)
        with pytest.raises(ShapeError, match=r"dropout_prob must be in \[0, 1\]"):
            fluid.layers.dropout(x, 1.5)


def test_channel_mismatch_between_input_and_filter_names_the_op():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2, 5, 5])
        w = fluid.layers.create_parameter([3, 3, 3, 3], "float32") \
            if hasattr(fluid.layers, "create_parameter") else None
    if w is None:
        pytest.skip("fluid.layers.create_parameter not available")
    with fluid.program_guard(main, startup):
        with pytest.raises(ShapeError, match=r"conv2d: .*2 channels .*expects 3"):
            main.global_block().append_op("conv2d", inputs={"Input": x, "Filter": w},
                                          outputs={"Output": main.global_block().create_var()})


# --- end to end -------------------------------------------------------------------------------
def test_program_gradients_of_a_small_cnn_match_finite_differences():
    main, startup = _programs(seed=3)
    with fluid.program_guard(main, startup):
        img = fluid.data("img", [None, 1, 10, 10], dtype="float64")
        label = fluid.data("label", [None, 1], dtype="int64")
        h = fluid.layers.conv2d(img, 3, 3, padding=1, act="relu")
        h = fluid.layers.pool2d(h, 2, "max", 2)
        h = fluid.layers.batch_norm(h)
        h = fluid.layers.conv2d(h, 4, 3, stride=2, act="tanh")
        h = fluid.layers.pool2d(h, 2, "avg", 1, ceil_mode=True, exclusive=False)
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        params = [p for p in main.global_block().all_parameters() if p.trainable]
        grads = fluid.gradients([loss], params)
    rng = np.random.default_rng(0)
    feed = {"img": rng.normal(size=(3, 1, 10, 10)), "label": rng.integers(0, 3, (3, 1))}
    exe, scope = _exe(startup)
    analytic = exe.run(main, feed=feed, fetch_list=grads, scope=scope)

    def loss_value():
        return float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
    for param, grad in zip(params, analytic):
        flat = scope.find_var(param.name).value.reshape(-1)  # the live parameter
        for i in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            original = flat[i]
            flat[i] = original + 1e-6
            plus = loss_value()
            flat[i] = original - 1e-6
            minus = loss_value()
            flat[i] = original
            assert grad.reshape(-1)[i] == pytest.approx((plus - minus) / 2e-6, rel=1e-4,
                                                        abs=1e-7), f"{param.name}[{i}]"


def _quadrant_data(n, rng):
    """Random 1x8x8 images; the label is the quadrant with the largest mean (4 classes)."""
    x = rng.normal(0.0, 1.0, (n, 1, 8, 8)).astype("float32")
    quadrants = x.reshape(n, 2, 4, 2, 4).mean(axis=(2, 4)).reshape(n, 4)
    return x, quadrants.argmax(axis=1).reshape(n, 1).astype("int64")


def test_a_tiny_cnn_learns():
    main, startup = _programs(seed=2)
    with fluid.program_guard(main, startup):
        img = fluid.data("img", [None, 1, 8, 8])
        label = fluid.data("label", [None, 1], dtype="int64")
        h = fluid.layers.conv2d(img, 8, 3, padding=1, act="relu")
        h = fluid.layers.pool2d(h, 2, "max", 2)
        h = fluid.layers.conv2d(h, 8, 3, padding=1)
        h = fluid.layers.batch_norm(h, act="relu")
        h = fluid.layers.pool2d(h, 2, "avg", 2)
        logits = fluid.layers.fc(fluid.layers.dropout(h, 0.1), 4)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.Adam(0.01).minimize(loss)
    exe, scope = _exe(startup)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(150):
        x, y = _quadrant_data(32, rng)
        losses.append(float(exe.run(main, feed={"img": x, "label": y}, fetch_list=[loss],
                                    scope=scope)[0][0]))
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert first > 1.2 and last < 0.5 * first, (first, last)


def test_nhwc_conv_and_pool_equal_the_nchw_ones():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((2, 3, 6, 6)).astype("float32")
    outs = []
    for layout in ("NCHW", "NHWC"):
        main, startup = _programs()
        with fluid.program_guard(main, startup):
            shape = [None, 3, 6, 6] if layout == "NCHW" else [None, 6, 6, 3]
            x = fluid.data("x", shape)
            y = fluid.layers.conv2d(x, 4, 3, padding=1, data_format=layout,
                                    param_attr=fluid.ParamAttr(
                                        initializer=fluid.initializer.Constant(0.1)))
            y = fluid.layers.pool2d(y, 2, "max", 2, data_format=layout)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        feed = x_np if layout == "NCHW" else x_np.transpose(0, 2, 3, 1)
        out = exe.run(main, feed={"x": feed}, fetch_list=[y])[0]
        outs.append(out if layout == "NCHW" else out.transpose(0, 3, 1, 2))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
