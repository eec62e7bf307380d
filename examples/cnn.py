"""Small CNN on synthetic 1x28x28 images: conv2d 5x5 -> pool2d 2 -> conv2d 5x5 -> pool2d 2 -> fc 10
(optionally with batch_norm after each convolution).

Each image holds one of ten 7x7 shapes (bars of four orientations, plus, cross, box, block, T,
L) drawn at a random position with random intensity and Gaussian noise; the class is the shape,
so the network has to find it wherever it is. Reports accuracy on a held-out split.
Run: python examples/cnn.py [--steps 300] [--filters 16,32] [--batch-norm]
"""

import argparse
import sys

import numpy as np

import runtime as fluid

GLYPH_SIZE = 7
N_CLASSES = 10


def make_glyphs():
    """The ten 7x7 binary shapes, one per class."""
    g = np.zeros((N_CLASSES, GLYPH_SIZE, GLYPH_SIZE), dtype="float32")
    g[0, 3, :] = 1                   # horizontal bar
    g[1, :, 3] = 1                   # vertical bar
    g[2] = np.eye(GLYPH_SIZE)        # diagonal
    g[3] = np.fliplr(g[2])           # anti-diagonal
    g[4, 3, :] = g[4, :, 3] = 1      # plus
    g[5] = np.maximum(g[2], g[3])    # cross
    g[6, [0, -1], :] = g[6, :, [0, -1]] = 1  # box outline
    g[7, 1:-1, 1:-1] = 1             # filled block
    g[8, 0, :] = g[8, :, 3] = 1      # T
    g[9, :, 0] = g[9, -1, :] = 1     # L
    return g


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=None, help="overrides --epochs")
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.005, help="Adam's learning rate")
    parser.add_argument("--filters", default="16,32", help="filters of the two conv layers")
    parser.add_argument("--batch-norm", action="store_true", help="batch_norm after each conv")
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    return parser.parse_args(argv)


def make_place(name):
    """CPUPlace, or CUDAPlace(0); without CuPy/a GPU the script stops with exit code 2."""
    if name == "cpu":
        return fluid.CPUPlace()
    try:
        return fluid.CUDAPlace(0)
    except fluid.core.EnforceNotMet as err:
        print(f"cnn.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def make_data(n_train=4000, n_test=1000, seed=1, noise=0.1):
    """((images [N, 1, 28, 28] float32, labels [N, 1] int64) for train, then for test)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    labels = rng.integers(0, N_CLASSES, size=n)
    shapes = make_glyphs()[labels] * rng.uniform(0.6, 1.0, size=(n, 1, 1)).astype("float32")
    images = rng.normal(0, noise, size=(n, 1, 28, 28)).astype("float32")
    for i, (top, left) in enumerate(rng.integers(0, 28 - GLYPH_SIZE + 1, size=(n, 2))):
        images[i, 0, top:top + GLYPH_SIZE, left:left + GLYPH_SIZE] += shapes[i]
    labels = labels.reshape(n, 1).astype("int64")
    return (images[:n_train], labels[:n_train]), (images[n_train:], labels[n_train:])


def conv_pool(x, num_filters, batch_norm):
    """conv2d 5x5 (+ batch_norm) + relu, then 2x2 max pooling with stride 2."""
    conv = fluid.layers.conv2d(input=x, num_filters=num_filters, filter_size=5,
                               act=None if batch_norm else "relu")
    if batch_norm:
        conv = fluid.layers.batch_norm(input=conv, act="relu")
    return fluid.layers.pool2d(input=conv, pool_size=2, pool_type="max", pool_stride=2)


def build_program(filters=(16, 32), batch_norm=False, lr=0.005, seed=1):
    """(main, startup, test program, avg_loss, accuracy)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        h = img
        for num_filters in filters:  # 28 -> 24 -> 12 -> 8 -> 4
            h = conv_pool(h, num_filters, batch_norm)
        logits = fluid.layers.fc(input=h, size=N_CLASSES)
        loss = fluid.layers.softmax_with_cross_entropy(logits=logits, label=label)
        avg_loss = fluid.layers.mean(loss)
        acc = fluid.layers.accuracy(input=logits, label=label)  # top-1 of logits = of softmax
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=lr).minimize(avg_loss)
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


def evaluate(exe, test_program, loss, acc, data, batch_size=500):
    """(mean loss, accuracy) over the whole of `data`, in batches of batch_size."""
    x, y = data
    loss_sum = acc_sum = 0.0
    for start in range(0, len(x), batch_size):
        feed = {"img": x[start:start + batch_size], "label": y[start:start + batch_size]}
        loss_value, acc_value = exe.run(test_program, feed=feed, fetch_list=[loss, acc])
        loss_sum += float(loss_value[0]) * len(feed["img"])
        acc_sum += float(acc_value[0]) * len(feed["img"])
    return loss_sum / len(x), acc_sum / len(x)


def run(args, place=None):
    """Train as `args` say, in a fresh scope; returns {'losses', 'loss', 'accuracy'}."""
    train_data, test_data = make_data(seed=args.seed)
    steps = args.steps if args.steps is not None else (
        args.epochs * (len(train_data[0]) // args.batch_size))
    filters = [int(s) for s in args.filters.split(",") if s.strip()]
    main, startup, test_program, loss, acc = build_program(filters, args.batch_norm, args.lr,
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
