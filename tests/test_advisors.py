"""Advisors: the Advice model, the rule registry and ranking, and each rule fired / not fired."""

import json
import subprocess
import sys

import pytest
from profiles import (make_profile, ops_records, program_record, sched_records, step_records,
                      system_samples, typed)

from paddletune import advisors
from paddletune.advisors import base, fetch, fusion, input, nan, threads
from paddletune.advisors.base import Advice, advise, rank
from paddletune.profile import load
from paddletune.profile.records import NumpyInfo


# --- builders ------------------------------------------------------------------------------------
def load_profile(tmp_path, name="p.jsonl", **kw):
    return load(make_profile(tmp_path / name, **kw))


def tuned_steps(**kw):
    """Compute-bound: 0.1 ms feed + 0.1 ms outside of a 10.1 ms cycle, a 4-byte loss fetch."""
    return step_records(**{"feed_s": 0.0001, "fetch_s": 0.0001, "gap_s": 0.0001, **kw})


def mlp_program(fused=False, accuracy=True):
    """img -> fc -> softmax -> cross_entropy -> mean (the loss), accuracy on the softmax, SGD."""
    if fused:
        head = [("softmax_with_cross_entropy", {"Logits": ["fc_0.tmp_1"], "Label": ["label"]},
                 {"Softmax": ["fc_0.tmp_2"], "Loss": ["cross_entropy_0.tmp_0"]})]
    else:
        head = [("softmax", {"X": ["fc_0.tmp_1"]}, {"Out": ["fc_0.tmp_2"]}),
                ("cross_entropy", {"X": ["fc_0.tmp_2"], "Label": ["label"]},
                 {"Y": ["cross_entropy_0.tmp_0"]})]
    ops = [("mul", {"X": ["img"], "Y": ["fc_0.w_0"]}, {"Out": ["fc_0.tmp_0"]}),
           ("elementwise_add", {"X": ["fc_0.tmp_0"], "Y": ["fc_0.b_0"]}, {"Out": ["fc_0.tmp_1"]}),
           *head,
           ("mean", {"X": ["cross_entropy_0.tmp_0"]}, {"Out": ["mean_0.tmp_0"]})]
    if accuracy:
        ops.append(("accuracy", {"Out": ["fc_0.tmp_2"], "Label": ["label"]},
                    {"Accuracy": ["accuracy_0.tmp_0"]}))
    roles = [0] * len(ops) + [257, 1, 2, 2]  # seed (Backward|Loss), one grad op, two SGD
    ops += [("fill_any_like", {"X": ["mean_0.tmp_0"]}, {"Out": ["mean_0.tmp_0@GRAD"]}),
            ("mul_grad", {"X": ["img"], "Y": ["fc_0.w_0"], "Out@GRAD": ["fc_0.tmp_0@GRAD"]},
             {"Y@GRAD": ["fc_0.w_0@GRAD"]}),
            ("sgd", {"Param": ["fc_0.w_0"], "Grad": ["fc_0.w_0@GRAD"],
                     "LearningRate": ["learning_rate_0"]}, {"ParamOut": ["fc_0.w_0"]}),
            ("sgd", {"Param": ["fc_0.b_0"], "Grad": ["fc_0.b_0@GRAD"],
                     "LearningRate": ["learning_rate_0"]}, {"ParamOut": ["fc_0.b_0"]})]
    record = program_record(ops)
    for op, role in zip(record["ops"], roles):
        op["role"] = role
    return record


def startup_program():
    return program_record([("uniform_random", {}, {"Out": ["fc_0.w_0"]}),
                           ("fill_constant", {}, {"Out": ["fc_0.b_0"]}),
                           ("fill_constant", {}, {"Out": ["learning_rate_0"]})], program=0)


def op_times(softmax_s=0.0002, mul_s=0.004, other_s=0.004):
    """ops records for steps 0..39 of program 1."""
    return ops_records(range(40), [("mul", mul_s), ("elementwise_add", other_s),
                                   ("softmax", softmax_s), ("cross_entropy", softmax_s / 2),
                                   ("softmax_grad", softmax_s), ("sgd", 0.0001)])


def system_rows(n=10, **fields):
    """`n` samples of the system probe (100% = one core busy)."""
    base_row = {"cpu_percent": 190.0, "steal_percent": 0.0, "blas_threads": None,
                "ctx_involuntary_per_s": 5.0}
    return [{"type": "sample", "probe": "system", "t": 0.1 + 0.5 * i, **base_row, **fields}
            for i in range(n)]


def nan_event(op_type="log", step=7, t=0.3, **fields):
    return {"type": "event", "t": t, "kind": "nan_inf", "op_type": op_type, "op_index": 3,
            "output": f"{op_type}_0.tmp_0", "inputs": ["fc_0.tmp_1"], "n_nan": 0, "n_inf": 4,
            "step": step, "message": f"op {op_type} (#3) produced 0 NaN and 4 Inf", **fields}


