"""DataFeeder (arrives in a later commit)."""


class DataFeeder:
    pass
