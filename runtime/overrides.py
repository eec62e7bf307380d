"""Settings a tuner (or a person) imposes on a job without editing it: PADDLETUNE_OVERRIDES.

One environment variable holds JSON with up to three sections, e.g.

    PADDLETUNE_OVERRIDES='{"reader": {"num_workers": 2, "capacity": 16,
                                      "use_double_buffer": true, "batch_size": 128},
                           "exec_strategy": {"num_threads": 1,
                                             "num_iteration_per_drop_scope": 100},
                           "build_strategy": {"fuse_all_optimizer_ops": true}}'

FLAGS are overridden by their own FLAGS_* variables (runtime/flags.py), NumPy's BLAS threads
by OPENBLAS_NUM_THREADS / OMP_NUM_THREADS; this variable covers what a script sets in code.
The runtime applies each value where the option is fixed:

* `apply_reader(loader)`: a DataLoader/PyReader's capacity, num_workers and use_double_buffer
  when it is constructed (the loader calls it at the end of its __init__); `batch_size` when
  a generator is set, for every kind of source (the loader's reader stage does the work,
  runtime/reader/regroup.py):
  - `set_sample_generator(reader, batch_size, drop_last)`: that batch_size is replaced.
  - `set_sample_list_generator(reader)`: the script's lists of samples are regrouped into
    lists of the new size. A reader made by `paddle.batch` / `fluid.io.batch` itself
    (runtime.reader.decorator.batch) is re-batched from its sample reader with its own
    drop_last, and `was` is its batch_size, known at once; any other reader's lists are
    flattened and re-chunked, a final partial list kept, and `was` is the size of the first
    list. `paddle.batch` itself is never overridden (a batch reader may feed an eval loop
    or a DataFeeder): the override belongs to the loader, so it is applied once, there.
  - `set_batch_generator(reader)`: the script's batches are joined and split along their
    first axis (a final partial batch kept); `was` is the first batch's first dimension.
    That needs every slot to be a host NumPy array with one row per sample: a LoD tensor
    (a feed variable with lod_level > 0, or a LoDTensor with a LoD), a scalar or device
    array, slots with different first dimensions, or shapes that change from batch to batch
    keep the script's batches, recorded in `skipped()` with why (a batch found unusable
    after others were regrouped takes the override back out of `applied()`).
  A feed variable with a fixed first dimension (fluid.data shape [8, ...]) takes no other
  batch size: the override is skipped for it. With worker processes (num_workers > 0) each
  worker groups what its generator yields, as for a sample generator: a generator that
  shards itself (fluid.io.get_worker_info()) has its own share regrouped (the same samples,
  each batch from one worker); one that does not keeps the single-process grouping. What a
  worker records here reaches the trainer's `applied()` / `skipped()` with its batches.
* `apply_strategies(build_strategy, exec_strategy, data_parallel)`: the CompiledProgram's
  strategies, when it is built for running.

`applied()` lists what was actually overridden, [{"section", "key", "value", "was"}, ...]
(once per distinct change), so a profile can say which values were not the script's own.
`skipped()` lists the overrides that had no effect, each with why (in words, and as a
`code` a program acts on: NO_EFFECT_CODES): a batch size the
script's batches cannot be regrouped to (above), use_double_buffer on CPU places, a
BuildStrategy fusion (any field but enable_inplace and memory_optimize) or an
ExecutionStrategy field of a program run without with_data_parallel, a value the script had
already. A tuner must not credit these with a change in speed.
An unknown section or key, or a value of the wrong type, is a FlagError naming the variable
and the key; `import runtime` checks the variable, as it checks FLAGS_*.
"""

import json
import os
import threading

from .errors import FlagError
from .place import is_gpu

ENV = "PADDLETUNE_OVERRIDES"
# why an override had no effect, as codes (the words vary with the job)
NO_EFFECT_CODES = ("same-value", "no-loader", "no-compiled-program", "not-data-parallel",
                   "cpu-places", "fixed-batch", "lod-feed", "unbatchable")


