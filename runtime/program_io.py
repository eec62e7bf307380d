"""Programs as bytes: what save_inference_model writes as `__model__` and
Program.parse_from_string / Program.desc.serialize_to_string read and write.

Format (paddletune's own, not Paddle's ProgramDesc protobuf): UTF-8 JSON
`{"format": "paddletune-program", "version": 1, "random_seed": int, "feed": [names],
"fetch": [names], "blocks": [{"idx", "parent_idx", "vars": [...], "ops": [...]}]}`. A variable
keeps its shape, dtype, kind, LoD level and flags (and a parameter its trainable flag and
learning-rate factor); an op its type, slots and attributes. Attribute values are JSON values,
with NumPy arrays as {"__ndarray__": values, "dtype"}, dtypes as {"__dtype__": name} and
sub-blocks as {"__block__": index}. Regularizers, clip and initializer objects of parameters
are not kept (Paddle's ProgramDesc does not keep them either).
"""

import json

import numpy as np

from .dtypes import convert_dtype
from .errors import SerializationError
from .framework import Block, Operator, Parameter, Program, Variable

FORMAT_NAME = "paddletune-program"
FORMAT_VERSION = 1
_VAR_FLAGS = ("persistable", "stop_gradient", "is_data", "need_check_feed")


def serialize(program, feed_names=None, fetch_names=None):
    """The program as bytes (feed/fetch: the inference targets, when it is a model)."""
    data = {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "random_seed": program.random_seed,
            "feed": list(feed_names if feed_names is not None else program._feed_targets),
            "fetch": list(fetch_names if fetch_names is not None else program._fetch_targets),
            "blocks": [_block(b) for b in program.blocks]}
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


def parse(raw, where="<bytes>"):
    """A Program from serialize()'s bytes (SerializationError when they are not that)."""
    data = _load_json(raw, where)
    program = Program()
    program._seed = int(data.get("random_seed") or 0)
    program.blocks = [Block(program, b["idx"], b["parent_idx"]) for b in data["blocks"]]
    callsite = (where, 0)
    for block, spec in zip(program.blocks, data["blocks"]):
        for v in spec["vars"]:
            var = _make_var(block, v, callsite)
            block.vars[var.name] = var
    for block, spec in zip(program.blocks, data["blocks"]):
        for o in spec["ops"]:
            attrs = {k: _decode(v, program) for k, v in o["attrs"].items()}
            block.ops.append(Operator(block, o["type"], o["inputs"], o["outputs"], attrs,
                                      callsite))
    program._feed_targets = list(data.get("feed") or [])
    program._fetch_targets = list(data.get("fetch") or [])
    program._bump()
    return program


def _load_json(raw, where):
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    try:
        data = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise SerializationError(f"{where} is not a program saved by this runtime "
                                 f"({type(err).__name__}: {err}); a model saved by PaddlePaddle "
                                 f"itself (protobuf) cannot be read") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise SerializationError(f"{where} is not a {FORMAT_NAME} file")
    if data.get("version") != FORMAT_VERSION:
        raise SerializationError(f"{where} has format version {data.get('version')!r}; this "
                                 f"runtime reads version {FORMAT_VERSION}")
    return data


# --- writing -------------------------------------------------------------------------------------
def _block(block):
    return {"idx": block.idx, "parent_idx": block.parent_idx,
            "vars": [_var(v) for v in block.vars.values()],
            "ops": [_op(op) for op in block.ops]}


def _var(var):
    out = {"name": var.name, "shape": list(var.shape) if var.shape is not None else None,
           "dtype": var.dtype.name if var.dtype is not None else None, "type": var.type,
           "lod_level": var.lod_level}
    out.update({flag: bool(getattr(var, flag)) for flag in _VAR_FLAGS})
    if isinstance(var, Parameter):
        out["parameter"] = {"trainable": bool(var.trainable),
                            "learning_rate": var.optimize_attr.get("learning_rate", 1.0)}
    return out


def _op(op):
    attrs = {}
    for key, value in op.attrs.items():
        try:
            attrs[key] = _encode(value)
        except TypeError:
            raise SerializationError(f"op {op.type}{op.where()}: attribute {key!r} holds a "
                                     f"{type(value).__name__}, which a saved program cannot "
                                     f"keep") from None
    return {"type": op.type, "inputs": op.inputs, "outputs": op.outputs, "attrs": attrs}


def _encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Block):
        return {"__block__": value.idx}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.name}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.dtype):
        return {"__dtype__": value.name}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"__dict__": {str(k): _encode(v) for k, v in value.items()}}
    raise TypeError(type(value).__name__)


# --- reading -------------------------------------------------------------------------------------
def _make_var(block, spec, callsite):
    kwargs = dict(name=spec["name"], shape=spec["shape"],
                  dtype=convert_dtype(spec["dtype"]) if spec["dtype"] else None,
                  type=spec["type"], lod_level=spec["lod_level"], callsite=callsite,
                  **{flag: spec.get(flag, False) for flag in _VAR_FLAGS})
    param = spec.get("parameter")
    if param is None:
        return Variable(block, **kwargs)
    kwargs.pop("stop_gradient")
    var = Parameter(block, trainable=param["trainable"],
                    optimize_attr={"learning_rate": param["learning_rate"]}, **kwargs)
    var.stop_gradient = spec.get("stop_gradient", False)
    return var


def _decode(value, program):
    if isinstance(value, list):
        return [_decode(v, program) for v in value]
    if not isinstance(value, dict):
        return value
    if "__block__" in value:
        return program.blocks[value["__block__"]]
    if "__ndarray__" in value:
        return np.array(value["__ndarray__"], dtype=value["dtype"])
    if "__dtype__" in value:
        return np.dtype(value["__dtype__"])
    if "__dict__" in value:
        return {k: _decode(v, program) for k, v in value["__dict__"].items()}
    return value
