"""fluid.contrib: the pieces of Fluid 1.8's contrib package this runtime provides."""

from . import layers  # noqa: F401
from .layers import *  # noqa: F401,F403
from .memory_usage_calc import memory_usage  # noqa: F401

__all__ = ["memory_usage"] + layers.__all__
