"""Train an MLP with PaddlePaddle 3.x and evaluate it after every epoch, over a second
DataLoader whose samples are slow to load (each one waits on a simulated read): the shape of
examples/torch/train_eval.py in Paddle.

    paddletune profile examples/paddle/train_eval.py

The evaluation passes are left out of the steps ("Evaluation: ..." in the report), and
`advise` gives the evaluation DataLoader workers (evaluation-input). With --eval-workers N
--persistent the workers are kept between passes, and each later pass's iter() waits for
them (advice worker-start-per-pass).
"""

import argparse
import time

import numpy as np
import paddle
from paddle import nn


class Points(paddle.io.Dataset):
    """Points around ten centres; each sample waits `read_s` (a slow file or network read)."""

    def __init__(self, n: int, read_s: float, seed: int):
        rng = np.random.default_rng(seed)
        self.centres = np.random.default_rng(0).normal(size=(10, 32)).astype("float32") * 2
        self.labels = rng.integers(0, 10, size=n)
        self.noise = rng.normal(size=(n, 32)).astype("float32")
        self.read_s = read_s

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if self.read_s:
            time.sleep(self.read_s)
        label = self.labels[i]
        return self.centres[label] + self.noise[i], np.int64(label)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=2048)
    parser.add_argument("--read-ms", type=float, default=0.1,
                        help="each evaluation sample's simulated read")
    parser.add_argument("--eval-workers", type=int, default=0)
    parser.add_argument("--persistent", action="store_true",
                        help="keep the evaluation DataLoader's workers between passes")
    parser.add_argument("--eval-batches", type=int, default=0,
                        help="evaluate on the first N batches only (0: all)")
    args = parser.parse_args()
    paddle.seed(0)
    train = paddle.io.DataLoader(Points(args.train_samples, 0.0, seed=1), batch_size=64,
                                 shuffle=True)
    evaluation = paddle.io.DataLoader(
        Points(args.eval_samples, args.read_ms / 1e3, seed=2), batch_size=256,
        num_workers=args.eval_workers,
        persistent_workers=args.persistent and args.eval_workers > 0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    optimizer = paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9,
                                          parameters=model.parameters())
    accuracy = 0.0
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        model.eval()
        correct = seen = 0
        with paddle.no_grad():
            for i, (x, y) in enumerate(evaluation):
                if i == args.eval_batches > 0:
                    break
                correct += int((model(x).argmax(1) == y).sum())
                seen += len(y)
        accuracy = correct / seen
        print(f"epoch {epoch}: loss {float(loss):.3f}, evaluation accuracy {accuracy:.2%}")
    assert accuracy > 0.9, "the model did not learn"


if __name__ == "__main__":
    main()
