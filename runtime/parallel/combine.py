"""Gradient-combining ops over places (sum in place order 0, 1, ..., so results are exactly
reproducible), the parameter broadcast of the Reduce strategy, and the fused optimizer update
over one flat buffer."""

import numpy as np

from ..tensor import SelectedRows


def _sum(values):
    if isinstance(values[0], SelectedRows):
        ids = np.concatenate([v.ids for v in values])
        vals = np.concatenate([v.value for v in values])
        return SelectedRows(ids, vals, values[0].full_height)
    total = np.add(values[0], values[1]) if len(values) > 1 else values[0].copy()
    for v in values[2:]:
        total += v
    return total


class AllReduce:
    """Sum each gradient over the places; every place gets the sum (one shared array)."""

    kind = "allreduce"

    def __init__(self, slots, n_places):
        self.slots, self.n = tuple(slots), n_places

    def __call__(self, envs):
        for s in self.slots:
            total = _sum([envs[p][s] for p in range(self.n)])
            for p in range(self.n):
                envs[p][s] = total


class FusedAllReduce(AllReduce):
    """A group of dense gradients summed through one flat buffer; each place's gradients
    become views of it."""

    kind = "fused_allreduce"

    def __call__(self, envs):
        n, slots = self.n, self.slots
        first = [envs[0][s] for s in slots]
        flat = np.concatenate([g.ravel() for g in first])
        for p in range(1, n):
            o = 0
            for s in slots:
                g = envs[p][s]
                flat[o:o + g.size] += g.ravel()
                o += g.size
        o = 0
        for s, g in zip(slots, first):
            view = flat[o:o + g.size].reshape(g.shape)
            o += g.size
            for p in range(n):
                envs[p][s] = view


class Reduce:
    """Sum one gradient over the places onto its owner place only."""

    kind = "reduce"

    def __init__(self, slot, owner, n_places):
        self.slots, self.owner, self.n = (slot,), owner, n_places

    def __call__(self, envs):
        s = self.slots[0]
        envs[self.owner][s] = _sum([envs[p][s] for p in range(self.n)])


class Broadcast:
    """Copy a parameter updated on its owner place into the other places' copies (in place)."""

    kind = "broadcast"

    def __init__(self, slot, owner, n_places):
        self.slot, self.owner, self.n = slot, owner, n_places

    def __call__(self, envs):
        s, src = self.slot, envs[self.owner][self.slot]
        for p in range(self.n):
            if p == self.owner:
                continue
            dst = envs[p][s]
            if isinstance(dst, np.ndarray) and dst.shape == src.shape and dst.flags.writeable:
                np.copyto(dst, src)
            else:
                envs[p][s] = src.copy()


class FusedOptimizer:
    """One optimizer op of `type` updating every parameter of its group through flat buffers
    (parameters and state become views of them; numerically identical, elementwise) where the
    gradients already are one (a fused all-reduce's output); otherwise each op of the group
    runs on its own parameter, as one scheduled unit."""

    SCALAR_STATE = ("Beta1Pow", "Beta2Pow")

    def __init__(self, steps):
        self.steps = tuple(steps)
        first = steps[0]
        self.kernel, self.ctx, self.attrs = first.fn, first.ctx, first.attrs
        self.slots = {}  # input slot -> [slot per op]
        for k, _ in first.ins1:
            self.slots[k] = [dict(st.ins1)[k] for st in steps]
        self.flats = {}  # input slot -> (flat, views)
        self.checked = False

    def __call__(self, env, run_op):
        if not self.checked:
            self._check_scalars(env)
        if not self.flats and _flat_base([env[s] for s in self.slots["Grad"]]) is None:
            # separate gradients (no fused all-reduce made them one buffer): each parameter is
            # updated where it is, the same elementwise result without first copying every
            # gradient into one flat buffer
            for step in self.steps:
                run_op(step, env)
            return
        ins = {}
        for k, slots in self.slots.items():
            if k == "LearningRate" or k in self.SCALAR_STATE:
                ins[k] = env[slots[0]]
            elif k == "Grad":
                ins[k] = _flat_of([env[s] for s in slots])
            else:
                ins[k] = self._flat(k, slots, env)
        res = self.kernel(self.ctx, ins, self.attrs)
        for k, slots in self.slots.items():
            out = res.get(k + "Out")
            if out is None or k == "Grad":
                continue
            if k in self.SCALAR_STATE:
                for s in slots[1:]:
                    env[s][...] = out
            elif out is not ins[k]:
                np.copyto(ins[k], out)

    def _flat(self, k, slots, env):
        arrays = [env[s] for s in slots]
        cached = self.flats.get(k)
        if cached is not None and all(a is v for a, v in zip(arrays, cached[1])):
            return cached[0]
        flat = np.concatenate([a.ravel() for a in arrays])
        views, o = [], 0
        for s, a in zip(slots, arrays):
            view = flat[o:o + a.size].reshape(a.shape)
            o += a.size
            env[s] = view
            views.append(view)
        self.flats[k] = (flat, tuple(views))
        return flat

    def _check_scalars(self, env):
        for k in self.SCALAR_STATE:
            slots = self.slots.get(k)
            if slots and any(not np.array_equal(env[s], env[slots[0]]) for s in slots[1:]):
                raise ValueError(f"fuse_all_optimizer_ops: the {k} accumulators of the "
                                 f"{self.steps[0].type} ops differ; they must be equal to be "
                                 f"fused (turn fuse_all_optimizer_ops off)")
        self.checked = True


def _flat_of(arrays):
    """One flat array with `arrays` in order: their common base when they already are
    consecutive views of one (a fused all-reduce's output), else a concatenation."""
    base = _flat_base(arrays)
    return base if base is not None else np.concatenate([a.ravel() for a in arrays])


def _flat_base(arrays):
    """The flat array `arrays` are consecutive views of, covering it whole, or None."""
    base = getattr(arrays[0], "base", None)
    if not (isinstance(base, np.ndarray) and base.ndim == 1 and base.flags.c_contiguous):
        return None
    addr = base.__array_interface__["data"][0]
    size = base.itemsize
    total = 0
    for a in arrays:
        if (getattr(a, "base", None) is not base or not a.flags.c_contiguous
                or a.__array_interface__["data"][0] != addr + total * size):
            return None
        total += a.size
    return base if total == base.size else None
