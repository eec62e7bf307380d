"""The FLAGS registry: parsing, validation messages, set/get_flags, environment, Paddle defaults."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import runtime as fluid
from runtime.errors import FlagError
from runtime.flags import FLAGS, PREFIX, flags_in_force, get_flags, set_flags

REPO = Path(__file__).resolve().parents[1]
# the user's documentation: every FLAGS_* name it gives must be a real flag
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CATALOGUE = REPO / "docs" / "advice.md"  # the advice catalogue

# Paddle 1.8's defaults (its FLAGS reference for releases 1.6-1.8), plus Paddle's own for the
# rest.
PADDLE_18_DEFAULTS = {
    "fraction_of_gpu_memory_to_use": 0.92,
    "initial_gpu_memory_in_mb": 0,
    "reallocate_gpu_memory_in_mb": 0,
    "allocator_strategy": "auto_growth",
    "eager_delete_tensor_gb": 0.0,
    "memory_fraction_of_eager_deletion": 1.0,
    "fast_eager_deletion_mode": True,
    "eager_delete_scope": True,
    "reader_queue_speed_test_mode": False,
    "cudnn_exhaustive_search": False,
    "enable_cublas_tensor_op_math": False,
    "conv_workspace_size_limit": 512,
    "fuse_parameter_memory_size": -1.0,
    "fuse_parameter_groups_size": 1,
    "use_pinned_memory": True,
    "paddle_num_threads": 1,
    "gpu_memory_limit_mb": 0,
    "gpu_allocator_retry_time": 10000,
    "selected_gpus": "",
    "check_nan_inf": False,
    "cpu_deterministic": False,
    "cudnn_deterministic": False,
}

# Every flag the Paddle performance playbook turns, which the advice catalogue
# (docs/advice.md) names.
PLAYBOOK_FLAGS = [
    "FLAGS_allocator_strategy", "FLAGS_check_nan_inf", "FLAGS_cudnn_exhaustive_search",
    "FLAGS_eager_delete_tensor_gb", "FLAGS_enable_cublas_tensor_op_math",
    "FLAGS_fast_eager_deletion_mode", "FLAGS_fraction_of_gpu_memory_to_use",
    "FLAGS_fuse_parameter_memory_size", "FLAGS_memory_fraction_of_eager_deletion",
    "FLAGS_reader_queue_speed_test_mode",
]


@pytest.fixture(autouse=True)
def restore_flags():
    """Put every flag's value, source and the listener list back after each test."""
    saved = {f.name: (f.value, f.source) for f in FLAGS}
    yield
    for f in FLAGS:
        if (f.value, f.source) != saved[f.name]:
            FLAGS.set(f.name, *saved[f.name])


def all_to_defaults():
    for f in FLAGS:
        FLAGS.reset(f.name)


# --- parsing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("true", True), ("TRUE", True), ("True", True), ("1", True), ("yes", True), ("YES", True),
    ("false", False), ("False", False), ("FALSE", False), ("0", False), ("no", False),
    ("No", False), (" true ", True), (True, True), (False, False), (1, True), (0, False),
])
def test_bool_parsing(raw, expected):
    assert FLAGS.set("check_nan_inf", raw) is expected
    assert FLAGS.get("FLAGS_check_nan_inf") is expected


@pytest.mark.parametrize("raw", ["maybe", "2", "", 2, 0.5])
def test_bool_rejects_other_values(raw):
    with pytest.raises(FlagError, match=r"FLAGS_check_nan_inf: expected a boolean"):
        FLAGS.set("check_nan_inf", raw)


@pytest.mark.parametrize("raw, expected", [("1024", 1024), (" 64 ", 64), (2048, 2048),
                                           (256.0, 256), ("0", 0)])
def test_int_parsing(raw, expected):
    value = FLAGS.set("conv_workspace_size_limit", raw)
    assert value == expected and type(value) is int


@pytest.mark.parametrize("raw", ["1.5", "abc", "", True, 1.5, None])
def test_int_rejects_non_integers(raw):
    expected = r"FLAGS_conv_workspace_size_limit: expected (an integer|a number), a value >= 0"
    with pytest.raises(FlagError, match=expected):
        FLAGS.set("conv_workspace_size_limit", raw)


@pytest.mark.parametrize("raw, expected", [("0.5", 0.5), ("1", 1.0), (0, 0.0), (" .25 ", 0.25),
                                           ("1e-1", 0.1)])
def test_float_parsing(raw, expected):
    value = FLAGS.set("fraction_of_gpu_memory_to_use", raw)
    assert value == expected and type(value) is float


@pytest.mark.parametrize("raw", ["half", "", True, None])
def test_float_rejects_non_numbers(raw):
    with pytest.raises(FlagError, match=r"FLAGS_fraction_of_gpu_memory_to_use: expected a number"):
        FLAGS.set("fraction_of_gpu_memory_to_use", raw)


def test_string_parsing():
    assert FLAGS.set("selected_gpus", "0,1") == "0,1"
    assert FLAGS.set("allocator_strategy", "naive_best_fit") == "naive_best_fit"


