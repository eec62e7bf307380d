"""Small Fluid 1.8 fidelity items: GeneratorLoader._check_input_array, BuildStrategy.async_mode,
to_string's flags and errors."""

import numpy as np
import pytest

import runtime as fluid


def test_check_input_array_regular_and_ragged():
    arr = fluid.reader.GeneratorLoader._check_input_array([np.arange(2), np.arange(2)])
    assert arr.shape == (2, 2)
    with pytest.raises(TypeError, match="create_lod_tensor"):
        fluid.reader.GeneratorLoader._check_input_array([np.arange(2), np.arange(1),
                                                         np.arange(3)])


def test_build_strategy_async_mode():
    bs = fluid.BuildStrategy()
    assert bs.async_mode is False
    bs.async_mode = True
    assert bs.async_mode is True


def test_program_to_string_uninitialized_var_raises():
    p = fluid.Program()
    p.current_block().create_var(name="t", shape=[0, 1])
    with pytest.raises(ValueError):
        p.to_string(True)
    assert "t" in p.to_string(False)


def test_program_to_string_details_and_flags():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="X", shape=[2, 3], dtype="float32", append_batch_size=False)
        fluid.layers.fc(x, size=3)
    plain = main.to_string(throw_on_error=True, with_details=False)
    detailed = main.to_string(throw_on_error=False, with_details=True)
    assert len(detailed) > len(plain)
    assert "trainable" in detailed and "trainable" not in plain
    with pytest.raises(AssertionError):
        main.to_string(1)
    with pytest.raises(AssertionError):
        main.to_string(True, with_details="yes")
    with pytest.raises(AssertionError):
        x.to_string(True, 0)
    assert "stop_gradient: True" in x.to_string(True, True)
