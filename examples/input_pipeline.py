"""Input pipeline: mlp.py's classifier fed by a reader that renders and augments every image in
Python as it goes, the way real jobs decode and augment JPEGs.

--reader sync     the generator runs inline, between exe.run calls (each step waits for it)
--reader loader   fluid.io.DataLoader.from_generator(capacity=--capacity,
                  num_workers=--num-workers): a reader thread (0 workers) or worker
                  processes prepare batches while the model trains
--decode-us       extra Python work per sample, a stand-in for decoding (0 for none)

The generator shards itself with fluid.io.get_worker_info(), so N workers make each batch once.
Run: python examples/input_pipeline.py [--reader loader --num-workers 2] [--steps 300]
"""

import argparse
import time

import numpy as np

import runtime as fluid
from mlp import DIGITS, SEGMENTS, build_program, evaluate, make_data, make_place


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", choices=("sync", "loader"), default="sync")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--decode-us", type=float, default=40.0,
                        help="extra Python work per sample, in microseconds")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1, help="passes over the reader")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per pass (default: 5000 samples per pass)")
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--hidden", default="256,128")
    parser.add_argument("--log-every", type=int, default=50)
    return parser.parse_args(argv)


GLYPHS = np.zeros((10, 28, 28), dtype="float32")
for _digit, _segments in enumerate(DIGITS):
    for _seg in _segments:
        GLYPHS[(_digit,) + SEGMENTS[_seg]] = 1.0


def decode(label, rng, decode_us):
    """One augmented 784-pixel image of `label`: the 'decoding' is pure Python busy work."""
    end = time.perf_counter() + decode_us * 1e-6
    while time.perf_counter() < end:
        pass
    image = GLYPHS[label] * rng.uniform(0.6, 1.0)
    image = np.roll(image, tuple(rng.integers(-2, 3, size=2)), axis=(0, 1))
    return (image + rng.normal(0, 0.25, size=image.shape)).astype("float32").reshape(784)


def batch_reader(steps, batch_size, decode_us, seed):
    """A batch generator of `steps` batches; with worker processes each makes its share."""
    def reader():
        info = fluid.io.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for step in range(worker, steps, workers):
            rng = np.random.default_rng((seed, step))  # the same batch whoever makes it
            labels = rng.integers(0, 10, size=batch_size)
            images = np.stack([decode(int(y), rng, decode_us) for y in labels])
            yield [images, labels.reshape(-1, 1).astype("int64")]
    return reader


def train(exe, main, loss, feed_vars, args, steps):
    """Train for `args.epochs` passes of `steps` batches; returns the losses."""
    reader = batch_reader(steps, args.batch_size, args.decode_us, args.seed)
    losses = []
    if args.reader == "sync":
        batches = ({"img": x, "label": y} for _ in range(args.epochs) for x, y in reader())
    else:
        loader = fluid.io.DataLoader.from_generator(
            feed_list=feed_vars, capacity=args.capacity, num_workers=args.num_workers)
        loader.set_batch_generator(reader, places=exe.place)
        batches = (data for _ in range(args.epochs) for data in loader())
    for step, feed in enumerate(batches):
        loss_value, = exe.run(main, feed=feed, fetch_list=[loss])
        losses.append(float(loss_value[0]))
        if args.log_every and step % args.log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return losses


def run(args, place=None):
    hidden = [int(s) for s in args.hidden.split(",") if s.strip()]
    main, startup, test_program, loss, acc = build_program(hidden, "momentum", args.lr,
                                                           args.seed)
    feed_vars = [main.global_block().var("img"), main.global_block().var("label")]
    steps = args.steps if args.steps is not None else 5000 // args.batch_size
    exe = fluid.Executor(place or fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = train(exe, main, loss, feed_vars, args, steps)
        test_loss, accuracy = evaluate(exe, test_program, loss, acc,
                                       make_data(seed=args.seed)[1])
    return {"losses": losses, "loss": test_loss, "accuracy": accuracy}


def main(argv=None):
    args = parse_args(argv)
    result = run(args, make_place(args.place))
    print(f"final: loss={result['loss']:.6f} accuracy={result['accuracy']:.4f}")


if __name__ == "__main__":
    main()
