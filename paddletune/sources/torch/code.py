"""Changes written in PyTorch code. Pure text: imports nothing of torch."""

from typing import Mapping, Optional, Sequence

from ..code import (SAMPLER_EXCLUSIVE, CodeWriter, batches_own, keep_note, kept_args,
                    sampler_note, script_args)

LOADER_ARGS = ("batch_size", "num_workers", "prefetch_factor", "pin_memory",
               "persistent_workers", "drop_last")
NAN_GUARDS = {
    "log": "out = torch.log(x.clamp(min=1e-8))",
    "elementwise_div": "out = x / (y + 1e-8)",
    "sqrt": "out = torch.sqrt(torch.relu(x) + 1e-12)",
    "pow": "out = torch.pow(torch.relu(x) + 1e-8, factor)",
    "cross_entropy": "loss = torch.nn.functional.cross_entropy(logits, label)",
}


class TorchCode(CodeWriter):
    framework = "torch"
    module_alias = "torch"

    def set_flag(self, flag: str, value, why: str = "") -> str:
        return self.comment(f"{flag} is a Paddle flag; PyTorch has no such setting") if \
            flag.startswith("FLAGS_") else self.env(flag, value, why)

    def blas_threads(self, env_var: str, n: int) -> str:
        return (f"export OMP_NUM_THREADS={n}\n"
                f"# or in the script, before training: torch.set_num_threads({n})")

    def loader(self, config, **changes) -> str:
        """The DataLoader call with `changes`, keeping the script's other arguments where
        they can be written (config.args: shuffle=True, collate_fn=pad_batch; drop_last,
        pin_memory) and naming those that cannot in a comment above it. With workers it
        writes persistent_workers=True unless a change sets it (None: not written)."""
        written, named = script_args(config)
        kept = [f"{key}=True" for key in ("drop_last", "pin_memory")
                if getattr(config, key, None) and key not in changes]
        args = {"num_workers": config.num_workers} if config.num_workers else {}
        args.update(changes)
        workers = args.get("num_workers") or 0
        if workers and "persistent_workers" not in args:
            args["persistent_workers"] = True
        args = {k: v for k, v in args.items() if v is not None}  # (None: not written)
        if not workers:
            for key in ("prefetch_factor", "persistent_workers"):
                args.pop(key, None)
        batch = args.pop("batch_size", config.batch_size)
        shown = ([f"batch_size={batch!r}"] if batch else []) + written + kept_args(named) + \
            kept + [f"{k}={v!r}" for k, v in args.items() if k in LOADER_ARGS]
        note = ""
        if batches_own(named):  # (its batch_sampler makes the batches)
            shown = [a for a in shown if a.split("=")[0] not in SAMPLER_EXCLUSIVE]
            note = sampler_note(changes["batch_size"]) + "\n" if "batch_size" in changes \
                else ""
        dataset = getattr(config, "dataset_name", None) or "dataset"
        call = f"loader = torch.utils.data.DataLoader({', '.join([dataset] + shown)})"
        return keep_note(named) + note + call

    def async_loader(self, feeds: Sequence[str], place: str, loss: str,
                     num_workers: int = 0) -> str:
        device = "cuda" if "CUDA" in (place or "") else "cpu"
        workers = num_workers or 4
        return "\n".join([
            "# dataset: a torch.utils.data.Dataset whose __getitem__ makes one sample",
            "loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, "
            f"num_workers={workers}, persistent_workers=True)",
            "for x, y in loader:",
            f"    x, y = x.to('{device}', non_blocking=True), y.to('{device}', "
            f"non_blocking=True)",
            f"    {loss} = loss_fn(model(x), y)"])

    def pinned_copy(self, place: str) -> str:
        device = "cuda" if "CUDA" in (place or "") else "cpu"
        return "\n".join([
            "for x, y in loader:  # pinned batches: non_blocking lets the copy leave the loop",
            f"    x, y = x.to('{device}', non_blocking=True), y.to('{device}', "
            f"non_blocking=True)"])

    def shard_note(self) -> str:
        return ("# an IterableDataset runs in every worker: each must yield only its share:\n"
                "#   info = torch.utils.data.get_worker_info()\n"
                "#   yield only items info.id, info.id + info.num_workers, ...")

    def build_strategy(self, settings: Mapping[str, object], data_parallel: bool = True) -> str:
        return self.comment("PyTorch has no BuildStrategy: fusions come from torch.compile "
                            "(model = torch.compile(model))")

    def exec_strategy(self, settings: Mapping[str, object]) -> str:
        return self.comment("PyTorch has no ExecutionStrategy: the threads are "
                            "torch.set_num_threads(n)")

    def layer_call(self, layer: str, **args) -> str:
        given = [f"{k}={v!r}" for k, v in args.items()]
        return f"torch.nn.functional.{layer}({', '.join(['...', *given])})"

    def optimizer(self, name: str, args: Mapping[str, object],
                  instead_of: Optional[str] = None, why: str = "") -> str:
        name = {"Momentum": "SGD", "Adamax": "Adamax"}.get(name, name)
        renamed = {"learning_rate": "lr"}
        pieces = ["model.parameters()",
                  *(f"{renamed.get(k, k)}={v}" for k, v in args.items())]
        line = f"optimizer = torch.optim.{name}({', '.join(pieces)})"
        note = f"instead of torch.optim.{instead_of}(...)" if instead_of else ""
        note = ": ".join(part for part in (note, " ".join(why.split())) if part)
        return line + (f"  # {note}" if note else "")

    def gradient_clip(self, norm: float, why: str) -> str:
        return (self.comment(f"{why} (after loss.backward(), before optimizer.step()):")
                + "\n"
                f"torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm={norm})")

    def nan_guard(self, op_type: str) -> Optional[str]:
        return NAN_GUARDS.get(op_type)

    def fused_softmax_cross_entropy(self, logits: str, label: str,
                                    return_softmax: bool = False) -> str:
        lines = [f"cost = torch.nn.functional.cross_entropy({logits}, {label})"
                 "  # takes raw logits: drop the softmax before it"]
        if return_softmax:
            lines.append(f"prediction = torch.softmax({logits}.detach(), dim=-1)")
        return "\n".join(lines)

    def loss_on_logits(self, activation: str, loss: str) -> str:
        return "\n".join([
            f"# take the torch.nn.{activation} that runs before the loss out of the training "
            f"path (often the model's last layer)",
            "criterion = torch.nn.CrossEntropyLoss()  # applies log_softmax itself"
            + (f", instead of torch.nn.{loss}()" if loss != "CrossEntropyLoss" else ""),
            f"loss = criterion(logits, target)  # logits: what the {activation} takes now; "
            f"target: the labels {loss} takes now",
            "# probabilities for metrics or inference: torch.softmax(logits.detach(), dim=-1)"])

    def fetch_every(self, keep: str, others: Sequence[str], every: int) -> str:
        shown = ", ".join([keep, *others])
        return "\n".join([f"if step % {every} == 0:  # .item() waits for the device: "
                          f"not every step",
                          f"    print([v.item() for v in ({shown},)])"])

    def sample_filter(self, field: int, axis: int) -> str:
        return "\n".join([
            "class Filtered(torch.utils.data.IterableDataset):  # wrap your dataset",
            "    def __init__(self, dataset):",
            "        self.dataset = dataset",
            "    def __iter__(self):",
            "        for sample in self.dataset:",
            f"            if sample[{field}].shape[{axis}] <= MAX_LEN:  # drop; or clip to "
            f"MAX_LEN",
            "                yield sample"])

    def reader_filter(self, field: int) -> str:
        return f"samples = [s for s in dataset if len(s[{field}]) <= MAX_LEN]"

    cudnn_autotune_setting = "torch.backends.cudnn.benchmark"
    tf32_setting = "torch.backends.cuda.matmul.allow_tf32"

    def sharing_strategy(self, strategy: str) -> Optional[str]:
        return (f"import torch.multiprocessing\n"
                f"torch.multiprocessing.set_sharing_strategy({strategy!r})  # at the start, "
                f"before the DataLoader makes its workers")

    def cudnn_autotune(self) -> Optional[str]:
        return ("torch.backends.cudnn.benchmark = True  # before the training loop: cuDNN "
                "times its algorithms once per input shape and keeps the fastest")

    def tf32_matmul(self) -> Optional[str]:
        return ("torch.backends.cuda.matmul.allow_tf32 = True  # before the training loop; or "
                "torch.set_float32_matmul_precision('high')")

    def mixed_precision(self, bf16: bool) -> Optional[str]:
        if bf16:
            return "\n".join([
                "for x, y in loader:",
                "    with torch.autocast('cuda', dtype=torch.bfloat16):  # no loss scaling",
                "        loss = loss_fn(model(x), y)",
                "    optimizer.zero_grad()",
                "    loss.backward()",
                "    optimizer.step()"])
        return "\n".join([
            "scaler = torch.amp.GradScaler('cuda')",
            "for x, y in loader:",
            "    with torch.autocast('cuda', dtype=torch.float16):",
            "        loss = loss_fn(model(x), y)",
            "    optimizer.zero_grad()",
            "    scaler.scale(loss).backward()",
            "    scaler.step(optimizer)",
            "    scaler.update()"])

    def channels_last(self, device: str) -> Optional[str]:
        return "\n".join([
            "model = model.to(memory_format=torch.channels_last)",
            "for x, y in loader:",
            f"    x = x.to('{device}', memory_format=torch.channels_last)  # 4-D image batches"])

    def cpu_autocast_off(self, dtype: str) -> Optional[str]:
        query = {"bfloat16": "bf16", "float16": "fp16"}.get(dtype)
        if query is None:
            return None
        return "\n".join([
            f"# autocast to {dtype} only on a CPU with oneDNN's {dtype} kernels "
            "(AVX-512 or AMX)",
            f"cpu_{query} = torch.ops.mkldnn._is_mkldnn_{query}_supported()",
            "for x, y in loader:",
            f"    with torch.autocast('cpu', dtype=torch.{dtype}, enabled=cpu_{query}):",
            "        loss = loss_fn(model(x), y)",
            "# (PyTorch Lightning: Trainer(precision='32-true') where it is False)"])

    def float32_model(self) -> Optional[str]:
        return "\n".join([
            "model = model.float()  # float32 parameters (the optimizer built after this)",
            "for x, y in loader:",
            "    x = x.float()  # a float64 batch (NumPy's default dtype) made float32"])

