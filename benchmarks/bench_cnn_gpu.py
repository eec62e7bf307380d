"""The runtime against PyTorch CUDA on a ResNet-style CNN, on GPU 0.

Model (the same in both): 3x32x32 images, batch 64; conv 3x3 16 + batch_norm + relu; a residual
block of 16 (conv 3x3, batch_norm, relu, conv 3x3, batch_norm, the input added, relu); 2x2 max
pooling; conv 3x3 32 + batch_norm + relu; a residual block of 32; the mean over the image; fc
10; softmax cross entropy; Momentum(0.01, 0.9); float32, convolutions without bias, padding 1.
Contenders, interleaved round by round with the batches already on the device and each step
fetching its loss: the runtime as it runs by default (captured into a CUDA graph where it can
be: runtime/cuda_graph.py), the runtime eager, PyTorch eager (cuDNN, cudnn.benchmark off, its
default) and PyTorch with cudnn.benchmark on. Target: the runtime >= 0.8x PyTorch eager (the
runtime's convolutions are im2col + cuBLAS: `use_cudnn` is not acted on yet, docs/runtime.md).
Exits with status 2, saying why, without CuPy and a GPU or without PyTorch built with CUDA.

    python benchmarks/bench_cnn_gpu.py [--steps 50] [--rounds 7] [--batch-size 64]

Prints the samples/s, the ratios and one JSON line (the last line of output).
"""

import argparse
import contextlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_runtime as bench  # noqa: E402
from bench_runtime import fluid, torch  # noqa: E402

WIDTHS = (16, 32)
CLASSES, IMAGE = 10, (3, 32, 32)
TARGET = 0.8  # the runtime / PyTorch eager


def make_data(batch, n_batches, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n_batches, batch) + IMAGE, dtype=np.float32)
    ys = rng.integers(0, CLASSES, (n_batches, batch, 1)).astype(np.int64)
    return xs, ys


# --- the runtime --------------------------------------------------------------------------------
def _conv_bn(x, width, act="relu"):
    conv = fluid.layers.conv2d(x, width, 3, padding=1, bias_attr=False)
    return fluid.layers.batch_norm(conv, act=act)


def _block(x, width):
    h = _conv_bn(_conv_bn(x, width), width, act=None)
    return fluid.layers.elementwise_add(h, x, act="relu")


class RuntimeCNN:
    """The CNN as a Fluid program on `place` (CUDAPlace(0) in the race)."""

    name = "runtime"

    def __init__(self, place, seed=1):
        self.main, startup = fluid.Program(), fluid.Program()
        self.main.random_seed = startup.random_seed = seed
        with fluid.program_guard(self.main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [None, *IMAGE])
            y = fluid.data("y", [None, 1], dtype="int64")
            h = _block(_conv_bn(x, WIDTHS[0]), WIDTHS[0])
            h = fluid.layers.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
            h = _block(_conv_bn(h, WIDTHS[1]), WIDTHS[1])
            logits = fluid.layers.fc(fluid.layers.reduce_mean(h, dim=[2, 3]), CLASSES)
            self.loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
            fluid.optimizer.Momentum(bench.LR, bench.MU).minimize(self.loss)
        self.scope = fluid.Scope()
        self.exe = fluid.Executor(place)
        self.exe.run(startup, scope=self.scope)
        self.n_ops = len(self.main.global_block().ops)
        self.cupy = None

    def step(self, x, y):
        return self.exe.run(self.main, feed={"x": x, "y": y}, fetch_list=[self.loss],
                            scope=self.scope)[0][0]

    def sync(self):
        if self.cupy is not None:
            self.cupy.cuda.runtime.deviceSynchronize()


# --- PyTorch ------------------------------------------------------------------------------------
def torch_cnn():
    nn = torch.nn

    def conv_bn(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(width, width), nn.ReLU(),
                                      *conv_bn(width, width))

        def forward(self, x):
            return torch.relu(self.body(x) + x)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            a, b = WIDTHS
            self.features = nn.Sequential(
                *conv_bn(IMAGE[0], a), nn.ReLU(), Block(a), nn.MaxPool2d(2, 2),
                *conv_bn(a, b), nn.ReLU(), Block(b))
            self.fc = nn.Linear(b, CLASSES)

        def forward(self, x):
            return self.fc(self.features(x).mean((2, 3)))
    return CNN()


class TorchCNN:
    name = "torch"

    def __init__(self, benchmark=False, seed=1):
        torch.manual_seed(seed)
        self.benchmark = benchmark
        self.model = torch_cnn().cuda()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=bench.LR, momentum=bench.MU)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        if benchmark:
            self.name = "torch_cudnn_benchmark"

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y[:, 0])
        loss.backward()
        self.opt.step()
        return loss.item()

    def sync(self):
        torch.cuda.synchronize()


@contextlib.contextmanager
def _cudnn_benchmark(on):
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def race(args, cupy):
    xs, ys = make_data(args.batch_size, 4)
    runtime_model = RuntimeCNN(fluid.CUDAPlace(0))
    runtime_model.cupy = cupy
    models = [runtime_model, bench.Switched(runtime_model, "runtime_eager", bench._eager),
              TorchCNN(), bench.Switched(TorchCNN(benchmark=True), "torch_cudnn_benchmark",
                                         lambda: _cudnn_benchmark(True))]
    _, report = bench.gpu_race(models, runtime_model, xs, ys, cupy, args)
    rate = report["samples_per_s"]
    return {**report,
            "runtime_vs_torch": round(rate["runtime"] / rate["torch"], 3),
            "eager_vs_torch": round(rate["runtime_eager"] / rate["torch"], 3),
            "torch_benchmark_vs_torch": round(rate["torch_cudnn_benchmark"] / rate["torch"], 3),
            "target": TARGET}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50, help="steps per contender per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)
    found = bench.gpu_report("bench_cnn_gpu", "runtime_cnn_gpu",
                             "ResNet-style CNN 3x32x32 (16, 32) Momentum float32",
                             args.batch_size)
    if found is None:
        return 2
    cupy, report = found
    r = race(args, cupy)
    report.update(r)
    rates = r["samples_per_s"]
    print(f"samples/s: runtime {rates['runtime']:.0f} (eager {rates['runtime_eager']:.0f}) | "
          f"torch eager {rates['torch']:.0f} "
          f"(cudnn.benchmark {rates['torch_cudnn_benchmark']:.0f})")
    verdict = "meets" if r["runtime_vs_torch"] >= TARGET else "BELOW"
    print(f"  runtime/torch eager {r['runtime_vs_torch']:.3f} ({verdict} the {TARGET}x target)")
    if not r["captured"]:
        print(f"  the runtime's steps were not captured: {r['eager_reasons']}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
