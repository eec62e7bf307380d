"""A framework's warning about the script's call names the script's frame under the profiler
too (paddletune/warn_frames.py): paddletune's wrappers around the framework's functions are
skipped when `warnings.warn` counts its stack levels, as Python 3.12's skip_file_prefixes
does, and only while the script runs."""

import importlib.util
import os
import sys
import warnings

from paddletune import warn_frames
from paddletune.warn_frames import script_frames


def _module(path, source):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _setup(tmp_path, monkeypatch):
    """(the framework's module, the profiler's wrapper module): the framework's function
    warns about its caller's call (stacklevel=2), as PyTorch's DataLoader iterator does."""
    (tmp_path / "ours").mkdir()
    framework = _module(tmp_path / "framework.py", (
        "import warnings\n"
        "def build(level=2):\n"
        "    warnings.warn('about your call', UserWarning, stacklevel=level)\n"))
    ours = _module(tmp_path / "ours" / "hooks.py", (
        "def wrapped(original, *args):\n"
        "    return original(*args)\n"))
    monkeypatch.setattr(warn_frames, "OURS", str(tmp_path / "ours") + os.sep)
    return framework, ours


def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        call()
    return [(w.filename, w.lineno) for w in caught], line


def test_a_warning_about_the_call_names_the_frame_above_the_wrapper(tmp_path, monkeypatch):
    framework, ours = _setup(tmp_path, monkeypatch)
    with script_frames(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        ours.wrapped(framework.build)  # (the script's line, as if called unwrapped)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_without_the_session_the_wrapper_is_named_and_warn_is_put_back(tmp_path,
                                                                       monkeypatch):
    framework, ours = _setup(tmp_path, monkeypatch)
    real = warnings.warn
    seen, _ = _caught(lambda: ours.wrapped(framework.build))
    assert [name for name, _ in seen] == [str(tmp_path / "ours" / "hooks.py")]
    with script_frames():
        assert warnings.warn is not real
    assert warnings.warn is real


def test_a_warning_about_paddletunes_own_call_and_level_one_keep_their_frames(tmp_path,
                                                                            monkeypatch):
    framework, ours = _setup(tmp_path, monkeypatch)
    with script_frames():
        seen, _ = _caught(lambda: framework.build(1))  # the framework's own line
        assert seen == [(str(tmp_path / "framework.py"), 3)]
        seen, _ = _caught(lambda: ours.wrapped(framework.build, 1))
        assert seen == [(str(tmp_path / "framework.py"), 3)]
