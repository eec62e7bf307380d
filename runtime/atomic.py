"""Writing a file atomically: a reader (or a crash) never sees half of it.

`atomic_write(path, write)` calls write(binary file) on a new file next to `path`, flushes it
to the disk (fsync) and moves it over `path` with `os.replace`; on any failure the new file
is removed and `path` is left as it was. Used by fluid.io's saves and paddletune's records.
"""

import os
import secrets

TMP_PREFIX = ".tmp-"  # the temporary file: TMP_PREFIX + the name + "-" + random hex


def atomic_write(path, write):
    """Call write(binary file) on a temporary file in the directory of `path`, fsync it and
    move it over `path`. The file gets the mode a new file gets (0666 less the umask)."""
    directory = os.path.dirname(path) or "."
    fd, tmp = _create_temporary(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_temporary(directory, name):
    while True:
        tmp = os.path.join(directory, f"{TMP_PREFIX}{name}-{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
