"""The tuning space: knobs, their candidate values, and a setting as env vars and as code.

A knob is one thing a trial can change without editing the script: a reader option or an
Execution/BuildStrategy field (through PADDLETUNE_OVERRIDES, runtime/overrides.py), a FLAG
(its FLAGS_* variable) or NumPy's BLAS threads (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS). A
setting is {knob name: value} for the knobs that differ from the job's own values; {} is
the baseline. `build_space` derives the knobs from the baseline trial's profile; `--space`
specs restrict or extend them.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Sequence, Tuple

from runtime.overrides import ENV as OVERRIDES_ENV
from runtime.overrides import SCHEMA

from ..advisors.cuda_allocator import CONF_VAR, allocator_strain
from ..advisors.gpu import gpu_place
from ..advisors.gpu_model import (DTYPE_SHARE, TF32_CORES, capability_of, float32_share,
                                   layer_calls)
from ..sources.code import code_for
from ..sources.eager.overrides import FRAMEWORK_SECTIONS, NEEDS_WORKERS, SHARING_STRATEGIES

TORCH_SECTIONS = FRAMEWORK_SECTIONS["torch"]  # backends: a PyTorch job's cuDNN search and
# TF32 (sources/torch/backends.py); multiprocessing: its sharing strategy (torch/handover.py)
OVERRIDE_SECTIONS = (*SCHEMA, *TORCH_SECTIONS)  # reader, exec_strategy, build_strategy,
# backends, multiprocessing
CAPACITIES = (2, 4, 8, 16, 64)
DEFAULT_MAX_BATCH_FACTOR = 8  # without --max-batch-size, batches up to 8x the job's own


GIVEN = "from --space"  # Knob.why of the knobs whose candidates the user gave


class SpaceError(ValueError):
    """A --space spec that names no knob or gives unusable values."""


@dataclass(frozen=True)
class Knob:
    name: str  # what --space and the tables call it: num_workers, FLAGS_..., blas_threads
    section: str  # reader | exec_strategy | build_strategy | flag | env
    key: str  # the override key, the FLAGS_* name or the environment variable
    values: Tuple[Any, ...]  # candidates, the job's own value first when known
    current: Any = None  # the job's own value (None: unknown / the runtime default)
    why: str = ""  # where the candidates come from
    source: str = ""  # batch_size: the loader's source (sample, sample_list, batch)

    def alternatives(self) -> List[Any]:
        return [v for v in self.values if v != self.current]


@dataclass
class Space:
    knobs: Dict[str, Knob] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)  # knobs left out and why
    framework: str = "fluid"  # what the job trains with (how code_lines writes a setting)

    def __contains__(self, name):
        return name in self.knobs

    def to_dict(self) -> dict:
        return {"knobs": [{"name": k.name, "section": k.section, "key": k.key,
                           "values": list(k.values), "current": k.current, "why": k.why}
                          for k in self.knobs.values()], "notes": list(self.notes)}


def build_space(profile, keep_batch_size=False, max_batch_size=None, specs=()) -> Space:
    """The knobs worth trying on the job of `profile` (the baseline trial), then `specs`."""
    space = Space(framework=profile.source.framework)
    cores = profile.env.cpu.cores or 1
    loader = profile.summary.main_loader
    framework = profile.source.framework
    if loader is not None:
        _add_reader(space, loader, cores, keep_batch_size, max_batch_size, framework)
    else:
        space.notes.append("no DataLoader/PyReader ran: reader knobs and the batch size are "
                           "not tunable without editing the script")
    if framework in ("fluid", "paddle"):
        _add_flags(space, profile.env.flags or {})
    _add_gpu_math(space, profile, framework)
    if framework == "torch":
        _add_alloc_conf(space, profile)
        _add_sharing_strategy(space, loader)
        _add_cpu_autocast(space, profile)
    blas, section, key, what = _math_threads(profile)
    shown = key if section == "env" else f"PADDLETUNE_OVERRIDES {section}.{key}"
    _put(space, Knob("blas_threads", section, key, _uniq([blas] + list(range(1, cores + 1))),
                     blas, f"{what} ({shown})"))
    if framework == "fluid":
        _add_strategies(space, profile.summary.parallel, cores)
    for spec in specs:
        apply_spec(space, spec)
    return space


def _add_flags(space, flags):
    """The GC threshold and the allocator strategy, from the job's FLAGS ({name: value})."""
    gc = flags.get("FLAGS_eager_delete_tensor_gb", 0.0)
    _put(space, Knob("FLAGS_eager_delete_tensor_gb", "flag", "FLAGS_eager_delete_tensor_gb",
                     _uniq([gc, 0.0, -1.0]), gc, "GC at last use / GC off"))
    strategy = flags.get("FLAGS_allocator_strategy", "auto_growth")
    _put(space, Knob("FLAGS_allocator_strategy", "flag", "FLAGS_allocator_strategy",
                     _uniq([strategy, "auto_growth", "naive_best_fit"]), strategy))


