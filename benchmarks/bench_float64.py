"""What a float64 model costs against the same model in float32 on this CPU (the claim of
docs/advice.md#float64-model): the reference MLP (784-512-512-10, SGD with momentum, batch
128, PyTorch) trained in each dtype, in interleaved blocks in one process. Prints the median
step of each and their ratio, then one JSON line.

    python benchmarks/bench_float64.py [--rounds 7 --steps 40 --threads 1]
"""

import argparse
import json
import statistics
import time

import torch


def make_step(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(128, 784, dtype=dtype), torch.randint(0, 10, (128,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40, help="steps per block")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    steps = {"float64": make_step(torch.float64), "float32": make_step(torch.float32)}
    for step in steps.values():
        for _ in range(10):
            step()
    blocks = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            blocks[name].append((time.perf_counter() - t0) / args.steps)
    median = {name: statistics.median(v) for name, v in blocks.items()}
    ratio = median["float64"] / median["float32"]
    print(f"MLP 784-512-512-10, batch 128, {args.threads} thread(s), torch {torch.__version__}: "
          f"float64 {median['float64'] * 1e3:.2f} ms, float32 {median['float32'] * 1e3:.2f} ms "
          f"a step: float64 takes {ratio:.2f}x")
    print(json.dumps({"bench": "float64", "threads": args.threads, "rounds": args.rounds,
                      "float64_step_ms": round(median["float64"] * 1e3, 4),
                      "float32_step_ms": round(median["float32"] * 1e3, 4),
                      "ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
