"""Fit a line: linear regression of 13 features with fc(size=1), square_error_cost and SGD.

The Paddle book's first chapter (UCI housing), on synthetic data: targets follow a fixed linear
rule plus Gaussian noise of std NOISE_STD, so a converged model's mean squared error sits near
NOISE_STD ** 2. Run: python examples/fit_a_line.py [--steps 400] [--place cpu|gpu]
"""

import argparse
import sys

import numpy as np

import runtime as fluid

N_FEATURES = 13
NOISE_STD = 0.1


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=None, help="overrides --epochs")
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    return parser.parse_args(argv)


def make_place(name):
    """CPUPlace, or CUDAPlace(0); without CuPy/a GPU the script stops with exit code 2."""
    if name == "cpu":
        return fluid.CPUPlace()
    try:
        return fluid.CUDAPlace(0)
    except fluid.core.EnforceNotMet as err:
        print(f"fit_a_line.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def make_data(n_train=400, n_test=100, seed=1):
    """Standardised features and y = x . w + b + noise, split into train and test."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(N_FEATURES, 1))
    x = rng.normal(size=(n_train + n_test, N_FEATURES)).astype("float32")
    y = (x @ w + 0.5 + NOISE_STD * rng.normal(size=(len(x), 1))).astype("float32")
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def build_program(lr=0.01, seed=1):
    """(main, startup, test program, avg_loss): the book chapter's network."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, N_FEATURES], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="float32")
        y_predict = fluid.layers.fc(input=x, size=1, act=None)
        cost = fluid.layers.square_error_cost(input=y_predict, label=y)
        avg_loss = fluid.layers.mean(cost)
        test_program = main.clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=lr).minimize(avg_loss)
    return main, startup, test_program, avg_loss


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
    """Run `steps` SGD steps; returns the loss of every step."""
    x, y = data
    losses = []
    for step, idx in enumerate(batches(len(x), batch_size, steps, seed)):
        loss_value, = exe.run(main, feed={"x": x[idx], "y": y[idx]}, fetch_list=[loss])
        losses.append(float(loss_value[0]))
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return losses


def evaluate(exe, test_program, loss, data):
    """Mean squared error on the whole of `data` (one batch)."""
    x, y = data
    loss_value, = exe.run(test_program, feed={"x": x, "y": y}, fetch_list=[loss])
    return float(loss_value[0])


def run(args, place=None):
    """Train as `args` say, in a fresh scope; returns {'losses': [...], 'loss': test MSE}."""
    train_data, test_data = make_data(seed=args.seed)
    steps = args.steps if args.steps is not None else (
        args.epochs * (len(train_data[0]) // args.batch_size))
    main, startup, test_program, loss = build_program(args.lr, args.seed)
    exe = fluid.Executor(place or fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = train(exe, main, loss, train_data, args.batch_size, steps, args.seed,
                       args.log_every)
        return {"losses": losses, "loss": evaluate(exe, test_program, loss, test_data)}


def main(argv=None):
    args = parse_args(argv)
    result = run(args, make_place(args.place))
    print(f"final: loss={result['loss']:.6f}")


if __name__ == "__main__":
    main()
