"""How `paddletune --help` reads: typer's rich help, with what it gets wrong put right.

typer (0.29) renders help through rich markup, so a `[default: ...]` written in an option's
help is taken for a markup tag and vanishes; it labels a flag `<bool>`, as if it took a
value (`--ops true` fails); it keeps the line breaks of a docstring in a command's
description; and it cuts a word longer than its column with an ellipsis. Here:

- every option's default is written at the end of its help, `[default: 5m]`: the value, or
  the words given in the help for a default that is not a value (`[default: detected]`);
- a flag has no type label; an argument shows its name only;
- a command's docstring is reflowed: paragraphs become single lines (indented lines, as in an
  example, are kept), and the first paragraph is the one line the command list shows;
- usage lines of commands that run a script say that its arguments follow it.

`HelpCommand` and `HelpGroup` do this for every command of the app (paddletune/cli.py);
`tests/test_cli_help.py` renders every command's help at 80 and 120 columns.
"""

import inspect
from typing import List

from typer.core import TyperCommand, TyperGroup

# The knobs `paddletune tune` builds its space from (paddletune/tune/space.py, build_space),
# in its order; tests/test_cli_help.py checks this list against build_space.
TUNE_KNOBS = ("num_workers", "capacity", "use_double_buffer", "batch_size",
              "FLAGS_eager_delete_tensor_gb", "FLAGS_allocator_strategy", "blas_threads",
              "num_threads", "num_iteration_per_drop_scope", "fuse_all_optimizer_ops",
              "fuse_elewise_add_act_ops")
# a PyTorch job's knobs (a Paddle 3 job's add its two memory FLAGS), and the GPU's, which its
# census adds where it found the setting off (tune/space.py _add_gpu_math, _add_alloc_conf)
TUNE_KNOBS_TORCH = ("num_workers", "prefetch_factor", "persistent_workers", "batch_size",
                    "blas_threads")
TUNE_KNOBS_TORCH_WORKERS = ("sharing_strategy",)  # a PyTorch job's where its DataLoader has
# workers (tune/space.py _add_sharing_strategy)
TUNE_KNOBS_TORCH_CPU_AUTOCAST = "cpu_autocast"  # a PyTorch job's whose census found the
# CPU's autocast to a dtype this CPU has no kernels for (tune/space.py _add_cpu_autocast)
TUNE_KNOBS_GPU = ("cudnn_benchmark", "FLAGS_cudnn_exhaustive_search", "matmul_allow_tf32",
                  "PYTORCH_CUDA_ALLOC_CONF")
# the sections of PADDLETUNE_OVERRIDES (runtime/overrides.py) and the other knob sections
TUNE_SECTIONS = ("reader", "exec_strategy", "build_strategy", "flag", "env")


def reflow(doc: str) -> str:
    """A docstring as help text: each paragraph on one line, except paragraphs whose lines
    are indented (examples), which keep their lines; rich markup escaped."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(_paragraph(p) for p in paragraphs if p.strip())


def summary(doc: str) -> str:
    """The docstring's first paragraph on one line: what the command list shows."""
    return _paragraph(inspect.cleandoc(doc or "").split("\n\n")[0])


def _paragraph(text: str) -> str:
    lines = text.splitlines()
    if len(lines) > 1 and all(line.startswith(" ") for line in lines[1:]):
        return escape("\n".join(lines))  # a heading and indented lines: keep them
    return escape(" ".join(line.strip() for line in lines))


def escape(text: str) -> str:
    """`text` shown as it is by typer's rich markup (a `[` opens no tag)."""
    return text.replace("[", "\\[")


def default_text(param) -> str:
    """The `[default: ...]` to append to an option's help ("" when none applies): its value,
    unless it is None (no default, or one the help describes) or a flag's False."""
    value = param.default
    if param.param_type_name != "option" or value is None or value is False \
            or callable(value) or getattr(param, "is_flag", False):
        return ""
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f" [default: {shown}]"


def tidy(param) -> None:
    """Put typer's rendering of one parameter right (see the module's docstring)."""
    help_text = param.help or ""
    if "[default:" not in help_text:
        help_text += default_text(param)
    param.help = escape(help_text.replace("\\[", "["))
    param.show_default = False
    if getattr(param, "is_flag", False):
        param.metavar = ""  # a flag takes no value: no type label
    elif param.param_type_name == "argument":
        param.display_type_rich = _no_type  # the argument's name says it all


def _no_type(ctx=None):
    return None


class _Tidy:
    """Tidies the parameters and the help option of a command or group."""

    def _tidy_params(self):
        for param in self.params:
            tidy(param)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None and option.metavar != "":
            tidy(option)
        return option


class HelpCommand(_Tidy, TyperCommand):
    """A command whose help reads right (the module's docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tidy_params()

    def collect_usage_pieces(self, ctx) -> List[str]:
        pieces = super().collect_usage_pieces(ctx)
        if ctx.allow_extra_args:  # profile, tune: the script's own arguments follow it
            pieces.append("[--] [ARGS]...")
        return pieces


class HelpGroup(_Tidy, TyperGroup):
    """The app's group: its options and help option tidied like a command's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tidy_params()
