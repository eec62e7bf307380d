"""What a PyTorch profile does not cover, recorded as the script runs: torch.compile (the
compiled target, its backend, and --check-nan splitting its graph) and torch.distributed
(DistributedDataParallel on the gloo backend, world size 1). In-process against the source,
and end to end through the CLI in real subprocesses (conftest's `procs` reaps them)."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from paddletune import profile as prof  # noqa: E402
from paddletune.profile.records import CompiledEvent, DistributedEvent  # noqa: E402
from paddletune.sources.torch.source import TorchSource  # noqa: E402
from test_torch_e2e import ENV, REPO, records  # noqa: E402

COMPILED = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
for x, y in torch.utils.data.DataLoader(data, batch_size=16):
    loss = nn.functional.mse_loss(compiled(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

DDP = """
import sys
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(),
                                                          nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
for x, y in torch.utils.data.DataLoader(data, batch_size=16):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
"""


def cli(procs, *args, timeout=240):
    return procs.run([sys.executable, "-m", "paddletune", *map(str, args)], timeout,
                     cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)


def advise_json(procs, path) -> dict:
    result = cli(procs, "advise", "--json", path)
    assert result.returncode == 0, result.stderr
    return {a["id"]: a for a in json.loads(result.stdout)}


def profiled(procs, tmp_path, text, *options, args=()):
    script = tmp_path / "train.py"
    script.write_text(text)
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", *options, "--out", out, script, *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(records(out, "step")) == 16
    return out


# --- in process ----------------------------------------------------------------------------------
def _scope_events(check_nan=False, ops=False):
    source = TorchSource()
    source.begin()
    got = []
    source.subscribe("scope", got.append)
    if ops:
        source.subscribe("op_end", lambda e: None)
    original = torch.compile
    with source.running(check_nan=check_nan):
        model = nn.Linear(4, 1)
        torch.compile(model, backend="eager")
        torch.compile(model, backend="eager")  # the same target again: recorded once

        @torch.compile(backend="eager", mode="reduce-overhead")
        def step(x):
            return x + 1
        torch.compile(model, disable=True)  # compiles nothing: not recorded
    assert torch.compile is original
    return got


def test_each_compiled_target_is_recorded_once_and_the_patch_is_undone():
    got = _scope_events()
    assert [type(e) for e in got] == [CompiledEvent, CompiledEvent]
    assert (got[0].target, got[0].backend, got[0].hidden) == ("Linear", "eager", ())
    assert (got[1].target, got[1].mode) == ("_scope_events.<locals>.step", "reduce-overhead")


def test_check_nan_is_named_as_splitting_the_graph_and_ops_is_not():
    got = _scope_events(check_nan=True, ops=True)
    assert got[0].hidden == ("check_nan",)  # (--ops reads torch.profiler: no module hooks)
    assert "--check-nan put a hook on every module" in got[0].message
    assert "--ops" not in got[0].message
    assert _scope_events(ops=True)[0].hidden == ()


# --- end to end ------------------------------------------------------------------------------------
def test_compiled_model_is_profiled_and_recorded(procs, tmp_path):
    out = profiled(procs, tmp_path, COMPILED)
    compiled = prof.load(out).events_of("compiled")
    assert len(compiled) == 1, compiled
    assert (compiled[0].target, compiled[0].backend, compiled[0].hidden) == (
        "Sequential", "eager", ())
    report = cli(procs, "report", out)
    assert report.returncode == 0, report.stderr
    assert "What this profile covers:" in report.stdout
    assert "torch.compile(Sequential, backend='eager')" in report.stdout
    assert "compiled-graph-split" not in advise_json(procs, out)  # nothing hid the graph


def test_compiled_model_with_check_nan_gets_an_info_card(procs, tmp_path):
    out = profiled(procs, tmp_path, COMPILED, "--check-nan")
    assert [e.hidden for e in prof.load(out).events_of("compiled")] == [("check_nan",)]
    card = advise_json(procs, out)["compiled-graph-split"]
    assert card["severity"] == "info" and card["source"] == 25
    assert "--check-nan" in card["evidence"] and "Sequential" in card["title"]
    assert "paddletune profile" in card["change"] and "--check-nan" not in card[
        "change"].split("\n")[-1]


def test_compiled_model_with_ops_keeps_its_graph_and_its_ops_are_timed(procs, tmp_path):
    out = profiled(procs, tmp_path, COMPILED, "--ops")
    assert [e.hidden for e in prof.load(out).events_of("compiled")] == [()]
    assert "compiled-graph-split" not in advise_json(procs, out)
    types = {op[1] for rec in records(out, "ops") for op in rec["ops"]}
    assert "SGD.step" in types, types  # (16 steps: a window over 10-15, closed at the end)


def test_ddp_on_gloo_is_profiled_as_rank_0_of_1(procs, tmp_path):
    out = profiled(procs, tmp_path, DDP, args=[tmp_path / "rendezvous"])
    events = prof.load(out).events_of("distributed")
    assert [e.call for e in events] == ["init_process_group", "DistributedDataParallel"]
    for e in events:
        assert (e.backend, e.rank, e.world_size) == ("gloo", 0, 1), e
    assert events[1].module == "Sequential"
    report = cli(procs, "report", out)
    assert report.returncode == 0, report.stderr
    assert "rank 0 of 1: the profile covers the whole job" in report.stdout
    card = advise_json(procs, out)["distributed-rank"]
    assert card["severity"] == "info"
    assert card["figures"]["world_size"] == 1 and card["figures"]["backend"] == "gloo"
    assert "all-reduce" in card["evidence"]


def test_distributed_card_names_the_rank_of_many(tmp_path):
    """A rank of 4 (a profile written by hand: one machine runs one rank here)."""
    from paddletune.advisors import advise
    from profiles import make_profile
    extra = [DistributedEvent(0.1, "DistributedDataParallel", "nccl", 2, 4, "ResNet")]
    p = prof.load(make_profile(tmp_path / "p.jsonl", extra=extra))
    card = next(a for a in advise(p) if a.id == "distributed-rank")
    assert "rank 2 of 4" in card.title
    assert "other ranks" in card.evidence and "--out rank2.jsonl" in card.change