# framework -> (knob name, section, key) of cuDNN's algorithm search, and of TF32
CUDNN_SEARCH = {"torch": ("cudnn_benchmark", "backends", "cudnn_benchmark"),
                "paddle": ("FLAGS_cudnn_exhaustive_search", "flag",
                           "FLAGS_cudnn_exhaustive_search")}
TF32 = {"torch": ("matmul_allow_tf32", "backends", "matmul_allow_tf32")}


def _add_cpu_autocast(space, profile):
    """The script's CPU autocast on and off, where its dtype has no kernels on this CPU (what
    advice #28's cpu-autocast-slow proposes, to be measured)."""
    census = profile.last_event("model")
    if census is not None and census.cpu_autocast and census.cpu_kernels is False \
            and gpu_place(profile) is None:
        _put(space, Knob("cpu_autocast", "backends", "cpu_autocast", (True, False), True,
                         f"the model's census: autocast to {census.cpu_autocast} on a CPU "
                         f"without its kernels"))


def _add_gpu_math(space, profile, framework):
    """cuDNN's algorithm search where convolutions ran off it, and TF32 where float32 matrix
    products did, on a GPU (the model's census, which records the settings under the names
    the framework's code writer gives: what advice #28 proposes, to be measured)."""
    census = profile.last_event("model")
    if census is None or gpu_place(profile) is None:
        return
    calls, code = layer_calls(census), code_for(framework)
    ampere = (capability_of(census.capability) or (0, 0)) >= TF32_CORES  # (TF32's Tensor Cores)
    float32 = not census.autocast and float32_share(census) >= DTYPE_SHARE  # (as advice #28)
    for table, setting, wanted in (
            (CUDNN_SEARCH, code.cudnn_autotune_setting, calls["convolutions"]),
            (TF32, code.tf32_setting, calls["matrix products"] and ampere and float32)):
        knob = table.get(framework)
        if knob is not None and wanted and census.settings.get(setting) is False:
            _put(space, Knob(*knob, (False, True), False, "the model's census: off on the GPU"))


def _add_alloc_conf(space, profile):
    """PYTORCH_CUDA_ALLOC_CONF with expandable segments, where the caching allocator's
    figures show strain (advisors/cuda_allocator.py: what its advice proposes, measured)."""
    strain = allocator_strain(profile)
    if strain is not None:  # (named PYTORCH_CUDA_ALLOC_CONF whichever variable it sets)
        _put(space, Knob(CONF_VAR, "env", strain.var, (strain.conf, strain.suggested_conf),
                         strain.conf, "the CUDA caching allocator's strain (advice "
                         "cuda-allocator-config)"))


def _add_sharing_strategy(space, loader):
    """How a PyTorch job's worker processes hand tensors over, where its DataLoader has
    workers (advice worker-hand-over: file_system instead of the file descriptors)."""
    config = loader.config if loader is not None else None
    if config is None or not config.num_workers:
        return
    own = config.sharing_strategy or SHARING_STRATEGIES[0]
    _put(space, Knob("sharing_strategy", "multiprocessing", "sharing_strategy",
                     _uniq([own, *SHARING_STRATEGIES]), own,
                     "how the workers hand tensors to the loop (torch.multiprocessing)"))