# --- validation messages name the flag and the valid range -----------------------------------

@pytest.mark.parametrize("name, raw, valid", [
    ("fraction_of_gpu_memory_to_use", "2", "[0.0, 1.0]"),
    ("fraction_of_gpu_memory_to_use", -0.1, "[0.0, 1.0]"),
    ("memory_fraction_of_eager_deletion", 1.5, "[0.0, 1.0]"),
    ("paddle_num_threads", 0, ">= 1"),
    ("conv_workspace_size_limit", -1, ">= 0"),
    ("allocator_strategy", "legacy", "one of 'naive_best_fit', 'auto_growth'"),
])
def test_out_of_range_names_flag_and_range(name, raw, valid):
    before, version = FLAGS.get(name), FLAGS.version
    with pytest.raises(FlagError) as err:
        FLAGS.set(name, raw)
    message = str(err.value)
    assert PREFIX + name in message and valid in message
    assert f"Default: {FLAGS.flag(name).default!r}" in message
    assert FLAGS.get(name) == before and FLAGS.version == version  # nothing changed


def test_flag_error_is_a_value_error():
    assert issubclass(FlagError, ValueError)


# --- set_flags / get_flags --------------------------------------------------------------------

def test_set_flags_and_get_flags():
    assert fluid.set_flags is set_flags and fluid.get_flags is get_flags
    set_flags({"FLAGS_eager_delete_tensor_gb": 1.0, "FLAGS_check_nan_inf": "true"})
    assert get_flags("FLAGS_eager_delete_tensor_gb") == {"FLAGS_eager_delete_tensor_gb": 1.0}
    assert get_flags(["FLAGS_check_nan_inf", "paddle_num_threads"]) == {
        "FLAGS_check_nan_inf": True, "FLAGS_paddle_num_threads": 1}
    assert FLAGS.flag("check_nan_inf").source == "set_flags"


def test_set_flags_unknown_name_suggests_the_closest():
    with pytest.raises(FlagError, match=r"unknown flag FLAGS_check_nan_in \(did you mean "
                                        r"FLAGS_check_nan_inf\?\)"):
        set_flags({"FLAGS_check_nan_in": True})
    with pytest.raises(FlagError, match=r"unknown flag FLAGS_qqqq\. `paddletune flags`"):
        set_flags({"FLAGS_qqqq": 1})


@pytest.mark.parametrize("arg", [[("FLAGS_check_nan_inf", True)], "FLAGS_check_nan_inf", None])
def test_set_flags_rejects_non_dicts(arg):
    with pytest.raises(FlagError, match="set_flags expects a dict"):
        set_flags(arg)


def test_get_flags_errors():
    with pytest.raises(FlagError, match="did you mean FLAGS_paddle_num_threads"):
        get_flags(["FLAGS_paddle_num_thread"])
    for bad in (5, None):
        with pytest.raises(FlagError, match="get_flags expects a flag name or a list"):
            get_flags(bad)


def test_set_flags_is_all_or_nothing():
    with pytest.raises(FlagError):
        set_flags({"FLAGS_check_nan_inf": True, "FLAGS_paddle_num_threads": 0})
    assert FLAGS.get("check_nan_inf") is False


def test_float_rejects_nan():
    with pytest.raises(FlagError, match="FLAGS_eager_delete_tensor_gb"):
        FLAGS.set("eager_delete_tensor_gb", "nan")


# --- the environment --------------------------------------------------------------------------

def test_read_environ_applies_flags_and_ignores_other_variables():
    FLAGS.read_environ({"FLAGS_check_nan_inf": "yes", "FLAGS_paddle_num_threads": "4",
                        "PATH": "/bin", "flags_use_mkldnn": "1"})
    assert FLAGS.get("check_nan_inf") is True and FLAGS.get("paddle_num_threads") == 4
    assert FLAGS.flag("paddle_num_threads").source == "env"
    assert FLAGS.get("use_mkldnn") is False  # the prefix is case-sensitive, as in Paddle


def test_read_environ_warns_on_unknown_names():
    with pytest.warns(RuntimeWarning, match=r"unknown flag FLAGS_check_nan_in in the environment"
                                            r" is ignored \(did you mean FLAGS_check_nan_inf\?\)"):
        FLAGS.read_environ({"FLAGS_check_nan_in": "1"})
    assert FLAGS.get("check_nan_inf") is False


def test_read_environ_invalid_value_names_the_variable():
    with pytest.raises(FlagError) as err:
        FLAGS.read_environ({"FLAGS_fraction_of_gpu_memory_to_use": "2"})
    message = str(err.value)
    assert "environment variable FLAGS_fraction_of_gpu_memory_to_use='2'" in message
    assert "[0.0, 1.0]" in message and "unset FLAGS_fraction_of_gpu_memory_to_use" in message


