"""Reader buffers in the CPU pool: a DataLoader's reader thread allocates its batches from the
pool tagged "reader", while the trainer thread's arrays keep the executor's tags."""

import gc
import threading
import time

import numpy as np

import runtime as fluid
from runtime import events, memory
from runtime.memory import numpy_hook

BATCH = (256, 784)


def test_a_tagged_handler_serves_another_thread_without_touching_the_pool_tag():
    pool = memory.pool_for(fluid.CPUPlace())
    gc.collect()  # an earlier test's reader batches still in cycles would be freed below
    before = pool.by_tag.get("reader", 0)
    made = []

    def reader_thread():
        with memory.tagged(pool, "reader"):
            made.append(np.ones(1 << 16, dtype="float32"))

    pool.tag = "activations"
    t = threading.Thread(target=reader_thread)
    t.start()
    t.join()
    assert pool.tag == "activations"
    assert pool.by_tag["reader"] - before >= (1 << 16) * 4
    assert numpy_hook.handler_for(pool, "reader") is numpy_hook.handler_for(pool, "reader")
    made.clear()
    gc.collect()
    assert pool.by_tag["reader"] == before
    pool.tag = "other"
    pool.check()


def test_dataloader_batches_are_counted_as_reader_memory():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, BATCH[1]])
        y = fluid.data("y", [None, 1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(x, 10), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=8)

    def gen():
        rng = np.random.default_rng(0)
        for _ in range(20):
            yield (rng.standard_normal(BATCH).astype("float32"),
                   rng.integers(0, 10, (BATCH[0], 1)))

    loader.set_batch_generator(gen, places=fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    records = []
    with events.subscribe("memory_step", records.append):
        for data in loader():
            exe.run(main, feed=data, fetch_list=[loss])
            time.sleep(0.02)  # slower than the reader: batches queue up
    batch_bytes = BATCH[0] * BATCH[1] * 4
    assert max(r.by_tag.get("reader", 0) for r in records) >= 2 * batch_bytes  # queued ones
    del data
    gc.collect()
    pool = memory.pool_for(fluid.CPUPlace())
    assert pool.by_tag.get("reader", 0) < batch_bytes  # the batches went back to the pool
    pool.check()


def test_the_generator_runs_on_numpys_allocator_and_its_batches_land_in_the_pool():
    """The user's generator's temporaries are not the batch's: they skip the pool's hook (a
    round trip into Python per array); the arrays the batch keeps are copied into the pool."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
    handlers = []
    data = np.arange(40, dtype="float32").reshape(10, 4)

    def gen():
        for i in range(4):
            handlers.append(numpy_hook.pooled(np.empty(16)))
            yield [data[i:i + 2] if i % 2 else np.full((2, 4), i, "float32")]

    loader.set_batch_generator(gen)
    got = [d[0]["x"] for d in loader()]
    assert handlers == [False] * 4
    made = np.array(got[0])  # (a LoDTensor's array)
    assert numpy_hook.pooled(got[0]._array())
    assert made.tolist() == [[0.0] * 4] * 2
    assert np.array(got[1]).tolist() == data[1:3].tolist()  # a view of the user's data
