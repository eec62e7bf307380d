"""Changes written in Fluid 1.x code (paddletune's embedded runtime, `import runtime as
fluid`, and PaddlePaddle 1.x scripts alike)."""

from typing import Mapping, Optional, Sequence

from ..code import CodeWriter

SET_FLAG = "fluid.set_flags({{'{flag}': {value!r}}})  # in the script, before the first exe.run"
DATA_PARALLEL = ("compiled = fluid.CompiledProgram(main_program).with_data_parallel(",
                 "    loss_name=loss.name, {name}={name})")
SINGLE_PLACE = ("compiled = fluid.CompiledProgram(main_program, build_strategy=build_strategy)",
                "exe.run(compiled, feed=feed, fetch_list=fetch_list)  # instead of "
                "exe.run(main_program, ...)")
NAN_GUARDS = {  # op type -> its call kept finite
    "log": "out = fluid.layers.log(fluid.layers.clip(x, min=1e-8, max=1e8))",
    "elementwise_div": "out = fluid.layers.elementwise_div(x, y + 1e-8)",
    "sqrt": "out = fluid.layers.sqrt(fluid.layers.relu(x) + 1e-12)",
    "pow": "out = fluid.layers.pow(fluid.layers.relu(x) + 1e-8, factor)",
    "cross_entropy": "loss = fluid.layers.softmax_with_cross_entropy(logits=logits, label=label)",
}


class FluidCode(CodeWriter):
    framework = "fluid"

    def set_flag(self, flag: str, value, why: str = "") -> str:
        return "\n".join([self.env(flag, value, why),
                          "# or " + SET_FLAG.format(flag=flag, value=value)])

    def blas_threads(self, env_var: str, n: int) -> str:
        return (f"export {env_var}={n}\n# or in the script, before training: "
                f"from runtime import blas; blas.set_blas_threads({n})")

    def loader(self, config, **changes) -> str:
        feeds = list(config.feed or ())
        names = ", ".join(feeds) if feeds and all(n.isidentifier() for n in feeds) else "..."
        args = {"capacity": config.capacity}
        if config.iterable is False:
            args["iterable"] = False
        args.update({k: v for k, v in changes.items() if v is not None})  # (None: not written)
        return (f"loader = fluid.io.DataLoader.from_generator(feed_list=[{names}], "
                + ", ".join(f"{k}={v}" for k, v in args.items()) + ")")

    def async_loader(self, feeds: Sequence[str], place: str, loss: str,
                     num_workers: int = 0) -> str:
        usable = bool(feeds) and all(n.isidentifier() for n in feeds)
        lines = ["# reader: your generator yielding one batch (a list of arrays) per iteration"]
        if not usable:
            named = f" ({', '.join(map(repr, feeds))})" if feeds else ""
            lines.append(f"# feed_list: your fluid.data variables{named}")
        return "\n".join(lines + [
            f"loader = fluid.io.DataLoader.from_generator(feed_list="
            f"[{', '.join(feeds) if usable else 'image, label'}], capacity=8, iterable=True"
            + (f", num_workers={num_workers})" if num_workers else ")"),
            f"loader.set_batch_generator(reader, places={_place(place)})",
            "for data in loader():",
            f"    exe.run(main_program, feed=data, fetch_list=[{loss}])"])

    def shard_note(self) -> str:
        return ("# each worker must make only its share of the batches; in the generator:\n"
                "#   info = fluid.io.get_worker_info()\n"
                "#   yield only items info.id, info.id + info.num_workers, ...")

    def build_strategy(self, settings: Mapping[str, object], data_parallel: bool = True) -> str:
        compile_lines = ([line.format(name="build_strategy") for line in DATA_PARALLEL]
                         if data_parallel else list(SINGLE_PLACE))
        return "\n".join(["build_strategy = fluid.BuildStrategy()",
                          *(f"build_strategy.{k} = {_strategy_value(k, v)}"
                            for k, v in settings.items()),
                          *compile_lines])

    def exec_strategy(self, settings: Mapping[str, object]) -> str:
        return "\n".join(["exec_strategy = fluid.ExecutionStrategy()",
                          *(f"exec_strategy.{k} = {v!r}" for k, v in settings.items()),
                          *(line.format(name="exec_strategy") for line in DATA_PARALLEL)])

    def layer_call(self, layer: str, **args) -> str:
        given = [f"{k}={v!r}" for k, v in args.items()]
        return f"fluid.layers.{layer}({', '.join(['...', *given])})"

    def optimizer(self, name: str, args: Mapping[str, object],
                  instead_of: Optional[str] = None, why: str = "") -> str:
        line = (f"optimizer = fluid.optimizer.{name}("
                + ", ".join(f"{k}={v}" for k, v in args.items()) + ")")
        note = f"instead of fluid.optimizer.{instead_of}(...)" if instead_of else ""
        note = ": ".join(part for part in (note, why) if part)
        return line + (f"  # {note}" if note else "")

    def gradient_clip(self, norm: float, why: str) -> str:
        return (f"# {why} (before optimizer.minimize(loss)):\n"
                f"fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm("
                f"clip_norm={norm}))")

    def nan_guard(self, op_type: str) -> Optional[str]:
        return NAN_GUARDS.get(op_type)

    def fused_softmax_cross_entropy(self, logits: str, label: str,
                                    return_softmax: bool = False) -> str:
        lhs, extra = ("cost, prediction", ", return_softmax=True") if return_softmax \
            else ("cost", "")
        return "\n".join([f"{lhs} = fluid.layers.softmax_with_cross_entropy(",
                          f"    logits={logits}, label={label}{extra})"])

    def fetch_every(self, keep: str, others: Sequence[str], every: int) -> str:
        line = (f"fetch_list = [{keep}] if step % {every} else [{', '.join([keep, *others])}]"
                if others else f"fetch_list = [] if step % {every} else [{keep}]")
        return "\n".join([line, "# then: exe.run(..., fetch_list=fetch_list)"])

    def sample_filter(self, field: int, axis: int) -> str:
        return "\n".join([
            "def filtered(samples):  # wrap your sample generator",
            "    def gen():",
            "        for sample in samples():",
            f"            if sample[{field}].shape[{axis}] <= MAX_LEN:  # drop; or clip to "
            f"MAX_LEN",
            "                yield sample",
            "    return gen"])

    def reader_filter(self, field: int) -> str:
        return f"reader = (s for s in reader() if len(s[{field}]) <= MAX_LEN)"


def _place(place: str) -> str:
    place = place or "CPUPlace"
    return f"fluid.{place}" if "(" in place else f"fluid.{place}()"


def _strategy_value(field: str, value) -> str:
    """A BuildStrategy field's value in Fluid code (reduce_strategy: the enum member)."""
    if field == "reduce_strategy" and isinstance(value, str):
        return f"fluid.BuildStrategy.ReduceStrategy.{value}"
    return repr(value)
