"""The advice view: exact text at width 100, the no-problems line, and the JSON array."""

import json

from profiles import make_profile, step_records
from rich.console import Console

from paddletune.advisors import Advice, advise
from paddletune.profile import load
from paddletune.render.advice import advice_json, headline, render_advice

INPUT = Advice(
    id="input-bound", title="Input-bound: 37% of each step waits for data", severity="high",
    evidence=("36.7% of each 15.00 ms step waits for input: 5.00 ms outside the runtime + "
              "0.50 ms feeding; 39 steady steps."),
    change=("loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8, "
            "iterable=True)\nloader.set_batch_generator(reader, places=fluid.CPUPlace())"),
    expected_gain="up to 1.58x steps/s (15.00 ms -> 9.50 ms per step)", expected_speedup=1.58,
    confidence="high", source=1, figures={"input_share": 0.367})
FUSION = Advice(
    id="unfused-softmax-cross-entropy", title="Use the fused softmax_with_cross_entropy",
    severity="low",
    evidence=("1 softmax op(s) feed cross_entropy: softmax('fc_0.tmp_1') -> 'fc_0.tmp_2' -> "
              "cross_entropy(label='label'); softmax, cross_entropy and their gradients take "
              "1.2% of the measured op time."),
    change=("# replaces softmax('fc_0.tmp_1') + cross_entropy: pass the logits\n"
            "cost = fluid.layers.softmax_with_cross_entropy(\n    logits=logits, label=label)"),
    expected_gain="numerically stable loss", confidence="high", source=9)

EXPECTED = """\
2 pieces of advice (1 high, 1 low), most important first:
╭─  1.  HIGH  Input-bound: 37% of each step waits for data  ───────────────────────────────────────╮
│ Evidence: 36.7% of each 15.00 ms step waits for input: 5.00 ms outside the runtime + 0.50 ms     │
│ feeding; 39 steady steps.                                                                        │
│ Change:                                                                                          │
│   loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8, iterable=True) │
│   loader.set_batch_generator(reader, places=fluid.CPUPlace())                                    │
│ Expected gain: up to 1.58x steps/s (15.00 ms -> 9.50 ms per step)                                │
│ Confidence: high · see docs/advice.md#input-bound                                                │
╰──────────────────────────────────────────────────────────────────────────────────────────────────╯
╭─  2.  LOW  Use the fused softmax_with_cross_entropy  ────────────────────────────────────────────╮
│ Evidence: 1 softmax op(s) feed cross_entropy: softmax('fc_0.tmp_1') -> 'fc_0.tmp_2' ->           │
│ cross_entropy(label='label'); softmax, cross_entropy and their gradients take 1.2% of the        │
│ measured op time.                                                                                │
│ Change:                                                                                          │
│   # replaces softmax('fc_0.tmp_1') + cross_entropy: pass the logits                              │
│   cost = fluid.layers.softmax_with_cross_entropy(                                                │
│       logits=logits, label=label)                                                                │
│ Expected gain: numerically stable loss                                                           │
│ Confidence: high · see docs/advice.md#unfused-softmax-cross-entropy                              │
╰──────────────────────────────────────────────────────────────────────────────────────────────────╯
"""


def console():
    return Console(width=100, record=True, force_terminal=False, color_system=None)


def test_panels_exact_text_most_important_first():
    c = console()
    render_advice([FUSION, INPUT], c)
    assert c.export_text() == EXPECTED


