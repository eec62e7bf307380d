"""MLP classifier on synthetic MNIST-like digits: 784 -> 512 -> 512 -> 10 with relu.

The images are seven-segment digits rendered in 28x28, shifted a few pixels at random, with
random stroke intensity and Gaussian noise. Trained with softmax_with_cross_entropy and
Momentum (or Adam); reports accuracy on a held-out split.
Run: python examples/mlp.py [--steps 200] [--hidden 512,512] [--optimizer adam]
"""

import argparse
import sys

import numpy as np

import runtime as fluid

# segment -> (rows, cols) of its stroke in a 28x28 image
SEGMENTS = {"a": (slice(4, 6), slice(9, 19)), "g": (slice(13, 15), slice(9, 19)),
            "d": (slice(22, 24), slice(9, 19)), "f": (slice(4, 15), slice(8, 10)),
            "b": (slice(4, 15), slice(18, 20)), "e": (slice(13, 24), slice(8, 10)),
            "c": (slice(13, 24), slice(18, 20))}
DIGITS = ["abcdef", "bc", "abdeg", "abcdg", "bcfg", "acdfg", "acdefg", "abc", "abcdefg",
          "abcdfg"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=None, help="overrides --epochs")
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="default 0.01 for momentum, 0.001 for adam")
    parser.add_argument("--optimizer", choices=("momentum", "adam"), default="momentum")
    parser.add_argument("--hidden", default="512,512", help="hidden layer sizes, comma separated")
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    return parser.parse_args(argv)


def make_place(name):
    """CPUPlace, or CUDAPlace(0); without CuPy/a GPU the script stops with exit code 2."""
    if name == "cpu":
        return fluid.CPUPlace()
    try:
        return fluid.CUDAPlace(0)
    except fluid.core.EnforceNotMet as err:
        print(f"mlp.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def make_data(n_train=5000, n_test=1000, seed=1, noise=0.25, max_shift=2):
    """((x_train [N, 784] float32, y_train [N, 1] int64), (x_test, y_test))."""
    rng = np.random.default_rng(seed)
    glyphs = np.zeros((10, 28, 28), dtype="float32")
    for digit, segments in enumerate(DIGITS):
        for seg in segments:
            glyphs[(digit,) + SEGMENTS[seg]] = 1.0
    n = n_train + n_test
    labels = rng.integers(0, 10, size=n)
    images = glyphs[labels] * rng.uniform(0.6, 1.0, size=(n, 1, 1)).astype("float32")
    for i, (dy, dx) in enumerate(rng.integers(-max_shift, max_shift + 1, size=(n, 2))):
        images[i] = np.roll(images[i], (dy, dx), axis=(0, 1))
    images += rng.normal(0, noise, size=images.shape).astype("float32")
    x, y = images.reshape(n, 784), labels.reshape(n, 1).astype("int64")
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def build_program(hidden=(512, 512), optimizer="momentum", lr=None, seed=1):
    """(main, startup, test program, avg_loss, accuracy)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        img = fluid.data(name="img", shape=[None, 784], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        h = img
        for size in hidden:
            h = fluid.layers.fc(input=h, size=size, act="relu")
        logits = fluid.layers.fc(input=h, size=10)
        loss = fluid.layers.softmax_with_cross_entropy(logits=logits, label=label)
        avg_loss = fluid.layers.mean(loss)
        acc = fluid.layers.accuracy(input=logits, label=label)  # top-1 of logits = of softmax
        test_program = main.clone(for_test=True)
        if optimizer == "adam":
            opt = fluid.optimizer.Adam(learning_rate=lr or 0.001)
        else:
            opt = fluid.optimizer.Momentum(learning_rate=lr or 0.01, momentum=0.9)
        opt.minimize(avg_loss)
    return main, startup, test_program, avg_loss, acc


def batches(n, batch_size, steps, seed):
    """Index arrays of shuffled minibatches, epoch after epoch, until `steps` were given."""
    rng = np.random.default_rng(seed)
    step = 0
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            if step == steps:
                return
            yield order[start:start + batch_size]
            step += 1


def train(exe, main, loss, data, batch_size, steps, seed=1, log_every=50):
    """Run `steps` optimizer steps; returns the loss of every step."""
    x, y = data
    losses = []
    for step, idx in enumerate(batches(len(x), batch_size, steps, seed)):
        loss_value, = exe.run(main, feed={"img": x[idx], "label": y[idx]}, fetch_list=[loss])
        losses.append(float(loss_value[0]))
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return losses


def evaluate(exe, test_program, loss, acc, data):
    """(mean loss, accuracy) over the whole of `data` (one batch)."""
    x, y = data
    loss_value, acc_value = exe.run(test_program, feed={"img": x, "label": y},
                                    fetch_list=[loss, acc])
    return float(loss_value[0]), float(acc_value[0])


def run(args, place=None):
    """Train as `args` say, in a fresh scope; returns {'losses', 'loss', 'accuracy'}."""
    train_data, test_data = make_data(seed=args.seed)
    steps = args.steps if args.steps is not None else (
        args.epochs * (len(train_data[0]) // args.batch_size))
    hidden = [int(s) for s in args.hidden.split(",") if s.strip()]
    main, startup, test_program, loss, acc = build_program(hidden, args.optimizer, args.lr,
                                                           args.seed)
    exe = fluid.Executor(place or fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = train(exe, main, loss, train_data, args.batch_size, steps, args.seed,
                       args.log_every)
        test_loss, accuracy = evaluate(exe, test_program, loss, acc, test_data)
    return {"losses": losses, "loss": test_loss, "accuracy": accuracy}


def main(argv=None):
    args = parse_args(argv)
    result = run(args, make_place(args.place))
    print(f"final: loss={result['loss']:.6f} accuracy={result['accuracy']:.4f}")


if __name__ == "__main__":
    main()
