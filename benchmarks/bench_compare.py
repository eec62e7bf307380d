"""Step time of two source trees of the runtime, side by side: the reference MLP, the CNN
example's model and bench_runtime.py's tiny model, each tree in its own subprocess, the trees
alternating round after round (so machine drift hits both alike); the median per tree and the
ratio.

    python benchmarks/bench_compare.py --base /path/to/old/checkout           # this tree vs it
    python benchmarks/bench_compare.py --base A --head B --rounds 7 --threads 1

A regression check for runtime changes (issue 28's "the CNN no slower than today"). Prints a
table and one JSON line (the last line of output).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# run in the child, with the tree under test first on sys.path: times `steps` steps after
# `warmup` and prints {"model": ms per step}
_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import runtime as fluid
from runtime import blas
threads, steps, warmup = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
blas.set_blas_threads(threads)

def mlp():
    x = fluid.data("x", [None, 784]); y = fluid.data("y", [None, 1], dtype="int64")
    h = fluid.layers.fc(x, 512, act="relu"); h = fluid.layers.fc(h, 512, act="relu")
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(h, 10), y))
    fluid.optimizer.Momentum(0.01, 0.9).minimize(loss)
    rng = np.random.default_rng(0)
    return loss, {"x": rng.standard_normal((128, 784), dtype=np.float32),
                  "y": rng.integers(0, 10, (128, 1)).astype(np.int64)}

def cnn():
    x = fluid.data("x", [None, 1, 28, 28]); y = fluid.data("y", [None, 1], dtype="int64")
    h = fluid.layers.conv2d(x, 16, 5, act="relu")
    h = fluid.layers.pool2d(h, 2, pool_stride=2)
    h = fluid.layers.conv2d(h, 32, 5, act="relu")
    h = fluid.layers.pool2d(h, 2, pool_stride=2)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(h, 10), y))
    fluid.optimizer.Adam(0.005).minimize(loss)
    rng = np.random.default_rng(0)
    return loss, {"x": rng.standard_normal((64, 1, 28, 28), dtype=np.float32),
                  "y": rng.integers(0, 10, (64, 1)).astype(np.int64)}

def tiny():  # bench_runtime.py's tiny model: the framework's own cost per step shows
    x = fluid.data("x", [None, 8]); y = fluid.data("y", [None, 1], dtype="int64")
    h = fluid.layers.fc(x, 8, act="relu")
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(h, 2), y))
    fluid.optimizer.Momentum(0.01, 0.9).minimize(loss)
    rng = np.random.default_rng(0)
    return loss, {"x": rng.standard_normal((4, 8), dtype=np.float32),
                  "y": rng.integers(0, 2, (4, 1)).astype(np.int64)}

result = {}
for name, build, repeat in (("mlp", mlp, 1), ("cnn", cnn, 1), ("tiny", tiny, 25)):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss, feed = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for _ in range(warmup * repeat):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    t0 = time.perf_counter()
    for _ in range(steps * repeat):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    result[name] = (time.perf_counter() - t0) / (steps * repeat) * 1e3
print(json.dumps(result))
"""


def run_tree(root, args):
    out = subprocess.run([sys.executable, "-c", _CHILD, root, str(args.threads),
                          str(args.steps), str(args.warmup)],
                         capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": root})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the tree compared against")
    parser.add_argument("--head", default=os.path.dirname(HERE), help="default: this tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    trees = {"base": os.path.abspath(args.base), "head": os.path.abspath(args.head)}
    times = {tree: {} for tree in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(list(trees)))
        for tree in order:
            for model, ms in run_tree(trees[tree], args).items():
                times[tree].setdefault(model, []).append(ms)
    medians = {tree: {m: statistics.median(v) for m, v in t.items()} for tree, t in times.items()}
    print(f"{'model':6s} {'base ms/step':>13s} {'head ms/step':>13s} {'head/base':>10s}")
    ratios = {}
    for model in medians["base"]:
        base, head = medians["base"][model], medians["head"][model]
        ratios[model] = round(head / base, 3)
        print(f"{model:6s} {base:13.4f} {head:13.4f} {ratios[model]:10.3f}")
    print(json.dumps({"bench": "runtime_compare", "threads": args.threads, "rounds": args.rounds,
                      "base": trees["base"], "head": trees["head"],
                      "ms_per_step": {t: {m: round(v, 4) for m, v in d.items()}
                                      for t, d in medians.items()},
                      "head_over_base": ratios}))


if __name__ == "__main__":
    main()