def _add_strategies(space, parallel, cores):
    """The job's own ExecutionStrategy, as its data-parallel steps ran (figures.
    ParallelFigures; without any: 0 / 100, Paddle's defaults: those knobs then have no
    effect anyway), and the BuildStrategy fusions."""
    threads = parallel.threads if parallel is not None else 0
    _put(space, Knob("num_threads", "exec_strategy", "num_threads",
                     _uniq([threads, 1, cores]), threads,
                     "ParallelExecutor threads (0: its default)"))
    every = (parallel.drop.every if parallel is not None else None) or 100
    _put(space, Knob("num_iteration_per_drop_scope", "exec_strategy",
                     "num_iteration_per_drop_scope", _uniq([every, 100, 1, 10]), every))
    for fusion in ("fuse_all_optimizer_ops", "fuse_elewise_add_act_ops"):
        _put(space, Knob(fusion, "build_strategy", fusion, (False, True), False))


def _math_threads(profile):
    """(the job's math threads, the knob's section and key, what they are): NumPy's BLAS for
    the embedded runtime (its variable), the framework's own pool otherwise: OMP_NUM_THREADS,
    which sets the pool's size as the job starts. A PyTorch script that sets its threads
    itself (torch.set_num_threads before its first step ended: the profile's settings event,
    in env.flags once loaded) undoes that variable, so the knob is then the threads.intra_op
    override, which a script's own later call does not undo, and the job's own value is the
    script's, not the one the header read before the script ran."""
    framework = profile.source.framework
    if framework == "fluid":
        return profile.env.numpy.blas_threads, "env", _blas_env(profile), "NumPy's BLAS threads"
    own = {k.id: k.value for k in profile.source.knobs}.get("threads.intra_op")
    what = f"{framework}'s CPU math threads"
    flag = FRAMEWORK_THREADS.get(framework)
    if flag is not None and _script_set(profile, flag):
        return (profile.env.flags or {}).get(flag, own), "threads", "intra_op", \
            f"{what}, as the script sets them itself"
    return own, "env", "OMP_NUM_THREADS", what


FRAMEWORK_THREADS = {"torch": "torch.get_num_threads"}  # the env.flags entry of the CPU
# math threads (the framework's source: flags())


def _script_set(profile, flag) -> bool:
    """The job changed `flag` before its first training step ended (a settings event)."""
    return any(flag in (e.flags or {}) for e in profile.events_of("settings"))


PREFETCH_FACTORS = (2, 4, 8)


def _add_reader(space, loader, cores, keep_batch_size, max_batch_size, framework="fluid"):
    """The main loader's knobs (figures.LoaderFigures; its settings: records.LoaderConfig)."""
    config = loader.config
    workers = config.num_workers
    first = "a thread" if config.made_in == "thread" else "in the loop"
    _put(space, Knob("num_workers", "reader", "num_workers",
                     _uniq([workers] + list(range(0, cores + 1))), workers,
                     f"0 ({first}) to {cores} worker processes ({cores} cores)"))
    if framework == "fluid":
        capacity = config.capacity
        _put(space, Knob("capacity", "reader", "capacity", _uniq([capacity, *CAPACITIES]),
                         capacity, "queue length in batches"))
        double = config.use_double_buffer
        _put(space, Knob("use_double_buffer", "reader", "use_double_buffer",
                         _uniq([double, True, False]), double))
    else:
        prefetch = config.prefetch_factor or 2
        _put(space, Knob("prefetch_factor", "reader", "prefetch_factor",
                         _uniq([prefetch, *PREFETCH_FACTORS]), prefetch,
                         "batches each worker prepares ahead (with workers only)"))
        persistent = bool(config.persistent_workers)
        _put(space, Knob("persistent_workers", "reader", "persistent_workers",
                         _uniq([persistent, True, False]), persistent,
                         "workers kept between epochs, not started again (with workers "
                         "only)"))
    source = config.source or "batch"
    batch, why = _own_batch(loader, config, source)
    if keep_batch_size:
        space.notes.append("batch size kept (--keep-batch-size)")
    elif why:
        space.notes.append(f"batch size not tunable: {why}")
    else:
        top = max_batch_size or batch * DEFAULT_MAX_BATCH_FACTOR
        how = {"sample_list": "; the runtime regroups the script's lists of samples",
               "batch": "; the runtime regroups the script's batches"}.get(source, "")
        space.knobs["batch_size"] = Knob("batch_size", "reader", "batch_size", (batch,), batch,
                                         f"up to {top} (memory model, verified){how}",
                                         source)


