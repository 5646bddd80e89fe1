"""Atomic file writing, below every module that writes files (data caches, run outputs, checkpoints,
paths): a file is written to a temporary name in the same directory, fsynced and renamed over the
target (``os.replace``), so a killed run leaves the previous version intact, never a truncated one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the process umask (mkstemp's temporary files
    are 0o600, which a finished output must not keep)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path, write) -> Path:
    """Write ``path`` atomically: ``write(f)`` streams into a temporary file in the same directory,
    which is fsynced and renamed over ``path`` (no copy of the content in memory), with the
    permissions any other tool's output gets (the umask's). A write killed midway leaves the
    previous file intact and removes the temporary one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda f: f.write(data))
