"""How a change is written in a framework's code: each source has a CodeWriter, and advice
renders every code or environment line it proposes through the profile's (`code_for(
profile.source.framework)`), so one advisor serves every framework. Writers are pure text:
none imports its framework.

The advisors pass neutral values (a LoaderConfig, {field: value} settings named as the
source's knob ids name them, the user's variable names); the writer turns them into its
framework's syntax. Explanations that hold for every framework stay in the advisors."""

import importlib
from typing import Dict, Mapping, Optional, Sequence

WRITERS = {"fluid": "paddletune.sources.fluid.code:FluidCode",
           "torch": "paddletune.sources.torch.code:TorchCode",
           "paddle": "paddletune.sources.paddle.code:PaddleCode",
           "paddle-static": "paddletune.sources.paddle.code:PaddleStaticCode"}
_CACHE: Dict[str, "CodeWriter"] = {}


class CodeWriter:
    """The lines a change takes; each method returns code (several lines joined by newlines).
    Comments say what a line does when it is not obvious. The first methods are shell and
    plain Python, the same everywhere; the rest are the framework's and each writer
    implements them."""

    framework = "none"
    module_alias = ""

    # --- shell and plain Python ------------------------------------------------------------
    def env(self, var: str, value, why: str = "") -> str:
        """An environment variable set before the job starts: `export VAR=value  # why`."""
        return f"export {var}={value}" + (f"  # {why}" if why else "")

    def comment(self, text: str) -> str:
        """`text` as comment lines (each line of it prefixed with `# `)."""
        return "\n".join(f"# {line}" if line else "#" for line in text.split("\n"))

    def constant(self, name: str, value, why: str = "") -> str:
        """A constant of the script: `NAME = value  # why`."""
        return f"{name} = {value}" + (f"  # {why}" if why else "")

    def batch_size(self, n: int, why: str = "") -> str:
        """The script's batch size: `BATCH_SIZE = n  # why`."""
        return self.constant("BATCH_SIZE", n, why)

    # --- the framework's syntax ------------------------------------------------------------
    def set_flag(self, flag: str, value, why: str = "") -> str:
        """A framework flag: the environment variable, and the in-script form."""
        raise NotImplementedError

    def blas_threads(self, env_var: str, n: int) -> str:
        """The BLAS library's thread count (`env_var`: its family's variable), and the
        in-script form where the framework has one."""
        return self.env(env_var, n)

    def loader(self, config, **changes) -> str:
        """The DataLoader's construction with `changes` applied (config: LoaderConfig;
        changes: its fields, e.g. num_workers=3, capacity=16, use_double_buffer=True)."""
        raise NotImplementedError

    def async_loader(self, feeds: Sequence[str], place: str, loss: str,
                     num_workers: int = 0) -> str:
        """A synchronous feeding loop rewritten to read through an async DataLoader:
        `feeds` the fed variables (placeholders when they are not identifiers), `place` the
        device ("CPUPlace", "CUDAPlace(0)"), `loss` the variable the loop fetches,
        `num_workers` its worker processes (0: the framework's default producer)."""
        raise NotImplementedError

    def pinned_copy(self, place: str) -> str:
        """The loop's host-to-device copy of a pinned batch made asynchronous (the copy
        leaves the loop's thread), for a framework whose DataLoader pins batches."""
        return self.comment("copy each batch to the device asynchronously")

    def shard_note(self) -> str:
        """How a generator that several workers run makes only its share (comment lines)."""
        return ""

    def build_strategy(self, settings: Mapping[str, object], data_parallel: bool = True) -> str:
        """The program compiled with these build settings ({field: value}, the knob ids'
        `build_strategy.` fields: enable_inplace, fuse_all_optimizer_ops, ...;
        reduce_strategy takes "Reduce" or "AllReduce"): on several places
        (`data_parallel`), else on one, with the run that uses the compiled program."""
        raise NotImplementedError

    def exec_strategy(self, settings: Mapping[str, object]) -> str:
        """The data-parallel program compiled with these execution settings ({field: value},
        the knob ids' `exec_strategy.` fields: num_threads, num_iteration_per_drop_scope)."""
        raise NotImplementedError

    def layer_call(self, layer: str, **args) -> str:
        """A call of the framework's layer `layer` (the op's name, "pool2d") with the user's
        own arguments elided and `args` set."""
        raise NotImplementedError

    def optimizer(self, name: str, args: Mapping[str, object],
                  instead_of: Optional[str] = None, why: str = "") -> str:
        """The optimizer `name` ("Momentum", "SGD", as facts.OPTIMIZER_NAMES names them)
        built with `args` ({argument: code}); `instead_of` the optimizer it replaces, `why`
        the reason (a comment)."""
        raise NotImplementedError

    def gradient_clip(self, norm: float, why: str) -> str:
        """Gradients clipped to a global norm of `norm`, with `why` and where the line goes
        as a comment before it."""
        raise NotImplementedError

    def nan_guard(self, op_type: str) -> Optional[str]:
        """The call of op `op_type` with its input kept where the op stays finite (log of a
        clipped input, division by y + eps, ...); None for an op it has no guard for."""
        return None

    def fused_softmax_cross_entropy(self, logits: str, label: str,
                                    return_softmax: bool = False) -> str:
        """The fused softmax + cross-entropy loss over `logits` and `label` (variable names),
        assigned to `cost` (and `prediction`, the softmax, when `return_softmax`)."""
        raise NotImplementedError

    def loss_on_logits(self, activation: str, loss: str) -> str:
        """The loss module `loss` ("NLLLoss", "CrossEntropyLoss") that an `activation` module
        ("Softmax") runs right before, replaced by the loss that takes the raw scores, with
        what to pass it said in words (the writer cannot know the script's names)."""
        raise NotImplementedError

    def fetch_every(self, keep: str, others: Sequence[str], every: int) -> str:
        """A fetch list holding `keep` every step (nothing when `others` is empty) and
        `keep` with `others` every `every` steps, and how the run takes it."""
        raise NotImplementedError

    def sample_filter(self, field: int, axis: int) -> str:
        """A wrapper of the sample generator that drops samples whose `field` is longer than
        MAX_LEN along `axis` (the constant defined before it)."""
        raise NotImplementedError

    def reader_filter(self, field: int) -> str:
        """The reader's samples whose `field` is at most MAX_LEN long, in one line."""
        raise NotImplementedError

    # --- GPU math settings (None: the framework has no such setting this writer knows) -------
    # the names the model's census records them under (records.ModelEvent.settings)
    cudnn_autotune_setting: Optional[str] = None
    tf32_setting: Optional[str] = None

    def cudnn_autotune(self) -> Optional[str]:
        """cuDNN's algorithm search per input shape turned on."""
        return None

    def tf32_matmul(self) -> Optional[str]:
        """float32 matrix products on Tensor Cores in TF32."""
        return None

    def mixed_precision(self, bf16: bool) -> Optional[str]:
        """The training step under automatic mixed precision (bfloat16 when `bf16`, else
        float16 with loss scaling)."""
        return None

    def channels_last(self, device: str) -> Optional[str]:
        """The model and its image batches in the channels_last (NHWC) layout."""
        return None

    def float32_model(self) -> Optional[str]:
        """The model's parameters and its batches made float32 (from float64)."""
        return None

    def cpu_autocast_off(self, dtype: str) -> Optional[str]:
        """The CPU's autocast to `dtype` ("bfloat16") on only where the CPU has kernels for
        it."""
        return None

    def sharing_strategy(self, strategy: str) -> Optional[str]:
        """Worker processes hand tensors to the loop by `strategy` (PyTorch's
        torch.multiprocessing sharing strategies); None where the framework has none."""
        return None


