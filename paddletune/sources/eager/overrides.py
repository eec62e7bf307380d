"""PADDLETUNE_OVERRIDES for an eager framework's job: the DataLoader arguments and thread
counts a tuner (or a person) imposes without editing the script, e.g.

    PADDLETUNE_OVERRIDES='{"reader": {"num_workers": 2, "batch_size": 128,
                                      "prefetch_factor": 4},
                           "threads": {"intra_op": 1}}'

and, for a PyTorch job, cuDNN's algorithm search, TF32 and the CPU's autocast (`backends`,
torch/backends.py) and how worker processes hand tensors over (`multiprocessing`:
sharing_strategy, torch/handover.py).

The framework's hooks call `loader_arguments` as each DataLoader is built, with the arguments
the script gave (bound to their names) and the framework's defaults; what was changed is
`applied`, what could not be (and why, with a code a program acts on) `skipped`, so a tuner
never credits a change that did not happen."""

import json
import os
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ...profile.records import AppliedOverride, NoEffect

ENV = "PADDLETUNE_OVERRIDES"


def _int(low):
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low), \
        f"an integer >= {low}"


def _bool():
    return (lambda v: isinstance(v, bool)), "true or false"


def _one_of(*choices):
    return (lambda v: v in choices), " or ".join(choices)


SCHEMA: Dict[str, Dict[str, Tuple[Callable, str]]] = {
    "reader": {"num_workers": _int(0), "batch_size": _int(1), "prefetch_factor": _int(1),
               "pin_memory": _bool(), "persistent_workers": _bool(),
               "use_shared_memory": _bool(), "use_buffer_reader": _bool()},
    "threads": {"intra_op": _int(1), "inter_op": _int(1)},
}
SHARING_STRATEGIES = ("file_descriptor", "file_system")  # torch.multiprocessing's, the
# default (Linux's) first
FRAMEWORK_SECTIONS = {  # the sections only one framework's jobs take
    "torch": {"backends": {"cudnn_benchmark": _bool(), "matmul_allow_tf32": _bool(),
                           "cpu_autocast": _bool()},
              "multiprocessing": {"sharing_strategy": _one_of(*SHARING_STRATEGIES)}},
}


def schema_for(framework: str) -> Dict[str, Dict[str, Tuple[Callable, str]]]:
    return {**SCHEMA, **FRAMEWORK_SECTIONS.get(framework, {})}


NEEDS_WORKERS = ("prefetch_factor", "persistent_workers", "use_shared_memory")


def batch_size_fixed(given: Mapping[str, object]) -> Optional[str]:
    """Why a DataLoader built with the arguments `given` (by name) takes no other batch size,
    or None: a batch sampler makes its own batches; batch_size=None turns batching off."""
    if given.get("batch_sampler") is not None:
        return "the script passes a batch_sampler, which makes its own batches"
    if "batch_size" in given and given["batch_size"] is None:
        return "the script turned automatic batching off (batch_size=None)"
    return None


class OverrideError(ValueError):
    """PADDLETUNE_OVERRIDES is not JSON, or names an unknown key, or a value of a wrong
    type (the message names the key and what it takes)."""


def parse(text: Optional[str], framework: str) -> Dict[str, Dict[str, object]]:
    if not text:
        return {}
    try:
        wanted = json.loads(text)
    except ValueError as err:
        raise OverrideError(f"{ENV} is not valid JSON ({err}); e.g. "
                            f"{ENV}='{{\"reader\": {{\"num_workers\": 2}}}}'") from None
    schema = schema_for(framework)
    if not isinstance(wanted, dict):
        raise OverrideError(f"{ENV} must be a JSON object of sections "
                            f"({', '.join(schema)}), not {type(wanted).__name__}")
    for section, values in wanted.items():
        keys = schema.get(section)
        if keys is None or not isinstance(values, dict):
            raise OverrideError(f"{ENV}: {framework} jobs take the sections "
                                f"{', '.join(schema)} (each an object), not {section!r}")
        for key, value in values.items():
            if key not in keys:
                raise OverrideError(f"{ENV}: unknown key {section}.{key} for a {framework} "
                                    f"job; known: {', '.join(keys)}")
            check, expected = keys[key]
            if not check(value):
                raise OverrideError(f"{ENV}: {section}.{key} takes {expected}, not "
                                    f"{value!r}")
    return wanted