def _own_batch(loader, config, source):
    """(the job's own batch size, None) when PADDLETUNE_OVERRIDES' reader.batch_size can
    change it, else (None, why not). A sample generator's is its batch_size. The runtime
    regroups what set_sample_list_generator and set_batch_generator yield (runtime/
    overrides.py): their size is paddle.batch's (the config) or the baseline's batches'
    first dimension (the reader probe's shapes); a batch generator's batches must have been
    seen to be regroupable (every slot with a first axis of the same size, the other axes
    alike in every batch), or the trial would only find it has no effect."""
    batch = config.batch_size
    if source == "sample":
        return (batch, None) if batch else (None, "the sample generator's batch_size is "
                                                   "not in the profile")
    method = f"set_{source}_generator"
    seen, why = _seen_batch(loader.shapes)
    if source == "batch" and why:
        return None, (f"the script makes whole batches itself ({method}), and {why}: the "
                      f"runtime regroups them only when every slot is an array with one row "
                      f"per sample")
    batch = batch or seen
    if not batch:
        return None, (f"the script makes whole batches itself ({method}) and the profile "
                      f"shows no batch of it")
    return batch, None


def _seen_batch(shapes):
    """(the batches' common first dimension, None) from the reader's per-feed shape figures
    ({feed variable: figures.ShapeFigures}), or (None, why they cannot be regrouped)."""
    if not shapes:
        return None, "the profile has no shapes of its batches"
    firsts = set()
    for name, fig in shapes.items():
        varying = {row.dim: row for row in fig.varying}
        if fig.rank_varies or not fig.shape:
            return None, f"its slot {name!r} has no fixed rank with a first axis"
        if set(varying) - {0}:
            return None, f"its slot {name!r} changes shape from batch to batch"
        first = varying.get(0)
        firsts.add(fig.shape[0] if first is None else (first.p50, first.min, first.max))
    if len(firsts) != 1:
        return None, "its slots have different first dimensions"
    first = firsts.pop()
    return (first[0] if isinstance(first, tuple) else first), None


def check_specs(specs) -> None:
    """The values of NAME=V1,V2 specs for override fields, checked before any trial runs (a
    bad one would otherwise cost a crashed trial each): SpaceError naming it."""
    for spec in specs:
        name, sep, text = spec.strip().partition("=")
        if not sep or name == "only" or name.startswith(("-", "FLAGS_")):
            continue
        section, dot, key = name.partition(".")
        fields = ([(section, key)] if dot else
                  [(sec, name) for sec in OVERRIDE_SECTIONS if _field(sec, name)])
        values = [parse_value(v) for v in text.split(",")]
        for section, key in fields:
            _check_values(spec, section, key, values)


def _field(section: str, key: str, framework=None):
    """(check, what it takes) of an override field (the runtime's, or a PyTorch job's
    `backends`: for `framework` "torch", or None when the job's framework is not known yet),
    None for another name."""
    sections = {**SCHEMA, **TORCH_SECTIONS} if framework in (None, "torch") else SCHEMA
    return sections.get(section, {}).get(key)


def _check_values(spec, section, key, values):
    field = _field(section, key)
    if field is None:
        return
    check, expected = field
    bad = [v for v in values if not check(v)]
    if bad:
        raise SpaceError(f"--space {spec}: {section}.{key} takes {expected}, not "
                         f"{', '.join(map(repr, bad))}")


def apply_spec(space: Space, spec: str):
    """One --space spec: `NAME=V1,V2,...` sets a knob's candidates (adding a FLAGS_* knob or
    a `reader.`/`exec_strategy.`/`build_strategy.` field not in the space), `-NAME` drops a
    knob, `-SECTION` drops a whole section (reader, flag, env, exec_strategy,
    build_strategy), `only=NAME1,NAME2` keeps just those knobs."""
    spec = spec.strip()
    if spec.startswith("-"):
        name = spec[1:]
        hits = [k for k in space.knobs.values() if name in (k.name, k.section)
                or (name == "env" and k.name == "blas_threads")]  # (its section: threads
        # where the script sets them itself)
        if not hits:
            raise SpaceError(f"--space {spec}: no knob or section {name!r}; knobs: "
                             f"{', '.join(space.knobs) or 'none'}")
        for knob in hits:
            del space.knobs[knob.name]
        return
    name, sep, text = spec.partition("=")
    name = name.strip()
    if name == "only":
        keep = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in keep if n not in space.knobs]
        if unknown or not keep:
            raise SpaceError(f"--space {spec}: no knob {', '.join(unknown) or '(none given)'} "
                             f"in the space; knobs: {', '.join(space.knobs) or 'none'}")
        for n in list(space.knobs):
            if n not in keep:
                del space.knobs[n]
        return
    if not sep or not text.strip():
        raise SpaceError(f"--space {spec!r}: write NAME=V1,V2 (e.g. num_workers=0,1,2) or "
                         f"-NAME to leave a knob out")
    values = tuple(_uniq(parse_value(v) for v in text.split(",")))
    short = name.partition(".")[2] if "." in name and not name.startswith("FLAGS_") else name
    knob = space.knobs.get(name) or space.knobs.get(short) or _new_knob(name, space.framework)
    _check_values(spec, knob.section, knob.key, values)
    space.knobs[knob.name] = replace(knob, values=_uniq([knob.current, *values]) if
                                knob.current is not None else values, why=GIVEN)


