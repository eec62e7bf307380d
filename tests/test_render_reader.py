"""The report's Reader and Speed test sections: exact text from a fixed-width console."""

from rich.console import Console

from paddletune.profile import load
from paddletune.render.report import render_report
from profiles import make_profile, reader_records, step_records
from test_summary_reader import speed_test_events

SHAPES = {"img": {"64x100": 18, "64x230": 1, "64x5000": 1}, "label": {"64x1": 20}}


def render(path, width=100):
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    render_report(load(path), console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def section(lines, head):
    """The lines from the one starting with `head` to the next blank line."""
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_reader_section_of_a_starved_two_worker_loader(tmp_path):
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, wait_s=0.004, empty_ratio=0.9, produce_s=0.030,
                           cpu_s=0.006, fill=1, swings=1, workers=(0, 1), shapes=SHAPES,
                           config={"num_workers": 2})
    lines = section(render(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)),
                    "Reader:")
    assert lines == [
        "Reader: DataLoader#0 · 2 worker processes · capacity 8 · double buffer on · iterable · "
        "30 batches",
        "(steady steps)",
        "queue fill      mean 1.0 of 8 (12%) · min 1 · max 1 · full 0% · empty 0% of the time",
        "fill over time  ▂▂▂▂  (▁ empty … █ full)",
        "empty pops      90% of 30 pops found the queue empty (the loop waited for the producer)",
        "wait per pop    mean 4.00 ms · p50 4.47 · p90 4.90 · max 6.00 · 26.7% of the loop's time",
        "producer        30.00 ms/batch (2 workers; CPU 6.00 ms) → at most 67 batches/s; blocked "
        "on a full",
        "                queue 0% of the time",
        "consumer        11.00 ms/batch when not waiting → 91 batches/s; took 67 batches/s",
        "balance         the producer is 1.36x slower than the consumer: the queue cannot stay "
        "filled",
        "oscillation     the queue swung 3 times from full (8) to empty: the producer runs in "
        "bursts",
        "shape img       [64, *]; dim 1 varies: min 100 · p50 100 · p95 230 · max 5000",
        "shape label     [64, 1]",
        "worker   batches   ms/batch   CPU ms/batch",
        "──────────────────────────────────────────",
        "0             15      30.00           6.00",
        "1             15      30.00           6.00"]


def test_a_job_without_a_dataloader_has_no_reader_or_speed_test_section(tmp_path):
    text = "\n".join(render(make_profile(tmp_path / "p.jsonl")))
    assert "Reader" not in text and "Speed test" not in text


def test_one_thread_producer_has_no_worker_table(tmp_path):
    steps = step_records()
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps,
                                extra=reader_records(steps)))
    reader = section(lines, "Reader:")
    assert reader[0].startswith("Reader: DataLoader#0 · thread producer · capacity 8")
    assert "producer        2.00 ms/batch (1 thread; CPU 1.00 ms) → at most 500 batches/s; " \
           "blocked on a full" in reader
    assert "balance         the producer keeps up (5.00x the consumer's rate)" in reader
    assert "queue fill      mean 8.0 of 8 (100%) · min 8 · max 8 · full 100% · empty 0% of the " \
           "time" in reader
    assert not any(line.startswith(("worker", "oscillation")) for line in lines)



def test_batches_made_in_the_loop_are_each_waited_for(tmp_path):
    """num_workers=0: no queue stands between the producer and the step, so "the producer
    keeps up" would mislead; the balance line says the loop waits for each batch and what
    a worker beside the step would do."""
    steps = step_records()
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps,
                                extra=reader_records(steps, config={"producer": "loop"})))
    reader = section(lines, "Reader:")
    assert reader[0].startswith("Reader: DataLoader#0 · made in the training loop")
    balance = " ".join(line.strip() for line in reader
                       if line.startswith("balance") or line.startswith("  "))
    assert "made in the loop, every batch is waited for; one takes 0.20x the step's own " \
           "time: one worker process beside the step would keep up" in balance
    assert "keeps up (" not in balance

def speed_test_profile(tmp_path, ceiling_wall_s=0.004, loader=True, done=True,
                       thread_cpu_s=None, speed_test=True, gap_s=0.005, env=None, extra=(),
                       **reader):
    """A profile whose steps 21-30 ran in speed-test mode (`speed_test=False`: the same steps,
    no speed test); `thread_cpu_s` the loader's thread CPU per batch, `reader` more of the
    reader's figures per batch (profiles.READER_BATCH)."""
    steps = step_records(gap_s=gap_s)[:None if done else 27]  # cut short: 6 ceiling steps
    t = steps[1]["t"]
    for i, st in enumerate(steps[1:]):
        if 20 <= i < 30:
            st["wall_s"], st["gap_s"] = ceiling_wall_s, 0.001
        st["t"] = t
        t += st["wall_s"] + st["gap_s"]
    events = speed_test_events(steps[11]["t"] - 1e-4, steps[21]["t"] - 1e-4,
                               steps[31]["t"] - 1e-4 if done else None) if speed_test else []
    per_batch = dict(reader) if thread_cpu_s is None else {
        "cpu_s": thread_cpu_s, "produce_s": thread_cpu_s * 1.2, **reader}
    extra = events + (reader_records(steps, **per_batch) if loader else []) + list(extra)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return make_profile(tmp_path / "p.jsonl", steps=steps, env=env,
                        options={"speed_test": 10} if speed_test else {}, extra=extra)