def ids(advices):
    return [a.id for a in advices]


def only(advices, advice_id):
    found = [a for a in advices if a.id == advice_id]
    assert len(found) == 1, ids(advices)
    return found[0]


# --- the model -----------------------------------------------------------------------------------
def make_advice(id="x-y", severity="medium", speedup=None, **kw):
    return Advice(id=id, title="T", severity=severity, evidence="E 1.0 ms", change="c = 1",
                  expected_gain="g", confidence="high", expected_speedup=speedup, **kw)


def test_advice_validates_id_severity_confidence():
    with pytest.raises(ValueError, match="kebab-case"):
        make_advice(id="Input_Bound")
    with pytest.raises(ValueError, match="severity"):
        make_advice(severity="critical")
    with pytest.raises(ValueError, match="confidence"):
        Advice("a", "T", "low", "E", "c", "g", "sure")


def test_advice_is_frozen_and_to_dict_is_json():
    a = make_advice(source=22, figures={"fetch_s": 0.002, "fetched": ["a", "b"]}, speedup=1.2)
    with pytest.raises(Exception):
        a.severity = "high"
    d = a.to_dict()
    assert list(d) == ["id", "title", "severity", "confidence", "evidence", "change",
                       "expected_gain", "expected_speedup", "expected_range",
                       "expected_peak_range", "blocking",
                       "source", "figures"]
    assert json.loads(json.dumps(d)) == d and d["source"] == 22 and d["expected_speedup"] == 1.2


def test_rank_by_severity_then_speedup_unknown_last_stable():
    a = [make_advice("low-one", "low", 3.0), make_advice("med-none", "medium"),
         make_advice("med-fast", "medium", 1.5), make_advice("info-one", "info"),
         make_advice("high-slow", "high", 1.1), make_advice("med-none-2", "medium")]
    assert ids(rank(a)) == ["high-slow", "med-fast", "med-none", "med-none-2", "low-one",
                            "info-one"]
    broken = base.Advice("broken", "t", "medium", "e", "c", "g", "high", blocking=True)
    assert ids(rank(a + [broken]))[0] == "broken"


# --- the registry --------------------------------------------------------------------------------
def test_rule_decorator_registers_and_checks_use_docstrings(monkeypatch):
    monkeypatch.setattr(base, "_RULES", [])

    @base.rule
    def my_rule(profile):
        """my check (#0)

        Details that are not shown."""
        return None

    assert base.rules() == (my_rule,) and base.checks() == ["my check (#0)"]


def test_every_rule_is_registered_in_advice_row_order():
    assert advisors.checks() == ["input wait (#1)", "reader queue and workers (#2, #5)",
                                 "no-data ceiling (#3)", "double buffer (#4)",
                                 "reader thread holding the GIL (#5)",
                                 "reader worker memory (#7)", "cuDNN-slow ops (#8)",
                                 "softmax + cross_entropy fusion (#9)",
                                 "BuildStrategy fusions (#10)",
                                 "ParallelExecutor threads (#11)", "scope drop cost (#12)",
                                 "underlying allocations (#13)", "cudaMalloc (#13, GPU)",
                                 "CUDA caching allocator (#13, PyTorch)",
                                 "cuDNN / cuBLAS speed flags (#14)",
                                 "garbage collection off (#15)", "inplace off (#16)",
                                 "batch size vs memory (#17)",
                                 "long-sequence outliers (#18)",
                                 "long batches set the memory peak (#18)",
                                 "optimizer state memory (#19)", "CPU threads (#21)",
                                 "Reduce vs AllReduce on CPU (#21)",
                                 "fetch cost (#22)", "NaN/Inf (#23)",
                                 "GPU utilisation (#24)", "what the profile covers (#25)",
                                 "pinned host memory (#26)", "prefetch depth (#27)",
                                 "the GPU's fast paths for the model (#28)",
                                 "a float64 model (#28)",
                                 "the CPU's autocast without kernels for its dtype (#28)",
                                 "the workers' hand-over (#29)",
                                 "evaluation passes waiting for their batches (#30)",
                                 "the workers' start at every pass (#31)",
                                 "full garbage collections in the loop (#32)"]


def test_a_failing_rule_yields_advisor_error_and_others_still_run(tmp_path):
    profile = load_profile(tmp_path, steps=step_records(gap_s=0.005))

    def broken(profile):
        """broken check"""
        raise KeyError("breakdown_s")

    def junk(profile):
        return "not advice"

    out = advise(profile, [broken, input.input_bound, junk])
    assert ids(out) == ["input-bound", "advisor-error", "advisor-error"]
    err = out[1]
    assert err.severity == "info" and err.figures["rule"] == "broken"
    assert "broken" in err.title and "KeyError: 'breakdown_s'" in err.evidence
    assert "returned str, not Advice" in out[2].evidence


