"""fluid.layers: functions that append ops (and their parameters) to the default programs."""

from .io import legacy_data as data
from .nn import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .sequence import *  # noqa: F401,F403
from .control_flow import *  # noqa: F401,F403
from .extra import *  # noqa: F401,F403
from .learning_rate_scheduler import *  # noqa: F401,F403
from .py_reader import *  # noqa: F401,F403
from .lod import lod_append, lod_reset  # noqa: F401
from .dynamic_rnn import DynamicRNN  # noqa: F401
from .static_rnn import StaticRNN  # noqa: F401
from .nn_more import *  # noqa: F401,F403
from .norm_more import *  # noqa: F401,F403
from .metric_op import *  # noqa: F401,F403
from .ifelse import IfElse  # noqa: F401
from .rnn import GRUCell, LSTMCell, RNNCell, rnn  # noqa: F401  (rnn: the function)
from .indexing import sequence_mask  # noqa: F401
from .fluid18_more import *  # noqa: F401,F403
from .decode import *  # noqa: F401,F403
from .lstm import dynamic_lstm  # noqa: F401
from .crf import crf_decoding, linear_chain_crf  # noqa: F401
from . import control_flow, distributions, learning_rate_scheduler, utils  # noqa: F401
from . import math_op_patch

math_op_patch.install()
