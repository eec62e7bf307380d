"""`paddletune tune` and a PyTorch script that sets its own CPU threads
(torch.set_num_threads before its loop): the space starts from the script's count, not from
the one the header read before the script ran, and tunes it through the threads.intra_op
override (which the script's own later call does not undo); an OMP_NUM_THREADS trial of such
a job ran the job's own setting again, and is recorded as "no effect", not as a setting."""

import json

from paddletune.profile import figures as F
from paddletune.profile import records as R
from paddletune.profile.load import with_settings
from paddletune.profile.model import Profile
from paddletune.tune import space as sp
from paddletune.tune import trials
from paddletune.tune.search import TuneOptions, Tuner
from paddletune.tune.trials import IdleOverride, Trial

THREADS = "torch.get_num_threads"


def torch_profile(started=2, script_sets=None, cores=2):
    """A PyTorch job's profile as load() gives it: the header read `started` threads before
    the script ran; `script_sets`: the count the script set before its first step ended (a
    settings event, which load() puts in env.flags), None: it set none."""
    knobs = (R.Knob("threads.intra_op", "torch.get_num_threads()", started,
                    "torch.set_num_threads({value})"),)
    source = R.SourceInfo(framework="torch", version="PyTorch 2.13", knobs=knobs)
    env = R.Env(cpu=R.CpuInfo(usable_cores=cores), numpy=R.NumpyInfo(blas="OpenBLAS 0.3",
                                                                     blas_threads=2),
                flags={THREADS: started, "torch.get_num_interop_threads": 2})
    events = () if script_sets is None else (
        R.SettingsEvent(t_s=1.0, flags={THREADS: script_sets},
                        message=f"the job set {THREADS}={script_sets} (was {started})"),)
    header = with_settings(R.Header(schema=2, env=env, source=source), events)
    return Profile(path="trial.jsonl", header=header, summary=F.Summary(), events=events)


def test_the_threads_knob_starts_from_the_count_the_script_set():
    """The header read 2 threads; the script set 1 before its first step: the job's own
    value is 1, and the other count is imposed through threads.intra_op."""
    space = sp.build_space(torch_profile(started=2, script_sets=1))
    knob = space.knobs["blas_threads"]
    assert knob.current == 1
    assert (knob.section, knob.key) == ("threads", "intra_op")
    assert knob.alternatives() == [2]
    env = sp.to_env({"blas_threads": 2}, space)
    assert "OMP_NUM_THREADS" not in env
    assert json.loads(env["PADDLETUNE_OVERRIDES"]) == {"threads": {"intra_op": 2}}
    lines = sp.code_lines({"blas_threads": 2}, space)
    assert lines[0].startswith("torch.set_num_threads(2)")
    assert "torch.set_num_threads(1)" in lines[0]  # (in place of the script's own)
    compile(lines[0], "code_lines", "exec")
    assert sp.build_space(torch_profile(script_sets=1), specs=("-env",)).knobs.get(
        "blas_threads") is None


def test_a_script_that_leaves_its_threads_alone_is_tuned_through_omp_num_threads():
    space = sp.build_space(torch_profile(started=2, script_sets=None))
    knob = space.knobs["blas_threads"]
    assert (knob.current, knob.section, knob.key) == (2, "env", "OMP_NUM_THREADS")
    assert sp.to_env({"blas_threads": 1}, space) == {"OMP_NUM_THREADS": "1"}


def test_omp_num_threads_the_script_undoes_is_no_effect():
    """A trial with OMP_NUM_THREADS=2 whose script set 1 itself ran 1 thread: the job's own
    setting, "same-value", not a setting of its own."""
    trial = Trial(1, {"OMP_NUM_THREADS": 2}, "OMP_NUM_THREADS=2", "knob:OMP_NUM_THREADS", 20)
    trials._env_threads(trial, torch_profile(started=2, script_sets=1),
                        {"OMP_NUM_THREADS": "2"})
    assert [(i.section, i.key, i.code) for i in trial.no_effect] == [
        ("env", "OMP_NUM_THREADS", "same-value")]
    assert "torch.set_num_threads(1)" in trial.no_effect_text
    kept = Trial(2, {"OMP_NUM_THREADS": 1}, "OMP_NUM_THREADS=1", "knob:OMP_NUM_THREADS", 20)
    trials._env_threads(kept, torch_profile(started=1, script_sets=None),
                        {"OMP_NUM_THREADS": "1"})
    assert kept.no_effect == []


def test_a_variable_the_script_undoes_leaves_the_search_with_all_its_values():
    tuner = Tuner(None, TuneOptions())
    tuner.space = sp.build_space(torch_profile(started=2, script_sets=None),
                                 specs=("OMP_NUM_THREADS=1,2,4",))
    tuner._kill([IdleOverride("env", "OMP_NUM_THREADS", "same-value", "the script's own")])
    assert tuner._dead({"OMP_NUM_THREADS": 4})
    assert not tuner._dead({"num_workers": 1})


JOB = """
import torch
from torch import nn

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        return torch.zeros(4), torch.get_num_threads()

torch.set_num_threads(1)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
seen = set()
for x, threads in torch.utils.data.DataLoader(Data(), batch_size=16, num_workers=1):
    seen.update(threads.tolist())
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("main", torch.get_num_threads(), "workers", sorted(seen))
"""


def test_the_threads_override_holds_against_the_script_but_not_in_its_workers(procs, tmp_path):
    """threads.intra_op=2 over a script's torch.set_num_threads(1): the training process
    runs 2 threads; its DataLoader workers keep the one thread torch's worker loop sets (the
    override's wrapper of torch.set_num_threads, inherited by the forked worker, swallowed
    that call: every worker ran the override's count)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest
    pytest.importorskip("torch")
    repo = Path(__file__).resolve().parents[1]
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1",
           "PADDLETUNE_OVERRIDES": json.dumps({"threads": {"intra_op": 2}})}
    result = procs.run([sys.executable, "-m", "paddletune", "profile", "-q", "--out",
                        str(tmp_path / "p.jsonl"), str(script)], 180, cwd=repo, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 0, result.stderr
    assert "main 2 workers [1]" in result.stdout, result.stdout
