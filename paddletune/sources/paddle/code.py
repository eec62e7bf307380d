"""Changes written in PaddlePaddle 3.x code (`import paddle`; the dynamic graph unless a
change only exists in the static graph). Pure text: imports nothing of paddle."""

from typing import Mapping, Optional, Sequence

from ..code import (SAMPLER_EXCLUSIVE, CodeWriter, batches_own, keep_note, kept_args,
                    sampler_note, script_args)

SET_FLAG = "paddle.set_flags({{'{flag}': {value!r}}})  # in the script, before training"
# LoaderConfig fields -> paddle.io.DataLoader's arguments (None: not an argument of it)
LOADER_ARGS = {"batch_size": "batch_size", "num_workers": "num_workers",
               "use_shared_memory": "use_shared_memory", "prefetch_factor": "prefetch_factor",
               "use_double_buffer": "use_buffer_reader", "drop_last": "drop_last",
               "timeout": "timeout", "persistent_workers": "persistent_workers"}
NAN_GUARDS = {  # op type -> its call kept finite
    "log": "out = paddle.log(paddle.clip(x, min=1e-8))",
    "elementwise_div": "out = paddle.divide(x, y + 1e-8)",
    "divide": "out = paddle.divide(x, y + 1e-8)",
    "sqrt": "out = paddle.sqrt(paddle.nn.functional.relu(x) + 1e-12)",
    "pow": "out = paddle.pow(paddle.nn.functional.relu(x) + 1e-8, factor)",
    "rsqrt": "out = paddle.rsqrt(paddle.nn.functional.relu(x) + 1e-12)",
    "exp": "out = paddle.exp(paddle.clip(x, max=80.0))",
    "cross_entropy": "loss = paddle.nn.functional.cross_entropy(logits, label)  # on logits",
    "softmax_with_cross_entropy":
        "loss = paddle.nn.functional.cross_entropy(logits, label)  # on logits",
}
# Fluid layer names -> paddle 3.x functional names
LAYERS = {"pool2d": "max_pool2d", "conv2d": "conv2d", "fc": "linear",
          "softmax_with_cross_entropy": "cross_entropy", "elementwise_add": "add",
          "batch_norm": "batch_norm", "dropout": "dropout", "relu": "relu",
          "softmax": "softmax", "embedding": "embedding", "layer_norm": "layer_norm"}


