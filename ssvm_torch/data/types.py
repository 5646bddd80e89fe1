"""Sequence data (:class:`ChainData`) and where the shipped datasets live.

The data directory is ``$SSVM_TORCH_DATA`` if set, else the ``datasets/`` folder of the source tree
(an editable install or a clone).
"""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import SSVMInputError, check, check_finite, warn_scale


def ptr_rows(ptr: torch.Tensor, rows: torch.Tensor):
    """(entries per row, the positions of the rows' entries in order) of CSR row pointers ``ptr``."""
    counts = ptr[rows + 1] - ptr[rows]
    nz = torch.repeat_interleave(ptr[rows] - torch.cumsum(counts, 0) + counts, counts) + \
        torch.arange(int(counts.sum()), device=ptr.device)
    return counts, nz


def data_dir() -> Path:
    """The folder of the datasets: ``$SSVM_TORCH_DATA`` (``--data-dir`` of the commands sets it), else
    the repository's ``datasets/`` beside the package (a source checkout). The wheel does not carry
    the datasets (datasets/README.md: they come without explicit licences)."""
    env = os.environ.get("SSVM_TORCH_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "datasets"
    if not path.is_dir():
        raise SSVMInputError(
            f"data directory: expected a folder with the datasets at {path}; set SSVM_TORCH_DATA to a copy of "
            "the repository's datasets/ folder (ssvm-train and ssvm-path also take --data-dir; the wheel does not "
            "include the datasets)")
    return path


@contextmanager
def data_folder(path):
    """``--data-dir``: read the datasets from ``path`` inside the block (the previous setting is back
    afterwards); None leaves everything as it is."""
    if path is None:
        yield
        return
    if not Path(path).is_dir():
        raise SSVMInputError(f"data_dir: expected a folder with the datasets, {path} "
                             f"{'is a file' if Path(path).exists() else 'does not exist'}")
    before = os.environ.get("SSVM_TORCH_DATA")
    os.environ["SSVM_TORCH_DATA"] = str(Path(path).resolve())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSVM_TORCH_DATA", None)
        else:
            os.environ["SSVM_TORCH_DATA"] = before


def numeric(x, field: str, dtype=torch.float64) -> torch.Tensor:
    """``x`` as a float tensor, or a clear error for strings, objects and ragged nesting."""
    try:
        arr = np.asarray(x)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"dtype {arr.dtype}")
        return torch.as_tensor(arr, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise SSVMInputError(f"{field}: expected a numeric array of one shape, got {type(x).__name__} "
                             f"({str(e).splitlines()[0][:80]})") from None


def integer_labels(y, field: str) -> torch.Tensor:
    """``y`` as int64 labels: integer dtypes are accepted, floats only with integral values (never truncated)."""
    arr = np.asarray(y)
    if arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all():
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise SSVMInputError(f"{field}: expected integer labels, got {arr.dtype} values "
                             f"{arr.reshape(-1)[:3].tolist()} (labels are never rounded)")
    return torch.as_tensor(arr.astype(np.int64))


_VERIFIED: dict = {}      # (path, size, mtime) -> True: a file is hashed once per process


def load_npz(name: str, keys) -> dict:
    """The arrays ``keys`` of the data file ``name`` (:func:`data_file`, no pickles): a file that is
    not a readable npz (truncated, overwritten) or lacks a key is refused by name, also where the
    folder has no SHA256SUMS to catch it first."""
    import zipfile
    path = data_file(name)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in keys}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise SSVMInputError(f"data file: {path} is damaged or not this dataset's npz ({type(e).__name__}: {e}); "
                             "copy it again from the repository's datasets/ folder (provenance in "
                             "datasets/README.md)") from None


def data_file(name: str) -> Path:
    """``data_dir() / name``, checked against the folder's ``SHA256SUMS`` (once per process and file
    version): a missing or damaged data file is refused by name instead of failing deep in a reader."""
    root = data_dir()
    path = root / name
    if not path.is_file():
        raise SSVMInputError(f"data file: {path} is missing; copy it from the repository's datasets/ folder "
                             "(provenance in datasets/README.md)")
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return path
    sums = root / "SHA256SUMS"
    expected = None
    if sums.is_file():
        for line in sums.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == name:
                expected = parts[0]
    if expected is not None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != expected:
            raise SSVMInputError(f"data file: {path} is damaged (its SHA-256 differs from {sums}); copy it again "
                                 "from the repository's datasets/ folder (provenance in datasets/README.md)")
    _VERIFIED[key] = True
    return path