def test_rules_accept_none_single_or_list(tmp_path):
    profile = load_profile(tmp_path)
    one = make_advice("one")
    assert ids(advise(profile, [lambda p: None, lambda p: one, lambda p: [one, one]])) == \
        ["one", "one", "one"]


def test_advisors_import_no_rich_runtime_or_probes():
    code = ("import sys, paddletune.advisors; bad = [m for m in sys.modules if "
            "m.split('.')[0] in ('rich', 'runtime', 'numpy', 'psutil') or "
            "m.startswith('paddletune.probes') or m.startswith('paddletune.render')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- #1 input-bound ------------------------------------------------------------------------------
def test_input_bound_high_with_evidence_code_and_speedup(tmp_path):
    profile = load_profile(tmp_path, steps=step_records(gap_s=0.005),
                           extra=[startup_program(), mlp_program()])
    a = only(advise(profile, [input.input_bound]), "input-bound")
    assert (a.severity, a.source, a.confidence) == ("high", 1, "high")
    assert a.title == "Input-bound: 37% of each step waits for data"
    assert a.evidence == ("36.7% of each 15.00 ms step waits for input: 5.00 ms outside the "
                          "runtime (data preparation and Python between exe.run calls) + "
                          "0.50 ms feeding, against 9.50 ms computing and fetching; 39 steady "
                          "steps.")
    assert a.expected_speedup == pytest.approx(0.015 / 0.0095)
    assert a.expected_gain.startswith("up to 1.58x steps/s (15.00 ms -> 9.50 ms per step)")
    assert "fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8, " \
           "iterable=True, num_workers=1)" in a.change
    assert "loader.set_batch_generator(reader, places=fluid.CPUPlace())" in a.change
    assert a.figures["input_share"] == pytest.approx(0.0055 / 0.015)


def test_input_bound_medium_and_reader_bound_note(tmp_path):
    medium = load_profile(tmp_path, steps=step_records(gap_s=0.0005))
    assert only(advise(medium, [input.input_bound]), "input-bound").severity == "medium"
    slow_reader = load_profile(tmp_path, "r.jsonl", steps=step_records(gap_s=0.030))
    a = only(advise(slow_reader, [input.input_bound]), "input-bound")
    # 30.5 ms of input against 9.5 ms of compute: 4 workers would keep up, the 2 cores run 1
    assert a.figures["workers_needed"] == 4 and a.figures["workers"] == 1
    assert a.expected_gain.endswith("the 30.50 ms of input per step would need 4 workers, but "
                                    "the cores run 1: make each batch cheaper too")
    assert a.expected_speedup == pytest.approx(0.040 / 0.0305)


def test_input_bound_sizes_the_workers_that_replace_the_loop(tmp_path):
    """4 cores, the process busy one core: the loop prepares 30.5 ms of each 40 ms step in
    Python, so the trainer's own work keeps a quarter of a core busy and 4 workers fit; they
    would make a step's batch in 7.6 ms, but with the 9.5 ms step they need 40 ms of CPU per
    step: 11.8 ms on the 4 cores, time-shared at 85% (producers.SHARED_CORE_USE)."""
    steps = step_records(gap_s=0.030)
    profile = load_profile(tmp_path, steps=steps, env={"cpu": {"usable_cores": 4}},
                           extra=system_samples(cpu_percent=98.0, cpu_total_percent=25.0))
    a = only(advise(profile, [input.input_bound]), "input-bound")
    assert (a.figures["workers_needed"], a.figures["workers"]) == (4, 4)
    assert a.figures["cpu_bound"] and a.figures["producer_cpu_s_per_step"] == \
        pytest.approx(0.0305)
    assert "num_workers=4" in a.change and "fluid.io.get_worker_info()" in a.change
    assert a.expected_speedup == pytest.approx(4 * 0.85, rel=0.01)
    assert a.expected_gain.startswith("up to 3.40x steps/s (40.00 ms -> 11.76 ms per step) "
                                      "with 4 worker process(es) making the batches while the "
                                      "model computes; the cores bound it")


def test_input_bound_low_when_the_input_is_only_loop_overhead(tmp_path):
    tiny = step_records(wall_s=0.0001, feed_s=0.00001, fetch_s=0.00001, gap_s=0.00002)
    a = only(advise(load_profile(tmp_path, steps=tiny), [input.input_bound]), "input-bound")
    assert (a.severity, a.confidence) == ("low", "low")
    assert a.evidence.endswith("At under 0.20 ms per step this is mostly the loop's own "
                               "overhead, which an async reader does not remove.")


def test_input_bound_placeholders_and_gpu_place(tmp_path):
    steps = step_records(gap_s=0.005)
    for s in steps:
        s["place"] = "CUDAPlace(0)"
    a = only(advise(load_profile(tmp_path, steps=steps), [input.input_bound]), "input-bound")
    assert "feed_list=[image, label]" in a.change and "# feed_list: your fluid.data" in a.change
    assert "places=fluid.CUDAPlace(0))" in a.change and "fetch_list=[loss]" in a.change


def test_feed_names_skip_parameters_learning_rate_and_gradients():
    (program,) = typed([mlp_program()])
    ops = program.ops
    assert input.feed_names(ops) == ["img", "label"]
    no_optimizer = [op for op in ops if op.role == 0]
    assert input.feed_names(no_optimizer, created={"fc_0.w_0", "fc_0.b_0"}) == ["img", "label"]


def test_input_bound_silent_when_compute_bound(tmp_path):
    assert advise(load_profile(tmp_path, steps=tuned_steps()), [input.input_bound]) == []


def test_too_few_steps_gives_info_not_a_verdict(tmp_path):
    profile = load_profile(tmp_path, steps=step_records(n_steps=3, gap_s=0.05))
    a = only(advise(profile), "too-few-steps")
    assert ids(advise(profile)) == ["too-few-steps"]  # no input-bound, no large-fetch
    assert a.severity == "info"
    assert a.evidence.startswith("only 2 steady-state step(s) measured (3 training step(s), "
                                 "1 of them warm-up)")
    assert a.change.endswith("paddletune profile train.py")
    limited = load_profile(tmp_path, "l.jsonl", steps=step_records(n_steps=3),
                           options={"steps": 3})
    assert only(advise(limited), "too-few-steps").change == \
        "paddletune profile --steps 50 train.py"


def test_no_training_steps_no_advice(tmp_path):
    profile = load_profile(tmp_path, steps=step_records(n_steps=0))
    assert advise(profile) == []


# --- #9 unfused softmax + cross_entropy ----------------------------------------------------------
def test_unfused_softmax_ce_with_measured_share(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), options={"ops": True},
                           extra=[mlp_program(), *op_times(softmax_s=0.0004)])
    a = only(advise(profile, [fusion.unfused_softmax_cross_entropy]),
             "unfused-softmax-cross-entropy")
    share = (0.0004 + 0.0002 + 0.0004) / (0.004 + 0.004 + 0.001 + 0.0001)
    assert (a.severity, a.confidence, a.source) == ("medium", "high", 9)
    assert a.figures["op_share"] == pytest.approx(share)
    assert f"take {share:.1%} of the measured op time" in a.evidence
    assert "softmax('fc_0.tmp_1') -> 'fc_0.tmp_2' -> cross_entropy(label='label')" in a.evidence
    assert a.change.splitlines()[-2:] == [
        "cost, prediction = fluid.layers.softmax_with_cross_entropy(",
        "    logits=logits, label=label, return_softmax=True)"]
    assert "prediction replaces 'fc_0.tmp_2' in accuracy" in a.change
    assert "log-sum-exp" in a.expected_gain


