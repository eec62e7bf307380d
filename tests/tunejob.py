"""A synthetic training job with a known best configuration, for `paddletune tune` tests.

A small classifier (in -> hidden -> 10) fed by a DataLoader over a sample generator. The
costs are waits, not computation, so the best setting is the same on a busy 2-core machine:
each batch waits `--batch-ms` (I/O) in the producer, every `--burst-every`-th batch waits
`--burst-ms` more (a slow file), and each step waits `--step-ms` after exe.run (device time).
With the defaults the producer (3.5 ms + 60 ms every 33 batches, ~5.3 ms per batch) is
slower than the step (~3.6 ms): one producer, thread or process, leaves the loop waiting;
two worker processes keep up (the bursts alternate between them), and then a queue of 16 or
more batches absorbs a burst (~17 steps) that a queue of 2 cannot: 2 workers with capacity
16 or 64 are best (~1.5x the defaults). Samples/s grows
with the batch size (the waits are per batch) until the memory runs out: `--hidden` large
makes the activations grow fast with the batch (out of memory under
FLAGS_cpu_memory_limit_mb). The generator shards itself with fluid.io.get_worker_info(), by
the loader's batch size (which PADDLETUNE_OVERRIDES may have changed).
`--pairs K` adds a term of batch x batch x K floats (each pair of samples compared, as a
contrastive loss does): the memory then grows faster than the batch, so a line fitted to one
batch's peak promises more than fits.
`--hang-when KEY=VALUE` / `--crash-when KEY=VALUE` hang / raise when the loader's config has
that value, or at least that value with `KEY>=VALUE` (a setting that hangs or crashes, say
a batch too large for the shared memory of its worker processes).
"""

import argparse
import itertools
import sys
import time

import numpy as np

import runtime as fluid


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--capacity", type=int, default=2)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--batch-ms", type=float, default=3.5)
    p.add_argument("--step-ms", type=float, default=3.0)
    p.add_argument("--burst-every", type=int, default=33)
    p.add_argument("--burst-ms", type=float, default=60.0)
    p.add_argument("--in-dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--pairs", type=int, default=0)
    p.add_argument("--hang-when", default=None)
    p.add_argument("--crash-when", default=None)
    return p.parse_args(argv)


def sample_reader(args, loader):
    sample = np.linspace(0, 1, args.in_dim, dtype="float32")

    def reader():
        info = fluid.io.get_worker_info()
        me, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        batch_size = loader.config()["batch_size"]
        for batch in itertools.count():
            if batch % workers != me:
                continue
            time.sleep(args.batch_ms * 1e-3)
            if args.burst_every and batch % args.burst_every == args.burst_every - 1:
                time.sleep(args.burst_ms * 1e-3)
            for i in range(batch_size):
                yield sample, np.array([i % 10], dtype="int64")
    return reader


def matches(loader, condition):
    if not condition:
        return False
    if ">=" in condition:
        key, _, value = condition.partition(">=")
        return float(loader.config().get(key)) >= float(value)
    key, _, value = condition.partition("=")
    return str(loader.config().get(key)) == value


def main(argv=None):
    args = parse_args(argv)
    main_prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main_prog, startup):
        x = fluid.data("x", shape=[None, args.in_dim])
        y = fluid.data("y", shape=[None, 1], dtype="int64")
        hidden = fluid.layers.fc(x, args.hidden, act="relu")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(hidden, 10), y))
        if args.pairs:
            similarity = fluid.layers.matmul(hidden, hidden, transpose_y=True)  # batch x batch
            pairs = fluid.layers.expand(similarity, [1, args.pairs])
            loss = loss + 1e-6 * fluid.layers.mean(pairs)
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
        loader = fluid.io.DataLoader.from_generator(
            feed_list=[x, y], capacity=args.capacity, num_workers=args.num_workers)
    loader.set_sample_generator(sample_reader(args, loader), batch_size=args.batch_size)
    if matches(loader, args.crash_when):
        raise RuntimeError(f"tunejob: crashing as asked ({args.crash_when})")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    step = 0
    for data in loader():
        if step == 3 and matches(loader, args.hang_when):
            time.sleep(3600)  # a hung job
        exe.run(main_prog, feed=data, fetch_list=[loss])
        time.sleep(args.step_ms * 1e-3)
        step += 1
        if step >= args.steps:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
