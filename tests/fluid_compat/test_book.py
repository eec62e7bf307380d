"""The Fluid 1.8 book chapters (issue 27): fit_a_line, recognize_digits (MLP and conv),
image_classification (ResNet and VGG, small), word2vec. Each network is built the way the
chapter builds it, trains on synthetic data of the chapter's format (the real readers
download), must lower its loss, and its inference model saved with
fluid.io.save_inference_model must load with load_inference_model and predict exactly what
the trained program predicts."""

import numpy as np
import pytest

import runtime as fluid

L = fluid.layers
RNG = np.random.default_rng(27)


def train_and_check(build, batches, feed_names, tmp_path, steps=30, opt=None):
    """Build (returns (loss, prediction)), train `steps` steps cycling over `batches`; the
    mean loss of the last batches pass must be below the first's. Then the inference model
    round trip. Returns (first losses, last losses)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss, predict = build()
        test_program = main.clone(for_test=True)
        (opt or fluid.optimizer.Adam(learning_rate=0.001)).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [float(exe.run(main, feed=batches[i % len(batches)], fetch_list=[loss])[0][0])
                  for i in range(steps)]
        k = len(batches)
        assert np.mean(losses[-k:]) < np.mean(losses[:k]), losses
        feed = {n: batches[0][n] for n in feed_names}
        expected = exe.run(test_program, feed=batches[0], fetch_list=[predict])[0]
        fluid.io.save_inference_model(str(tmp_path), feed_names, [predict], exe, main)
    with fluid.scope_guard(fluid.Scope()):
        program, names, targets = fluid.io.load_inference_model(str(tmp_path), exe)
        assert names == feed_names
        got = exe.run(program, feed=feed, fetch_list=targets)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    return losses


def test_fit_a_line(tmp_path):
    w = RNG.uniform(-2, 2, (13, 1)).astype("float32")
    batches = []
    for _ in range(4):
        x = RNG.uniform(-0.5, 0.5, (20, 13)).astype("float32")
        batches.append({"x": x, "y": x @ w + 1.5})

    def build():
        x = L.data(name="x", shape=[13], dtype="float32")
        y = L.data(name="y", shape=[1], dtype="float32")
        y_predict = L.fc(input=x, size=1, act=None)
        return L.mean(L.square_error_cost(input=y_predict, label=y)), y_predict

    train_and_check(build, batches, ["x"], tmp_path, steps=40,
                    opt=fluid.optimizer.SGD(learning_rate=0.05))


def _digit_batches(n_batches=3, batch=16, shape=(1, 28, 28), classes=10):
    protos = RNG.uniform(-1, 1, (classes,) + shape).astype("float32")
    out = []
    for _ in range(n_batches):
        label = RNG.integers(0, classes, (batch, 1))
        img = protos[label[:, 0]] + RNG.normal(0, 0.3, (batch,) + shape).astype("float32")
        out.append({"img": img.astype("float32"), "label": label.astype("int64")})
    return out


def _classify(predict):
    label = L.data(name="label", shape=[1], dtype="int64")
    return L.mean(L.cross_entropy(input=predict, label=label)), predict


def test_recognize_digits_mlp(tmp_path):
    def build():
        img = L.data(name="img", shape=[1, 28, 28], dtype="float32")
        hidden = L.fc(input=img, size=200, act="relu")
        hidden = L.fc(input=hidden, size=200, act="relu")
        return _classify(L.fc(input=hidden, size=10, act="softmax"))

    train_and_check(build, _digit_batches(), ["img"], tmp_path)


def test_recognize_digits_conv(tmp_path):
    def build():
        img = L.data(name="img", shape=[1, 28, 28], dtype="float32")
        conv_pool_1 = fluid.nets.simple_img_conv_pool(
            input=img, filter_size=5, num_filters=8, pool_size=2, pool_stride=2, act="relu")
        conv_pool_1 = L.batch_norm(conv_pool_1)
        conv_pool_2 = fluid.nets.simple_img_conv_pool(
            input=conv_pool_1, filter_size=5, num_filters=8, pool_size=2, pool_stride=2,
            act="relu")
        return _classify(L.fc(input=conv_pool_2, size=10, act="softmax"))

    train_and_check(build, _digit_batches(), ["img"], tmp_path, steps=24)


def _cifar_batches():
    return _digit_batches(n_batches=2, batch=8, shape=(3, 16, 16))


def _conv_bn(x, filters, size, stride, padding, act="relu"):
    conv = L.conv2d(input=x, filter_size=size, num_filters=filters, stride=stride,
                    padding=padding, act=None, bias_attr=False)
    return L.batch_norm(input=conv, act=act)


def _shortcut(x, ch_in, ch_out, stride):
    return _conv_bn(x, ch_out, 1, stride, 0, None) if ch_in != ch_out else x


def _basicblock(x, ch_in, ch_out, stride):
    tmp = _conv_bn(x, ch_out, 3, stride, 1)
    tmp = _conv_bn(tmp, ch_out, 3, 1, 1, act=None)
    return L.elementwise_add(x=tmp, y=_shortcut(x, ch_in, ch_out, stride), act="relu")


def test_image_classification_resnet(tmp_path):
    def build():
        images = L.data(name="img", shape=[3, 16, 16], dtype="float32")
        conv1 = _conv_bn(images, 8, 3, 1, 1)  # resnet_cifar10 with depth 8: one block a stage
        res1 = _basicblock(conv1, 8, 8, 1)
        res2 = _basicblock(res1, 8, 16, 2)
        res3 = _basicblock(res2, 16, 32, 2)
        pool = L.pool2d(input=res3, pool_size=4, pool_type="avg", pool_stride=1)
        return _classify(L.fc(input=pool, size=10, act="softmax"))

    train_and_check(build, _cifar_batches(), ["img"], tmp_path, steps=16)


def test_image_classification_vgg(tmp_path):
    def conv_block(x, filters, groups, dropouts):
        return fluid.nets.img_conv_group(
            input=x, pool_size=2, pool_stride=2, conv_num_filter=[filters] * groups,
            conv_filter_size=3, conv_act="relu", conv_with_batchnorm=True,
            conv_batchnorm_drop_rate=dropouts, pool_type="max")

    def build():
        images = L.data(name="img", shape=[3, 16, 16], dtype="float32")
        conv1 = conv_block(images, 8, 2, [0.3, 0])
        conv2 = conv_block(conv1, 16, 2, [0.4, 0])
        drop = L.dropout(x=conv2, dropout_prob=0.5)
        fc1 = L.fc(input=drop, size=32, act=None)
        bn = L.batch_norm(input=fc1, act="relu")
        fc2 = L.fc(input=L.dropout(x=bn, dropout_prob=0.5), size=32, act=None)
        return _classify(L.fc(input=fc2, size=10, act="softmax"))

    train_and_check(build, _cifar_batches(), ["img"], tmp_path, steps=30,
                    opt=fluid.optimizer.Adam(learning_rate=0.005))


def test_word2vec(tmp_path):
    dict_size, embed, hidden, n = 60, 16, 32, 5
    batches = []
    for _ in range(3):
        start = RNG.integers(0, dict_size, 32)
        words = [(start + 2 * i) % dict_size for i in range(n)]  # a learnable n-gram rule
        batches.append({name: w.reshape(-1, 1).astype("int64") for name, w in
                        zip(["firstw", "secondw", "thirdw", "forthw", "nextw"], words)})

    def build():
        names = ["firstw", "secondw", "thirdw", "forthw"]
        words = [L.data(name=name, shape=[1], dtype="int64") for name in names]
        next_word = L.data(name="nextw", shape=[1], dtype="int64")
        embs = [L.embedding(input=w, size=[dict_size, embed], dtype="float32",
                            is_sparse=True, param_attr="shared_w") for w in words]
        concat = L.concat(input=embs, axis=1)
        hidden1 = L.fc(input=concat, size=hidden, act="sigmoid")
        predict = L.fc(input=hidden1, size=dict_size, act="softmax")
        loss = L.mean(L.cross_entropy(input=predict, label=next_word))
        return loss, predict

    train_and_check(build, batches, ["firstw", "secondw", "thirdw", "forthw"], tmp_path,
                    steps=30, opt=fluid.optimizer.SGD(learning_rate=0.5))


@pytest.mark.parametrize("filename", [None, "__params__"])
def test_inference_model_files_and_program_only(tmp_path, filename):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float32")
        y = L.fc(x, size=2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, main,
                                  model_filename="__model__", params_filename=filename)
    program, names, targets = fluid.io.load_inference_model(
        str(tmp_path), exe, model_filename="__model__", params_filename=filename)
    data = np.ones((2, 3), "float32")
    expected = exe.run(main, feed={"x": data}, fetch_list=[y])[0]
    np.testing.assert_allclose(exe.run(program, feed={"x": data}, fetch_list=targets)[0],
                               expected)
    assert [op.type for op in program.global_block().ops][0] == "feed" or names == ["x"]
