"""Training tests: the example programs (imported from examples/) learn, in-process and at reduced
sizes, and sparse and dense embedding updates give the same parameters."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

import runtime as fluid

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def load_example(name):
    """The module examples/<name>.py, imported by path (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(name, *argv):
    module = load_example(name)
    return module.run(module.parse_args(["--log-every", "0", *argv]))


def test_fit_a_line_converges_to_the_noise_floor():
    result = run_example("fit_a_line", "--steps", "300")
    noise_floor = load_example("fit_a_line").NOISE_STD ** 2
    assert result["losses"][0] > 1.0
    assert result["loss"] < 3 * noise_floor
    assert len(result["losses"]) == 300


def test_epochs_set_the_number_of_steps_unless_steps_is_given():
    result = run_example("fit_a_line", "--epochs", "2", "--batch-size", "40")
    assert len(result["losses"]) == 2 * (400 // 40)
    result = run_example("fit_a_line", "--epochs", "2", "--steps", "7")
    assert len(result["losses"]) == 7


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_mlp_reaches_high_accuracy_on_held_out_digits(optimizer):
    result = run_example("mlp", "--steps", "150", "--hidden", "128", "--optimizer", optimizer)
    assert result["accuracy"] > 0.85  # chance is 0.1
    assert result["loss"] < 0.5 * result["losses"][0]


def test_mlp_builds_the_hidden_layers_asked_for():
    mlp = load_example("mlp")
    with fluid.unique_name.guard():
        main, *_ = mlp.build_program(hidden=[32, 16, 8])
    params = main.global_block().all_parameters()
    shapes = [tuple(p.shape) for p in params if p.name.endswith(".w_0")]
    assert shapes == [(784, 32), (32, 16), (16, 8), (8, 10)]


@pytest.mark.parametrize("batch_norm", [False, True])
def test_cnn_reaches_high_accuracy_on_held_out_shapes(batch_norm):
    argv = ["--steps", "250", "--filters", "8,16"] + (["--batch-norm"] if batch_norm else [])
    result = run_example("cnn", *argv)
    assert result["accuracy"] > 0.8  # chance is 0.1


def test_word2vec_loss_falls():
    result = run_example("word2vec", "--steps", "200", "--dict-size", "300", "--emb-size", "32")
    assert result["losses"][0] == pytest.approx(math.log(300), rel=0.05)
    assert result["loss"] < 0.7 * result["losses"][0]
    assert result["accuracy"] > 0.3  # chance is 1/300


def _train_word2vec(word2vec, is_sparse, optimizer, steps=5):
    """Parameters after `steps` steps of the word2vec model, from the seed-3 initialisation."""
    with fluid.unique_name.guard():
        main, startup, _, loss, _ = word2vec.build_program(
            dict_size=200, emb_size=16, is_sparse=is_sparse, optimizer=optimizer, seed=3)
    grad_type = main.global_block().vars["shared_w@GRAD"].type
    assert grad_type == ("selected_rows" if is_sparse else "lod_tensor")
    train_data, _ = word2vec.make_data(n_train=1000, n_test=10, dict_size=200, seed=3)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        initial = _parameters(main, scope)
        word2vec.train(exe, main, loss, train_data, batch_size=32, steps=steps, log_every=0)
        return initial, _parameters(main, scope)


def _parameters(program, scope):
    """Snapshots of the parameters' values. The explicit copy matters: optimizers update the
    scope's arrays in place and np.array(tensor) currently returns the live buffer."""
    return {p.name: np.array(scope.find_var(p.name).get_tensor()).copy()
            for p in program.global_block().all_parameters()}


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_sparse_and_dense_embedding_train_to_the_same_parameters(optimizer):
    word2vec = load_example("word2vec")
    initial, sparse = _train_word2vec(word2vec, True, optimizer)
    initial_dense, dense = _train_word2vec(word2vec, False, optimizer)
    assert sparse.keys() == dense.keys() == {"shared_w", "fc_0.w_0", "fc_0.b_0"}
    for name in sparse:
        np.testing.assert_array_equal(initial[name], initial_dense[name])
        assert not np.allclose(sparse[name], initial[name]), f"{name} did not train"
        np.testing.assert_allclose(sparse[name], dense[name], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name} differs after {optimizer}")
