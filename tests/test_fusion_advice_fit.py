"""#9 unfused softmax + cross_entropy: the change fits the script it is about.

Fluid heads are built in-process with the embedded runtime and recorded exactly as the step
probe records them (describe_ops); eager jobs are given the op records the PyTorch source's
--ops module timing writes (one per step, leaf-module classes in the order they ran)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from profiles import make_profile, ops_records, source_info, step_records

import runtime as fluid
from paddletune.advisors import fusion
from paddletune.advisors.base import advise
from paddletune.probes.step import describe_ops
from paddletune.profile import load
from paddletune.profile.records import MemoryTrace, MemoryTraceOp, Program
from paddletune.sources.paddle.code import PaddleCode

REPO = Path(__file__).resolve().parents[1]
RULE = [fusion.unfused_softmax_cross_entropy]


# --- builders ------------------------------------------------------------------------------
def fluid_head(head, accuracy=False):
    """A classifier's main program: img -> fc(relu) -> `head` (returns the probabilities)
    -> cross_entropy -> mean, SGD; accuracy on the probabilities when `accuracy`."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        img = fluid.data(name="img", shape=[None, 16], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        hidden = fluid.layers.fc(input=img, size=32, act="relu")
        probs = head(hidden)
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=probs, label=label))
        if accuracy:
            fluid.layers.accuracy(input=probs, label=label)
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main


def fc_softmax(hidden):
    return fluid.layers.fc(input=hidden, size=10, act="softmax")


def advice_for(tmp_path, main, extra=()):
    program = Program(t_s=0.05, program=1, ops=describe_ops(main))
    path = make_profile(tmp_path / "p.jsonl", extra=[program, *extra])
    found = advise(load(path), RULE)
    assert [a.id for a in found] == ["unfused-softmax-cross-entropy"]
    compile(found[0].change, "change", "exec")  # every line is Python (comments included)
    return found[0]


def memory_trace(probs_bytes, loss_bytes):
    """The main program's trace with the softmax output and the per-example loss sizes."""
    return MemoryTrace(t_s=0.2, program=1, step=1, gc=True, inplace=False, batch_size=8, ops=(
        MemoryTraceOp(index=5, type="softmax", before=0, peak=0, after=0,
                      outputs={"fc_1.tmp_2": probs_bytes}),
        MemoryTraceOp(index=6, type="cross_entropy2", before=0, peak=0, after=0,
                      outputs={"cross_entropy_0.tmp_0": loss_bytes})))


# --- Fluid: the softmax is the fc's act='softmax' ------------------------------------------
def test_fc_softmax_head_says_drop_act_and_names_the_fc(tmp_path):
    a = advice_for(tmp_path, fluid_head(fc_softmax))
    assert "softmax('fc_1.tmp_1') -> 'fc_1.tmp_2' -> cross_entropy(label='label')" in a.evidence
    assert "the act='softmax' of the fc Paddle names 'fc_1'" in a.change
    assert "drop act='softmax' from that fc call and keep its output as logits" in a.change
    assert a.change.splitlines()[-3:] == [
        "logits = fluid.layers.fc(..., act=None)  # your fc call, without act='softmax'",
        "cost = fluid.layers.softmax_with_cross_entropy(",
        "    logits=logits, label=label)"]
    assert a.figures["pairs"][0]["activation_of"] == "fc_1"


def test_fc_size_comes_from_the_memory_trace(tmp_path):
    a = advice_for(tmp_path, fluid_head(fc_softmax), extra=[memory_trace(8 * 10 * 4, 8 * 4)])
    assert "logits = fluid.layers.fc(..., size=10, act=None)" in a.change
    assert a.figures["pairs"][0]["classes"] == 10


def test_fc_size_left_out_when_the_trace_cannot_tell(tmp_path):
    inplace = advice_for(tmp_path, fluid_head(fc_softmax), extra=[memory_trace(0, 8 * 4)])
    assert "logits = fluid.layers.fc(..., act=None)" in inplace.change
    uneven = advice_for(tmp_path, fluid_head(fc_softmax), extra=[memory_trace(330, 8 * 4)])
    assert "size=" not in uneven.change


def test_accuracy_on_the_fc_softmax_keeps_the_softmax(tmp_path):
    a = advice_for(tmp_path, fluid_head(fc_softmax, accuracy=True))
    assert ("# prediction replaces 'fc_1.tmp_2' in accuracy: pass it where the script passes "
            "the fc's output now") in a.change
    assert a.change.splitlines()[-2:] == [
        "cost, prediction = fluid.layers.softmax_with_cross_entropy(",
        "    logits=logits, label=label, return_softmax=True)"]


# --- Fluid: a standalone fluid.layers.softmax ----------------------------------------------
@pytest.mark.filterwarnings("ignore:minimize")  # the loss reads no parameter: nothing to train
def test_standalone_softmax_of_a_named_variable_uses_that_name(tmp_path):
    def head(hidden):
        scores = fluid.data(name="scores", shape=[None, 10], dtype="float32")
        return fluid.layers.softmax(scores)
    a = advice_for(tmp_path, fluid_head(head))
    assert "act='softmax'" not in a.change and "logits =" not in a.change
    assert "pass scores, the softmax's input" in a.change
    assert a.change.splitlines()[-1] == "    logits=scores, label=label)"


