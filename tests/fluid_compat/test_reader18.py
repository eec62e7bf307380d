"""paddle.fluid.reader's Fluid 1.8 names (issue 27): DataLoaderBase, keep_data_loader_order,
and a DataLoader's _reset ending a pass left early."""

import numpy as np
import pytest

import runtime as fluid
from runtime.reader import DataLoaderBase, keep_data_loader_order


def test_data_loader_base_is_abstract():
    loader = DataLoaderBase()
    assert loader() is loader
    with pytest.raises(NotImplementedError):
        iter(loader)
    with pytest.raises(NotImplementedError):
        loader.next()


def test_keep_data_loader_order_reads_and_sets_the_switch():
    assert keep_data_loader_order() is True
    try:
        keep_data_loader_order(False)
        assert keep_data_loader_order() is False
        with pytest.raises(TypeError, match="one bool"):
            keep_data_loader_order(1)
    finally:
        keep_data_loader_order(True)


def _counting_batches():
    n = 0
    while True:
        yield (np.full((2, 3), n, dtype="float32"),)
        n += 1


@pytest.mark.parametrize("iterable", [True, False])
def test_reset_after_an_early_stop_starts_the_next_pass_from_the_beginning(iterable):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = fluid.data("x", [None, 3], "float32")
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4,
                                                    iterable=iterable)
        assert isinstance(loader, DataLoaderBase)
        loader.set_batch_generator(_counting_batches, places=fluid.CPUPlace())
        exe = fluid.Executor(fluid.CPUPlace())
        for _ in range(3):  # passes, each left after 5 batches of an endless generator
            seen = []
            if iterable:
                for data in loader():
                    seen.append(exe.run(main, feed=data, fetch_list=[x])[0][0, 0])
                    if len(seen) == 5:
                        break
                loader._reset()
            else:
                loader.start()
                while len(seen) < 5:
                    seen.append(exe.run(main, fetch_list=[x])[0][0, 0])
                loader.reset()
            assert seen == [0, 1, 2, 3, 4]
        assert loader.queue.size() == 0


# --- map-style loading: fluid.io.Dataset, BatchSampler, DataLoader(dataset, ...) -------------
class Numbers(fluid.io.Dataset):
    """Sample i: x = [i, i, i] + the worker's offset (set by worker_init_fn), y = [i % 2]."""

    offset = 0

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return np.full([3], i + Numbers.offset, "float32"), np.array([i % 2], "int64")

    def __len__(self):
        return self.n


def _set_offset(worker_id):
    Numbers.offset = 100 * (worker_id + 1)


def test_batch_sampler_as_paddle():
    sampler = fluid.io.BatchSampler(dataset=Numbers(10), batch_size=4)
    assert list(sampler) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and len(sampler) == 3
    dropping = fluid.io.BatchSampler(indices=[5, 6, 7], batch_size=2, drop_last=True)
    assert list(dropping) == [[5, 6]] and len(dropping) == 1
    shuffled = fluid.io.BatchSampler(indices=list(range(9)), batch_size=3, shuffle=True)
    assert sorted(i for b in shuffled for i in b) == list(range(9))
    with pytest.raises(AssertionError, match="dataset or indices"):
        fluid.io.BatchSampler()
    with pytest.raises(AssertionError, match="batch_size must be a positive integer"):
        fluid.io.BatchSampler(indices=[1], batch_size=0)


def test_default_collate_fn_stacks_each_field():
    one, two = (np.zeros(2), np.array([1])), (np.ones(2), np.array([0]))
    stacked = fluid.io.default_collate_fn([one, two])
    assert [a.shape for a in stacked] == [(2, 2), (2, 1)]
    assert fluid.io.default_collate_fn([np.zeros(3), np.ones(3)])[0].shape == (2, 3)


def _map_style_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        y = fluid.data("y", [None, 1], "int64")
    return main, x, y


