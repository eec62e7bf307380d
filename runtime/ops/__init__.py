"""Op kernels. Importing this package registers every op in ops.registry.REGISTRY."""

from . import registry  # noqa: F401
from . import math, fill, activation, loss, optim, embedding  # noqa: F401
from . import tensor, reduce, sequence, conv, pool, norm  # noqa: F401
from . import compare, array, control, sort, misc, optim_more, activation_more  # noqa: F401
from . import lod_ops, loss_more, py_func, random_like  # noqa: F401
from . import norm_more  # noqa: F401
from . import metrics  # noqa: F401
from . import indexing_ops  # noqa: F401
from . import fluid18_more  # noqa: F401
from . import conv3d, crf, decode_ops, layer_norm, lstm  # noqa: F401

REGISTRY = registry.REGISTRY