def test_no_advice_is_one_line_naming_the_checks():
    c = console()
    render_advice([], c)
    assert c.export_text() == (
        "No problems found (checked: input wait (#1), reader queue and workers (#2, #5), "
        "no-data ceiling (#3), double buffer (#4), reader thread holding the GIL (#5), "
        "reader worker memory (#7), cuDNN-slow ops "
        "(#8), softmax + cross_entropy fusion (#9), BuildStrategy fusions (#10), "
        "ParallelExecutor threads (#11), scope drop cost (#12), underlying allocations (#13), "
        "cudaMalloc (#13, GPU), CUDA caching allocator (#13, PyTorch), cuDNN / cuBLAS speed "
        "flags (#14), garbage collection off "
        "(#15), inplace off (#16), batch size vs memory (#17), long-sequence outliers (#18), "
        "long batches set the memory peak (#18), optimizer state memory (#19), CPU threads "
        "(#21), Reduce vs AllReduce on CPU (#21), fetch cost (#22), NaN/Inf (#23), GPU "
        "utilisation (#24), what the profile covers (#25), pinned host memory (#26), prefetch "
            "depth (#27), the GPU's fast paths for the model (#28), a float64 model (#28), "
            "the CPU's autocast without kernels for its dtype (#28), "
            "the workers' hand-over (#29), evaluation passes waiting for their batches "
            "(#30), the workers' start at every pass (#31), full garbage collections in the "
            "loop (#32)).\n")
    c = console()
    render_advice([], c, checked=["input wait (#1)"])
    assert c.export_text() == "No problems found (checked: input wait (#1)).\n"


def test_headline_counts_severities():
    assert headline([INPUT]) == "1 piece of advice (1 high), most important first:"
    assert headline([INPUT, INPUT, FUSION]) == \
        "3 pieces of advice (2 high, 1 low), most important first:"


def test_colour_badges_when_the_terminal_has_colour():
    c = Console(width=100, record=True, force_terminal=True, color_system="standard")
    render_advice([INPUT], c)
    styled = c.export_text(styles=True)
    assert "\x1b[1;37;41m HIGH \x1b[0m" in styled and "\x1b[31m╭─" in styled


def test_json_array_most_important_first():
    rows = json.loads(advice_json([FUSION, INPUT]))
    assert [r["id"] for r in rows] == ["input-bound", "unfused-softmax-cross-entropy"]
    assert rows[0] == {"id": "input-bound", "title": INPUT.title, "severity": "high",
                       "confidence": "high", "evidence": INPUT.evidence,
                       "change": INPUT.change, "expected_gain": INPUT.expected_gain,
                       "expected_speedup": 1.58, "expected_range": None,
                       "expected_peak_range": None, "blocking": False,
                       "source": 1, "figures": {"input_share": 0.367}}
    assert json.loads(advice_json([])) == []


def test_real_profile_renders_every_section(tmp_path):
    profile = load(make_profile(tmp_path / "p.jsonl", steps=step_records(gap_s=0.005)))
    c = console()
    render_advice(advise(profile), c)
    text = c.export_text()
    assert text.startswith("1 piece of advice (1 high), most important first:\n")
    for part in ("1.  HIGH  Input-bound: 37% of each step waits for data", "Evidence: 36.7%",
                 "Change:", "DataLoader.from_generator", "Expected gain: up to 1.58x",
                 "Confidence: high · see docs/advice.md#input-bound"):
        assert part in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_wrapped_code_keeps_its_indent_in_a_narrow_terminal():
    c = Console(width=60, record=True, force_terminal=False, color_system=None)
    render_advice([INPUT], c)
    lines = c.export_text().splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("│ Change:")][0]
    assert all(line.startswith("│   ") for line in lines[start + 1:start + 5])


def test_names_from_the_profile_are_printed_without_control_characters():
    hostile = Advice(
        id="x", title="Loader \x1b]0;owned\x07 is slow", severity="medium",
        evidence="variable \x1b[2Jimg", change="loader = fluid.io.DataLoader(\n    x)\x9b",
        expected_gain="some", confidence="high")
    c = console()
    render_advice([hostile], c)
    text = c.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "Loader \\x1b]0;owned\\x07 is slow" in text and "variable \\x1b[2Jimg" in text
    assert "│       x)\\x9b" in text  # newlines in code kept
