"""Terminal and text output of paddletune; `rich` is imported only here and in `cli.py`."""
