"""Fluid 1.8's map-style data loading: `fluid.io.Dataset`, `fluid.io.BatchSampler`,
`default_collate_fn` and `fluid.io.DataLoader(dataset, ...)`.

A map-style loader is a GeneratorLoader (loader.py) fed by a batch generator over the batch
sampler: each batch is `collate_fn([dataset[i] for i in indices])`. With `num_workers=N` the
workers are the loader's own processes: every worker draws the pass's batch list alike (they
start from the same RNG state, so a shuffled order is the same in all of them), keeps batches
id, id + N, ... of it, and the loader takes them round robin: the batches come in the
sampler's order, as with no workers. Argument checks are assertions, as in Paddle 1.8.
"""

import numpy as np

from .worker_main import get_worker_info


class Dataset:
    """A map-style data set: `dataset[i]` is sample i (a list or tuple of fields, or one
    array), `len(dataset)` the number of samples."""

    def __getitem__(self, idx):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")


class BatchSampler:
    """Lists of sample indices, `batch_size` at a time, over `range(len(dataset))` or the
    given `indices` (shuffled at each pass with `shuffle=True`; the last short list kept
    unless `drop_last=True`)."""

    def __init__(self, dataset=None, indices=None, shuffle=False, batch_size=1,
                 drop_last=False):
        if dataset is None:
            assert indices is not None, "BatchSampler: give either dataset or indices"
            assert isinstance(indices, (list, tuple)), \
                f"BatchSampler: indices must be a list or tuple, got {type(indices).__name__}"
            self.indices = list(indices)
        else:
            assert isinstance(dataset, Dataset), \
                f"BatchSampler: dataset must be a fluid.io.Dataset, got {type(dataset).__name__}"
            assert indices is None, "BatchSampler: give dataset or indices, not both"
            self.indices = list(range(len(dataset)))
        assert isinstance(batch_size, int) and not isinstance(batch_size, bool) \
            and batch_size > 0, f"BatchSampler: batch_size must be a positive integer, " \
                                f"got {batch_size!r}"
        assert isinstance(shuffle, bool), f"BatchSampler: shuffle must be a bool, got {shuffle!r}"
        assert isinstance(drop_last, bool), \
            f"BatchSampler: drop_last must be a bool, got {drop_last!r}"
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last

    def __iter__(self):
        if self.shuffle:
            np.random.shuffle(self.indices)
        for start in range(0, len(self.indices), self.batch_size):
            batch = self.indices[start:start + self.batch_size]
            if len(batch) == self.batch_size or not self.drop_last:
                yield batch

    def __len__(self):
        full, rest = divmod(len(self.indices), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)


def default_collate_fn(batch):
    """Samples (each a list of fields, or one array) to one stacked array per field."""
    if isinstance(batch[0], np.ndarray):
        return [np.stack(batch, axis=0)]
    fields = len(batch[0])
    return [np.stack([sample[k] for sample in batch], axis=0) for k in range(fields)]


def loader_args(dataset, feed_list, places, return_list, batch_sampler, batch_size, shuffle,
                drop_last, num_workers, timeout):
    """Paddle 1.8's checks of DataLoader(dataset, ...); the batch sampler to use."""
    assert isinstance(dataset, Dataset), \
        f"DataLoader: dataset must be a fluid.io.Dataset, got {type(dataset).__name__}"
    assert feed_list is not None, \
        "DataLoader: feed_list is required in static-graph mode (the fluid.data variables " \
        "the batches feed)"
    assert places is not None, "DataLoader: places cannot be None (e.g. fluid.cpu_places())"
    assert isinstance(num_workers, int) and num_workers >= 0, \
        f"DataLoader: num_workers must be a non-negative integer, got {num_workers!r}"
    assert timeout >= 0, f"DataLoader: timeout must be >= 0, got {timeout!r}"
    if batch_sampler is not None:
        assert isinstance(batch_sampler, BatchSampler), \
            "DataLoader: batch_sampler must be a fluid.io.BatchSampler"
        assert batch_size == 1 and not shuffle and not drop_last, \
            "DataLoader: batch_size, shuffle and drop_last are the batch_sampler's when " \
            "batch_sampler is given"
        return batch_sampler
    assert batch_size is not None and batch_size > 0, \
        "DataLoader: batch_size must be positive when batch_sampler is not given"
    return BatchSampler(dataset=dataset, batch_size=batch_size, shuffle=shuffle,
                        drop_last=drop_last)


class BatchGenerator:
    """The loader's batch generator: the sampler's batches collated, a worker's share of them
    in a worker process (worker_init_fn(id) first)."""

    def __init__(self, dataset, batch_sampler, collate_fn=None, worker_init_fn=None):
        self.dataset, self.batch_sampler = dataset, batch_sampler
        self.collate_fn = collate_fn or default_collate_fn
        self.worker_init_fn = worker_init_fn

    def __call__(self):
        batches = list(self.batch_sampler)  # before get_worker_info() reseeds a worker
        info = get_worker_info()
        if info is not None:
            if self.worker_init_fn is not None:
                self.worker_init_fn(info.id)
            batches = batches[info.id::info.num_workers]
        for indices in batches:
            yield self.collate_fn([self.dataset[i] for i in indices])
