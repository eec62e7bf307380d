"""tune/proposals.py: the reader advice as the settings `tune` tries first (and bench_advice
applies), the BLAS threads as the advice's note gives them."""

from paddletune.advisors.base import Advice
from paddletune.tune.proposals import proposals
from paddletune.tune.space import Knob, Space


def space():
    knobs = [Knob("num_workers", "reader", "num_workers", (0, 1, 2), 0),
             Knob("capacity", "reader", "capacity", (8, 16), 8),
             Knob("blas_threads", "env", "OPENBLAS_NUM_THREADS", (2, 1), 2)]
    return Space(knobs={k.name: k for k in knobs})


def advice(advice_id, **figures):
    return Advice(id=advice_id, title="t", severity="medium", evidence="e", change="c",
                  expected_gain="g", confidence="medium", figures=figures)


READER = {"workers": 2, "current_workers": 0, "suggested_capacity": 16, "blas_threads": 2,
          "cores": 2, "trainer_cores": 0.5}


def test_busy_workers_beside_two_blas_threads_get_one_thread():
    found, _ = proposals([advice("reader-starved", **READER, worker_busy_cores=1.8)], space())
    assert found == [("reader-starved", {"num_workers": 2, "capacity": 16,
                                         "blas_threads": 1})]


def test_a_worker_needing_half_a_core_beside_two_blas_threads_gets_one_thread():
    """Two threads and half a core's worth of worker crowd 2 cores: the threads spin on the
    core the worker needs (bench_advice's gil-thread job gained nothing from the worker
    beside them, 1.46x with one thread)."""
    figures = {**READER, "workers": 1, "suggested_capacity": 8, "worker_busy_cores": 0.5}
    found, _ = proposals([advice("reader-thread-gil", **figures)], space())
    assert found == [("reader-thread-gil", {"num_workers": 1, "capacity": 8,
                                            "blas_threads": 1})]


def test_workers_that_are_mostly_idle_leave_the_blas_threads_alone():
    found, _ = proposals([advice("reader-starved", **READER, worker_busy_cores=0.1)], space())
    assert found == [("reader-starved", {"num_workers": 2, "capacity": 16})]


def test_a_gil_bound_thread_moves_to_one_worker():
    figures = {**READER, "workers": 1, "suggested_capacity": 8, "worker_busy_cores": 0.7}
    found, _ = proposals([advice("reader-thread-gil", **figures)], space())
    assert found == [("reader-thread-gil", {"num_workers": 1, "capacity": 8,
                                            "blas_threads": 1})]


def test_the_thread_cards_give_their_thread_count():
    """cpu-contended (the cores other processes leave) sets the math threads as
    cpu-oversubscribed does: `tune` tries it first, bench_advice applies it."""
    for card in ("cpu-oversubscribed", "cpu-contended"):
        found, _ = proposals([advice(card, suggested_blas_threads=1)], space())
        assert found == [(card, {"blas_threads": 1})], card


def test_evaluation_workers_are_not_tried_and_say_why():
    """advice #30 names workers for the evaluation DataLoader alone; the overrides would give
    them to every loader, and its passes are not in the steps a trial measures."""
    found, notes = proposals([advice("evaluation-input", suggested_workers=3)], space())
    assert found == []
    assert notes == ["advice evaluation-input: give the evaluation DataLoader workers (code "
                     "change; its passes are left out of the steps a trial measures); not "
                     "tried"]


def test_workers_started_every_pass_are_kept_and_an_evaluation_loaders_are_not_tried():
    knobs = {**space().knobs, "persistent_workers": Knob("persistent_workers", "reader",
                                                         "persistent_workers", (False, True),
                                                         False)}
    with_knob = Space(knobs=knobs)
    found, _ = proposals([advice("worker-start-per-pass", evaluation=False,
                                 suggested_persistent_workers=True)], with_knob)
    assert found == [("worker-start-per-pass", {"persistent_workers": True})]
    found, _ = proposals([advice("worker-start-per-pass", evaluation=True,
                                 suggested_persistent_workers=True)], with_knob)
    assert found == []
