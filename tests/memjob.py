"""A small training job for the memory-advice tests: run under `paddletune profile`, changed the
way an advice says, and run again to check the advice's predicted figure.

  --model mlp    784-512-512-10 MLP on random data
  --model chain  a wide forward chain of activations (inplace matters at its peak)
  --model seq    [batch, length, 32] sequences -> fc per position -> mean over length -> fc 4;
                 every --long-every'th batch is --long-len long (else --len), unless --max-len
                 drops samples longer than it
--loader feeds through fluid.io.DataLoader.from_generator (a thread producer) instead, the
first 50 batches made before training and fed in turn (a producer that costs nothing).
Memory settings come from FLAGS_* environment variables (FLAGS_eager_delete_tensor_gb,
FLAGS_cpu_memory_limit_mb, FLAGS_allocator_strategy, ...), read by the runtime at import.
An out-of-memory error ends the job with its exception, as a user's script would.
"""

import argparse
import itertools

import numpy as np

import runtime as fluid


MADE = 50  # --loader: batches made before training


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("mlp", "chain", "seq"), default="mlp")
    p.add_argument("--batches", default="64", help="batch sizes, in turn, --steps each")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--optimizer", choices=("adam", "momentum", "adadelta"), default="momentum")
    p.add_argument("--compiled", action="store_true", help="run a CompiledProgram")
    p.add_argument("--inplace", action="store_true", help="BuildStrategy.enable_inplace")
    p.add_argument("--len", type=int, default=20)
    p.add_argument("--long-len", type=int, default=400)
    p.add_argument("--long-every", type=int, default=0)
    p.add_argument("--max-len", type=int, default=0)
    p.add_argument("--loader", action="store_true",
                   help="feed through a DataLoader (a thread producer) instead of the loop")
    return p.parse_args(argv)


def build(model):
    y = fluid.data("y", [None, 1], dtype="int64")
    if model == "mlp":
        x = fluid.data("x", [None, 784])
        h = fluid.layers.fc(fluid.layers.fc(x, 512, act="relu"), 512, act="relu")
        logits = fluid.layers.fc(h, 10)
    elif model == "chain":
        x = fluid.data("x", [None, 64])
        h = fluid.layers.fc(x, 2048)
        for _ in range(4):
            h = fluid.layers.relu(fluid.layers.scale(h, 0.9))
        logits = fluid.layers.fc(h, 10)
    else:
        x = fluid.data("x", [None, None, 32])
        h = fluid.layers.fc(x, 256, num_flatten_dims=2, act="relu")
        logits = fluid.layers.fc(fluid.layers.reduce_mean(h, dim=1), 4)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
    return loss, [x, y]


def optimizer(name):
    if name == "adam":
        return fluid.optimizer.Adam(0.001)
    if name == "adadelta":
        return fluid.optimizer.Adadelta(0.01)
    return fluid.optimizer.Momentum(0.01, 0.9)


def batches(args, rng):
    step = 0
    for size in (int(b) for b in args.batches.split(",")):
        for _ in range(args.steps):
            step += 1
            if args.model == "seq":
                long = args.long_every and step % args.long_every == 0
                length = args.long_len if long else args.len
                if args.max_len and length > args.max_len:
                    continue  # the advice: drop the long samples
                x = rng.standard_normal((size, length, 32)).astype("float32")
            else:
                x = rng.standard_normal((size, 784 if args.model == "mlp" else 64))
                x = x.astype("float32")
            yield {"x": x, "y": rng.integers(0, 4, (size, 1)).astype("int64")}


def main(argv=None):
    args = parse(argv)
    main_program, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main_program, startup):
        loss, feed_vars = build(args.model)
        optimizer(args.optimizer).minimize(loss)
    program = main_program
    if args.compiled:
        strategy = fluid.BuildStrategy()
        strategy.enable_inplace = args.inplace
        program = fluid.CompiledProgram(main_program, build_strategy=strategy)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(0)
    feeds = batches(args, rng)
    if args.loader:  # the first MADE batches, made before training, in turn
        made = [[f["x"], f["y"]] for f in itertools.islice(feeds, MADE)]
        total = args.steps * len(args.batches.split(","))
        loader = fluid.io.DataLoader.from_generator(feed_list=feed_vars, capacity=8)
        loader.set_batch_generator(lambda: (made[i % len(made)] for i in range(total)),
                                   places=exe.place)
        feeds = loader()
    for feed in feeds:
        exe.run(program, feed=feed, fetch_list=[loss])


if __name__ == "__main__":
    main()
