"""Sources: where measurements come from. Each framework's source lives in its own package,
imported only when that framework runs (`source_for`); its code writer (how a change is
written in that framework's code) imports nothing of the framework, so a profile's advice can
be rendered anywhere (`code_for`)."""

import importlib

from .base import EVENTS, Source, Subscription
from .code import CodeWriter, code_for

SOURCES = {"fluid": "paddletune.sources.fluid.source:FluidSource",
           "torch": "paddletune.sources.torch.source:TorchSource",
           "paddle": "paddletune.sources.paddle.source:PaddleSource"}


def source_for(framework: str) -> Source:
    """A new source of `framework` (its package imported now)."""
    target = SOURCES.get(framework)
    if target is None:
        raise ValueError(f"no source for the framework {framework!r}; known: "
                         f"{', '.join(SOURCES)}")
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)()


__all__ = ["EVENTS", "CodeWriter", "Source", "Subscription", "code_for", "source_for"]
