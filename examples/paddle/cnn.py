"""A small CNN trained with PaddlePaddle 3.x (dynamic graph) on synthetic images: each class
is a bright square in its own corner of a noisy 16x16 image, read through paddle.io.DataLoader
over a Dataset. Fast on a CPU; the loss falls well below its start.

    paddletune profile examples/paddle/cnn.py
    paddletune advise
"""

import argparse

import numpy as np
import paddle
from paddle import nn


class Squares(paddle.io.Dataset):
    """Noisy 1x16x16 images; label k: a bright 6x6 square in corner k."""

    CORNERS = ((0, 0), (0, 10), (10, 0), (10, 10))

    def __init__(self, n=2048, seed=0):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 4, size=n).astype("int64")
        self.noise = (0.3 * rng.normal(size=(n, 1, 16, 16))).astype("float32")

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        label = int(self.labels[i])
        image = self.noise[i].copy()
        r, c = self.CORNERS[label]
        image[0, r:r + 6, c:c + 6] += 1.0
        return image, np.array([label], "int64")


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
            nn.Conv2D(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2))
        self.head = nn.Linear(16 * 4 * 4, 4)

    def forward(self, x):
        return self.head(paddle.flatten(self.features(x), 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args()

    paddle.seed(0)
    model = Net()
    optimizer = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    loader = paddle.io.DataLoader(Squares(), batch_size=args.batch_size, shuffle=True,
                                  drop_last=True, num_workers=args.num_workers)
    losses, step = [], 0
    while step < args.steps:
        for image, label in loader:
            loss = nn.functional.cross_entropy(model(image), label)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            step += 1
            if step % 25 == 0 or step == args.steps or step == 1:
                losses.append(float(loss))
                print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
            if step >= args.steps:
                break
    assert len(losses) >= 2 and losses[-1] < 0.5 * losses[0], \
        f"the loss did not fall: {losses}"
    print("done: the loss fell from", round(losses[0], 4), "to", round(losses[-1], 4))


if __name__ == "__main__":
    main()
