"""Train an MLP and evaluate it after every epoch, over a second DataLoader whose samples are
slow to load (each one waits on a simulated read): the usual shape of a training script.

    paddletune profile examples/torch/train_eval.py

The evaluation passes run between training steps: the report leaves them out of the steps
and states what they cost the run ("Evaluation: ..."), and `advise` gives the evaluation
DataLoader worker processes (advice evaluation-input). Try its change with --eval-workers N.
With --eval-batches N each evaluation reads only its first N batches (a `break`, the usual
shortcut for a quick validation loss); those passes are left out of the steps as well.
"""

import argparse
import time

import torch
from torch import nn


class Points(torch.utils.data.Dataset):
    """Points around ten centres; each sample waits `read_s` (a slow file or network read)."""

    def __init__(self, n: int, read_s: float, seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.centres = torch.randn(10, 32, generator=torch.Generator().manual_seed(0)) * 2
        self.labels = torch.randint(0, 10, (n,), generator=gen)
        self.noise = torch.randn(n, 32, generator=gen)
        self.read_s = read_s

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if self.read_s:
            time.sleep(self.read_s)
        label = self.labels[i]
        return self.centres[label] + self.noise[i], label


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=2048)
    parser.add_argument("--read-ms", type=float, default=0.1,
                        help="each evaluation sample's simulated read")
    parser.add_argument("--eval-workers", type=int, default=0)
    parser.add_argument("--eval-batches", type=int, default=0,
                        help="evaluate on the first N batches only (0: all)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    train = torch.utils.data.DataLoader(Points(args.train_samples, 0.0, seed=1),
                                        batch_size=64, shuffle=True)
    evaluation = torch.utils.data.DataLoader(
        Points(args.eval_samples, args.read_ms / 1e3, seed=2), batch_size=256,
        num_workers=args.eval_workers, persistent_workers=args.eval_workers > 0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    accuracy = 0.0
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        correct = seen = 0
        with torch.no_grad():
            for i, (x, y) in enumerate(evaluation):
                if i == args.eval_batches > 0:
                    break
                correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
                seen += len(y)
        accuracy = correct / seen
        print(f"epoch {epoch}: loss {loss.item():.3f}, evaluation accuracy {accuracy:.2%}")
    assert accuracy > 0.9, "the model did not learn"


if __name__ == "__main__":
    main()
