"""lookup_table (fluid.layers.embedding, ids [..., 1]) and lookup_table_v2 (fluid.embedding,
ids of any shape). With is_sparse=True the weight's gradient is a SelectedRows holding only
the looked-up rows, so optimizers update just those rows."""

import numpy as np

from ..dtypes import VarType
from .registry import defop


def _grad_type(slot, attrs):
    return VarType.SELECTED_ROWS if slot == "W" and attrs.get("is_sparse") else None


def _lookup(name, trailing_one):
    opdef = defop(name, inputs=("W", "Ids"), outputs=("Out",),
                  attrs={"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                         "remote_prefetch": False})

    @opdef.infer
    def _shape(ic):
        w, ids = ic.input("W"), ic.input("Ids")
        ic.check(len(w.shape) == 2, f"the table {ic.describe('W')} must be 2-D [vocab, dim]")
        ic.check(ids.dtype.kind in "iu", f"ids must be integers (int64), got {ids.dtype.name}")
        if trailing_one:
            ic.check(len(ids.shape) >= 1 and ids.shape[-1] in (1, -1),
                     f"{ic.describe('Ids')} must end in a dimension of 1 ([batch, 1]); use "
                     f"fluid.embedding for ids without it")
            out = list(ids.shape[:-1]) + [w.shape[1]]
        else:
            out = list(ids.shape) + [w.shape[1]]
        ic.set_output("Out", out, w.dtype)

    def flat_ids(ids):
        return ids.reshape(-1)

    @opdef.kernel
    def _forward(ctx, ins, attrs):
        w, ids = ins["W"], ins["Ids"]
        flat = flat_ids(ids)
        vocab = w.shape[0]
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= vocab):
            bad = int(flat.min()) if int(flat.min()) < 0 else int(flat.max())
            raise ValueError(f"id {bad} is out of range [0, {vocab}) of the embedding table "
                             f"{ctx.op.input('W')[0]!r}; check the vocabulary size")
        out = w[flat]
        pad = attrs["padding_idx"]
        if pad is not None and pad >= 0:
            out[flat == pad] = 0
        shape = ids.shape[:-1] if trailing_one else ids.shape
        return {"Out": out.reshape(tuple(shape) + (w.shape[1],))}

    @opdef.grad(uses=("W", "Ids"), inputs=("W",), var_type=_grad_type)
    def _backward(ctx, ins, attrs):
        from ..tensor import SelectedRows
        xp, w, ids, dout = ctx.xp, ins["W"], ins["Ids"], ins["Out@GRAD"]
        flat = flat_ids(ids).astype(np.int64, copy=False)
        values = dout.reshape(-1, w.shape[1])
        pad = attrs["padding_idx"]
        if pad is not None and pad >= 0:
            values = values * (flat != pad)[:, None]
        if attrs["is_sparse"]:
            return {"W@GRAD": SelectedRows(flat, values, w.shape[0])}
        dw = xp.zeros_like(w)
        xp.add.at(dw, flat, values)
        return {"W@GRAD": dw}

    return opdef


_lookup("lookup_table", trailing_one=True)
_lookup("lookup_table_v2", trailing_one=False)