def test_standalone_softmax_of_an_unnamed_value_says_which_value_in_words(tmp_path):
    def head(hidden):
        return fluid.layers.softmax(fluid.layers.fc(input=hidden, size=10))
    a = advice_for(tmp_path, fluid_head(head, accuracy=True))
    assert "act='softmax'" not in a.change and "logits =" not in a.change
    assert ("# logits below: the value you now pass to the softmax (Paddle's 'fc_1.tmp_1', "
            "the output of layer 'fc_1')") in a.change
    assert "prediction replaces 'softmax_0.tmp_0' in accuracy" in a.change
    assert a.change.splitlines()[-1] == "    logits=logits, label=label, return_softmax=True)"


# --- eager jobs: module timings (--ops) ----------------------------------------------------
def eager_profile(tmp_path, modules, framework="torch", steps=10):
    extra = ops_records(range(steps), [(m, 0.001) for m in modules], program=0)
    path = make_profile(tmp_path / f"{framework}.jsonl", options={"ops": True},
                        steps=step_records(n_steps=steps, program=0), extra=extra,
                        source=source_info(framework))
    return load(path)


def test_torch_softmax_module_before_cross_entropy_loss_is_a_double_softmax(tmp_path):
    profile = eager_profile(tmp_path, ["Linear", "ReLU", "Linear", "Softmax",
                                       "CrossEntropyLoss"])
    [a] = advise(profile, RULE)
    compile(a.change, "change", "exec")
    assert (a.id, a.severity, a.confidence) == ("unfused-softmax-cross-entropy", "high",
                                                "medium")
    assert "a Softmax module ran right before the CrossEntropyLoss module in 10 of 10" \
        in a.evidence
    assert "CrossEntropyLoss, which takes raw scores, applies a second softmax" in a.evidence
    assert "criterion = torch.nn.CrossEntropyLoss()  # applies log_softmax itself" in a.change
    assert "fluid" not in a.change
    assert a.figures["module_pairs"] == [{"module": "Softmax", "loss": "CrossEntropyLoss",
                                          "steps": 10}]


def test_torch_softmax_module_before_nll_loss(tmp_path):
    [a] = advise(eager_profile(tmp_path, ["Linear", "Softmax", "NLLLoss"]), RULE)
    assert a.severity == "medium" and "-p[label]" in a.evidence
    assert "torch.nn.CrossEntropyLoss()  # applies log_softmax itself, instead of " \
           "torch.nn.NLLLoss()" in a.change


@pytest.mark.parametrize("modules", [
    ["Linear", "LogSoftmax", "NLLLoss"],  # CrossEntropyLoss is exactly this: nothing to gain
    ["Linear", "CrossEntropyLoss"],  # already on the logits
    ["Linear", "Softmax", "Linear", "CrossEntropyLoss"],  # the softmax does not feed the loss
])
def test_torch_without_the_pattern_is_silent(tmp_path, modules):
    assert advise(eager_profile(tmp_path, modules), RULE) == []


def census_profile(tmp_path, pairs, framework="paddle"):
    """A profile without op timings whose model census saw `pairs` back to back."""
    census = {"type": "event", "kind": "model", "t": 0.2, "modules": {"Linear": 1},
              "params": {"float32": 100}, "pairs": pairs}
    path = make_profile(tmp_path / f"{framework}-census.jsonl", extra=[census],
                        steps=step_records(n_steps=10, program=0),
                        source=source_info(framework))
    return load(path)


def test_the_census_pairs_find_the_double_softmax_without_op_timings(tmp_path):
    profile = census_profile(tmp_path, {"Linear>Softmax": 1, "Softmax>CrossEntropyLoss": 1})
    [a] = advise(profile, RULE)
    assert (a.severity, a.confidence) == ("high", "medium")
    assert ("a Softmax module ran right before the CrossEntropyLoss module in the first "
            "training step") in a.evidence
    assert "The model's census (its leaf calls in order) name what ran" in a.evidence
    assert "criterion = paddle.nn.CrossEntropyLoss()" in a.change
    # paddle's CrossEntropyLoss(use_softmax=False) takes the probabilities: nothing to say
    quiet = census_profile(tmp_path, {"Softmax>CrossEntropyLoss(use_softmax=False)": 1})
    assert advise(quiet, RULE) == []


def test_paddle_writer_gives_the_loss_the_logits():
    change = PaddleCode().loss_on_logits("Softmax", "NLLLoss")
    compile(change, "change", "exec")
    assert "criterion = paddle.nn.CrossEntropyLoss()" in change
    assert "instead of paddle.nn.NLLLoss()" in change


# --- end to end: examples/word2vec.py (fc(act='softmax') + cross_entropy + accuracy) --------
def test_word2vec_profile_advises_dropping_the_fc_softmax(tmp_path):
    out = tmp_path / "w2v.jsonl"
    run = [sys.executable, "-m", "paddletune"]
    subprocess.run([*run, "profile", "-o", str(out), "examples/word2vec.py", "--",
                    "--steps", "12"], cwd=REPO, check=True, capture_output=True, timeout=120)
    advised = subprocess.run([*run, "advise", "--json", str(out)], cwd=REPO, check=True,
                             capture_output=True, text=True, timeout=60)
    [a] = [a for a in json.loads(advised.stdout) if a["id"] == "unfused-softmax-cross-entropy"]
    assert "drop act='softmax' from that fc call" in a["change"]
    assert "logits = fluid.layers.fc(..., size=1000, act=None)" in a["change"]
    assert "prediction replaces 'fc_0.tmp_2' in accuracy" in a["change"]
    assert "logits=logits, label=target, return_softmax=True)" in a["change"]
