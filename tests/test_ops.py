"""Every registered op: forward vs a NumPy reference, gradient vs central finite differences."""

import importlib
import pkgutil

import pytest

import cases
from opcheck import CASES, check_forward, check_gradient
from runtime.ops.registry import REGISTRY

for _mod in pkgutil.iter_modules(cases.__path__):
    importlib.import_module(f"cases.{_mod.name}")

# Ops whose outputs are random draws: their distribution is tested in test_initializers.py.
NO_REFERENCE = {"uniform_random", "gaussian_random", "truncated_gaussian_random",
                "uniform_random_batch_size_like", "gaussian_random_batch_size_like"}
# Ops that run a sub-block or read the step's variables (control flow, LoDTensorArray): one op
# alone means nothing, so tests/fluid_compat/test_control_flow.py checks them on programs,
# gradients against central finite differences (opcheck.check_program_gradient).
PROGRAM_CHECKED = {"conditional_block", "while", "write_to_array", "read_from_array",
                   "lod_array_length", "select_output",
                   # LoD ops read and set LoDs and rank tables: tests/fluid_compat/test_lod.py
                   # checks them (gradients against finite differences) on whole programs
                   "lod_rank_table", "max_sequence_len", "lod_tensor_to_array",
                   "array_to_lod_tensor", "shrink_rnn_memory", "reorder_lod_tensor_by_rank",
                   "split_lod_tensor", "merge_lod_tensor", "merge_lod_tensor_infer",
                   "lod_reset",
                   # py_func calls a Python function: tests/fluid_compat/test_api18.py runs it
                   # forward and backward against finite differences
                   "py_func",
                   # sequence_reverse needs LoD input, tensor_array_to_tensor an array input:
                   # tests/fluid_compat/test_fluid18_more.py checks them (gradients against
                   # finite differences) on whole programs
                   "sequence_reverse", "tensor_array_to_tensor",
                   # lstm runs over LoD sequences: tests/fluid_compat/test_lstm18.py checks it
                   # against a NumPy LSTM and every input's gradient against finite differences
                   "lstm",
                   # the CRF ops run over LoD sequences: tests/fluid_compat/test_crf18.py checks
                   # them against brute force over every tagging, gradients against finite
                   # differences
                   "linear_chain_crf", "crf_decoding"}

FORWARD_OPS = sorted(t for t, d in REGISTRY.items()
                     if d.forward_def is None and t not in PROGRAM_CHECKED)
GRAD_CASES = [c for c in CASES if c.check_grad and REGISTRY[c.op].grad_def is not None]


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_forward_matches_reference(c):
    check_forward(c)


@pytest.mark.parametrize("c", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_finite_differences(c):
    check_gradient(c)


@pytest.mark.parametrize("op_type", FORWARD_OPS)
def test_every_op_has_cases(op_type):
    mine = [c for c in CASES if c.op == op_type]
    assert mine, f"op {op_type} is registered but has no case in tests/cases/"
    if op_type not in NO_REFERENCE:
        assert any(c.reference for c in mine), f"op {op_type} has no case with a NumPy reference"
    if REGISTRY[op_type].grad_def is not None:
        assert any(c.check_grad for c in mine), f"op {op_type} has a gradient rule but no " \
                                                f"gradient case"