class RaggedOffsets:
    """What ragged containers with word / position ``offsets`` (n+1,) share: the number of items, their
    device and every item's length."""

    def check_word_offsets(self) -> None:
        """Refuse ``offsets`` that are not n + 1 >= 2 word offsets from 0, or a sentence without words, by name."""
        check(self.offsets.dim() == 1 and self.offsets.shape[0] >= 2 and int(self.offsets[0]) == 0, "offsets",
              "a 1-d tensor of n+1 >= 2 word offsets from 0", tuple(self.offsets.shape))
        lengths = self.lengths
        if bool((lengths <= 0).any()):
            i = int(torch.nonzero(lengths <= 0)[0])
            raise SSVMInputError(f"sentence {i}: expected at least one word, got {int(lengths[i])}")

    @property
    def n(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def device(self) -> torch.device:
        return self.offsets.device

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]


@dataclass
class ChainData(RaggedOffsets):
    """Sequences stored ragged: ``X`` (N, F) features of all positions (dense, or a torch sparse CSR
    tensor for large sparse feature maps), ``Y`` (N,) labels, ``offsets`` (n+1,) so that sequence i
    is rows ``offsets[i]:offsets[i+1]``. With ``allow_unknown`` (evaluation data only), a label may
    equal ``n_states``: a tag the model does not know, which every prediction gets wrong.
    ``meta`` carries dataset-specific extras (e.g. tag names, original tag strings). ``E`` (N, A_e),
    optional sparse CSR: the edge-observation attributes of the transition *into* each position
    (the rows of first positions are empty; models/chain_edges.py). ``observed`` (N,) bool, optional:
    the positions whose label is observed (partial annotation, ssvm_torch/latent.py); the task loss
    counts those only, and ``Y`` at the others holds a completion (the latent SSVM's argmax over the
    labelings that agree with the observed labels)."""

    X: torch.Tensor
    Y: torch.Tensor
    offsets: torch.Tensor
    n_states: int
    name: str = "chain"
    allow_unknown: bool = False
    meta: dict = field(default_factory=dict)
    E: torch.Tensor | None = None
    observed: torch.Tensor | None = None

    def __post_init__(self):
        check(isinstance(self.X, torch.Tensor) and self.X.dim() == 2, "X", "a 2-d tensor (positions, features)",
              getattr(self.X, "shape", type(self.X)))
        check(isinstance(self.Y, torch.Tensor) and self.Y.dim() == 1, "Y", "a 1-d tensor of labels",
              getattr(self.Y, "shape", type(self.Y)))
        check(self.Y.shape[0] == self.X.shape[0], "Y", f"one label per row of X ({self.X.shape[0]})",
              self.Y.shape[0])
        if self.Y.dtype != torch.int64 and not self.Y.is_floating_point() and self.Y.dtype != torch.bool:
            self.Y = self.Y.to(torch.int64)        # any integer dtype is a label; the kernels index with int64
        check(not self.Y.is_floating_point(), "Y", "an integer tensor", self.Y.dtype)
        check(isinstance(self.n_states, int) and self.n_states >= 1, "n_states", "an int >= 1", self.n_states)
        off = self.offsets
        check(off.dim() == 1 and off.shape[0] >= 2, "offsets", "a 1-d tensor with n+1 >= 2 entries",
              tuple(off.shape))
        check(int(off[0]) == 0 and int(off[-1]) == self.X.shape[0], "offsets",
              f"to start at 0 and end at the number of positions {self.X.shape[0]}",
              (int(off[0]), int(off[-1])))
        lengths = off[1:] - off[:-1]
        if bool((lengths <= 0).any()):
            i = int(torch.nonzero(lengths <= 0)[0])
            raise SSVMInputError(f"sequence {i}: expected length >= 1, got {int(lengths[i])} (empty sequence)")
        if self.Y.numel():
            lo, hi = int(self.Y.min()), int(self.Y.max())
            top = self.n_states if self.allow_unknown else self.n_states - 1
            check(lo >= 0 and hi <= top, "Y", f"labels in [0, {top}]", f"range [{lo}, {hi}]")
        check(self.X.layout in (torch.strided, torch.sparse_csr), "X", "a dense or sparse CSR tensor", self.X.layout)
        if self.E is not None:
            check(isinstance(self.E, torch.Tensor) and self.E.layout == torch.sparse_csr and self.E.dim() == 2
                  and self.E.shape[0] == self.X.shape[0], "E", f"a sparse CSR tensor with {self.X.shape[0]} rows",
                  getattr(self.E, "shape", type(self.E)))
            crow = self.E.crow_indices()
            check(bool((crow[off[:-1] + 1] == crow[off[:-1]]).all()), "E",
                  "no edge attributes at the first position of a sequence (no transition enters it)", "some")
            check_finite(self.E.values(), "E")
        if self.observed is not None:
            check(isinstance(self.observed, torch.Tensor) and self.observed.dtype == torch.bool
                  and self.observed.shape == self.Y.shape, "observed", f"a bool tensor of shape {tuple(self.Y.shape)}",
                  getattr(self.observed, "dtype", type(self.observed)))
        check_finite(self.X.values() if self.is_sparse else self.X, "X")
        warn_scale(self.X.values() if self.is_sparse else self.X, "X")

    @classmethod
    def from_sequences(cls, xs, ys, n_states: int, name: str = "chain", dtype=torch.float64) -> "ChainData":
        """Build from lists of per-sequence arrays ``xs[i]`` (T_i, F) and ``ys[i]`` (T_i,)."""
        check(len(xs) == len(ys), "ys", f"as many label sequences as feature sequences ({len(xs)})", len(ys))
        check(len(xs) >= 1, "xs", "at least one sequence", 0)
        xs = [numeric(x, f"xs[{i}]", dtype) for i, x in enumerate(xs)]
        ys = [integer_labels(y, f"ys[{i}]") for i, y in enumerate(ys)]
        for i, (x, y) in enumerate(zip(xs, ys)):
            check(x.dim() == 2, f"xs[{i}]", "a 2-d array (length, features)", tuple(x.shape))
            check(x.shape[1] == xs[0].shape[1], f"xs[{i}]", f"{xs[0].shape[1]} features like xs[0]", x.shape[1])
            check(y.dim() == 1 and y.shape[0] == x.shape[0], f"ys[{i}]",
                  f"a 1-d array with {x.shape[0]} labels", tuple(y.shape))
            if x.shape[0] == 0:
                raise SSVMInputError(f"sequence {i}: expected length >= 1, got 0 (empty sequence)")
        lengths = torch.tensor([x.shape[0] for x in xs], dtype=torch.int64)
        offsets = torch.zeros(len(xs) + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(lengths, 0)
        return cls(torch.cat(xs), torch.cat(ys), offsets, n_states, name)

    @property
    def is_sparse(self) -> bool:
        return self.X.layout == torch.sparse_csr

    @property
    def partial(self) -> bool:
        """Whether some position's label is unobserved."""
        return self.observed is not None and not bool(self.observed.all())

    def loss_labels(self) -> torch.Tensor:
        """The labels the task loss compares with: ``Y``, -1 at unobserved positions."""
        return torch.where(self.observed, self.Y, -1) if self.partial else self.Y

    def to(self, device=None, dtype=None) -> "ChainData":
        """The data with the features in ``dtype`` (default theirs) and every tensor on ``device`` (the
        dense store's call, stores/dense.py)."""
        def move(t):
            return None if t is None else t.to(device)
        X = self.X.to(device=device, dtype=dtype or self.X.dtype)
        E = None if self.E is None else self.E.to(device=device, dtype=dtype or self.E.dtype)
        return ChainData(X, move(self.Y), move(self.offsets), self.n_states, self.name, self.allow_unknown,
                         self.meta, E, move(self.observed))

    def subset(self, idx) -> "ChainData":
        dev = self.offsets.device
        idx = torch.as_tensor(idx, dtype=torch.int64, device=dev).reshape(-1)
        rows = torch.cat([torch.arange(int(self.offsets[i]), int(self.offsets[i + 1]), device=dev) for i in idx.tolist()])
        lengths = self.lengths[idx]
        offsets = torch.zeros(len(idx) + 1, dtype=torch.int64, device=dev)
        offsets[1:] = torch.cumsum(lengths, 0)
        X = csr_rows(self.X, rows) if self.is_sparse else self.X[rows]
        meta = {k: ([v[i] for i in idx.tolist()] if k == "tags" else v) for k, v in self.meta.items()}
        E = None if self.E is None else csr_rows(self.E, rows)
        observed = None if self.observed is None else self.observed[rows]
        return ChainData(X, self.Y[rows], offsets, self.n_states, self.name, self.allow_unknown, meta, E, observed)


def csr_rows(X: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows of a sparse CSR tensor, as a new CSR tensor."""
    crow, col, val = X.crow_indices(), X.col_indices(), X.values()
    counts = crow[rows + 1] - crow[rows]
    dev = crow.device
    local = torch.repeat_interleave(torch.arange(rows.shape[0], device=dev), counts)
    starts = torch.cumsum(counts, 0) - counts
    nz = crow[rows][local] + torch.arange(local.shape[0], device=dev) - starts[local]
    new_crow = torch.zeros(rows.shape[0] + 1, dtype=crow.dtype, device=dev)    # int32 or int64, as col
    new_crow[1:] = torch.cumsum(counts, 0)
    return torch.sparse_csr_tensor(new_crow, col[nz], val[nz], (rows.shape[0], X.shape[1]),
                                   check_invariants=False)
