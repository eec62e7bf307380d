"""The embedded runtime's source package: `source.FluidSource` (imports the runtime) and
`code.FluidCode` (pure text: how a change is written in Fluid code). Importing the package
imports neither; `FluidSource` loads the runtime when first named."""


def __getattr__(name):
    if name == "FluidSource":
        from .source import FluidSource
        return FluidSource
    raise AttributeError(name)
