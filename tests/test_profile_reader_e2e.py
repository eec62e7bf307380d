"""End to end in real subprocesses: a training script whose thread-producer DataLoader is slower
than its step gets the Reader section, the starved-reader advice with a worker count, and
with --speed-test a ceiling above the actual throughput."""

import json
import os
import subprocess
import sys
import textwrap

TIMEOUT_S = 120
SCRIPT = '''
import time
import numpy as np
import runtime as fluid

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 8])
    y = fluid.data("y", [None, 1])
    loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
    fluid.optimizer.SGD(0.01).minimize(loss)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4)

def reader():  # 20 ms per batch: far slower than the step, even on a loaded machine
    while True:
        time.sleep(0.020)
        x = np.ones((16, 8), "float32")
        yield [x, x[:, :1]]

loader.set_batch_generator(reader)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
for data in loader():
    exe.run(main, feed=data, fetch_list=[loss])
'''


def paddletune(tmp_path, *argv, env=None):
    done = subprocess.run([sys.executable, "-m", "paddletune", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_starved_reader_end_to_end(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    run = paddletune(tmp_path, "profile", "--steps", "60", "--interval", "0.1", "-o",
                     "p.jsonl", "train.py")
    assert "Reader: DataLoader#0 · thread producer · capacity 4" in run.stderr
    assert "found the queue empty" in run.stderr
    advice = json.loads(paddletune(tmp_path, "advise", "--json", "p.jsonl").stdout)
    starved = [a for a in advice if a["id"] == "reader-starved"]
    assert len(starved) == 1 and starved[0]["severity"] in ("high", "medium")
    f = starved[0]["figures"]
    assert f["workers_needed"] >= 2 and isinstance(f["workers"], int) and f["workers"] >= 1
    assert f["producer_s_per_step"] > f["consumer_s_per_step"]
    assert "input-bound" not in [a["id"] for a in advice]  # #1 defers to the reader rules

    speed = paddletune(tmp_path, "profile", "--steps", "90", "--speed-test",
                       "--speed-test-steps", "15", "--interval", "0.1", "--json", "-o",
                       "s.jsonl", "train.py", env={"OPENBLAS_NUM_THREADS": "2"})
    st = json.loads(speed.stdout)["speed_test"]
    assert st["has_loader"] and st["complete"]
    assert st["ceiling"]["steps_per_s"] > st["baseline"]["steps_per_s"]
    assert st["ratio"] > 1.1 and 0 < st["data_share"] < 1
    # then the reader thread was timed alone: 8 batches of its 20 ms sleep
    [alone] = st["producers_alone"]
    assert alone["batches"] == 8 and 0.019 < alone["s_per_batch"] < 0.2
    phases = [json.loads(line).get("phase") for line in
              (tmp_path / "s.jsonl").read_text().splitlines()
              if '"kind":"speed_test"' in line]
    # (baseline: the default phase); then the ceiling again with 1 of its 2 BLAS threads
    assert phases == [None, "ceiling", "solo", "one_thread", "done"]
    assert st["one_thread"]["steps"] == 15


COPY_ON_READ = '''
import time
import numpy as np
import runtime as fluid

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 1])
    total = fluid.layers.reduce_sum(x)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, num_workers=4)

dataset = [float(i) for i in range(3 * 10 ** 6)]  # Python objects: read = written (refcounts)

def reader():
    info = fluid.io.get_worker_info()
    for i in range(info.id, 8, info.num_workers):
        s = 0.0
        for value in dataset:
            s += value
        time.sleep(0.3)
        yield [np.full((1, 1), s, "float32")]

loader.set_batch_generator(reader)
exe = fluid.Executor(fluid.CPUPlace())
for data in loader():
    exe.run(main, feed=data, fetch_list=[total])
'''


def test_copy_on_read_in_four_workers_is_measured_and_advised(tmp_path):
    """docs/reliability.md #13: a Python list read by 4 forked workers; each worker's USS growth
    is measured, the report shows it and the advice names the fix."""
    (tmp_path / "train.py").write_text(textwrap.dedent(COPY_ON_READ))
    run = paddletune(tmp_path, "profile", "--interval", "0.1", "-o", "p.jsonl", "train.py")
    assert "worker memory   private memory (USS) grew" in run.stderr
    advice = json.loads(paddletune(tmp_path, "advise", "--json", "p.jsonl").stdout)
    found = [a for a in advice if a["id"] == "worker-copy-on-read"]
    assert len(found) == 1 and found[0]["figures"]["workers"] == 4
    assert found[0]["figures"]["uss_growth_bytes_mean"] > 64 * 2 ** 20  # ~70 MiB of floats