class Overrides:
    def __init__(self, framework: str, env: Mapping[str, str] = os.environ):
        self.framework = framework
        self.requested = parse(env.get(ENV), framework)
        self.applied: List[AppliedOverride] = []
        self.skipped: List[NoEffect] = []
        self._seen = set()

    def wanted(self, section: str) -> Dict[str, object]:
        return dict(self.requested.get(section, {}))

    def apply(self, section: str, key: str, value, was):
        if (section, key, value, was) not in self._seen:
            self._seen.add((section, key, value, was))
            self.applied.append(AppliedOverride(section, key, value, was))
            # an override first found equal to the job's value and then kept against the
            # script's own later change did take effect: its "same value" skip is untrue
            self.skipped = [s for s in self.skipped
                            if (s.section, s.key, s.code) != (section, key, "same-value")]

    def skip(self, section: str, key: str, value, code: str, why: str):
        if (section, key, value, code) not in self._seen:
            self._seen.add((section, key, value, code))
            self.skipped.append(NoEffect(section, key, value, code, why))

    def loader_arguments(self, given: Dict[str, object], supported: Mapping[str, object],
                         batch_size_fixed: Optional[str] = None) -> Dict[str, object]:
        """The DataLoader's arguments with the reader overrides applied: `given` the
        script's (by name), `supported` the framework's arguments the override may set
        with their defaults, `batch_size_fixed` why the batch size cannot change (a batch
        sampler given), if so."""
        out = dict(given)
        wanted = self.wanted("reader")
        workers = wanted.get("num_workers", given.get("num_workers",
                                                     supported.get("num_workers", 0)))
        for key, value in wanted.items():
            was = given.get(key, supported.get(key))
            if key not in supported:
                self.skip("reader", key, value, "not-supported",
                          f"this {self.framework} DataLoader has no {key} argument")
            elif key == "batch_size" and batch_size_fixed:
                self.skip("reader", key, value, "fixed-batch", batch_size_fixed)
            elif key in NEEDS_WORKERS and not workers:
                self.skip("reader", key, value, "no-workers",
                          f"{key} needs worker processes (num_workers > 0)")
            elif was == value:
                self.skip("reader", key, value, "same-value", "the script's own value")
            else:
                out[key] = value
                self.apply("reader", key, value, was)
        if not workers and given.get("num_workers"):  # the override took the workers away
            self._without_workers(out, supported)
        return out

    def _without_workers(self, arguments: Dict[str, object], supported: Mapping[str, object]):
        """The worker-only arguments the script gave, back to the framework's defaults once
        an override leaves no workers (PyTorch refuses persistent_workers=True or a
        prefetch_factor without them): applied, as a consequence of num_workers."""
        for key in NEEDS_WORKERS:
            if key in arguments and key in supported and arguments[key] != supported[key]:
                was, arguments[key] = arguments[key], supported[key]
                self.apply("reader", key, supported[key], was)

    def report(self) -> Optional[dict]:
        if not (self.requested or self.applied or self.skipped):
            return None
        unreached = [NoEffect("reader", k, v, "no-loader", "no DataLoader was built")
                     for k, v in self.wanted("reader").items()
                     if not any(e.section == "reader" and e.key == k
                                for e in (*self.applied, *self.skipped))]
        return {"env": ENV, "requested": self.requested, "applied": list(self.applied),
                "skipped": list(self.skipped) + unreached}
