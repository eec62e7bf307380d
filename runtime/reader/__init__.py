"""paddle.reader: decorators that build, combine and speed up Paddle 1.x sample readers; as
paddle.fluid.reader (runtime.compat), also Fluid 1.8's DataLoaderBase and
keep_data_loader_order."""

from .decorator import (ComposeNotAligned, batch, buffered, cache, chain, compose, firstn,
                        map_readers, multiprocess_reader, shuffle, xmap_readers)
from .loader import DataLoaderBase, GeneratorLoader, keep_data_loader_order

__all__ = ["map_readers", "buffered", "compose", "chain", "shuffle", "ComposeNotAligned",
           "firstn", "xmap_readers", "multiprocess_reader", "cache", "batch", "DataLoaderBase",
           "keep_data_loader_order"]
