"""fluid.contrib.layers: the RNN building blocks of Fluid 1.8's contrib package."""

from . import rnn_impl  # noqa: F401
from .rnn_impl import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm  # noqa: F401

__all__ = list(rnn_impl.__all__)