@pytest.mark.parametrize("num_workers", [0, 2])
def test_map_style_loader_gives_every_sample_once_per_pass(num_workers):
    main, x, y = _map_style_program()
    with fluid.scope_guard(fluid.Scope()):
        loader = fluid.io.DataLoader(Numbers(10), feed_list=[x, y],
                                     places=fluid.cpu_places(1), batch_size=4, shuffle=True,
                                     num_workers=num_workers)
        assert len(loader) == 3
        exe = fluid.Executor(fluid.CPUPlace())
        orders = []
        for _ in range(2):
            xs, ys = [], []
            for data in loader():
                xv, yv = exe.run(main, feed=data, fetch_list=[x, y])
                xs.append(xv[:, 0].astype(int).tolist())
                ys.extend(yv[:, 0].tolist())
            assert [len(b) for b in xs] == [4, 4, 2]
            flat = [i for b in xs for i in b]
            assert sorted(flat) == list(range(10)) and ys == [i % 2 for i in flat]
            orders.append(flat)
        assert orders[0] != orders[1]  # shuffled again at each pass (1 in 10! to fail)


def test_map_style_loader_runs_worker_init_fn_in_each_worker():
    main, x, y = _map_style_program()
    with fluid.scope_guard(fluid.Scope()):
        loader = fluid.io.DataLoader(Numbers(8), feed_list=[x, y],
                                     places=fluid.cpu_places(1), batch_size=2, num_workers=2,
                                     worker_init_fn=_set_offset, drop_last=True)
        exe = fluid.Executor(fluid.CPUPlace())
        firsts = [exe.run(main, feed=data, fetch_list=[x])[0][0, 0] for data in loader()]
    # batches 0, 2 from worker 0 (offset 100), 1, 3 from worker 1 (offset 200), in order
    assert firsts == [100.0, 202.0, 104.0, 206.0]
    assert Numbers.offset == 0  # the trainer's own class is untouched


def test_map_style_loader_checks_its_arguments_as_paddle():
    main, x, y = _map_style_program()
    with pytest.raises(AssertionError, match="must be a fluid.io.Dataset"):
        fluid.io.DataLoader([1, 2], feed_list=[x, y], places=fluid.cpu_places(1))
    sampler = fluid.io.BatchSampler(dataset=Numbers(4), batch_size=2)
    with pytest.raises(AssertionError, match="are the batch_sampler's"):
        fluid.io.DataLoader(Numbers(4), feed_list=[x, y], places=fluid.cpu_places(1),
                            batch_sampler=sampler, batch_size=2)
    with pytest.raises(AssertionError, match="places cannot be None"):
        fluid.io.DataLoader(Numbers(4), feed_list=[x, y])


def test_py_reader_loader_attribute_is_the_reader_itself():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        reader = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=True)
    reader.decorate_batch_generator(_counting_batches, places=fluid.CPUPlace())
    for data in reader._loader():
        assert np.array(data[0]["x"])[0, 0] == 0
        break
    reader._loader._reset()
    assert reader.queue.size() == 0


class _Custom(ValueError):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


@pytest.mark.parametrize("iterable", [True, False])
def test_a_failing_reader_reaches_the_consumer_as_enforce_not_met(iterable):
    """Fluid 1.8: the failed reader kills the queue and the run raises EnforceNotMet (what
    test_multiprocess_reader_exception catches); here it is also the generator's own class,
    with its attributes and message."""
    def gen():
        raise _Custom(7)
        yield [np.zeros((2, 3), "float32")]  # noqa: unreachable (makes gen a generator)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        y = x + 1
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2,
                                                    iterable=iterable)
    loader.set_batch_generator(gen, places=fluid.cpu_places(1))
    exe = fluid.Executor(fluid.CPUPlace())
    runs = 0
    with pytest.raises(fluid.core.EnforceNotMet) as info:
        if iterable:
            for data in loader():
                exe.run(main, feed=data, fetch_list=[y])
                runs += 1
        else:
            loader.start()
            while True:
                exe.run(main, fetch_list=[y])
                runs += 1
    assert runs == 0
    assert isinstance(info.value, _Custom) and info.value.code == 7
    assert str(info.value) == "code 7" and type(info.value).__name__ == "_Custom"
    if not iterable:
        loader.reset()
