"""Train an MLP with PyTorch Lightning's Trainer (`pip install pytorch-lightning`), validating
each epoch on the first batches of a DataLoader whose samples are slow to load.

    paddletune profile examples/torch/lightning_trainer.py

The Trainer runs the loop: its training steps are the optimizer's steps, as in a plain loop.
Its validation (the sanity check before training, then `limit_val_batches` batches after each
epoch) runs without gradients and stops before the DataLoader's end; paddletune sees each
such pass end as the Trainer turns back to training, leaves it out of the steps and states
what it cost ("Evaluation: ..." in the report), and `advise` gives the validation DataLoader
workers (evaluation-input). Try its change with --val-workers N.
"""

import argparse
import time

import pytorch_lightning as pl
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


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10))

    def training_step(self, batch, index):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, index):
        x, y = batch
        self.log("val_accuracy", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--limit-val-batches", type=int, default=4)
    parser.add_argument("--read-ms", type=float, default=0.2,
                        help="each validation sample's simulated read")
    parser.add_argument("--val-workers", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    train = torch.utils.data.DataLoader(Points(args.train_samples, 0.0, seed=1),
                                        batch_size=64, shuffle=True)
    val = torch.utils.data.DataLoader(Points(4096, args.read_ms / 1e3, seed=2),
                                      batch_size=256, num_workers=args.val_workers,
                                      persistent_workers=args.val_workers > 0)
    trainer = pl.Trainer(max_epochs=args.epochs, limit_val_batches=args.limit_val_batches,
                         accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(), train, val)
    accuracy = float(trainer.callback_metrics["val_accuracy"])
    print(f"validation accuracy {accuracy:.2%}")
    assert accuracy > 0.9, "the model did not learn"


if __name__ == "__main__":
    main()
