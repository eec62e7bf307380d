"""A data-parallel training job that drops its local scopes too often, for `paddletune tune`.

A small MLP (in -> hidden -> 10, SGD) run with `CompiledProgram.with_data_parallel` on
`--places` CPU places, with `exec_strategy.num_iteration_per_drop_scope = 1` (`--drop`): the
mis-configuration. Every drop of the local scopes costs `--drop-ms`: in Paddle a drop
synchronises every thread and frees, then re-creates on the next step, each variable of the
local scopes (tensors that belong to a device allocator, on a GPU a stream synchronisation);
in this NumPy runtime the drop itself is nearly free, so the job stands in a deterministic
wait for that cost: a subscriber to the runtime's public `drop_scope` event
(`fluid.events.subscribe("drop_scope", ...)`, emitted by the ParallelExecutor each time it
drops its local scopes, inside the step) sleeps `--drop-ms` (with `--spin` it spins that long
instead, as a CUDA synchronisation does by default: the core stays busy). Each step also waits
`--step-ms` after exe.run (device time). The costs are waits, not computation, so the
optimum holds on a busy 2-core machine.

A step costs about s = step-ms + compute (~1 ms), plus drop-ms / N with N =
num_iteration_per_drop_scope. With the defaults (drop-ms 30, step-ms 2, s ~3 ms):
  N = 1:   ~33 ms a step      (the job as written)
  N = 10:  ~6 ms a step       (~5x)
  N = 100: ~3.3 ms a step     (~10x; ~1.8x over N = 10; trials shorter than 100 steps drop
                               no time at all)
so 100, Paddle's default, is the best of the tuner's candidates (100, 1, 10) by a wide margin.
PADDLETUNE_OVERRIDES='{"exec_strategy": {"num_iteration_per_drop_scope": N}}' sets N without
editing the script (the override reaches the ExecutionStrategy through with_data_parallel).
"""

import argparse
import sys
import time

import numpy as np

import runtime as fluid


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--drop", type=int, default=1, help="num_iteration_per_drop_scope")
    p.add_argument("--drop-ms", type=float, default=30.0, help="wait per scope drop")
    p.add_argument("--step-ms", type=float, default=2.0, help="wait per step")
    p.add_argument("--spin", action="store_true",
                   help="the drop's wait spins (as a CUDA synchronisation does by default) "
                        "instead of sleeping")
    p.add_argument("--places", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--in-dim", type=int, default=16)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--steps", type=int, default=100000)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    main_prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main_prog, startup):
        x = fluid.data("x", shape=[None, args.in_dim])
        y = fluid.data("y", shape=[None, 1], dtype="int64")
        hidden = fluid.layers.fc(x, args.hidden, act="relu")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(hidden, 10), y))
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    es = fluid.ExecutionStrategy()
    es.num_threads = 1  # a small sequential model: one thread (no BLAS/thread contention)
    es.num_iteration_per_drop_scope = args.drop  # 1: the mis-configuration
    compiled = fluid.CompiledProgram(main_prog).with_data_parallel(
        loss_name=loss.name, exec_strategy=es, places=fluid.cpu_places(args.places))

    def drop_cost(record):  # the cost of a drop, paid inside the step that drops
        if args.spin:
            end = time.perf_counter() + args.drop_ms * 1e-3
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(args.drop_ms * 1e-3)

    subscription = fluid.events.subscribe("drop_scope", drop_cost)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rows = args.batch_size * args.places
    feed = {"x": np.linspace(0, 1, rows * args.in_dim, dtype="float32").reshape(rows, -1),
            "y": (np.arange(rows, dtype="int64") % 10).reshape(rows, 1)}
    try:
        for _ in range(args.steps):
            exe.run(compiled, feed=feed, fetch_list=[loss])
            time.sleep(args.step_ms * 1e-3)
    finally:
        subscription.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