def _new_knob(name, framework) -> Knob:
    if name.startswith("FLAGS_"):
        return Knob(name, "flag", name, ())
    section, _, key = name.partition(".")
    if _field(section, key, framework) is not None:
        return Knob(key, section, key, ())
    if name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") or (
            name == CONF_VAR and framework == "torch"):
        return Knob(name, "env", name, ())
    sections = OVERRIDE_SECTIONS if framework == "torch" else tuple(SCHEMA)
    raise SpaceError(f"--space: unknown knob {name!r} for a {framework} job; use a knob of the "
                     f"space, FLAGS_<name>, or SECTION.KEY with SECTION one of "
                     f"{', '.join(sections)}")


def parse_value(text: str):
    """'2' -> 2, '0.5' -> 0.5, 'true' -> True, 'none' -> None, else the text."""
    text = text.strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


# --- a setting ---------------------------------------------------------------------------------
def label(setting: dict) -> str:
    """'num_workers=1 capacity=16', or 'baseline' for {}."""
    if not setting:
        return "baseline"
    return " ".join(f"{k}={_show(v)}" for k, v in setting.items())


def key(setting: dict) -> str:
    """A canonical text for a setting (dict keys of the record, de-duplication)."""
    return json.dumps(sorted(setting.items()), default=str)


def needs_workers(knob: Knob) -> bool:
    """A knob that acts only through a DataLoader's worker processes: a worker-only argument
    (eager.overrides.NEEDS_WORKERS) or how workers hand tensors over (multiprocessing)."""
    return (knob.section == "reader" and knob.key in NEEDS_WORKERS) or \
        knob.section == "multiprocessing"


def merged(base: dict, change: dict, space: Space) -> dict:
    """`base` with `change` applied; knobs set back to the job's own value are dropped, and
    so are the worker-only knobs of a setting left without workers (they would have no
    effect)."""
    out = dict(base)
    for name, value in change.items():
        knob = space.knobs.get(name)
        if knob is not None and knob.current is not None and value == knob.current:
            out.pop(name, None)
        else:
            out[name] = value
    workers = space.knobs.get("num_workers")
    if workers is not None and out.get("num_workers", workers.current) == 0:
        for name in [n for n in out if n in space.knobs and needs_workers(space.knobs[n])]:
            del out[name]
    order = list(space.knobs)
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order
                       else len(order)))


def to_env(setting: dict, space: Space) -> Dict[str, str]:
    """The environment variables that impose `setting` on a run of the unmodified script."""
    env, sections = {}, {}
    for name, value in setting.items():
        knob = space.knobs[name]
        if knob.section in OVERRIDE_SECTIONS or knob.section == "threads":
            sections.setdefault(knob.section, {})[knob.key] = value
        else:
            env[knob.key] = str(value).lower() if isinstance(value, bool) else str(value)
    if sections:
        env[OVERRIDES_ENV] = json.dumps(sections, separators=(",", ":"))
    return env


def exports(setting: dict, space: Space) -> List[str]:
    """`export NAME=value` lines."""
    return [f"export {k}={_quote(v)}" for k, v in to_env(setting, space).items()]


BACKENDS = {"cudnn_benchmark": "torch.backends.cudnn.benchmark",
            "matmul_allow_tf32": "torch.backends.cuda.matmul.allow_tf32"}
EAGER_LOADERS = {"torch": "torch.utils.data.DataLoader", "paddle": "paddle.io.DataLoader"}
EAGER_THREADS = {"torch": "torch.set_num_threads({value})",
                 "paddle": "paddle.base.core.set_num_threads({value})"}


