"""An input-bound PyTorch job: each sample is made by slow per-sample Python work in the
Dataset's __getitem__, and the DataLoader reads it in the training loop itself
(num_workers=0), so the model waits for data most of the time.

    paddletune profile examples/torch/input_heavy.py
    paddletune advise            # says how many workers, in PyTorch code
    paddletune tune examples/torch/input_heavy.py --budget 2m
"""

import argparse

import numpy as np
import torch
from torch import nn


class SlowDigits(torch.utils.data.Dataset):
    """Noisy copies of 10 prototypes; each sample costs `work` rounds of per-pixel Python
    arithmetic (decoding and augmenting an image, in a real job)."""

    def __init__(self, n=16384, dim=64, work=100, seed=0):
        rng = np.random.default_rng(seed)
        self.prototypes = rng.normal(size=(10, dim)).astype(np.float32)
        self.labels = rng.integers(0, 10, size=n)
        self.n, self.dim, self.work, self.seed = n, dim, work, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        label = int(self.labels[i])
        rng = np.random.default_rng(self.seed * 100003 + i)
        x = self.prototypes[label] + 0.5 * rng.normal(size=self.dim).astype(np.float32)
        acc = 0.0
        for _ in range(self.work):  # the slow part: pure Python per value
            for v in x.tolist():
                acc += v * v
        return torch.from_numpy(x / np.float32(1.0 + 1e-9 * acc)), label


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--work", type=int, default=100)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = SlowDigits(work=args.work)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.num_workers, drop_last=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step, first, last = 0, None, None
    while step < args.steps:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = loss.item()
            first = value if first is None else first
            last = value
            step += 1
            if step >= args.steps:
                break
    print(f"steps {step}: loss {first:.3f} -> {last:.3f}")
    assert last < first * 0.5, "the model did not learn"


if __name__ == "__main__":
    main()