class PaddleCode(CodeWriter):
    framework = "paddle"
    module_alias = "paddle"

    def set_flag(self, flag: str, value, why: str = "") -> str:
        return "\n".join([self.env(flag, value, why),
                          "# or " + SET_FLAG.format(flag=flag, value=value)])

    def blas_threads(self, env_var: str, n: int) -> str:
        return (f"export {env_var}={n}\n# or in the script, before training: "
                f"paddle.base.core.set_num_threads({n})")

    def loader(self, config, **changes) -> str:
        """batch_size and num_workers as the config has them, the script's other arguments
        where they can be written (config.args: shuffle=True, collate_fn=pad_batch; the
        others named in a comment above), and every changed field that is an argument of
        paddle.io.DataLoader (capacity: paddle keeps prefetch_factor x num_workers batches
        ahead, so it becomes a prefetch_factor)."""
        written, named = script_args(config)
        if getattr(config, "drop_last", None) and "drop_last" not in changes:
            written.append("drop_last=True")
        values = {}
        for field in ("batch_size", "num_workers"):
            value = getattr(config, field, None)
            if value is not None:
                values[field] = value
        notes = []
        for field, value in changes.items():
            if value is None:  # (not written)
                continue
            arg = LOADER_ARGS.get(field)
            if arg is not None:
                values[arg] = value
            elif field == "capacity" and value:
                workers = changes.get("num_workers", getattr(config, "num_workers", 0)) or 1
                if "prefetch_factor" not in changes:
                    values["prefetch_factor"] = max(1, -(-int(value) // int(workers)))
            elif field == "pin_memory":
                notes.append("# pin_memory: paddle pins batches itself "
                             "(FLAGS_use_pinned_memory)")
            else:
                notes.append(f"# {field}={value!r}: paddle.io.DataLoader has no such argument")
        batch = values.pop("batch_size", None)
        shown = (([f"batch_size={batch!r}"] if batch is not None else []) + written
                 + kept_args(named) + [f"{k}={v!r}" for k, v in values.items()])
        if batches_own(named):  # (its batch_sampler makes the batches)
            shown = [a for a in shown if a.split("=")[0] not in SAMPLER_EXCLUSIVE]
            if "batch_size" in changes:
                notes.append(sampler_note(changes["batch_size"]))
        args = "".join(f", {a}" for a in shown)
        return keep_note(named) + "\n".join([f"loader = paddle.io.DataLoader(dataset{args})",
                                              *notes])

    def async_loader(self, feeds: Sequence[str], place: str, loss: str,
                     num_workers: int = 0) -> str:
        usable = bool(feeds) and all(n.isidentifier() for n in feeds)
        names = list(feeds) if usable else ["image", "label"]
        lines = ["class Samples(paddle.io.Dataset):  # one sample per index, read here",
                 "    def __len__(self):",
                 "        return NUM_SAMPLES",
                 "    def __getitem__(self, i):",
                 f"        return {', '.join(f'{n}_i' for n in names)}  # the sample's arrays",
                 "",
                 "loader = paddle.io.DataLoader(Samples(), batch_size=BATCH_SIZE, "
                 f"shuffle=True, num_workers={num_workers or 2}, drop_last=True)",
                 f"for {', '.join(names)} in loader():"]
        lines.insert(0, f"# exe = paddle.static.Executor({_place(place)}), as before")
        feed = ", ".join(f"{n!r}: {n}" for n in names)
        lines.append(f"    exe.run(main_program, feed={{{feed}}}, fetch_list=[{loss}])")
        return "\n".join(lines)

    def shard_note(self) -> str:
        return ("# an IterableDataset's __iter__ must yield only its worker's share:\n"
                "#   info = paddle.io.get_worker_info()\n"
                "#   yield only items info.id, info.id + info.num_workers, ...")

    def build_strategy(self, settings: Mapping[str, object], data_parallel: bool = True) -> str:
        lines = ["build_strategy = paddle.static.BuildStrategy()",
                 *(f"build_strategy.{k} = {_strategy_value(k, v)}" for k, v in settings.items()),
                 "compiled = paddle.static.CompiledProgram(main_program, "
                 "build_strategy=build_strategy)",
                 "exe.run(compiled, feed=feed, fetch_list=fetch_list)  # instead of "
                 "exe.run(main_program, ...)"]
        if data_parallel:
            lines.insert(0, "# paddle 3 trains on several devices with paddle.distributed "
                            "(one process per device:\n# python -m paddle.distributed.launch "
                            "train.py); the settings apply to each process's program")
        return "\n".join(lines)

    def exec_strategy(self, settings: Mapping[str, object]) -> str:
        lines = ["# paddle 3.x has no ExecutionStrategy: its executor schedules ops itself"]
        for key, value in settings.items():
            if key == "num_threads":
                lines.append(f"paddle.base.core.set_num_threads({value!r})  # CPU math threads")
            else:
                lines.append(f"# {key} = {value!r}: no paddle 3.x equivalent")
        return "\n".join(lines)

    def layer_call(self, layer: str, **args) -> str:
        name = LAYERS.get(layer, layer)
        given = [f"{k}={v!r}" for k, v in args.items()]
        return f"paddle.nn.functional.{name}({', '.join(['...', *given])})"

    def optimizer(self, name: str, args: Mapping[str, object],
                  instead_of: Optional[str] = None, why: str = "") -> str:
        parts = [f"{k}={v}" for k, v in args.items() if k != "parameters"]
        line = (f"optimizer = paddle.optimizer.{name}("
                + ", ".join([*parts, "parameters=model.parameters()"]) + ")")
        note = f"instead of paddle.optimizer.{instead_of}(...)" if instead_of else ""
        note = ": ".join(part for part in (note, why) if part)
        return line + (f"  # {note}" if note else "")

    def gradient_clip(self, norm: float, why: str) -> str:
        return (f"# {why} (given to the optimizer as grad_clip=):\n"
                f"clip = paddle.nn.ClipGradByGlobalNorm(clip_norm={norm})\n"
                f"optimizer = paddle.optimizer.Adam(parameters=model.parameters(), "
                f"grad_clip=clip)  # your optimizer, with grad_clip=clip")

    def nan_guard(self, op_type: str) -> Optional[str]:
        return NAN_GUARDS.get(op_type)

    def fused_softmax_cross_entropy(self, logits: str, label: str,
                                    return_softmax: bool = False) -> str:
        lines = ["# cross_entropy applies the softmax itself (fused): give it the logits, "
                 "drop a softmax before it",
                 f"cost = paddle.nn.functional.cross_entropy({logits}, {label})"]
        if return_softmax:
            lines.append(f"prediction = paddle.nn.functional.softmax({logits})")
        return "\n".join(lines)

    def loss_on_logits(self, activation: str, loss: str) -> str:
        return "\n".join([
            f"# take the paddle.nn.{activation} that runs before the loss out of the training "
            f"path (often the model's last layer)",
            "criterion = paddle.nn.CrossEntropyLoss()  # use_softmax=True: applies the "
            "softmax itself" + (f", instead of paddle.nn.{loss}()"
                                if loss != "CrossEntropyLoss" else ""),
            f"loss = criterion(logits, label)  # logits: what the {activation} takes now; "
            f"label: the labels {loss} takes now",
            "# probabilities for metrics or inference: paddle.nn.functional.softmax(logits)"])

    def fetch_every(self, keep: str, others: Sequence[str], every: int) -> str:
        static = (f"fetch_list = [{keep}] if step % {every} else [{', '.join([keep, *others])}]"
                  if others else f"fetch_list = [] if step % {every} else [{keep}]")
        return "\n".join([self._fetch_dynamic(keep, others, every),
                          "# static graph: " + static,
                          "# then: exe.run(..., fetch_list=fetch_list)"])

    def _fetch_dynamic(self, keep: str, others: Sequence[str], every: int) -> str:
        if not others:
            return "\n".join([
                f"if step % {every} == 0:  # .item() / .numpy() wait for the device: "
                f"only every {every} steps",
                f"    print(step, float({keep}))"])
        shown = ", ".join(f"float({name})" for name in others)
        return "\n".join([
            f"if step % {every} == 0:  # .item() / .numpy() wait for the device: only every "
            f"{every} steps",
            f"    print(step, float({keep}), {shown})"])

    def sample_filter(self, field: int, axis: int) -> str:
        return "\n".join([
            "class Filtered(paddle.io.Dataset):  # wrap your dataset",
            "    def __init__(self, dataset):",
            "        self.keep = [i for i in range(len(dataset))",
            f"                     if dataset[i][{field}].shape[{axis}] <= MAX_LEN]  "
            f"# drop; or clip to MAX_LEN",
            "        self.dataset = dataset",
            "    def __len__(self):",
            "        return len(self.keep)",
            "    def __getitem__(self, i):",
            "        return self.dataset[self.keep[i]]"])

    def reader_filter(self, field: int) -> str:
        return f"samples = [s for s in samples if len(s[{field}]) <= MAX_LEN]"

    # --- GPU math settings (the dynamic graph) ----------------------------------------------
    cudnn_autotune_setting = "FLAGS_cudnn_exhaustive_search"
    tf32_setting = "paddle.base.core.get_cublas_switch()"

    def cudnn_autotune(self) -> Optional[str]:
        return (SET_FLAG.format(flag="FLAGS_cudnn_exhaustive_search", value=True)
                + ": cuDNN times its algorithms once per input shape and keeps the fastest")

    def tf32_matmul(self) -> Optional[str]:
        return ("paddle.base.core.set_cublas_switch(True)  # before training: float32 matrix "
                "products in TF32 on the Tensor Cores (Paddle's default)")

    def mixed_precision(self, bf16: bool) -> Optional[str]:
        if bf16:
            return "\n".join([
                "for x, y in loader:",
                "    with paddle.amp.auto_cast(dtype='bfloat16'):  # no loss scaling",
                "        loss = loss_fn(model(x), y)",
                "    loss.backward()",
                "    optimizer.step()",
                "    optimizer.clear_grad()"])
        return "\n".join([
            "scaler = paddle.amp.GradScaler(init_loss_scaling=1024)",
            "for x, y in loader:",
            "    with paddle.amp.auto_cast(dtype='float16'):",
            "        loss = loss_fn(model(x), y)",
            "    scaler.scale(loss).backward()",
            "    scaler.step(optimizer)",
            "    scaler.update()",
            "    optimizer.clear_grad()"])

    def channels_last(self, device: str) -> Optional[str]:
        return "\n".join([
            "# each Conv2D, BatchNorm2D and pooling layer of the model built NHWC:",
            "conv = paddle.nn.Conv2D(in_channels, out_channels, 3, data_format='NHWC')",
            "for x, y in loader:",
            "    x = paddle.transpose(x, [0, 2, 3, 1])  # NCHW image batches to NHWC (or in "
            "the Dataset)"])

    def float32_model(self) -> Optional[str]:
        return "\n".join([
            "paddle.set_default_dtype('float32')  # before the model is built (Paddle's "
            "default)",
            "model = model.float()  # or a model built float64: its parameters made float32, "
            "before the optimizer",
            "for x, y in loader:",
            "    x = x.astype('float32')  # a float64 batch (NumPy's default dtype) made "
            "float32"])


def _place(place: str) -> str:
    place = place or "CPUPlace"
    return f"paddle.{place}" if "(" in place else f"paddle.{place}()"


def _strategy_value(field: str, value) -> str:
    if field == "reduce_strategy" and isinstance(value, str):
        return f"paddle.static.BuildStrategy.ReduceStrategy.{value}"
    return repr(value)


class PaddleStaticCode(PaddleCode):
    """A Paddle 3 static-graph job's writer (advisors.facts.writer picks it when the model's
    census read a static program): the changes that differ from the dynamic graph's (mixed
    precision through the optimizer, the layout and dtype where the program is built)."""

    def mixed_precision(self, bf16: bool) -> Optional[str]:
        dtype, scaling = (("bfloat16", "no loss scaling") if bf16 else
                          ("float16", "dynamic loss scaling, on by default for float16"))
        return "\n".join([
            "# where the program is built, before minimize:",
            f"optimizer = paddle.static.amp.decorate(optimizer, level='O1', dtype='{dtype}')"
            f"  # {scaling}",
            "optimizer.minimize(loss)"])

    def channels_last(self, device: str) -> Optional[str]:
        return "\n".join([
            "# where the program is built: the image input and every convolution NHWC",
            "image = paddle.static.data('image', shape=[None, height, width, channels], "
            "dtype='float32')",
            "conv = paddle.static.nn.conv2d(image, num_filters, 3, data_format='NHWC')",
            "# likewise paddle.static.nn.batch_norm(..., data_layout='NHWC') and "
            "paddle.nn.functional.max_pool2d(..., data_format='NHWC')",
            "# feed NHWC batches: image.transpose(0, 2, 3, 1) in the reader"])

    def float32_model(self) -> Optional[str]:
        return "\n".join([
            "paddle.set_default_dtype('float32')  # before the program is built (Paddle's "
            "default): float32 parameters",
            "x = paddle.static.data('x', shape=[None, features], dtype='float32')  # each "
            "input declared float32",
            "# feed float32 batches: x.astype('float32') in the reader (NumPy's default is "
            "float64)"])
