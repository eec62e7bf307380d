"""paddle.reader: decorators that build, combine and speed up Paddle 1.x sample readers."""

from .decorator import (ComposeNotAligned, batch, buffered, cache, chain, compose, firstn,
                        map_readers, multiprocess_reader, shuffle, xmap_readers)

__all__ = ["map_readers", "buffered", "compose", "chain", "shuffle", "ComposeNotAligned",
           "firstn", "xmap_readers", "multiprocess_reader", "cache", "batch"]
