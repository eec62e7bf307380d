"""Shared builders for the test_parallel_* files (no tests here): a small MLP, its data, and a
trainer that runs it on the single-place Executor or data-parallel."""

import numpy as np

import runtime as fluid


def build(opt="momentum", hidden=32, clip=None, seed=1):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 16])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, hidden, act="relu")
        h = fluid.layers.fc(h, hidden, act="relu")
        logits = fluid.layers.fc(h, 4)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), y)
        if opt == "momentum":
            o = fluid.optimizer.MomentumOptimizer(0.1, 0.9, grad_clip=clip)
        elif opt == "adam":
            o = fluid.optimizer.AdamOptimizer(0.01, grad_clip=clip)
        else:
            o = fluid.optimizer.SGDOptimizer(0.1, grad_clip=clip)
        o.minimize(loss)
    return main, startup, loss, acc


def data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, 16)) * 2
    y = rng.integers(0, 4, (n, 1))
    x = (centers[y[:, 0]] + rng.normal(size=(n, 16))).astype("float32")
    return x, y.astype("int64")


def strategy(**kw):
    bs = fluid.BuildStrategy()
    for k, v in kw.items():
        setattr(bs, k, v)
    return bs


def train(places, steps=4, opt="momentum", bs=None, es=None, x=None, y=None):
    """(losses, parameters) after `steps` steps; places=0: the plain single-place Executor."""
    main, startup, loss, _ = build(opt)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    if x is None:
        x, y = data()
    prog = main if places == 0 else fluid.CompiledProgram(main).with_data_parallel(
        loss.name, build_strategy=bs, exec_strategy=es, places=fluid.cpu_places(places))
    losses = []
    for _ in range(steps):
        out, = exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        losses.append(float(np.mean(out)))
    params = [np.array(scope.find_var(p.name).value) for p in main.global_block().all_parameters()]
    return losses, params