def test_invalid_env_flag_stops_import():
    env = dict(os.environ, FLAGS_fraction_of_gpu_memory_to_use="2")
    proc = subprocess.run([sys.executable, "-c", "import runtime"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "FlagError" in proc.stderr and "FLAGS_fraction_of_gpu_memory_to_use" in proc.stderr
    assert "[0.0, 1.0]" in proc.stderr


def test_env_flag_is_read_at_import():
    env = dict(os.environ, FLAGS_eager_delete_tensor_gb="1.5")
    code = ("import runtime; f = runtime.FLAGS.flag('eager_delete_tensor_gb'); "
            "print(f.value, f.source)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1.5", "env"]


# --- defaults and the flag list ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PADDLE_18_DEFAULTS))
def test_defaults_follow_paddle_18(name):
    flag = FLAGS.flag(name)
    expected = PADDLE_18_DEFAULTS[name]
    assert flag.default == expected and type(flag.default) is type(expected)
    assert isinstance(flag.default, flag.type)


def test_every_default_is_valid():
    for flag in FLAGS:
        assert flag.validate(flag.parse(flag.default)) == flag.default, flag.name


@pytest.mark.parametrize("name", PLAYBOOK_FLAGS)
def test_playbook_flags_are_registered(name):
    assert name in FLAGS


def flags_named_in(paths):
    """Every FLAGS_<name> the files name (a name cut by a line end or a wildcard, FLAGS_x_*,
    is left out)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in paths)
    return {m for m in re.findall(r"FLAGS_[a-z0-9_]*[a-z0-9](?![a-z0-9_*<])", text)}


# flags the docs name that are Paddle 3's own, not the embedded runtime's (each checked against
# the installed paddle below)
PADDLE3_FLAGS = ("FLAGS_enable_pir_in_executor_trace_run",)  # docs/frameworks.md: --ops


def test_flags_named_in_the_docs_are_registered():
    named = flags_named_in(DOCS)
    assert len(named) >= len(PLAYBOOK_FLAGS), "the docs name few flags: is the pattern right?"
    assert sorted(n for n in named if n not in FLAGS and n not in PADDLE3_FLAGS) == []
    assert set(PADDLE3_FLAGS) <= named  # (a name the docs dropped goes from the list too)


def test_the_paddle3_flags_the_docs_name_are_paddles():
    paddle = pytest.importorskip("paddle")
    assert paddle.get_flags(list(PADDLE3_FLAGS)).keys() == set(PADDLE3_FLAGS)


def test_the_advice_catalogue_names_every_playbook_flag():
    named = flags_named_in([CATALOGUE])
    assert sorted(set(PLAYBOOK_FLAGS) - named) == []
    assert sorted(n for n in named if n not in FLAGS) == []


def test_names_with_and_without_prefix():
    assert "check_nan_inf" in FLAGS and "FLAGS_check_nan_inf" in FLAGS
    assert "FLAGS_no_such_flag" not in FLAGS
    assert FLAGS.get("check_nan_inf") == FLAGS.get("FLAGS_check_nan_inf")


# --- flags_in_force, reset, version and listeners ---------------------------------------------

def test_flags_in_force_lists_only_changed_values():
    all_to_defaults()
    assert flags_in_force() == {}
    set_flags({"FLAGS_check_nan_inf": True, "FLAGS_eager_delete_tensor_gb": -1})
    assert flags_in_force() == {"FLAGS_check_nan_inf": True, "FLAGS_eager_delete_tensor_gb": -1.0}
    set_flags({"FLAGS_check_nan_inf": False})  # set, but back at its default
    assert flags_in_force() == {"FLAGS_eager_delete_tensor_gb": -1.0}


def test_reset_restores_default_and_source():
    FLAGS.set("paddle_num_threads", 8)
    FLAGS.reset("FLAGS_paddle_num_threads")
    flag = FLAGS.flag("paddle_num_threads")
    assert (flag.value, flag.source) == (1, "default")


def test_version_counts_changes_and_listeners_hear_them():
    heard = []
    listener = FLAGS.on_change(lambda name, value: heard.append((name, value)))
    version = FLAGS.version
    set_flags({"FLAGS_check_nan_inf": "1"})
    FLAGS.set("paddle_num_threads", "2")
    with pytest.raises(FlagError):
        FLAGS.set("paddle_num_threads", "0")
    assert FLAGS.version == version + 2
    assert heard == [("check_nan_inf", True), ("paddle_num_threads", 2)]
    FLAGS.remove_listener(listener)
    FLAGS.set("paddle_num_threads", "3")
    assert len(heard) == 2


def test_string_flags_reject_non_strings_and_membership_is_safe():
    with pytest.raises(FlagError, match="FLAGS_selected_gpus"):
        set_flags({"FLAGS_selected_gpus": None})
    assert "FLAGS_check_nan_inf" in FLAGS and "check_nan_inf" in FLAGS
    assert 3 not in FLAGS and "FLAGS_nope" not in FLAGS


def test_defining_a_flag_twice_is_an_error():
    with pytest.raises(ValueError, match="defined twice"):
        FLAGS.define("check_nan_inf", bool, False, "dup")


def test_every_flag_is_documented():
    for flag in FLAGS:
        assert flag.doc and flag.type in (bool, int, float, str), flag.name
        if flag.type is float:
            assert math.isfinite(flag.default), flag.name
