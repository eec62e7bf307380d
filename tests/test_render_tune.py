"""The tuning record's ranked table: off a terminal (a pipe, a file) it is printed at its
natural width, so no cell wraps, least of all inside a setting's name; on a terminal it
keeps within the terminal's width."""

import io

import pytest
from rich.console import Console

from paddletune.render import tune as tune_view

LONG = "num_workers=2 FLAGS_allocator_strategy=naive_best_fit blas_threads=1"


def record(labels):
    ranking = [{"label": label, "samples_per_s": 8000.0 - 100 * i, "ci": 400.0,
                "vs_baseline": 0.5, "peak_bytes": 4 << 20, "status": "ok", "best": i == 0}
               for i, label in enumerate(labels)]
    return {"type": "paddletune-tune", "command": {"script": "train.py", "args": []},
            "options": {"budget_s": 60, "objective": "throughput"}, "trials": [],
            "ranking": ranking, "best": {"setting": {}}, "final": None, "notes": []}


def rendered(rec, width, terminal):
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None,
                      force_terminal=terminal)
    tune_view.render_record(rec, console)
    return console.export_text(styles=False).splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_a_piped_table_never_wraps_inside_a_setting(width):
    labels = [LONG, "num_workers=2 FLAGS_eager_delete_tensor_gb=-1.0 blas_threads=1",
              "baseline"]
    lines = rendered(record(labels), width, terminal=False)
    rows = [line for line in lines if "│" in line]
    assert len(rows) == len(labels)  # one line per setting
    for row, label in zip(rows, labels):
        assert row.rstrip().endswith(label)
    assert lines[2] == "Settings, best first"  # no padding to the table's width
    assert all(line == line.rstrip() for line in lines)


def test_on_a_terminal_the_table_keeps_within_its_width():
    lines = rendered(record([LONG, "baseline"]), 80, terminal=True)
    assert max(len(line) for line in lines if "│" in line or "┃" in line) <= 80
