"""What moving a batch through a DataLoader's worker processes costs, on top of making it:
the trainer's CPU per batch (the training thread's, around each `next`) and the workers' (the
child processes' CPU), with 2 persistent workers against the same batches made in the trainer
(num_workers=0), in the steady state (a first pass starts the workers). The batch: 32 samples
of a 64-float array and a label. The reader advice counts the difference for PyTorch
(advisors/producers.py WORKER_TRANSFER_S).

CPU time moves less than wall time on a loaded machine, but the workers' and the trainer's
share the cores: run it on a quiet one. Paddle's in-trainer figure is its main thread's only
(its reading thread makes the batches), so only its worker figures compare.

Prints a table and, last, one JSON line. Run:
    python benchmarks/bench_worker_transfer.py [--framework torch|paddle] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import psutil

os.environ.setdefault("GLOG_minloglevel", "2")
BATCHES = 1500
BATCH = 32


def children_cpu_s() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def per_batch(loader):
    """(the trainer's, the workers') CPU milliseconds per batch over a pass, after a first."""
    for _ in loader:
        pass
    trainer_s, batches, children_s = 0.0, 0, children_cpu_s()
    it = iter(loader)
    while True:
        t0 = time.thread_time()
        try:
            next(it)
        except StopIteration:
            break
        trainer_s += time.thread_time() - t0
        batches += 1
    return trainer_s / batches * 1e3, (children_cpu_s() - children_s) / batches * 1e3


def torch_loader(workers: int):
    import torch
    torch.set_num_threads(1)

    class Samples(torch.utils.data.Dataset):
        def __len__(self):
            return BATCH * BATCHES

        def __getitem__(self, i):
            return torch.from_numpy(np.full(64, i, np.float32)), i % 10

    return torch.utils.data.DataLoader(Samples(), batch_size=BATCH, num_workers=workers,
                                       persistent_workers=workers > 0)


def paddle_loader(workers: int):
    import paddle
    paddle.set_device("cpu")

    class Samples(paddle.io.Dataset):
        def __len__(self):
            return BATCH * BATCHES

        def __getitem__(self, i):
            return np.full(64, i, np.float32), np.array([i % 10], np.int64)

    return paddle.io.DataLoader(Samples(), batch_size=BATCH, num_workers=workers,
                                persistent_workers=workers > 0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=("torch", "paddle"), default="torch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    make = torch_loader if args.framework == "torch" else paddle_loader
    figures = {0: [], 2: []}
    for _ in range(args.rounds):
        for workers in (0, 2):
            figures[workers].append(per_batch(make(workers)))
    median = {w: tuple(statistics.median(f[i] for f in runs) for i in (0, 1))
              for w, runs in figures.items()}
    print(f"{args.framework}: {args.rounds} rounds of {BATCHES} batches of {BATCH} samples "
          f"(CPU ms per batch, medians)")
    print(f"{'':<22}{'trainer':>9}{'workers':>9}")
    for workers, (trainer, children) in median.items():
        print(f"{f'num_workers={workers}':<22}{trainer:>9.3f}{children:>9.3f}")
    taking = median[2][0] - median[0][0]
    sending = median[2][1] - median[0][0]
    print(f"transfer: the trainer's side {taking:+.3f} ms, a worker's side {sending:+.3f} ms "
          f"(its CPU less the batch made in the trainer)")
    print(json.dumps({"bench": "worker_transfer", "framework": args.framework,
                      "rounds": args.rounds, "batches": BATCHES,
                      "ms_per_batch": {str(w): [round(v, 4) for v in m]
                                       for w, m in median.items()},
                      "taking_ms": round(taking, 4), "sending_ms": round(sending, 4)}))


if __name__ == "__main__":
    main()
