"""An on-disk cache of featurized designs: named int64 arrays in one ``.npz`` per key.

The directory is ``$SSVM_TORCH_CACHE`` if set, else ``~/.cache/ssvm_torch``. A file holds its own
SHA-256 over the arrays' bytes; it is read with ``allow_pickle=False`` and a file that fails to load
or to verify is warned about and rebuilt (the cache is derived data: it never blocks a run).
Writes are atomic (temporary file + rename), so an interrupted run leaves no half file behind.
"""
from __future__ import annotations

import hashlib
import io
import os
import warnings
from pathlib import Path

import numpy as np

from ..atomic import atomic_write_bytes

FORMAT = "ssvm-features-2"


def cache_dir() -> Path:
    env = os.environ.get("SSVM_TORCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ssvm_torch"


def cache_key(*parts) -> str:
    """A short digest of the parts (template key, options, data checksums)."""
    return hashlib.sha256("\x00".join([FORMAT, *map(str, parts)]).encode()).hexdigest()[:32]


def file_digest(path) -> str:
    """The SHA-256 of a data file's bytes (a part of the cache keys: an edited file is another design)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _digest(arrays: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def load(key: str) -> dict | None:
    """The arrays stored under ``key``, or None when absent, unreadable or damaged (then warned)."""
    path = cache_dir() / f"{key}.npz"
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
        stored = arrays.pop("__sha256__").tobytes().decode("ascii")
        if stored != _digest(arrays):
            raise ValueError("SHA-256 mismatch")
    except Exception as e:                         # any damage: rebuild rather than fail the run
        warnings.warn(f"feature cache {path} is damaged ({type(e).__name__}: {e}); rebuilding it", stacklevel=2)
        return None
    return arrays


def save(key: str, arrays: dict) -> Path | None:
    """Stores ``arrays`` under ``key`` atomically; a cache that cannot be written is warned about."""
    payload = dict(arrays)
    payload["__sha256__"] = np.frombuffer(_digest(arrays).encode("ascii"), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **payload)
    try:
        return atomic_write_bytes(cache_dir() / f"{key}.npz", buf.getvalue())
    except OSError as e:
        warnings.warn(f"feature cache: cannot write to {cache_dir()} ({e}); set SSVM_TORCH_CACHE to a writable "
                      "folder to keep featurized designs between runs", stacklevel=2)
        return None
