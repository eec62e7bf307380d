"""word2vec (the Paddle FAQ's sparse-training example): predict a word from the two words before
it and the two after it.

The four context ids go through one shared embedding table (`param_attr='shared_w'`,
`is_sparse=True` unless --dense), are sum-pooled, and an fc layer with softmax over the whole
vocabulary is trained with cross_entropy. The corpus is a walk of a low-entropy Markov chain
(every word has three likely successors), so the centre word is predictable from its
neighbours. Run: python examples/word2vec.py [--steps 300] [--dense] [--optimizer sgd|momentum|adam]
"""

import argparse
import sys

import numpy as np

import runtime as fluid

N_SUCCESSORS = 3
SUCCESSOR_PROBS = (0.6, 0.3, 0.1)
CONTEXT = ("firstw", "secondw", "fourthw", "fifthw")  # positions t-2, t-1, t+1, t+2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="overrides --epochs")
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="default 10 for sgd, 1.0 for momentum, 0.01 for adam")
    parser.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="sgd")
    parser.add_argument("--dict-size", type=int, default=1000)
    parser.add_argument("--emb-size", type=int, default=64)
    parser.add_argument("--dense", action="store_true", help="embedding with is_sparse=False")
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    return parser.parse_args(argv)


def make_place(name):
    """CPUPlace, or CUDAPlace(0); without CuPy/a GPU the script stops with exit code 2."""
    if name == "cpu":
        return fluid.CPUPlace()
    try:
        return fluid.CUDAPlace(0)
    except fluid.core.EnforceNotMet as err:
        print(f"word2vec.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def make_corpus(n_words, dict_size, seed=1):
    """A walk of n_words ids of a Markov chain where word w is followed by one of its three
    successors with probabilities SUCCESSOR_PROBS."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, dict_size, size=(dict_size, N_SUCCESSORS))
    choices = rng.choice(N_SUCCESSORS, size=n_words, p=SUCCESSOR_PROBS)
    words = np.empty(n_words, dtype="int64")
    words[0] = rng.integers(dict_size)
    for t in range(1, n_words):
        words[t] = successors[words[t - 1], choices[t]]
    return words


def make_data(n_train=40000, n_test=2000, dict_size=1000, seed=1):
    """(train, test): each a dict of five [N, 1] int64 arrays, the four context words and
    'target', from one walk (the test windows are its tail)."""
    words = make_corpus(n_train + n_test + 4, dict_size, seed)
    windows = np.lib.stride_tricks.sliding_window_view(words, 5)
    columns = dict(zip(CONTEXT + ("target",), (0, 1, 3, 4, 2)))
    data = {name: np.ascontiguousarray(windows[:, col, None]) for name, col in columns.items()}
    return ({k: v[:n_train] for k, v in data.items()},
            {k: v[n_train:] for k, v in data.items()})


def make_optimizer(name, lr):
    """The loss is a batch mean and a table row only gets gradient from the few windows it
    appears in, so plain SGD wants a large rate; Adam normalises that away."""
    if name == "adam":
        return fluid.optimizer.Adam(learning_rate=lr or 0.01)
    if name == "momentum":
        return fluid.optimizer.Momentum(learning_rate=lr or 1.0, momentum=0.9)
    return fluid.optimizer.SGD(learning_rate=lr or 10.0)


def build_program(dict_size=1000, emb_size=64, is_sparse=True, optimizer="sgd", lr=None, seed=1):
    """(main, startup, test program, avg_cost, accuracy)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        words = [fluid.data(name=n, shape=[None, 1], dtype="int64") for n in CONTEXT]
        target = fluid.data(name="target", shape=[None, 1], dtype="int64")
        embs = [fluid.layers.embedding(input=w, size=[dict_size, emb_size], dtype="float32",
                                       is_sparse=is_sparse, param_attr="shared_w")
                for w in words]
        emb_sum = fluid.layers.sums(input=embs)
        predict = fluid.layers.fc(input=emb_sum, size=dict_size, act="softmax")
        cost = fluid.layers.cross_entropy(input=predict, label=target)
        avg_cost = fluid.layers.mean(cost)
        acc = fluid.layers.accuracy(input=predict, label=target)
        test_program = main.clone(for_test=True)
        make_optimizer(optimizer, lr).minimize(avg_cost)
    return main, startup, test_program, avg_cost, acc


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
    losses = []
    for step, idx in enumerate(batches(len(data["target"]), batch_size, steps, seed)):
        feed = {name: column[idx] for name, column in data.items()}
        loss_value, = exe.run(main, feed=feed, fetch_list=[loss])
        losses.append(float(loss_value[0]))
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return losses


def evaluate(exe, test_program, loss, acc, data):
    """(mean loss, top-1 accuracy) over the whole of `data` (one batch)."""
    loss_value, acc_value = exe.run(test_program, feed=data, fetch_list=[loss, acc])
    return float(loss_value[0]), float(acc_value[0])


def run(args, place=None):
    """Train as `args` say, in a fresh scope; returns {'losses', 'loss', 'accuracy'}."""
    train_data, test_data = make_data(dict_size=args.dict_size, seed=args.seed)
    steps = args.steps if args.steps is not None else (
        args.epochs * (len(train_data["target"]) // args.batch_size))
    main, startup, test_program, loss, acc = build_program(
        args.dict_size, args.emb_size, not args.dense, args.optimizer, args.lr, args.seed)
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