def test_unfused_softmax_ce_low_when_cheap_medium_when_unmeasured(tmp_path):
    cheap = load_profile(tmp_path, steps=tuned_steps(), extra=[
        mlp_program(accuracy=False), *op_times(softmax_s=0.00002)])
    a = only(advise(cheap, [fusion.unfused_softmax_cross_entropy]),
             "unfused-softmax-cross-entropy")
    assert a.severity == "low"
    assert a.change.splitlines()[-1] == "    logits=logits, label=label)"
    unmeasured = load_profile(tmp_path, "u.jsonl", steps=tuned_steps(), extra=[mlp_program()])
    b = only(advise(unmeasured, [fusion.unfused_softmax_cross_entropy]),
             "unfused-softmax-cross-entropy")
    assert (b.severity, b.confidence) == ("medium", "medium") and "--ops" in b.evidence


def test_fused_or_unrelated_softmax_is_silent(tmp_path):
    fused = load_profile(tmp_path, steps=tuned_steps(), extra=[mlp_program(fused=True)])
    assert advise(fused, [fusion.unfused_softmax_cross_entropy]) == []
    other = program_record([("softmax", {"X": ["a"]}, {"Out": ["b"]}),
                            ("cross_entropy", {"X": ["c"], "Label": ["y"]}, {"Y": ["d"]})])
    assert fusion.softmax_ce_pairs(typed([other])[0].ops) == []
    assert advise(load_profile(tmp_path, "n.jsonl"), [fusion.unfused_softmax_cross_entropy]) \
        == []


