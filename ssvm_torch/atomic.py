"""Atomic file writing, below every module that writes files (data caches, run outputs, checkpoints,
paths): a file is written to a temporary name in the same directory, fsynced and renamed over the
target (``os.replace``), so a killed run leaves the previous version intact, never a truncated one."""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

#: the files this process has written (atomically, so each is whole), each with the number of its last write:
#: what an interrupted command reports it leaves behind (:func:`ssvm_torch.errors.run_cli`)
WRITTEN: dict = {}
_WRITES = [0]


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
        _WRITES[0] += 1
        WRITTEN.pop(path, None)
        WRITTEN[path] = _WRITES[0]
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        interrupt = _interrupt_under(e)
        if interrupt is not None:            # a stop mid-write, which the writer's cleanup (torch.save) raised over
            raise interrupt from None
        full = _disk_full(path.parent, e)
        if full is not None:                 # the writer's own words (torch.save: "unexpected pos") hide the cause
            raise full from e
        raise
    return path


def _interrupt_under(e: BaseException) -> BaseException | None:
    """The stop that an exception ``e`` (not itself one) was raised while handling, if any: Ctrl-C
    (KeyboardInterrupt) or SIGTERM (the CLIs' ``Terminated``, Lightning's ``SIGTERMException``: every
    BaseException that is not an Exception) arriving during a write whose cleanup then failed (torch.save:
    "unexpected pos"), which the caller must see as the stop it is."""
    if not isinstance(e, Exception):
        return None
    seen, ctx = 0, e.__context__
    while ctx is not None and seen < 8:
        if not isinstance(ctx, Exception) and isinstance(ctx, BaseException):
            return ctx
        seen, ctx = seen + 1, ctx.__context__
    return None


def writes_so_far() -> int:
    """The number of atomic writes this process has made: a mark for :func:`written_files`."""
    return _WRITES[0]


def written_files(since: int = 0) -> list:
    """The files this process has written after the mark ``since`` (:func:`writes_so_far`), oldest first."""
    return [path for path, at in WRITTEN.items() if at > since]


def free_bytes(folder) -> int | None:
    """Bytes free on the file system of ``folder`` (None where it cannot be read)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _disk_full(folder: Path, error: BaseException) -> OSError | None:
    """An ENOSPC OSError naming ``folder`` when a failed write left its file system without room
    (under 1 MiB free), else None: writers report a full disk in their own words (torch.save raises
    RuntimeError "unexpected pos ..."), and the user needs to read "no space left"."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return None                           # already says so
    if not isinstance(error, (OSError, RuntimeError)):
        return None
    free = free_bytes(folder)
    if free is None or free >= 1 << 20:
        return None
    return OSError(errno.ENOSPC, f"No space left on device ({folder} has {free} bytes free)")


def atomic_write_bytes(path, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda f: f.write(data))
