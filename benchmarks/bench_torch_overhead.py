"""What profiling costs a PyTorch job: an MLP (784-512-512-10, SGD with momentum, batch 128,
batches from a DataLoader over an in-memory TensorDataset, num_workers=0) trained bare and
under the probes a `paddletune profile` session runs (session.session_probes: step, reader,
memory, scheduler, workers, system, nvml, writing a real profile file, with the PyTorch
source's hooks installed), interleaved in one process: each round runs a block of N steps
bare, then a block of N steps profiled (the order alternating between rounds), so machine
noise hits both alike.

The MLP's blocks give the overhead as a share of its step, which on a busy machine is within
the noise; the same loop on a near-empty step (a 1-unit model, 1-sample batches) gives the
probes' absolute cost per step, divided by the MLP's step for the share (`within_target`).

Target: the default probes cost under 1% of the MLP's step time. Prints a table and, last,
one JSON line. Run: python benchmarks/bench_torch_overhead.py [--rounds 11 --steps 80
--threads 1]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from overhead_common import LoopJob, interleave, json_figures, print_table, profiled  # noqa: E402
from paddletune.sources.torch.source import TorchSource  # noqa: E402


class Job(LoopJob):
    def __init__(self, batch_size: int):
        torch.manual_seed(0)
        n = batch_size * 16
        centers = torch.randn(10, 784)
        labels = torch.randint(0, 10, (n,))
        inputs = centers[labels] + torch.randn(n, 784)
        self.loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(inputs, labels), batch_size=batch_size,
            shuffle=True, drop_last=True)
        self.model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                                   nn.ReLU(), nn.Linear(512, 10))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()

    def train_step(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


class TinyJob(Job):
    """The same loop on a 1-unit model and 1-sample batches: a step that costs almost nothing
    but the loop's own calls, so the probes' absolute cost per step (microseconds) shows
    above the noise."""

    def __init__(self):
        torch.manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(256, 1), torch.zeros(256))
        self.loader = torch.utils.data.DataLoader(data, batch_size=1)
        self.model = nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loss_fn = lambda out, y: out.sum()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=80, help="steps per block")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--tiny-steps", type=int, default=2000,
                        help="steps per block of the near-empty step")
    parser.add_argument("--tiny-rounds", type=int, default=None,
                        help="rounds of the near-empty step (default: 3 x --rounds; its "
                             "blocks take about a second, and its medians give the cost)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    job = Job(args.batch_size)
    job.steps(args.warmup)
    tiny = TinyJob()
    tiny.steps(args.warmup)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        def under_probes(r):
            return profiled(TorchSource, Path(directory) / f"profiled-{r}.jsonl",
                            "bench_torch_overhead")
        mlp = interleave(job, args.rounds, args.steps, under_probes)
        tiny_rounds = args.tiny_rounds or 3 * args.rounds
        tiny_run = interleave(tiny, tiny_rounds, args.tiny_steps, under_probes)
    wall = time.perf_counter() - started
    print_table(f"PyTorch {torch.__version__} MLP 784-512-512-10, batch {args.batch_size}, "
                f"{args.threads} thread(s): {args.rounds} rounds x {args.steps} steps per "
                f"block ({wall:.1f} s)", mlp, tiny_run, args.tiny_steps)
    print(json.dumps({"bench": "torch_overhead", "torch": torch.__version__,
                      "batch_size": args.batch_size, "threads": args.threads,
                      "rounds": args.rounds, "steps": args.steps, "tiny_rounds": tiny_rounds,
                      **json_figures(mlp, tiny_run)}))


if __name__ == "__main__":
    main()
