"""The bounded blocking queue between a DataLoader's producer and the executor: Fluid's
`LoDTensorBlockingQueue`, whose size the playbook tells you to watch (`loader.queue.size()`).

Semantics (Fluid 1.x `blocking_queue.h`):
* capacity is counted in batches and must be > 0;
* `push` blocks while the queue is full and returns False (dropping the item) once it is closed;
* `pop` blocks while it is empty; when it is closed and empty the pass is over (`QueueClosed`);
* in speed-test mode (`pop(peek=True)`, driven by FLAGS_reader_queue_speed_test_mode) `pop`
  returns the head without removing it, so a queue that ever held a batch never empties.

Differences from Fluid, deliberate: `kill(error)` makes the next `pop` raise `error` at once,
even when batches are still queued (a failed producer stops training promptly instead of after
the queue drains); waiting consumers and producers wake up within the poll interval when the
queue is closed or killed, and a waiting `pop` stays interruptible by Ctrl-C.
"""

import collections
import threading
import time

__all__ = ["BlockingQueue", "QueueClosed"]


class QueueClosed(Exception):
    """pop() on a queue that is closed and empty: the pass is over."""


class BlockingQueue:
    def __init__(self, capacity):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"the reader queue's capacity must be a positive integer (batches), "
                             f"got {capacity!r}")
        self._capacity = capacity
        self._items = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._error = None

    # --- what the playbook reads ---------------------------------------------------------------
    def size(self):
        """Batches waiting in the queue now."""
        return len(self._items)

    def capacity(self):
        return self._capacity

    def is_closed(self):
        return self._closed

    # --- producer side ---------------------------------------------------------------------------
    def push(self, item):
        """Append `item`, waiting while the queue is full. Returns the queue's size after the
        push, or 0 when the queue is (or gets) closed: the consumer has gone, so the producer
        should stop."""
        with self._cond:
            while len(self._items) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                return 0
            self._items.append(item)
            self._cond.notify_all()
            return len(self._items)

    def close(self, drop=False):
        """No more pushes; pops drain what is queued (nothing with drop=True: a reset), then
        raise QueueClosed."""
        with self._cond:
            self._closed = True
            if drop:
                self._items.clear()
            self._cond.notify_all()

    def kill(self, error):
        """Close the queue, drop its batches and make the next pop raise `error`."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    # --- consumer side ---------------------------------------------------------------------------
    def pop(self, peek=False, timeout=None):
        """(item, size when pop was called: 0 when it had to wait). Blocks while empty; raises
        the kill() error, QueueClosed at the end of the pass, or TimeoutError after `timeout`
        seconds without a batch."""
        with self._cond:
            waited = False
            if not self._items and self._error is None and not self._closed:
                waited = True
                deadline = None if not timeout else time.monotonic() + timeout
                while not self._items and self._error is None and not self._closed:
                    if deadline is None:
                        self._cond.wait()
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise TimeoutError(timeout)
                        self._cond.wait(left)
            if self._error is not None:
                raise self._error
            size = len(self._items)
            if not size:
                raise QueueClosed()
            if peek:
                return self._items[0], 0 if waited else size
            item = self._items.popleft()
            self._cond.notify_all()
            return item, 0 if waited else size

    def __repr__(self):
        state = "killed" if self._error is not None else "closed" if self._closed else "open"
        return f"<BlockingQueue {len(self._items)}/{self._capacity} {state}>"