# --- #21 CPU threads -----------------------------------------------------------------------------
def env_with(blas_threads, cores=2, blas="openblas", usable=None):
    cpu = {"model": "Test CPU", "logical_cores": cores, "physical_cores": cores}
    if usable is not None:
        cpu["usable_cores"] = usable
    return {"numpy": {"version": "2.0.0", "blas": blas, "blas_threads": blas_threads},
            "cpu": cpu}


def test_oversubscribed_from_env(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(4, cores=8, usable=2))
    a = only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed")
    assert (a.severity, a.source) == ("medium", 21)  # no op timings: not high
    assert a.evidence == ("NumPy's OpenBLAS runs 4 threads in each of 1 runtime thread(s): 4 "
                          "threads on 2 usable cores (2.0x oversubscribed).")
    assert a.change.splitlines()[0] == "export OPENBLAS_NUM_THREADS=2"
    assert "blas.set_blas_threads(2)" in a.change


def test_oversubscribed_high_when_blas_ops_dominate_and_mkl_variable(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(8, blas="mkl"),
                           extra=[*op_times(mul_s=0.008, other_s=0.001),
                                  *system_rows(ctx_involuntary_per_s=900.0)])
    a = only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed")
    assert a.severity == "high" and a.change.startswith("export MKL_NUM_THREADS=2\n")
    assert "4.0x oversubscribed" in a.evidence and "900 involuntary context switches/s" \
        in a.evidence


def test_framework_layers_count_as_blas_ops(tmp_path):
    """PyTorch's and Paddle's --ops time leaf layers: a Linear-heavy step is BLAS-heavy."""
    layers = ops_records(range(40), [("Linear", 0.008), ("ReLU", 0.0005), ("Conv2D", 0.001)])
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(8, blas="mkl"),
                           extra=[*layers, *system_rows(ctx_involuntary_per_s=900.0)])
    a = only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed")
    assert a.severity == "high"  # BLAS layers 95% of the op time


def workers_beside_blas(tmp_path, workers=2, cores=0.45):
    """2 cores, 2 BLAS threads, `workers` reader workers each busy `cores` of a core that
    keep the queue full."""
    from profiles import reader_records, worker_samples
    steps = tuned_steps()
    extra = reader_records(steps, fill=8, workers=tuple(range(workers)), intervals=5,
                           config={"num_workers": workers}) + \
        worker_samples(workers=workers, cores=cores)
    return load_profile(tmp_path, steps=steps, env=env_with(2, cores=2), extra=extra)


def test_reader_workers_count_against_the_blas_threads(tmp_path):
    a = only(advise(workers_beside_blas(tmp_path), [threads.cpu_threads]),
             "cpu-oversubscribed")
    assert a.title == "CPU oversubscribed: 2 math threads and 2 reader worker(s) on 2 cores"
    assert a.evidence.startswith("NumPy's OpenBLAS runs 2 threads in each of 1 runtime "
                                 "thread(s): 2 threads and 2 reader worker process(es) busy on "
                                 "0.9 cores on 2 usable cores (1.4x oversubscribed)")
    assert a.change.splitlines()[0] == "export OPENBLAS_NUM_THREADS=1"
    # (busy workers: the speed test's no-data windows leave them idle, so it would not
    # measure the threads against them; a run with the thread count does)
    assert a.expected_speedup is None
    assert a.expected_gain.endswith("Measure it: `OPENBLAS_NUM_THREADS=1 paddletune profile "
                                    "train.py`")


def test_idle_reader_workers_do_not_count(tmp_path):
    profile = workers_beside_blas(tmp_path, cores=0.05)
    assert "cpu-oversubscribed" not in ids(advise(profile, [threads.cpu_threads]))


def test_blas_family_from_a_config_string_or_library_path():
    config = NumpyInfo(blas="OpenBLAS 0.3.31.188.0 USE64BITINT DYNAMIC_ARCH Haswell "
                            "MAX_THREADS=64")
    assert threads.blas_family(config) == ("OpenBLAS", "OPENBLAS_NUM_THREADS")
    assert threads.blas_family(NumpyInfo(blas=None, blas_path="/x/libmkl_rt.so.2")).env_var \
        == "MKL_NUM_THREADS"
    assert threads.blas_family(NumpyInfo()) == ("BLAS", "OMP_NUM_THREADS")


def test_runtime_threads_multiply_blas_threads(tmp_path):
    # the runtime's threads per executor: the ParallelExecutor's (the scheduler records)
    steps = tuned_steps()
    profile = load_profile(tmp_path, steps=steps, env=env_with(2, cores=4),
                           extra=sched_records(steps, places=1, threads=4))
    a = only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed")
    assert a.figures["threads"] == 8 and a.change.startswith("export OPENBLAS_NUM_THREADS=1")


