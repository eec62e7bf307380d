"""A small PyTorch MLP on synthetic data: a compute-bound job for the report's baseline.

    paddletune profile examples/torch/mlp.py [-- --device cuda]

With --num-workers N its cheap batches come from N worker processes, whose hand-over costs
the loop more than making them does (advice worker-hand-over):

    paddletune profile examples/torch/mlp.py --num-workers 1
"""

import argparse

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    centers = torch.randn(10, 32) * 2
    labels = torch.randint(0, 10, (8192,))
    inputs = centers[labels] + torch.randn(8192, 32)
    data = torch.utils.data.TensorDataset(inputs, labels)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         drop_last=True, num_workers=args.num_workers,
                                         persistent_workers=args.num_workers > 0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step, correct, seen = 0, 0, 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step > args.steps - 50:  # accuracy over the last 50 steps
                correct += int((logits.argmax(1) == y).sum())
                seen += len(y)
            if step >= args.steps:
                break
    accuracy = correct / max(seen, 1)
    print(f"steps {step}: accuracy {accuracy:.2%} over the last 50 steps")
    assert accuracy > 0.8, "the model did not learn"


if __name__ == "__main__":
    main()
