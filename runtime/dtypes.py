"""Data types: Fluid's dtype names and VarType enum mapped onto NumPy dtypes."""

import numpy as np

_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "int8": "int8", "uint8": "uint8", "int16": "int16",
    "int32": "int32", "int": "int32", "int64": "int64", "long": "int64",
    "bool": "bool",
}


def convert_dtype(dtype) -> np.dtype:
    """Any dtype spelling Fluid accepts ('float32', np.float32, VarType.FP32, ...) -> np.dtype."""
    if isinstance(dtype, np.dtype):
        return dtype
    if isinstance(dtype, str):
        key = dtype.lower()
        if key not in _ALIASES:
            raise TypeError(f"unsupported dtype {dtype!r}; use one of "
                            f"{', '.join(sorted(set(_ALIASES.values())))}")
        return np.dtype(_ALIASES[key])
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unsupported dtype {dtype!r}") from None
    if result.name not in _ALIASES.values():
        raise TypeError(f"unsupported dtype {result.name!r}")
    return result


def dtype_name(dtype) -> str:
    return convert_dtype(dtype).name


def is_float(dtype) -> bool:
    return convert_dtype(dtype).kind == "f"


class VarType:
    """Paddle's core.VarDesc.VarType: element types are NumPy dtypes (so `v.dtype == VarType.FP32`
    and `v.dtype == 'float32'` both hold); variable kinds are strings."""

    FP16 = np.dtype("float16")
    FP32 = np.dtype("float32")
    FP64 = np.dtype("float64")
    INT8 = np.dtype("int8")
    UINT8 = np.dtype("uint8")
    INT16 = np.dtype("int16")
    INT32 = np.dtype("int32")
    INT64 = np.dtype("int64")
    BOOL = np.dtype("bool")
    LOD_TENSOR = "lod_tensor"
    SELECTED_ROWS = "selected_rows"
    LOD_TENSOR_ARRAY = "lod_tensor_array"
    READER = "reader"
    FEED_MINIBATCH = "feed_minibatch"
    FETCH_LIST = "fetch_list"
    STEP_SCOPES = "step_scopes"
    PLACE_LIST = "place_list"
    LOD_RANK_TABLE = "lod_rank_table"
    RAW = "raw"


class VarDesc:
    VarType = VarType
