"""`paddle.version` (the Paddle release this runtime follows) and fluid.require_version."""

import re
import warnings

full_version = "1.8.5"
major = "1"
minor = "8"
patch = "5"
rc = "0"
istaged = False
commit = "8e1712a71057e3ca06a2927ceec51c18cb171fdc"  # the v1.8.5 tag this runtime follows
with_mkl = "OFF"


def show():
    print(f"full_version: {full_version}\nmajor: {major}\nminor: {minor}\npatch: {patch}\n"
          f"rc: {rc}\ncommit: {commit}")


_FORMAT = re.compile(r"\d+(\.\d+){0,3}")


def _checked(value, what):
    if not isinstance(value, str):
        raise TypeError(f"The type of '{what}' in require_version must be str, but received "
                        f"{type(value)}.")
    found = _FORMAT.match(value)
    if found is None or found.group() != value:
        raise ValueError(f"The value of '{what}' in require_version must be in format "
                         f"'\\d+(\\.\\d+){{0,3}}', like '1.5.2.0', but received {value}")
    return (value.split(".") + ["0"] * 4)[:4]


def _cmp(a, b):
    for x, y in zip(a, b):
        if int(x) != int(y):
            return 1 if int(x) > int(y) else -1
    return 0


def require_version(min_version, max_version=None):
    """Raise when the installed version (this module's, read at call time) is below
    min_version or above max_version; a 0.0.0.0 (development) version only warns."""
    low = _checked(min_version, "min_version")
    high = _checked(max_version, "max_version") if max_version is not None else None
    installed = [major, minor, patch, rc]
    if _cmp(installed, ["0"] * 4) == 0:
        warnings.warn(f"PaddlePaddle version {min_version} or higher is required, but "
                      f"{full_version} installed, Maybe you are using a develop version, please "
                      f"make sure the version is good with your code.")
        return
    if high is not None and (_cmp(installed, high) > 0 or _cmp(installed, low) < 0):
        raise Exception(f"VersionError: PaddlePaddle version in [{min_version}, "
                        f"{max_version}] required, but {full_version} installed.")
    if high is None and _cmp(installed, low) < 0:
        raise Exception(f"VersionError: PaddlePaddle version {min_version} or higher is "
                        f"required, but {full_version} installed, please upgrade your "
                        f"PaddlePaddle to {min_version} or other higher version.")
