"""A data-parallel training job for the ParallelExecutor advice tests: run under
`paddletune profile`, changed the way an advice says, and run again.

  --model small   16-32-32-4 MLP, batch 32 (per-op overhead dominates)
  --model mlp     784-512-512-10 MLP, batch 128
Options map onto BuildStrategy / ExecutionStrategy fields; --places sets the CPU places.
"""

import argparse

import numpy as np

import runtime as fluid

SIZES = {"small": (16, 32, 4, 32), "mlp": (784, 512, 10, 128)}  # in, hidden, classes, batch


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=tuple(SIZES), default="small")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--places", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--drop", type=int, default=100, help="num_iteration_per_drop_scope")
    p.add_argument("--reduce", action="store_true", help="ReduceStrategy.Reduce")
    p.add_argument("--fuse", default="", help="comma-separated BuildStrategy fuse_* flags")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--keep-temporaries", action="store_true",
                   help="BuildStrategy.memory_optimize = False (with GC off: the local scopes "
                        "hold every temporary until they are dropped)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    n_in, hidden, classes, batch = SIZES[args.model]
    main_program, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main_program, startup):
        x = fluid.data("x", [None, n_in])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = x
        for _ in range(args.layers):
            h = fluid.layers.fc(h, hidden, act="relu")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, classes), y))
        fluid.optimizer.Momentum(0.01, 0.9).minimize(loss)
    bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    if args.reduce:
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    for flag in filter(None, args.fuse.split(",")):
        setattr(bs, flag, True)
    if args.keep_temporaries:
        bs.memory_optimize = False
    es.num_threads = args.threads
    es.num_iteration_per_drop_scope = args.drop
    compiled = fluid.CompiledProgram(main_program).with_data_parallel(
        loss_name=loss.name, build_strategy=bs, exec_strategy=es,
        places=fluid.cpu_places(args.places))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, n_in)).astype("float32")
    ys = rng.integers(0, classes, (batch, 1)).astype("int64")
    for _ in range(args.steps):
        exe.run(compiled, feed={"x": xs, "y": ys}, fetch_list=[loss])


if __name__ == "__main__":
    main()
