"""fluid.layers.device: get_places (deprecated since Fluid 1.6; kept for the scripts that still
import it). The variable it returns names the places; only Fluid's removed ParallelDo read it,
so no op computes it here."""

from ..dtypes import VarType
from ..layer_helper import LayerHelper


def get_places(device_count=None, device_type=None):
    """A PLACE_LIST variable (device_type 'CPU' or 'CUDA'; device_count 0 or None: all)."""
    helper = LayerHelper("get_places")
    return helper.create_variable(name=helper.name + ".out", type=VarType.PLACE_LIST,
                                  stop_gradient=True)


__all__ = []
