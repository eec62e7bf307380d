"""Unique names for layers, parameters and temporaries (fc_0, fc_0.w_0, fc_0.tmp_1, ...)."""

import contextlib
from collections import defaultdict


class UniqueNameGenerator:
    """Hands out `<prefix><key>_<n>` with a counter per key."""

    def __init__(self, prefix=None):
        self.ids = defaultdict(int)
        self.prefix = prefix or ""

    def __call__(self, key):
        n = self.ids[key]
        self.ids[key] += 1
        return f"{self.prefix}{key}_{n}"


generator = UniqueNameGenerator()


def generate(key):
    return generator(key)


def generate_with_ignorable_key(key):
    return generator(key)


def switch(new_generator=None):
    """Install a new generator (or a fresh one) and return the old."""
    global generator
    old = generator
    generator = new_generator if new_generator is not None else UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator=None):
    """Names restart inside the block (used to share parameters between two programs).
    new_generator may be a prefix string or a UniqueNameGenerator."""
    if isinstance(new_generator, (str, bytes)):
        prefix = new_generator.decode() if isinstance(new_generator, bytes) else new_generator
        new_generator = UniqueNameGenerator(prefix)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