def _int(low):
    def check(value):
        return isinstance(value, int) and not isinstance(value, bool) and value >= low
    return check, f"an integer >= {low}"


def _bool():
    return (lambda value: isinstance(value, bool)), "true or false"


def _opt_bool():
    return (lambda value: value is None or isinstance(value, bool)), "true, false or null"


def _choice(*values):
    return (lambda value: value in values and not isinstance(value, bool)), \
        f"one of {', '.join(map(str, values))}"


SCHEMA = {
    "reader": {"num_workers": _int(0), "capacity": _int(1), "use_double_buffer": _bool(),
               "batch_size": _int(1)},
    "exec_strategy": {"num_threads": _int(0), "num_iteration_per_drop_scope": _int(1),
                      "num_iteration_per_run": _int(1), "use_thread_barrier": _bool(),
                      "allow_op_delay": _bool(), "use_experimental_executor": _bool()},
    "build_strategy": {"fuse_all_optimizer_ops": _bool(), "fuse_all_reduce_ops": _opt_bool(),
                       "fuse_elewise_add_act_ops": _bool(), "fuse_broadcast_ops": _opt_bool(),
                       "fuse_relu_depthwise_conv": _bool(), "enable_inplace": _bool(),
                       "memory_optimize": _opt_bool(), "reduce_strategy": _choice(0, 1),
                       "enable_sequential_execution": _bool(),
                       "enable_backward_optimizer_op_deps": _bool(),
                       "remove_unnecessary_lock": _bool(), "cache_runtime_context": _bool()},
}
READER_AT_CONSTRUCTION = ("capacity", "num_workers", "use_double_buffer")
# the BuildStrategy fields a CompiledProgram without with_data_parallel uses too
# (CompiledProgram._options); the others, and every ExecutionStrategy field, only shape the
# data-parallel engine
SINGLE_PLACE_BUILD = ("enable_inplace", "memory_optimize")
# the loader's attribute holding each construction-time option
_LOADER_ATTR = {"capacity": "_queue_capacity", "num_workers": "_num_workers",
                "use_double_buffer": "_use_double_buffer"}

_lock = threading.Lock()
_cache = [None, {}]  # [raw text parsed, its parsed value]
_applied = []
_skipped = []
_withdrawn = []  # applied entries taken back: a later batch could not be regrouped
_forward = None  # in a reader worker process: sends each record to the trainer


def parse(raw):
    """The overrides in `raw` (the variable's JSON text) as {section: {key: value}};
    FlagError naming the variable and the key when anything is wrong."""
    if raw is None or not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise FlagError(f"{ENV} is not valid JSON ({err}); expected e.g. "
                        f"'{{\"reader\": {{\"num_workers\": 2}}}}'") from None
    if not isinstance(data, dict):
        raise FlagError(f"{ENV} must be a JSON object of sections "
                        f"({', '.join(SCHEMA)}), got {type(data).__name__}")
    out = {}
    for section, values in data.items():
        keys = SCHEMA.get(section)
        if keys is None:
            raise FlagError(f"{ENV}: unknown section {section!r}; known: {', '.join(SCHEMA)}")
        if not isinstance(values, dict):
            raise FlagError(f"{ENV}: section {section!r} must be an object of "
                            f"{{key: value}}, got {json.dumps(values)}")
        for key, value in values.items():
            if key not in keys:
                raise FlagError(f"{ENV}: unknown key {section}.{key}; known in {section}: "
                                f"{', '.join(keys)}")
            check, expected = keys[key]
            if not check(value):
                raise FlagError(f"{ENV}: invalid value {json.dumps(value)} for "
                                f"{section}.{key}: expected {expected}")
        out[section] = dict(values)
    return out


def requested(environ=None):
    """The overrides the environment asks for (parsed once per distinct text)."""
    raw = (os.environ if environ is None else environ).get(ENV)
    with _lock:
        if raw != _cache[0]:
            _cache[1] = parse(raw)
            _cache[0] = raw
        return _cache[1]


