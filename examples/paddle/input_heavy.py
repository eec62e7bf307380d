"""An input-bound PaddlePaddle 3.x job: each sample is made by slow per-sample Python work in
the Dataset's __getitem__, and the DataLoader reads it in the training process itself
(--num-workers 0 by default), so the small MLP waits for data most of the time.

    paddletune profile examples/paddle/input_heavy.py
    paddletune advise            # says how many workers, in Paddle code
    paddletune tune examples/paddle/input_heavy.py --budget 2m
"""

import argparse

import numpy as np
import paddle
from paddle import nn


class SlowDigits(paddle.io.Dataset):
    """Noisy copies of 10 prototypes; each sample costs `work` rounds of per-value Python
    arithmetic and NumPy sorting (decoding and augmenting an image, in a real job)."""

    def __init__(self, n=4096, dim=64, work=10, seed=0):
        rng = np.random.default_rng(seed)
        self.prototypes = rng.normal(size=(10, dim)).astype("float32")
        self.labels = rng.integers(0, 10, size=n)
        self.n, self.dim, self.work, self.seed = n, dim, work, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        label = int(self.labels[i])
        rng = np.random.default_rng(self.seed * 100003 + i)
        x = self.prototypes[label] + 1.0 * rng.normal(size=self.dim).astype("float32")
        acc = 0.0
        for _ in range(self.work):  # the slow part: per-value Python, then a NumPy sort
            for v in x[:16].tolist():
                acc += v * v
            acc += float(np.sort(rng.random(2048))[-1])
        return (x / np.float32(1.0 + 1e-9 * acc)).astype("float32"), np.array([label], "int64")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args()

    paddle.seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = paddle.optimizer.Adam(learning_rate=1e-2, parameters=model.parameters())
    loader = paddle.io.DataLoader(SlowDigits(), batch_size=args.batch_size, shuffle=True,
                                  drop_last=True, num_workers=args.num_workers)
    losses, step = [], 0
    while step < args.steps:
        for x, label in loader:
            loss = nn.functional.cross_entropy(model(x), label)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            step += 1
            if step % 20 == 0 or step == args.steps or step == 1:
                losses.append(float(loss))
                print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
            if step >= args.steps:
                break
    assert len(losses) >= 2 and losses[-1] < 0.5 * losses[0], \
        f"the loss did not fall: {losses}"
    print("done: the loss fell from", round(losses[0], 4), "to", round(losses[-1], 4))


if __name__ == "__main__":
    main()
