"""What torch.autocast("cpu", dtype=torch.bfloat16) costs against float32 on this CPU (the
claim of docs/advice.md#cpu-autocast-slow): two reference models, each trained with and
without CPU autocast, in interleaved blocks in one process: the MLP of bench_float64.py
(784-512-512-10, batch 128) and a small CNN (two 3x3 convolutions, batch norm, two linear
layers; 3x16x16 inputs, batch 32). Prints whether oneDNN has bfloat16 kernels on this CPU,
the median step of each and their ratio, then one JSON line.

    python benchmarks/bench_cpu_autocast.py [--rounds 7 --steps 20 --threads 1]
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.fc1 = torch.nn.Linear(16 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn(self.c2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def mlp():
    return (torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)),
            torch.randn(128, 784), torch.randint(0, 10, (128,)))


def cnn():
    return SmallCNN(), torch.randn(32, 3, 16, 16), torch.randint(0, 10, (32,))


MODELS = {"mlp": mlp, "cnn": cnn}


def make_step(build, autocast: bool):
    torch.manual_seed(0)
    model, x, y = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def median_steps(steps, rounds: int, per_block: int):
    for step in steps.values():
        for _ in range(3):
            step()
    blocks = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(per_block):
                step()
            blocks[name].append((time.perf_counter() - t0) / per_block)
    return {name: statistics.median(v) for name, v in blocks.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    print(f"torch {torch.__version__}, {args.threads} thread(s), CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, oneDNN bfloat16 kernels: "
          f"{'yes' if native else 'no'}")
    result = {"bench": "cpu_autocast", "threads": args.threads, "rounds": args.rounds,
              "onednn_bf16": native}
    for name, build in MODELS.items():
        median = median_steps({"bf16": make_step(build, True), "fp32": make_step(build, False)},
                              args.rounds, args.steps)
        ratio = median["bf16"] / median["fp32"]
        print(f"{name}: autocast bfloat16 {median['bf16'] * 1e3:.2f} ms, float32 "
              f"{median['fp32'] * 1e3:.2f} ms a step: autocast takes {ratio:.2f}x")
        result[name] = {"bf16_step_ms": round(median["bf16"] * 1e3, 4),
                        "fp32_step_ms": round(median["fp32"] * 1e3, 4), "ratio": round(ratio, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