def apply_reader(loader):
    """Override the options of `loader` that are fixed at this point: the construction-time
    ones the first time it is called for a loader, `batch_size` once a generator is set (a
    sample generator's batch_size; for the others the size the reader stage regroups the
    script's batches to). Safe to call again: an option is overridden once per loader, the
    batch size once per source. use_double_buffer is recorded once a source sets the places:
    it only does something on a GPU place."""
    wanted = requested().get("reader")
    if not wanted:
        return
    own = loader.__dict__.setdefault("_overridden", {})  # key -> the script's own value
    for key in READER_AT_CONSTRUCTION:
        if key in wanted and key not in own:
            attr = _LOADER_ATTR[key]
            own[key] = getattr(loader, attr)
            object.__setattr__(loader, attr, wanted[key])
            if key != "use_double_buffer":
                _record("reader", key, wanted[key], own[key])
    source = loader._source
    if source is None:
        return
    if "use_double_buffer" in own:
        _record("reader", "use_double_buffer", wanted["use_double_buffer"],
                own["use_double_buffer"], _double_buffer_no_effect(loader))
    if "batch_size" in wanted and loader.__dict__.get("_overridden_source") is not source:
        _apply_batch_size(loader, source, wanted["batch_size"])


def _apply_batch_size(loader, source, value):
    """Give `loader`'s new source the requested batch size (see the module docstring)."""
    kind, reader, batch_size, drop_last = source
    loader._overridden_source = source  # this source is done; a new one is not
    fixed = _fixed_batch(loader, kind)
    if fixed is not None:
        _note_no_effect("reader", "batch_size", value, *fixed)
        return
    if kind == "sample":
        was = batch_size
    elif kind == "sample_list":
        from .reader.decorator import batch_info
        known = batch_info(reader)
        # paddle.batch's own reader: re-batched with its drop_last, `was` known now; other
        # lists are re-chunked keeping a final partial one, `was` recorded at the first
        was, drop_last = (known[1], known[2]) if known else (None, False)
    else:
        was = None  # the first batch's first dimension, recorded when the reader sees it
    if was == value:
        _record("reader", "batch_size", value, was)  # the script's own: recorded, unchanged
        return
    loader._source = loader._overridden_source = (kind, reader, value, drop_last)
    if was is not None:
        _record("reader", "batch_size", value, was)


def _fixed_batch(loader, kind):
    """(why, code) when `loader`'s feed variables take no other batch size (None: they do)."""
    for var in loader._feed_vars:
        shape = tuple(var.shape or ())
        if kind != "sample" and var.lod_level:
            return (f"{loader.name} feeds {var.name!r}, a LoD tensor (lod_level="
                    f"{var.lod_level}): its rows are not one per sample, so the script's "
                    f"batches (set_{kind}_generator) are kept", "lod-feed")
        if shape and shape[0] >= 0:
            return (f"{loader.name} feeds {var.name!r}, whose first dimension is fixed "
                    f"(shape {list(shape)}): no other batch size fits it", "fixed-batch")
    return None


def record_batch_size(value, was):
    """The reader stage regrouped a loader's batches to `value` (the script's: `was`)."""
    _record("reader", "batch_size", value, was)


def batch_size_no_effect(value, why):
    """The reader stage kept the script's batches: `why`."""
    _note_no_effect("reader", "batch_size", value, why, "unbatchable")


def withdraw_batch_size(value, was, why):
    """The reader stage stopped regrouping part way (a batch it cannot join): the override is
    taken out of `applied()` (also if recorded again later) and noted with `why`."""
    _add("withdrawn", {"section": "reader", "key": "batch_size", "value": value, "was": was,
                       "why": why, "code": "unbatchable"})


def _double_buffer_no_effect(loader):
    if any(is_gpu(place) for place in loader._places):
        return None
    return (f"{loader.name} feeds CPU places: the double buffer only stages batches onto a "
            f"GPU", "cpu-places")