def code_for(framework: str) -> CodeWriter:
    """The code writer of `framework` (a source's declared name); the Fluid writer for a
    framework this version has none of."""
    writer = _CACHE.get(framework)
    if writer is None:
        module, _, name = WRITERS.get(framework, WRITERS["fluid"]).partition(":")
        writer = _CACHE[framework] = getattr(importlib.import_module(module), name)()
    return writer


def script_args(config) -> tuple:
    """The script's other DataLoader arguments (LoaderConfig.args): (those written as
    `name=value`, the names of those that cannot be). A name that cannot be written (a
    sampler object, a lambda) is written `name=name` (`kept_args`) under `keep_note`: a call
    pasted without it would drop it (a batch_sampler's batches for batches of one)."""
    args = tuple(getattr(config, "args", ()) or ())
    return [a for a in args if "=" in a], [a for a in args if "=" not in a]


SAMPLER_EXCLUSIVE = ("batch_size", "shuffle", "sampler", "drop_last")  # a DataLoader with a
# batch_sampler takes none of these (torch raises ValueError, paddle AssertionError)


def batches_own(named) -> bool:
    """Whether the script's batch_sampler makes the batches (`named`: script_args' second):
    then the call leaves out SAMPLER_EXCLUSIVE."""
    return "batch_sampler" in named


def sampler_note(batch) -> str:
    """A changed batch size where the script's batch_sampler makes the batches."""
    return (f"# batch_size={batch!r}: your batch_sampler makes the batches: give it "
            f"{batch!r} a batch")


def kept_args(names) -> list:
    """The call's `name=name` for each argument the script passes an object of its own."""
    return [f"{name}={name}" for name in names]


def keep_note(names) -> str:
    """A comment line above a DataLoader call whose `name=name` arguments stand for the
    script's own objects (its sampler, a lambda), or nothing."""
    if not names:
        return ""
    kept = " and ".join(names)
    one = len(names) == 1
    return (f"# {kept}: the script's own {'object' if one else 'objects'}, passed as the "
            f"script passes {'it' if one else 'them'}\n")

