"""The PaddlePaddle versions the Paddle source supports, checked before anything of paddle
beyond its top package is imported (an older paddle lacks the modules the hooks use, and
would fail there with a message about a module instead of its version). Pure: imports
nothing of paddle."""

import re

SUPPORTED = ((2, 6), (4, 0))  # from 2.6 up to (not including) 4.0


class UnsupportedPaddle(RuntimeError):
    """The installed paddle is a version paddletune's Paddle source does not support."""


def version_tuple(text: str):
    """(major, minor) of a version string; None for a development build ("0.0.0")."""
    numbers = [int(n) for n in re.findall(r"\d+", text.split("+")[0])[:2]]
    if len(numbers) < 2 or numbers == [0, 0]:
        return None
    return tuple(numbers)


def check_version(text: str):
    version = version_tuple(text)
    if version is not None and not SUPPORTED[0] <= version < SUPPORTED[1]:
        raise UnsupportedPaddle(
            f"paddletune supports PaddlePaddle 2.6 to 3.x; found {text}"
            + (" (PaddlePaddle 1.x scripts run on the fluid source)" if version < (2, 0)
               else ""))
