"""runtime.compat: `import paddle` / `import paddle.fluid as fluid` served by the runtime. Every
test runs in a subprocess so the shim never leaks into the rest of the suite."""

import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# An unmodified Fluid 1.x training script (the usual fit-a-line/recognize-digits shape).
TRAIN_SCRIPT = '''
import numpy as np
import paddle
import paddle.fluid as fluid

BATCH_SIZE = 32
rng = np.random.RandomState(0)
W = rng.randn(13, 3)
X = rng.randn(256, 13).astype("float32")
LABELS = (X @ W).argmax(axis=1)


def train_data():
    for features, label in zip(X, LABELS):
        yield features, int(label)


x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="int64")
hidden = fluid.layers.fc(input=x, size=16, act="relu")
predict = fluid.layers.fc(input=hidden, size=3, act="softmax")
cost = fluid.layers.cross_entropy(input=predict, label=y)
avg_cost = fluid.layers.mean(cost)
sgd_optimizer = fluid.optimizer.SGD(learning_rate=0.1)
sgd_optimizer.minimize(avg_cost)

train_reader = paddle.batch(paddle.reader.shuffle(train_data, buf_size=100),
                            batch_size=BATCH_SIZE)
place = fluid.CPUPlace()
feeder = fluid.DataFeeder(place=place, feed_list=[x, y])
exe = fluid.Executor(place)
exe.run(fluid.default_startup_program())

epoch_losses = []
for pass_id in range(8):
    losses = []
    for data in train_reader():
        loss, = exe.run(fluid.default_main_program(), feed=feeder.feed(data),
                        fetch_list=[avg_cost])
        losses.append(float(np.mean(loss)))
    epoch_losses.append(sum(losses) / len(losses))
    print("pass %d loss %.4f" % (pass_id, epoch_losses[-1]))
print("first %.4f last %.4f" % (epoch_losses[0], epoch_losses[-1]))
'''

INSTALL_AND_RUN = """
import runpy, sys
import runtime.compat
assert runtime.compat.install() is True
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_python(code, *args, cwd=None, extra_path=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [extra_path, REPO, env.get("PYTHONPATH")] if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_an_unmodified_fluid_training_script_trains(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    proc = run_python(INSTALL_AND_RUN, str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last_line = proc.stdout.strip().splitlines()[-1]
    first, last = float(last_line.split()[1]), float(last_line.split()[3])
    assert last < 0.7 * first, proc.stdout


def test_every_fluid_import_form_resolves_to_the_runtime():
    proc = run_python("""
        import runtime, runtime.compat
        assert runtime.compat.install() and runtime.compat.install()  # idempotent
        import paddle
        import paddle.fluid as fluid
        from paddle import fluid as fluid2
        import paddle.fluid.layers as layers
        from paddle.fluid import core
        from paddle.fluid.param_attr import ParamAttr
        from paddle.fluid.layers import fc
        import paddle.fluid.io, paddle.fluid.optimizer, paddle.fluid.initializer
        import paddle.fluid.framework, paddle.fluid.executor, paddle.fluid.backward
        import paddle.fluid.regularizer, paddle.fluid.clip, paddle.fluid.unique_name
        import paddle.reader
        from paddle.batch import batch
        assert fluid is runtime and fluid2 is runtime and layers is runtime.layers
        assert core is runtime.core and ParamAttr is runtime.ParamAttr and fc is layers.fc
        assert paddle.fluid.io.save_persistables is runtime.io.save_persistables
        assert paddle.fluid.optimizer.SGD is runtime.optimizer.SGD
        assert paddle.fluid.executor.Executor is runtime.Executor
        assert callable(paddle.batch) and paddle.batch is batch is runtime.reader.batch
        assert paddle.reader.shuffle is runtime.reader.shuffle
        assert paddle.reader.ComposeNotAligned is runtime.reader.ComposeNotAligned
        assert "paddletune" in paddle.__version__ and paddle.__version__.startswith("1.8")
        print(fluid.__name__, paddle.__name__, paddle.fluid.layers.__name__, repr(paddle))
        import importlib, sys
        # no module is loaded twice under two names
        for name, module in list(sys.modules.items()):
            if name.startswith("paddle.fluid."):
                assert module is sys.modules["runtime." + name[len("paddle.fluid."):]], name
        try:
            import paddle.dataset
        except ImportError as err:
            print("ImportError:", err)
        assert runtime.compat.uninstall() is True
        assert not [m for m in sys.modules if m == "paddle" or m.startswith("paddle.")]
        assert runtime.compat.uninstall() is False
        try:
            import paddle
        except ImportError:
            print("gone after uninstall")
        else:  # a real PaddlePaddle (3.x, no fluid) is installed: `import paddle` is it now
            assert "paddletune" not in paddle.__version__ and not runtime.compat.is_installed()
            print("gone after uninstall")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "runtime paddle runtime.layers" in proc.stdout
    assert "No module named 'paddle.dataset'" in proc.stdout
    assert "gone after uninstall" in proc.stdout


def test_a_real_paddle_is_left_alone(tmp_path):
    fake = tmp_path / "site" / "paddle"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '1.8.5'\nREAL = True\n")
    proc = run_python("""
        import warnings, runtime.compat
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert runtime.compat.install() is False
        assert len(caught) == 1 and "real PaddlePaddle is installed" in str(caught[0].message)
        import paddle
        assert paddle.REAL and not runtime.compat.is_installed()
        assert runtime.compat.install() is False  # already imported: still left alone
        print("left alone")
    """, extra_path=str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    assert "left alone" in proc.stdout


def test_a_paddle_without_fluid_gets_the_shim():
    """PaddlePaddle 2.6 and later have no paddle.fluid: a Fluid 1.x program can only run on
    the runtime, so install() puts the shim in front of it (and says so)."""
    from importlib import metadata
    try:
        version = metadata.version("paddlepaddle")
    except metadata.PackageNotFoundError:
        pytest.skip("no PaddlePaddle installed")
    if tuple(int(p) for p in version.split(".")[:2]) < (2, 6):
        pytest.skip(f"PaddlePaddle {version} still has paddle.fluid")
    proc = run_python("""
        import warnings, runtime, runtime.compat
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert runtime.compat.install() is True
        assert any("has no paddle.fluid" in str(w.message) for w in caught), caught
        import paddle.fluid as fluid
        assert fluid is runtime
        print("shim in front")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "shim in front" in proc.stdout
