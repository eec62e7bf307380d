"""A Fluid MLP classifier with the loss and fetch mis-configurations bench_advice.py tries.

  --loss unfused   fc(act='softmax') + cross_entropy (advice #9's pattern); fused:
                   softmax_with_cross_entropy on the fc's logits
  --fetch hidden   fetch the first hidden layer's activations (batch x hidden floats) with
                   the loss every step (advice #22's pattern); --fetch-every N fetches them
                   every N steps only (the advice's change)
Batches are made in memory before training (no input cost). The loss must fall.
Run: python benchmarks/advice_job.py [--loss unfused] [--fetch hidden] [--steps 300]
"""

import argparse

import numpy as np

import runtime as fluid


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loss", choices=("unfused", "fused"), default="fused")
    p.add_argument("--fetch", choices=("loss", "hidden"), default="loss")
    p.add_argument("--fetch-every", type=int, default=1)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--in-dim", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_args(argv)


def build(args):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = args.seed
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, args.in_dim], "float32")
        label = fluid.data("label", [None, 1], "int64")
        hidden = fluid.layers.fc(x, args.hidden, act="relu")
        if args.loss == "unfused":
            prediction = fluid.layers.fc(hidden, args.classes, act="softmax")
            loss = fluid.layers.mean(fluid.layers.cross_entropy(prediction, label))
        else:
            logits = fluid.layers.fc(hidden, args.classes)
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss, hidden


def batches(args, n=16):
    """`n` separable batches: the class is which block of inputs carries a signal."""
    rng = np.random.default_rng(args.seed)
    out = []
    block = args.in_dim // args.classes
    for _ in range(n):
        y = rng.integers(0, args.classes, size=args.batch_size)
        x = rng.normal(0, 1, size=(args.batch_size, args.in_dim)).astype("float32")
        for i, c in enumerate(y):
            x[i, c * block:(c + 1) * block] += 2.0
        out.append({"x": x, "label": y.reshape(-1, 1).astype("int64")})
    return out


def main(argv=None):
    args = parse_args(argv)
    main_program, startup, loss, hidden = build(args)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    data = batches(args)
    losses = []
    for step in range(args.steps):
        extra = args.fetch == "hidden" and step % args.fetch_every == 0
        fetched = exe.run(main_program, feed=data[step % len(data)],
                          fetch_list=[loss, hidden] if extra else [loss])
        losses.append(float(np.asarray(fetched[0]).ravel()[0]))
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print(f"loss {first:.4f} -> {last:.4f}")
    if not last < first:
        raise SystemExit(f"the loss did not fall: {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    main()
