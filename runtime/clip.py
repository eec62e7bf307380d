"""Gradient clipping: by value, by norm (per gradient), by global norm (all gradients together).

Pass one to an optimizer (`SGD(..., grad_clip=GradientClipByGlobalNorm(1.0))`, Paddle 1.8) or
install it for some/all parameters with `set_gradient_clip` (Paddle 1.5)."""

from .dtypes import VarType
from .framework import OpRole, default_main_program


class GradientClipBase:
    """`need_clip(param) -> bool` (Paddle 1.8) picks the parameters whose gradients are clipped;
    the others pass through unchanged. Pairs whose gradient is None are dropped."""

    def __init__(self, need_clip=None):
        if need_clip is not None and not callable(need_clip):
            raise TypeError("need_clip must be a function taking a Parameter and returning bool, "
                            f"got {type(need_clip).__name__}")
        self._need_clip_func = need_clip

    def _wants(self, param):
        return self._need_clip_func is None or bool(self._need_clip_func(param))

    def __call__(self, params_grads):
        params_grads = [(p, g) for p, g in params_grads if g is not None]
        chosen = [(p, g) for p, g in params_grads if self._wants(p)]
        if not chosen:
            return params_grads
        block = chosen[0][1].block
        with block.program._role_guard(OpRole.Optimize):
            clipped = dict(zip((id(p) for p, _ in chosen), self._clip(block, chosen)))
        return [clipped.get(id(p), (p, g)) for p, g in params_grads]

    def _clip(self, block, params_grads):
        raise NotImplementedError

    @staticmethod
    def _new_grad(block, grad, suffix):
        return block.create_var(name=f"{grad.name}@{suffix}", shape=grad.shape, dtype=grad.dtype,
                                type=grad.type)


class GradientClipByValue(GradientClipBase):
    """Clip every gradient element into [min, max] (min defaults to -max)."""

    def __init__(self, max, min=None, need_clip=None):
        super().__init__(need_clip)
        self.max = float(max)
        self.min = -self.max if min is None else float(min)
        if self.min > self.max:
            raise ValueError(f"GradientClipByValue needs min <= max, got {self.min} > {self.max}")

    def __str__(self):
        return f"Gradient Clip By Value, min = {self.min:f}, max={self.max:f}"

    def _clip(self, block, params_grads):
        out = []
        for param, grad in params_grads:
            new = self._new_grad(block, grad, "CLIP")
            block.append_op("clip", inputs={"X": grad}, outputs={"Out": new},
                            attrs={"min": self.min, "max": self.max})
            out.append((param, new))
        return out


class GradientClipByNorm(GradientClipBase):
    """Scale each gradient so its L2 norm is at most clip_norm."""

    def __init__(self, clip_norm, need_clip=None):
        super().__init__(need_clip)
        self.clip_norm = float(clip_norm)

    def __str__(self):
        return f"Gradient Clip By Norm, clip_norm={self.clip_norm:f}"

    def _clip(self, block, params_grads):
        out = []
        for param, grad in params_grads:
            new = self._new_grad(block, grad, "CLIP")
            block.append_op("clip_by_norm", inputs={"X": grad}, outputs={"Out": new},
                            attrs={"max_norm": self.clip_norm})
            out.append((param, new))
        return out


class GradientClipByGlobalNorm(GradientClipBase):
    """Scale all gradients by clip_norm / max(global_norm, clip_norm), where global_norm is the
    L2 norm of all gradients together (sparse gradients count each row once)."""

    def __init__(self, clip_norm, group_name="default_group", need_clip=None):
        super().__init__(need_clip)
        self.clip_norm = float(clip_norm)
        self.group_name = group_name

    def __str__(self):
        return f"Gradient Clip By GlobalNorm, global_norm={self.clip_norm:f}"

    def _clip(self, block, params_grads):
        squares = []
        for _, grad in params_grads:
            sq = block.create_var(name=f"{grad.name}@SQNORM", shape=[1], dtype=grad.dtype)
            block.append_op("squared_l2_norm", inputs={"X": grad}, outputs={"Out": sq})
            squares.append(sq)
        dtype = params_grads[0][1].dtype
        total = _tmp(block, "global_norm_sq", dtype)
        block.append_op("sum", inputs={"X": squares}, outputs={"Out": total})
        norm = _tmp(block, "global_norm", dtype)
        block.append_op("sqrt", inputs={"X": total}, outputs={"Out": norm})
        limit = _tmp(block, "clip_norm", dtype)
        block.append_op("fill_constant", outputs={"Out": limit},
                        attrs={"shape": [1], "dtype": dtype.name, "value": self.clip_norm})
        denom = _tmp(block, "clip_denominator", dtype)
        block.append_op("elementwise_max", inputs={"X": norm, "Y": limit},
                        outputs={"Out": denom})
        factor = _tmp(block, "clip_factor", dtype)
        block.append_op("elementwise_div", inputs={"X": limit, "Y": denom},
                        outputs={"Out": factor})
        out = []
        for param, grad in params_grads:
            new = self._new_grad(block, grad, "CLIP")
            block.append_op("scale", inputs={"X": grad, "ScaleTensor": factor},
                            outputs={"Out": new})
            out.append((param, new))
        return out


def _tmp(block, key, dtype):
    from . import unique_name
    return block.create_var(name=unique_name.generate(key), shape=[1], dtype=dtype)


# Paddle 2.0 spellings, accepted too
ClipGradByValue = GradientClipByValue
ClipGradByNorm = GradientClipByNorm
ClipGradByGlobalNorm = GradientClipByGlobalNorm


def set_gradient_clip(clip, param_list=None, program=None):
    """Paddle 1.5: use `clip` for the given parameters (default: all of the program's)."""
    if not isinstance(clip, GradientClipBase):
        raise TypeError(f"set_gradient_clip needs a GradientClip* object, got {clip!r}")
    program = program or default_main_program()
    params = program.all_parameters() if param_list is None else [
        program.global_block().var(p) if isinstance(p, str) else p for p in param_list]
    for param in params:
        param.gradient_clip_attr = clip


def append_gradient_clip_ops(params_grads, clip=None):
    """Apply the optimizer's clip to all, or each parameter's own clip to its gradient."""
    if clip is not None:
        return clip(params_grads)
    groups = {}
    for param, grad in params_grads:
        groups.setdefault(id(param.gradient_clip_attr), (param.gradient_clip_attr, []))[1].append(
            (param, grad))
    out = []
    for clip_attr, pairs in groups.values():
        out.extend(clip_attr(pairs) if clip_attr is not None else pairs)
    order = {p.name: i for i, (p, _) in enumerate(params_grads)}
    return sorted(out, key=lambda pg: order[pg[0].name])


def is_sparse(grad):
    return grad.type == VarType.SELECTED_ROWS
