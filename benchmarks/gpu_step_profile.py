"""Where a captured GPU step's time goes: the runtime's reference MLP (bench_runtime.py's) on
CUDAPlace(0) with its step captured into a CUDA graph, against PyTorch's step captured with
torch.cuda.graphs. For each: the wall time of a step as the benchmark runs it (feed, replay,
the loss read back), the device's time for one replay of the graph alone (CUDA events around
back-to-back launches), and so the host's share; then cProfile's top functions of the runtime's
steps. Needs CuPy, a GPU and PyTorch with CUDA.

    python benchmarks/gpu_step_profile.py [--steps 400] [--top 25]
"""

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_runtime as bench  # noqa: E402


def per_step_us(model, xs, ys, steps):
    bench.time_steps(model, xs, ys, 20)
    return bench.time_steps(model, xs, ys, steps) / steps * 1e6


def runtime_replay_us(cupy, model, steps):
    graphs = model.exe._graphs.captured()
    assert len(graphs) == 1, model.exe._graphs.reasons()
    graph = graphs[0].graph
    stream = cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    graph.launch(stream)
    start.record(stream)
    for _ in range(steps):
        graph.launch(stream)
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / steps


def torch_replay_us(torch, model, steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    model.graph.replay()
    start.record()
    for _ in range(steps):
        model.graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / steps


def profile_top(model, xs, ys, steps, top):
    profiler = cProfile.Profile()
    profiler.enable()
    bench.time_steps(model, xs, ys, steps)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    missing = bench.gpu_missing()
    if missing:
        print(f"gpu_step_profile.py cannot run: {missing}", file=sys.stderr)
        return 2
    from runtime.backend import cupy_status
    cupy, torch = cupy_status()[0], bench.torch
    xs, ys = bench.make_data(128, 8)
    runtime = bench.RuntimeCudaMLP(cupy)
    torch_graph = bench.TorchCudaGraphMLP()
    dev_x, dev_y = cupy.asarray(xs), cupy.asarray(ys)
    t_x, t_y = torch.as_tensor(xs, device="cuda"), torch.as_tensor(ys, device="cuda")
    report = {}
    for name, model, x, y, replay in (
            ("runtime", runtime, dev_x, dev_y, lambda: runtime_replay_us(cupy, runtime, 200)),
            ("torch_graph", torch_graph, t_x, t_y,
             lambda: torch_replay_us(torch, torch_graph, 200))):
        step = per_step_us(model, x, y, args.steps)
        device = replay()
        report[name] = {"step_us": round(step, 1), "replay_device_us": round(device, 1),
                        "host_us_beyond_replay": round(step - device, 1)}
        print(f"{name:12s} step {step:7.1f} us · one replay on the device {device:7.1f} us · "
              f"the rest {step - device:7.1f} us")
    t0 = time.perf_counter()
    print(profile_top(runtime, dev_x, dev_y, args.steps, args.top))
    print(f"(profiled {args.steps} runtime steps in {time.perf_counter() - t0:.2f} s)")
    print(json.dumps({"bench": "gpu_step_profile", "gpu": bench.gpu_name(cupy), **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
