"""paddletune: measure where training time and memory go, and say what to change."""

__version__ = "0.1.0"