def apply_strategies(build_strategy, exec_strategy, data_parallel):
    """Override the fields of a CompiledProgram's BuildStrategy / ExecutionStrategy (either
    may be None) that PADDLETUNE_OVERRIDES names. Without data parallelism only
    SINGLE_PLACE_BUILD fields do anything: the others are recorded as having no effect
    and left as they are."""
    wanted = requested()
    for section, strategy in (("build_strategy", build_strategy),
                              ("exec_strategy", exec_strategy)):
        for key, value in (wanted.get(section) or {}).items():
            if not data_parallel and not (section == "build_strategy"
                                          and key in SINGLE_PLACE_BUILD):
                _note_no_effect(section, key, value,
                                "the program runs without with_data_parallel, so no "
                                "data-parallel graph uses it", "not-data-parallel")
            elif strategy is not None:
                _set(strategy, key, section, key, value)


def applied():
    """[{"section", "key", "value", "was"}, ...]: every distinct override the runtime made
    that changes what runs."""
    with _lock:
        return [dict(entry) for entry in _applied]


def skipped():
    """[{"section", "key", "value", "why", "code"}, ...]: overrides that had no effect where
    asked (not applied, or applied where nothing uses them, or equal to the script's own
    value)."""
    with _lock:
        return [dict(entry) for entry in _skipped]


_NOT_REACHED = {"reader": ("no DataLoader/PyReader of the job used it", "no-loader"),
                "build_strategy": ("the job ran no CompiledProgram (a Program that a plain "
                                   "Executor runs has no strategies)", "no-compiled-program")}
_NOT_REACHED["exec_strategy"] = _NOT_REACHED["build_strategy"]


def unreached():
    """[{"section", "key", "value", "why", "code"}, ...]: requested overrides that nothing in
    the job came to (neither applied nor skipped); call it when the job is over."""
    with _lock:
        seen = {(e["section"], e["key"]) for e in _applied + _skipped}
    return [{"section": section, "key": key, "value": value, "why": _NOT_REACHED[section][0],
             "code": _NOT_REACHED[section][1]}
            for section, values in requested().items() for key, value in values.items()
            if (section, key) not in seen]


def reset():
    """Forget what was applied (tests; a session that runs several jobs)."""
    with _lock:
        _applied.clear()
        _skipped.clear()
        _withdrawn.clear()


def _set(obj, attr, section, key, value):
    was = getattr(obj, attr)
    object.__setattr__(obj, attr, value)
    _record(section, key, value, was)


def _record(section, key, value, was, no_effect=None):
    """An override made: applied, or (`no_effect`: (why, code)) one that changes nothing."""
    if no_effect is None and value == was:
        no_effect = (f"the script's own value is {json.dumps(value)} already", "same-value")
    if no_effect is not None:
        _note_no_effect(section, key, value, *no_effect)
        return
    _add("applied", {"section": section, "key": key, "value": value, "was": was})


def _note_no_effect(section, key, value, why, code):
    _add("skipped", {"section": section, "key": key, "value": value, "why": why, "code": code})


def _add(kind, entry):
    if _forward is not None:  # a reader worker process: the trainer keeps the records
        _forward(kind, entry)
    else:
        accept(kind, entry)


def accept(kind, entry):
    """Keep one record: "applied" / "skipped" (its entry) or "withdrawn" (an applied entry
    plus why). The trainer calls it for the records its reader workers send."""
    with _lock:
        if kind == "applied":
            if entry not in _applied and entry not in _withdrawn:
                _applied.append(entry)
        elif kind == "skipped":
            if entry not in _skipped:
                _skipped.append(entry)
        elif kind == "withdrawn":
            done = {k: entry[k] for k in ("section", "key", "value", "was")}
            if done not in _withdrawn:
                _withdrawn.append(done)
            if done in _applied:
                _applied.remove(done)
            note = {k: entry.get(k) for k in ("section", "key", "value", "why", "code")}
            if note not in _skipped:
                _skipped.append(note)


def forward_to(send):
    """In a reader worker process: hand every record to `send(kind, entry)` (its channel to
    the trainer, which calls `accept`) instead of keeping it in this process."""
    global _forward
    _forward = send


requested()  # `import runtime` rejects a bad PADDLETUNE_OVERRIDES, as it does a bad FLAGS_*