def test_concurrent_executors_count_only_overlapping_runs():
    a = typed(step_records(n_steps=5, executor=1))
    b = typed(step_records(n_steps=5, executor=2, t_start=0.105))  # overlaps a's steps
    later = typed(step_records(n_steps=5, executor=3, t_start=10.0))
    assert threads.concurrent_executors(a + later) == 1
    assert threads.concurrent_executors(a + b + later) == 2
    assert threads.concurrent_executors([]) == 1


def test_sampled_blas_threads_override_the_header(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(1),
                           extra=system_rows(blas_threads=6))
    assert only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed").figures[
        "blas_threads"] == 6


def test_steal_medium_and_high(tmp_path):
    some = load_profile(tmp_path, steps=tuned_steps(), extra=system_rows(steal_percent=12.0))
    a = only(advise(some, [threads.cpu_threads]), "cpu-steal")
    assert a.severity == "medium" and a.expected_speedup == pytest.approx(1 / 0.88)
    assert a.evidence.startswith("steal time averaged 12.0% of CPU time (peak 12.0%) over 10 "
                                 "samples")
    assert a.change == ("# run on a dedicated (non-shared, non-burstable) instance; your 1 "
                        "BLAS thread(s) per runtime thread fit")
    crowded = load_profile(tmp_path, "c.jsonl", steps=tuned_steps(), env=env_with(6, cores=8),
                           extra=system_rows(steal_percent=40.0, blas_threads=6))
    b = only(advise(crowded, [threads.cpu_threads]), "cpu-steal")
    assert b.change.splitlines()[1] == "export OPENBLAS_NUM_THREADS=4"  # 8 x 60% -> 4
    lots = load_profile(tmp_path, "s.jsonl", steps=tuned_steps(),
                        extra=system_rows(steal_percent=30.0))
    assert only(advise(lots, [threads.cpu_threads]), "cpu-steal").severity == "high"
    little = load_profile(tmp_path, "l.jsonl", steps=tuned_steps(),
                          extra=system_rows(steal_percent=3.0))
    assert advise(little, [threads.cpu_threads]) == []


def test_idle_cores_low_advice_when_compute_bound_and_blas_heavy(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(1, cores=8),
                           extra=[*op_times(mul_s=0.008, other_s=0.001),
                                  *system_rows(cpu_percent=100.0)])
    a = only(advise(profile, [threads.cpu_threads]), "cpu-underused")
    assert (a.severity, a.confidence) == ("low", "medium")
    assert a.change.startswith("export OPENBLAS_NUM_THREADS=8")
    assert "process used 100% CPU on average (100% = one core) of 800% available" in a.evidence
    assert 1 < a.expected_speedup < 8


def test_idle_cores_counts_only_the_cores_other_processes_leave(tmp_path):
    """8 cores, the job on one, the machine half busy: 3 cores busy with other processes
    leave 5, and the advice is 5 threads, saying who kept the others busy."""
    profile = load_profile(tmp_path, steps=tuned_steps(), env=env_with(1, cores=8),
                           extra=[*op_times(mul_s=0.008, other_s=0.001),
                                  *system_rows(cpu_percent=100.0, cpu_total_percent=50.0)])
    a = only(advise(profile, [threads.cpu_threads]), "cpu-underused")
    assert a.change.startswith("export OPENBLAS_NUM_THREADS=5")
    assert "of 800% available (3.0 core(s) busy with other processes)" in a.evidence
    assert a.figures["other_processes_cores"] == pytest.approx(3.0)
    # a daemon's 0.04 of a core on an idle 2-core machine leaves both cores (helper-39's s01:
    # 2 threads ran 1.13-1.19x faster there)
    idle = load_profile(tmp_path, "i.jsonl", steps=tuned_steps(), env=env_with(1, cores=2),
                        extra=[*op_times(mul_s=0.008, other_s=0.001),
                               *system_rows(cpu_percent=96.0, cpu_total_percent=50.0)])
    assert only(advise(idle, [threads.cpu_threads]), "cpu-underused").change.startswith(
        "export OPENBLAS_NUM_THREADS=2")