def code_lines(setting: dict, space: Space) -> List[str]:
    """The lines to change in the script for the same effect."""
    if space.framework in EAGER_LOADERS:
        return _eager_code_lines(setting, space)
    lines, reader = [], {}
    for name, value in setting.items():
        knob = space.knobs[name]
        if knob.section == "reader" and knob.key != "batch_size":
            reader[knob.key] = value
        elif knob.key == "batch_size":
            where = {"sample_list": f"paddle.batch(reader, batch_size={value})",
                     "batch": f"yield batches of {value} from the batch generator"}.get(
                knob.source, f"loader.set_sample_generator(reader, batch_size={value}, ...)")
            lines.append(f"{where}  # was {knob.current}; scale the learning rate too")
        elif knob.section == "exec_strategy":
            lines.append(f"exec_strategy.{knob.key} = {value!r}")
        elif knob.section == "build_strategy":
            lines.append(f"build_strategy.{knob.key} = {value!r}")
        elif knob.section == "flag":
            lines.append(f"fluid.set_flags({{{knob.key!r}: {value!r}}})  # before training")
        else:
            lines.append(f"# {knob.key}={value} must be set before NumPy loads (or: from "
                         f"runtime import blas; blas.set_blas_threads({value}))")
    if reader:
        args = ", ".join(f"{k}={v!r}" for k, v in reader.items())
        lines.insert(0, f"fluid.io.DataLoader.from_generator(..., {args})")
    return lines


def _eager_code_lines(setting: dict, space: Space) -> List[str]:
    """code_lines for a PyTorch or Paddle 3 job: the DataLoader's arguments, the flags, the
    CPU math threads."""
    lines, reader = [], {}
    for name, value in setting.items():
        knob = space.knobs[name]
        if knob.section == "reader":
            reader[knob.key] = value
        elif knob.section == "flag":
            lines.append(f"paddle.set_flags({{{knob.key!r}: {value!r}}})  # before training")
        elif knob.key == "cpu_autocast":
            lines.append(f"with torch.autocast('cpu', ..., enabled={value!r}):  # the "
                         f"script's own autocast, {'on' if value else 'off'}")
        elif knob.section == "backends":
            lines.append(f"{BACKENDS[knob.key]} = {value!r}  # before training")
        elif knob.section == "multiprocessing":
            lines.append(f"torch.multiprocessing.set_sharing_strategy({value!r})  # before "
                         f"the DataLoader makes its workers")
        elif knob.key == "OMP_NUM_THREADS":
            call = EAGER_THREADS[space.framework].format(value=value)
            lines.append(f"{call}  # before training (or export OMP_NUM_THREADS={value})")
        elif knob.section == "threads":
            call = EAGER_THREADS[space.framework].format(value=value)
            lines.append(f"{call}  # in place of the script's own "
                         f"{EAGER_THREADS[space.framework].format(value=knob.current)}")
        else:
            lines.append(f"export {knob.key}={value}")
    if reader:
        args = ", ".join(f"{k}={v!r}" for k, v in reader.items())
        notes = (["scale the learning rate with the batch size"] if "batch_size" in reader
                 else []) + (["without prefetch_factor and persistent_workers (they need "
                              "workers)"] if reader.get("num_workers") == 0 else [])
        note = f"  # {'; '.join(notes)}" if notes else ""
        lines.insert(0, f"{EAGER_LOADERS[space.framework]}(dataset, {args}){note}")
    return lines


def _blas_env(profile) -> str:
    text = (profile.env.numpy.blas or "").lower()
    if "mkl" in text:
        return "MKL_NUM_THREADS"
    return "OPENBLAS_NUM_THREADS" if "openblas" in text else "OMP_NUM_THREADS"


def _put(space, knob):
    if len(knob.values) > 1:
        space.knobs[knob.name] = knob


def _uniq(values: Sequence) -> tuple:
    """The values without None and repeats (True and 1 are different values here)."""
    out, seen = [], set()
    for v in values:
        if v is not None and (type(v), v) not in seen:
            seen.add((type(v), v))
            out.append(v)
    return tuple(out)


def _show(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _quote(value: str) -> str:
    return f"'{value}'" if any(c in value for c in " {}\"',") else value
