"""`paddletune profile / report / advise` on real Paddle 3 scripts, end to end in real
subprocesses (`python -m paddletune`), each reaped whatever happens (conftest's `procs`)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("paddle")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "paddle"
ENV = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
       "GLOG_minloglevel": "2"}
ENV.pop("PADDLETUNE_OVERRIDES", None)


def cli(procs, *args, timeout=180, env=None):
    return procs.run([sys.executable, "-m", "paddletune", *map(str, args)], timeout,
                     cwd=REPO, env=env or ENV, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)


def records(path: Path, kind: str, what=None) -> list:
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("type") == kind
                and (what is None or what in (r.get("what"), r.get("kind")))]


def report_json(procs, path: Path) -> dict:
    result = cli(procs, "report", "--json", path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_hooks_overhead(out: Path):
    """The hooks' own time on the training thread, beside the probes' (PaddleHooks.own_s):
    some, and a small part of the loop's."""
    (hooks,) = [r for r in records(out, "probe") if r["name"] == "hooks"]
    loop_s = sum(r["wall_s"] + r.get("gap_s", 0.0) for r in records(out, "step"))
    assert hooks["in_step"] and 0.0 < hooks["overhead_s"] < 0.2 * loop_s, (hooks, loop_s)


def test_input_bound_paddle_job_is_advised_workers_in_paddle_code(procs, tmp_path):
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out, EXAMPLES / "input_heavy.py", "--steps", 60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert records(out, "header")[0]["source"]["framework"] == "paddle"
    assert len(records(out, "step")) == 60
    assert_hooks_overhead(out)
    summary = report_json(procs, out)
    assert summary["verdict"]["kind"] in ("highly-input-bound", "moderately-input-bound"), \
        summary["verdict"]
    advice = cli(procs, "advise", out)
    assert advice.returncode == 0, advice.stderr
    assert "paddle.io.DataLoader(" in advice.stdout, advice.stdout
    workers = [int(n) for n in re.findall(r"num_workers=(\d+)", advice.stdout)]
    assert workers and max(workers) >= 1, advice.stdout


FLOAT64_MLP = """
import numpy as np
import paddle

paddle.set_default_dtype("float64")  # the mistake: every layer built float64
paddle.seed(0)
model = paddle.nn.Sequential(paddle.nn.Linear(32, 64), paddle.nn.ReLU(), paddle.nn.Linear(64, 2))
optimizer = paddle.optimizer.SGD(0.05, parameters=model.parameters())
rng = np.random.RandomState(0)
x = paddle.to_tensor(rng.rand(64, 32))
y = paddle.to_tensor((rng.rand(64, 1) > 0.5).astype("int64"))
for step in range(60):
    loss = paddle.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
"""


def _profile_script(procs, tmp_path, text: str):
    """`paddletune profile` of a script made of `text`, which must succeed; its profile."""
    script, out = tmp_path / "job.py", tmp_path / "f.jsonl"
    script.write_text(text)
    result = cli(procs, "profile", "-q", "--out", out, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_a_float64_paddle_model_is_seen_by_the_census_and_advised_float32(procs, tmp_path):
    out = _profile_script(procs, tmp_path, FLOAT64_MLP)
    (census,) = records(out, "event", "model")
    assert census["modules"] == {"Linear": 2, "ReLU": 1}, census
    assert census["params"] == {"float64": 32 * 64 + 64 + 64 * 2 + 2}, census
    report = cli(procs, "report", out)
    assert report.returncode == 0, report.stderr
    assert ("Model (first training step): leaf layer calls in the first step: Linear x2, "
            "ReLU x1; parameters: 2,242 float64") in " ".join(report.stdout.split())
    advice = cli(procs, "advise", out)
    assert advice.returncode == 0, advice.stderr
    text = " ".join(advice.stdout.split())
    assert "100% of the model's parameters are float64" in text, text
    assert "paddle.set_default_dtype('float32')" in text, text


SETS_A_FLAG = """
import numpy as np
import paddle

paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 1.0})  # the script's own, before its loop
model = paddle.nn.Linear(4, 2)
optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
x = paddle.to_tensor(np.random.rand(8, 4).astype("float32"))
for _ in range(20):
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
"""


def test_a_flag_the_script_sets_is_the_one_the_profile_holds(procs, tmp_path):
    from paddletune.profile import load
    out = _profile_script(procs, tmp_path, SETS_A_FLAG)
    assert records(out, "header")[0]["env"]["flags"]["FLAGS_eager_delete_tensor_gb"] == 0.0
    (event,) = records(out, "event", "settings")  # (the header took them before the script)
    assert event["flags"] == {"FLAGS_eager_delete_tensor_gb": 1.0}, event
    assert load(out).env.flags["FLAGS_eager_delete_tensor_gb"] == 1.0
    assert load(out).source.terms.step == "a training step (optimizer.step)"  # (dynamic)
    report = cli(procs, "report", out)
    assert "the job set FLAGS_eager_delete_tensor_gb=1.0 (was 0.0) before its first training " \
        "step ended" in " ".join(report.stdout.split()), report.stdout


def test_static_graph_steps_are_executor_runs(procs, tmp_path):
    out = tmp_path / "s.jsonl"
    result = cli(procs, "profile", "--out", out, EXAMPLES / "static_graph.py", "--steps", 60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [r for r in records(out, "step") if not r.get("startup")]
    assert len(steps) == 60
    assert_hooks_overhead(out)
    summary = report_json(procs, out)
    assert summary["n_steps"] == 60
    assert summary["steady_steps"] > 0
    (census,) = records(out, "event", "model")  # (the training program's)
    assert census["modules"]["matmul"] == 2 and set(census["params"]) == {"float32"}, census
    assert census["graph"] == "static", census
    from paddletune.profile import load  # the report names its steps by the static graph's
    assert load(out).source.terms.step == "a training step (Executor.run of the static graph)"


def test_overrides_change_a_paddle_dataloader(procs, tmp_path):
    out = tmp_path / "o.jsonl"
    env = {**ENV, "PADDLETUNE_OVERRIDES": json.dumps({"reader": {"num_workers": 1}})}
    result = cli(procs, "profile", "--out", out, EXAMPLES / "cnn.py", "--steps", 20, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    applied = records(out, "event", "overrides")[0]["applied"]
    assert [(a["key"], a["value"]) for a in applied] == [("num_workers", 1)]
    starts = records(out, "reader", "start")
    assert starts and starts[0]["config"]["num_workers"] == 1
    assert len(starts[0]["config"]["worker_pids"]) == 1


@pytest.mark.parametrize("version, note", [
    ("2.4.2", ""), ("1.8.5", " (PaddlePaddle 1.x scripts run on the fluid source)"),
    ("4.0.0", "")])
def test_an_unsupported_paddle_is_one_line_before_the_script_runs(procs, tmp_path, version,
                                                                  note):
    """A paddle outside 2.6-3.x (a fake package on PYTHONPATH that has only its version, as
    paddle 2.4 lacks the modules the hooks use): one line naming the supported range and
    the version found, exit status 2, no traceback, the script not run."""
    fake = tmp_path / "fake" / "paddle"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"__version__ = {version!r}\n")
    script = tmp_path / "train.py"
    script.write_text('import paddle\nprint("the script ran")\n')
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO)])}
    result = cli(procs, "profile", "--out", tmp_path / "p.jsonl", script, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"paddletune: paddle: paddletune supports PaddlePaddle 2.6 to 3.x; found "
        f"{version}{note}"], result.stderr
    assert "the script ran" not in result.stdout