@pytest.mark.parametrize("kw", [
    {"cpu_percent": 700.0},  # cores busy already
    # the job's one core, the machine's eight all busy: other processes leave no idle core
    # (helper-34: "Cores idle ... export OMP_NUM_THREADS=2" on a 2-core machine at load 4.7,
    # where 2 threads ran 15x slower and cpu-contended then said 1)
    {"cpu_total_percent": 100.0},
    {"steps": step_records(gap_s=0.005)},  # input-bound: more BLAS threads won't help
    {"mul_s": 0.0005},  # little BLAS work
])
def test_idle_cores_is_conservative(tmp_path, kw):
    steps = kw.get("steps") or tuned_steps()
    profile = load_profile(tmp_path, steps=steps, env=env_with(1, cores=8),
                           extra=[*op_times(mul_s=kw.get("mul_s", 0.008), other_s=0.001),
                                  *system_rows(cpu_percent=kw.get("cpu_percent", 100.0),
                                               **({"cpu_total_percent": kw[
                                                   "cpu_total_percent"]}
                                                  if "cpu_total_percent" in kw else {}))])
    assert advise(profile, [threads.cpu_threads]) == []


# --- #22 large fetch -----------------------------------------------------------------------------
def test_large_fetch_high_names_variables_and_keeps_the_loss(tmp_path):
    steps = tuned_steps(fetch_s=0.002, fetch=("accuracy_0.tmp_0", "mean_0.tmp_0", "fc_0.tmp_2"),
                        fetch_bytes=3 << 20)
    profile = load_profile(tmp_path, steps=steps, extra=[mlp_program()])
    a = only(advise(profile, [fetch.large_fetch]), "large-fetch")
    assert (a.severity, a.confidence, a.source) == ("high", "high", 22)
    assert a.title == "Fetching costs 20% of each step"
    assert a.evidence == ("fetching 'accuracy_0.tmp_0', 'mean_0.tmp_0', 'fc_0.tmp_2' takes "
                          "2.00 ms per step, 19.8% of the 10.10 ms step, and copies 3.0 MiB out "
                          "of the runtime per step (39 steady steps).")
    assert a.change.splitlines() == [
        "fetch_list = [loss] if step % 100 else [loss, accuracy_0, fc_0]",
        "# then: exe.run(..., fetch_list=fetch_list)",
        "# loss is 'mean_0.tmp_0', accuracy_0 is 'accuracy_0.tmp_0', fc_0 is 'fc_0.tmp_2'"]
    assert a.expected_speedup == pytest.approx(0.0101 / (0.0101 - 0.002 * 0.99))


def test_fetch_medium_low_and_silent(tmp_path):
    def advice_for(name, **kw):
        profile = load_profile(tmp_path, name, steps=tuned_steps(**kw))
        return advise(profile, [fetch.large_fetch])

    assert only(advice_for("m.jsonl", fetch_s=0.0008, fetch_bytes=256 << 10),
                "large-fetch").severity == "medium"
    low = only(advice_for("l.jsonl", fetch_s=0.0003, fetch_bytes=2 << 20), "large-fetch")
    assert low.severity == "low"
    assert low.change.splitlines()[0] == "fetch_list = [] if step % 100 else [loss]"
    assert advice_for("s.jsonl", fetch_s=0.0003, fetch_bytes=4) == []  # small and cheap
    assert advice_for("b.jsonl", fetch_s=0.0001, fetch_bytes=8 << 20) == []  # big but quick


def test_a_slow_fetch_phase_of_a_few_bytes_is_blamed_on_the_fetch_only_on_a_gpu(tmp_path):
    """On a CPU place copying the loss's 4 bytes takes microseconds: 3 ms in the fetch phase
    are spent on something else (a scope drop, an event subscriber). On a GPU the fetch waits
    for the device: a host sync each step, which fetching less often saves."""
    cpu = tuned_steps(fetch_s=0.003, fetch_bytes=4)
    assert advise(load_profile(tmp_path, "cpu.jsonl", steps=cpu), [fetch.large_fetch]) == []
    gpu = tuned_steps(fetch_s=0.003, fetch_bytes=4)
    for step in gpu:
        step["place"] = "CUDAPlace(0)"
    a = only(advise(load_profile(tmp_path, "gpu.jsonl", steps=gpu), [fetch.large_fetch]),
             "large-fetch")
    assert a.severity == "high"


# --- #23 NaN / Inf -------------------------------------------------------------------------------
def test_nan_inf_names_op_inputs_step_and_epsilon_fix(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), extra=[
        mlp_program(), nan_event("log", step=9, t=0.5), nan_event("log", step=7, t=0.3)],
        exit_status=1, exit_reason="exception")
    a = only(advise(profile, [nan.nan_inf]), "nan-inf")
    assert (a.severity, a.confidence, a.source) == ("high", "high", 23)
    assert a.title == "NaN/Inf first produced by log"
    assert a.evidence == ("op log (#3) produced 0 NaN and 4 Inf in 'log_0.tmp_0' at step 7; "
                          "its inputs: fc_0.tmp_1. 2 NaN/Inf output(s) found.")
    assert a.change.splitlines()[:2] == [
        "# never take log(0):",
        "out = fluid.layers.log(fluid.layers.clip(x, min=1e-8, max=1e8))"]
    assert "GradientClipByGlobalNorm(clip_norm=1.0)" in a.change


