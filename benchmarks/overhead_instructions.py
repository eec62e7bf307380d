"""What profiling costs a PyTorch (or, with --framework paddle, a Paddle 3) training step, in
CPU instructions: a count that a loaded machine does not move (the wall-clock benchmarks,
bench_torch_overhead.py and bench_paddle_overhead.py, swing by 2x between runs on the shared
2-core VM), so two versions of the code can be compared to the percent.

Each count runs the loop of the overhead benchmarks' near-empty step, taken to the bone: a
DataLoader of 1-sample batches (num_workers=0) and an optimizer step, nothing else, in a child
process under valgrind's callgrind. The loop runs bare or under the probes of a `paddletune
profile` session (session.session_probes and the session's step counter, a real profile
written), for a short and a long run past the profile's first HEAD_STEPS steps (written in
full); the difference of the two runs' counts over their difference in steps is the steady
cost of a step, the start-up (imports, the session's threads) cancelled out.

What runs on a clock is left out: a step under valgrind lasts some 50x longer, so the
samplers' work (per second, not per step) would count 50x too much per step, and how much
depends on the machine's load. The samplers' interval is set past the run, and so are the
writer's and the length of its windows of steps: the steps' records are folded and written
at the end, on the training thread, so the count holds every instruction a step costs (the
source's hooks, the probes' callbacks, the writer's work on its record) and nothing else.
The per-thread split is printed as well.

Needs valgrind; each child takes 2-3 minutes (two run at once). Instructions are not time (in
a real loop a step's Python code runs colder than the count suggests: the wall-clock cost is
2-3x the count's share), but fewer instructions for the same work is what a change to the hot
path must show. Prints a table and one JSON line.

    python benchmarks/overhead_instructions.py [--steps 2000] [--framework paddle]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Tuple

REPO = Path(__file__).resolve().parents[1]
HEAD = 1100  # steps run before the counted ones: past the writer's HEAD_STEPS in full
NEVER = 1e9  # the samplers' and the writer's interval: their work per second is left out


def child(mode: str, steps: int, framework: str = "torch"):
    """The loop itself (run under callgrind by main)."""
    sys.path.insert(0, str(REPO))
    if framework == "paddle":
        return paddle_child(mode, steps)
    import torch
    torch.set_num_threads(1)
    data = torch.utils.data.TensorDataset(torch.randn(steps + HEAD + 1, 1),
                                          torch.zeros(steps + HEAD + 1))
    loader = torch.utils.data.DataLoader(data, batch_size=1)
    weight = torch.nn.Parameter(torch.zeros(1))
    weight.grad = torch.zeros(1)
    optimizer = torch.optim.SGD([weight], lr=0.0)
    with tempfile.TemporaryDirectory() as directory:
        with (profiled(Path(directory) / "p.jsonl") if mode == "profiled" else nullcontext()):
            batches = iter(loader)
            for _ in range(steps + HEAD):
                next(batches)
                optimizer.step()


def paddle_child(mode: str, steps: int):
    """The same loop in Paddle 3's dynamic graph (its DataLoader's buffer thread included)."""
    import paddle
    paddle.set_device("cpu")
    data = paddle.io.TensorDataset([paddle.randn([steps + HEAD + 1, 1]),
                                    paddle.zeros([steps + HEAD + 1])])
    loader = paddle.io.DataLoader(data, batch_size=1)
    weight = paddle.create_parameter([1], "float32")
    optimizer = paddle.optimizer.SGD(0.0, parameters=[weight])
    with tempfile.TemporaryDirectory() as directory:
        with (profiled(Path(directory) / "p.jsonl", "paddle") if mode == "profiled"
              else nullcontext()):
            batches = iter(loader)
            for _ in range(steps + HEAD):
                next(batches)
                optimizer.step()


@contextmanager
def profiled(path: Path, framework: str = "torch"):
    from paddletune.probes.base import Clock
    from paddletune.profile import ProfileWriter, header_record, windows
    # a long job's windows of steps close on the clock too (one a second at the start): under
    # valgrind a window holds some 50x fewer steps, so its closing would count 50x too much
    # per step; the windows last past the run (the steps are still folded 256 at a time)
    windows.WINDOW_MIN_S = windows.WINDOW_MAX_S = NEVER
    from paddletune.session import session_probes
    from paddletune.sources import source_for
    from overhead_common import count_steps
    clock = Clock()
    writer = ProfileWriter(path, clock=clock.now, flush_interval_s=NEVER)
    source = source_for(framework)
    source.begin()
    writer.submit(header_record({"argv": ["overhead_instructions"]}, {}, {}, time.time(),
                                source.info()))
    probes = session_probes(writer.submit, clock, source, NEVER)
    for p in probes:
        p.start()
    counter = count_steps(source, writer)
    try:
        with source.running():
            yield
    finally:
        counter.close()
        for p in probes:
            p.stop()
        writer.finish()


def count(mode: str, steps: int, framework: str = "torch") -> Tuple[int, int]:
    """Instructions of a child process running `steps` counted steps (after HEAD): (the
    training thread's, every other thread's)."""
    with tempfile.TemporaryDirectory() as directory:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             f"--callgrind-out-file={directory}/cg.out", sys.executable, __file__, "--child",
             mode, str(steps), framework],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                 "GLOG_minloglevel": "2"},
            cwd=str(REPO), timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"the {mode} child of {steps} steps failed:\n{out.stderr[-2000:]}")
        per_thread = {}
        for path in Path(directory).glob("cg.out-*"):
            totals = re.search(r"^(?:totals|summary):\s*(\d+)", path.read_text(), re.M)
            per_thread[int(path.name.rsplit("-", 1)[1])] = int(totals.group(1)) if totals else 0
    if 1 not in per_thread:
        raise SystemExit(f"callgrind wrote no count for the {mode} child's main thread")
    return per_thread[1], sum(per_thread.values()) - per_thread[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000,
                        help="the long run's extra steps over the short run's")
    parser.add_argument("--framework", choices=("torch", "paddle"), default="torch")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "STEPS", "FRAMEWORK"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2])
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    runs = [(mode, n) for mode in ("bare", "profiled") for n in (100, 100 + args.steps)]
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count(*run, args.framework), runs)))
    per_step = {mode: [(counts[(mode, 100 + args.steps)][i] - counts[(mode, 100)][i])
                       / args.steps for i in (0, 1)] for mode in ("bare", "profiled")}
    cost = [p - b for p, b in zip(per_step["profiled"], per_step["bare"])]
    print(f"instructions per step ({args.framework}; callgrind; {args.steps} steps; "
          f"{time.perf_counter() - started:.0f} s)")
    print(f"{'':<10}{'all threads':>14}{'training thread':>18}{'other threads':>16}")
    for mode, (main_n, other_n) in per_step.items():
        print(f"{mode:<10}{main_n + other_n:>14,.0f}{main_n:>18,.0f}{other_n:>16,.0f}")
    bare = sum(per_step["bare"])
    print(f"{'cost':<10}{sum(cost):>14,.0f}{cost[0]:>18,.0f}{cost[1]:>16,.0f}  "
          f"({sum(cost) / bare:.0%} of the bare step's)")
    print(json.dumps({"bench": "overhead_instructions", "framework": args.framework,
                      "steps": args.steps,
                      "bare_per_step": round(bare),
                      "profiled_per_step": round(sum(per_step["profiled"])),
                      "cost_per_step": round(sum(cost)), "main_cost_per_step": round(cost[0]),
                      "other_cost_per_step": round(cost[1])}))


if __name__ == "__main__":
    main()
