"""fluid.layers: functions that append ops (and their parameters) to the default programs."""

from .io import legacy_data as data
from .nn import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .sequence import *  # noqa: F401,F403
from . import math_op_patch

math_op_patch.install()
