"""The installed distribution's version (pyproject.toml is the one source), for run outputs and
``ssvm_torch.__version__``."""
from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("ssvm-torch")
except PackageNotFoundError:                # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"