def test_speed_test_section(tmp_path):
    lines = render(speed_test_profile(tmp_path))
    assert section(lines, "Speed test") == [
        "Speed test (FLAGS_reader_queue_speed_test_mode)",
        "actual     66.7 steps/s · 4,267 samples/s (baseline, 10 steps)",
        "ceiling    200.0 steps/s · 12,800 samples/s (no data: the same batch re-read, 10 steps)",
        "data cost  the ceiling is 3.00x the actual: reading data costs 66.7% of the throughput",
        "training   the ceiling's 10 steps trained on re-read batches, not new ones (a loop to "
        "the end of its",
        "           data takes 10 steps more than without --speed-test): the model this run "
        "leaves is not the",
        "           script's usual result"]
    assert "39 measured" not in lines[5] and "· 10 speed-test steps excluded" in \
        " ".join(lines)
    assert not any(line.startswith("Events:") for line in lines)


def test_speed_test_not_the_bottleneck(tmp_path):
    speed = section(render(speed_test_profile(tmp_path, ceiling_wall_s=0.0139)), "Speed test")
    assert speed[3] == "data cost  the ceiling is 1.01x the actual: the reader is not the " \
        "bottleneck"


def test_speed_test_cut_short_in_its_ceiling_window(tmp_path):
    speed = section(render(speed_test_profile(tmp_path, done=False)), "Speed test")
    assert speed[2] == "ceiling    200.0 steps/s · 12,800 samples/s (no data: the same batch " \
                       "re-read, 6 steps)"
    assert speed[4] == "window     incomplete: the job ended during the ceiling window (6 of 10 " \
                       "steps)"


def test_speed_test_without_a_dataloader_says_so(tmp_path):
    text = " ".join(render(speed_test_profile(tmp_path, loader=False)))
    assert ("Speed test: nothing measured. This job has no DataLoader/PyReader, and "
            "--speed-test only changes how a DataLoader/PyReader queue is read "
            "(FLAGS_reader_queue_speed_test_mode); feed through "
            "fluid.io.DataLoader.from_generator to measure the no-data ceiling.") in text


def test_speed_test_that_never_reached_its_ceiling(tmp_path):
    steps = step_records()
    events = speed_test_events(steps[11]["t"] - 1e-4, 99.0, None)[:1]
    path = make_profile(tmp_path / "p.jsonl", steps=steps, options={"speed_test": 20},
                        extra=events + reader_records(steps))
    assert ("Speed test: incomplete: the job ended before the ceiling window (30 baseline steps "
            "measured; each window is 20 steps).") in render(path, width=200)


def test_worker_memory_and_cpu_rows_and_columns(tmp_path):
    from profiles import worker_samples
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, wait_s=0.004, empty_ratio=0.9, produce_s=0.030, cpu_s=0.006,
                           fill=1, workers=(0, 1), config={"num_workers": 2}) + \
        worker_samples(workers=2, growth=96 * 2 ** 20, cores=0.5)
    lines = section(render(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)),
                    "Reader:")
    assert "worker memory   private memory (USS) grew 96.0 MiB per worker during a pass (max " \
           "96.0 MiB; peak" in "\n".join(lines)
    assert "worker CPU      1.00 cores busy in 2 worker process(es)" in lines
    assert lines[-4:] == [
        "worker   batches   ms/batch   CPU ms/batch   USS growth   cores",
        "───────────────────────────────────────────────────────────────",
        "0             15      30.00           6.00     96.0 MiB    0.50",
        "1             15      30.00           6.00     96.0 MiB    0.50"]


def test_a_data_cost_above_the_wait_is_explained_in_the_verdict(tmp_path):
    """The loop waits ~33% of its 15 ms step for input, the speed test says data costs 67%
    of the throughput: the verdict says why the two differ; with a ceiling barely above the
    actual it says nothing more."""
    text = " ".join(render(speed_test_profile(tmp_path)))
    assert "Yet the speed test says data costs 67% of the throughput: the producers slow the " \
           "step itself" in text
    flat = " ".join(render(speed_test_profile(tmp_path / "flat", ceiling_wall_s=0.0139)))
    assert "Yet the speed test" not in flat
