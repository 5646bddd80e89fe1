"""The weight vectors of a regularization path's breakpoints (:mod:`ssvm_torch.path`), kept on the host row by row:
a row whose non-zero entries (bit patterns: -0.0 and NaN kept) take at most half of its bytes as their positions and
values, any other as a dense copy.

Why: a path keeps one d-vector per breakpoint. On CoNLL-2000 (d = 7.4M with all 8,936 sentences, 59 MB a dense row)
a w has ~14% non-zero entries (the attribute-label pairs that fired with a label some block's labelings carry),
so a sparse row takes ~1.7 B per coordinate instead of 8; the path's ~100 breakpoints then fit where the dense rows,
and their (J, d) stack at the end, did not. ``path.pt`` and the checkpoints keep their format: the (J, d) matrix W,
written as :mod:`ssvm_torch.portable` writes a mostly-zero tensor (built here row by row, never densified)."""
from __future__ import annotations

import torch

from .errors import check
from .portable import SPARSE_MIN, sparse_entry

_ROW_DTYPE = torch.float64


class PathRows:
    """W[0..J-1] (d,) float64 of a path's breakpoints (module docstring)."""

    def __init__(self, d: int):
        self.d = int(d)
        self._index = torch.int32 if self.d < 2 ** 31 else torch.int64
        self._rows: list = []

    @classmethod
    def of_matrix(cls, W: torch.Tensor) -> "PathRows":
        """The rows of a (J, d) matrix (a loaded path.pt, a checkpoint's state)."""
        rows = cls(W.shape[1])
        for w in W.unbind(0):
            rows.append(w)
        return rows

    @classmethod
    def of_packed(cls, entry, field: str = "W") -> "PathRows":
        """The rows of W as :meth:`packed` (or :func:`ssvm_torch.portable.pack`) wrote it, a (J, d) float64 matrix or
        its non-zero entries, read row by row without the dense matrix; a file's entry (untrusted): one that does
        not make a (J, d) float64 matrix is refused by name."""
        if torch.is_tensor(entry):
            check(entry.dim() == 2 and entry.dtype == _ROW_DTYPE, field, "a float64 (J, d) matrix",
                  f"{entry.dtype} {tuple(entry.shape)}")
            return cls.of_matrix(entry)
        sparse = entry.get("__sparse__") if isinstance(entry, dict) and len(entry) == 1 else None
        shape, at, values = (sparse.get(k) if isinstance(sparse, dict) else None for k in ("shape", "index", "values"))
        ok = (isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) and v >= 1 for v in shape)
              and torch.is_tensor(at) and at.dtype in (torch.int32, torch.int64) and at.dim() == 1
              and torch.is_tensor(values) and values.dtype == _ROW_DTYPE and values.shape == at.shape)
        if ok:
            at = at.long()
        if ok and at.numel():
            ok = int(at[0]) >= 0 and int(at[-1]) < shape[0] * shape[1] and bool((at[1:] > at[:-1]).all())
        check(ok, field, "a float64 (J, d) matrix or its non-zero entries (shape, ascending flat positions, values)",
              "entries that do not make one")
        J, d = shape
        rows = cls(d)
        bounds = torch.searchsorted(at, torch.arange(J + 1, dtype=torch.int64) * d).tolist()
        for j in range(J):
            a, b = bounds[j], bounds[j + 1]
            rows._keep(at[a:b] - j * d, values[a:b])
        return rows

    def _sparse_pays(self, nnz: int) -> bool:
        """True where a row's ``nnz`` positions and values take at most half of its dense bytes."""
        return nnz * (self._index.itemsize + 8) <= self.d * 8 // 2

    def _dense(self, at: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.d, dtype=_ROW_DTYPE)
        out[at.long()] = values
        return out

    def _keep(self, at: torch.Tensor, values: torch.Tensor) -> None:
        """Keep the row whose non-zero entries are ``values`` at ``at`` (ascending), sparse where that halves it."""
        self._rows.append((at.to(self._index), values.clone()) if self._sparse_pays(len(at))
                          else self._dense(at, values))

    def append(self, w: torch.Tensor) -> None:
        """Keep a copy of ``w`` (d,) on the host, sparse where that takes at most half its bytes."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        w = w.detach().to("cpu", _ROW_DTYPE)
        bits = w.view(torch.int64)
        if self._sparse_pays(int(torch.count_nonzero(bits))):
            at = torch.nonzero(bits).reshape(-1)
            self._rows.append((at.to(self._index), w[at]))
        else:
            self._rows.append(w.clone())           # a dense copy (w may be the store's own tensor)

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, j: int) -> torch.Tensor:
        """W[j] (d,) float64, a fresh dense tensor."""
        kept = self._rows[j]
        return kept.clone() if torch.is_tensor(kept) else self._dense(*kept)

    def matrix(self) -> torch.Tensor:
        """W (J, d) float64, dense."""
        out = torch.zeros(len(self), self.d, dtype=_ROW_DTYPE)
        for j in range(len(self)):
            out[j] = self.row(j)
        return out

    def nbytes(self) -> int:
        """The bytes the rows hold."""
        return sum(r.nbytes if torch.is_tensor(r) else r[0].nbytes + r[1].nbytes for r in self._rows)

    def packed(self):
        """W (J, d) as :func:`ssvm_torch.portable.pack` writes it with ``sparse=True`` (the flat positions of its
        non-zero bit patterns and their values where that takes at most half its bytes, else the dense matrix),
        built from the rows: :func:`ssvm_torch.portable.unpack` gives W back."""
        J, d = len(self), self.d
        numel = J * d
        index = torch.int32 if numel < 2 ** 31 else torch.int64
        parts = []
        for j, kept in enumerate(self._rows):
            if torch.is_tensor(kept):
                at = torch.nonzero(kept.view(torch.int64)).reshape(-1)
                parts.append((at + j * d, kept[at]))
            else:
                parts.append((kept[0].long() + j * d, kept[1]))
        nnz = sum(len(p[0]) for p in parts)
        if numel < SPARSE_MIN or nnz * (index.itemsize + 8) > numel * 8 // 2:
            return self.matrix()
        at = torch.cat([p[0] for p in parts]) if parts else torch.zeros(0, dtype=torch.int64)
        values = torch.cat([p[1] for p in parts]) if parts else torch.zeros(0, dtype=_ROW_DTYPE)
        return sparse_entry((J, d), at.to(index), values)