def test_nan_inf_in_gradients_clips_first_and_flags_fed_inputs(tmp_path):
    event = nan_event("mul_grad", inputs=["img", "fc_0.w_0"])
    profile = load_profile(tmp_path, steps=tuned_steps(), extra=[
        startup_program(), mlp_program(), event])
    a = only(advise(profile, [nan.nan_inf]), "nan-inf")
    assert a.change.splitlines()[:2] == [
        "# clip gradients (before optimizer.minimize(loss)):",
        "fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=1.0))"]
    assert "learning_rate=learning_rate / 10" in a.change and "np.isfinite" in a.change
    assert "its inputs: img, fc_0.w_0 (img is fed, not computed)." in a.evidence


def test_nan_inf_reads_the_briefs_field_names_and_is_silent_without_events(tmp_path):
    event = {"type": "event", "t": 0.2, "kind": "nan_inf", "op_type": "elementwise_div",
             "op_index": 5, "step": 2, "inputs": {"X": ["a"], "Y": ["b"]},
             "output": "c", "message": "boom"}
    a = only(advise(load_profile(tmp_path, extra=[event]), [nan.nan_inf]), "nan-inf")
    assert a.evidence.startswith("op elementwise_div (#5) produced NaN/Inf in 'c' at step 2; "
                                 "its inputs: a, b")
    assert "elementwise_div(x, y + 1e-8)" in a.change
    assert advise(load_profile(tmp_path, "n.jsonl"), [nan.nan_inf]) == []


# --- the whole set -------------------------------------------------------------------------------
def test_well_tuned_profile_gets_no_advice(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), options={"ops": True},
                           extra=[startup_program(), mlp_program(fused=True),
                                  *op_times(softmax_s=0.0), *system_rows()])
    assert profile.summary.verdict.kind == "compute-bound"
    assert advise(profile) == []


def test_well_tuned_default_env_without_samples_has_no_high_or_medium(tmp_path):
    profile = load_profile(tmp_path, steps=tuned_steps(), extra=[mlp_program(fused=True)])
    assert [a for a in advise(profile) if a.severity in ("high", "medium")] == []


def test_advise_ranks_across_rules(tmp_path):
    steps = step_records(gap_s=0.0006, fetch_s=0.002, fetch=("mean_0.tmp_0", "fc_0.tmp_2"),
                         fetch_bytes=3 << 20)
    profile = load_profile(tmp_path, steps=steps, env=env_with(4),
                           extra=[mlp_program(), nan_event("log")])
    out = advise(profile)
    # blocking (nan-inf: training is broken) first, then severity, speedup, docs/advice.md number
    assert ids(out) == ["nan-inf", "large-fetch", "input-bound",
                        "unfused-softmax-cross-entropy", "cpu-oversubscribed"]
    assert [a.severity for a in out] == ["high", "high", "medium", "medium", "medium"]


def test_advice_serialises_for_json(tmp_path):
    profile = load_profile(tmp_path, steps=step_records(gap_s=0.005), env=env_with(4),
                           extra=[mlp_program(), nan_event("log")])
    rows = json.loads(json.dumps([a.to_dict() for a in advise(profile)]))
    for row in rows:
        assert {"id", "title", "severity", "evidence", "change", "expected_gain",
                "confidence"} <= set(row)


def test_busy_workers_take_no_prediction_from_the_speed_tests_one_thread_window(tmp_path):
    """The speed test's windows only peek at the queue: the workers stop once it is full, so
    its one-math-thread window did not run the threads against them (bench_advice's
    blas-workers: 1.12x from it, 1.66x measured). The card keeps to the run that measures
    it."""
    from paddletune.profile.records import SpeedTestEvent
    from profiles import reader_records, worker_samples
    steps = tuned_steps(n_steps=50)
    switches = [SpeedTestEvent(steps[k]["t"] - 1e-4, phase, k - 1)
                for k, phase in ((11, "baseline"), (21, "ceiling"), (31, "one_thread"),
                                 (41, "done"))]
    extra = reader_records(steps, fill=8, workers=(0, 1), intervals=5,
                           config={"num_workers": 2}) + worker_samples(workers=2, cores=0.45)
    profile = load_profile(tmp_path, steps=steps, env=env_with(2, cores=2),
                           extra=extra + switches, options={"speed_test": 10})
    assert profile.summary.speed_test.one_thread is not None
    a = only(advise(profile, [threads.cpu_threads]), "cpu-oversubscribed")
    assert a.expected_speedup is None and "measured_by" not in a.figures
    assert a.expected_gain.endswith("Measure it: `OPENBLAS_NUM_THREADS=1 paddletune profile "
                                    "train.py`")
