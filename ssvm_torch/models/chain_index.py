"""Index and statistics helpers of chain data (ragged sequences stacked by ``offsets``, features as
CSR rows): sequence ids, padded (B, Tmax) views of a batch of sequences, transition counts, feature
rows as CSR with the constant column and as a sparse matrix, and the unary scores of some positions.
Shared by the chain and semi-Markov models and their stores."""
from __future__ import annotations

import torch


def segment_ids(offsets: torch.Tensor) -> torch.Tensor:
    """Sequence id of every position: (N,)."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(lengths.shape[0], device=offsets.device), lengths)


def padded_index(offsets: torch.Tensor, idx: torch.Tensor | None = None):
    """Row indices (B, Tmax) into the stacked positions of sequences ``idx`` and their mask."""
    if idx is None:
        idx = torch.arange(offsets.shape[0] - 1, device=offsets.device)
    start = offsets[idx]
    lengths = offsets[idx + 1] - start
    tmax = int(lengths.max())
    steps = torch.arange(tmax, device=offsets.device)
    valid = steps[None, :] < lengths[:, None]
    pos = torch.where(valid, start[:, None] + steps[None, :], torch.zeros_like(start)[:, None])
    return pos, valid


def feature_coo(csr, F: int, transpose: bool = False) -> torch.Tensor:
    """CSR feature rows (row pointers, indices, values) as a coalesced sparse COO (N, F), or (F, N)."""
    fptr, fidx, fval = csr
    rows = segment_ids(fptr)
    N = fptr.shape[0] - 1
    ij, shape = (torch.stack([fidx, rows]), (F, N)) if transpose else (torch.stack([rows, fidx]), (N, F))
    return torch.sparse_coo_tensor(ij, fval, shape, check_invariants=True).coalesce()


def trans_counts(labels: torch.Tensor, seg: torch.Tensor, n: int, K: int) -> torch.Tensor:
    """Transition counts per sequence, (n, K, K) [next, prev], of ragged ``labels``."""
    out = torch.zeros(n, K, K, dtype=torch.float64, device=labels.device)
    same = seg[1:] == seg[:-1]
    out.index_put_((seg[1:][same], labels[1:][same], labels[:-1][same]),
                   torch.ones(int(same.sum()), dtype=torch.float64, device=labels.device), accumulate=True)
    return out


def padded_trans_counts(labels: torch.Tensor, valid: torch.Tensor, K: int, dtype=torch.float64) -> torch.Tensor:
    """Transition counts (B, K, K) [next, prev] of padded labelings (B, T) with mask ``valid``."""
    B, T = labels.shape
    out = torch.zeros(B, K, K, dtype=dtype, device=labels.device)
    if T > 1:
        both = valid[:, 1:] & valid[:, :-1]
        b = torch.arange(B, device=labels.device)[:, None].expand(B, T - 1)
        out.index_put_((b[both], labels[:, 1:][both], labels[:, :-1][both]),
                       torch.ones(int(both.sum()), dtype=dtype, device=labels.device), accumulate=True)
    return out


def csr_row_nonzeros(fptr: torch.Tensor, rows: torch.Tensor):
    """For CSR row pointers ``fptr`` and some ``rows``: (batch row of each stored entry, its index
    into the CSR arrays), in row order."""
    starts = fptr[rows]
    counts = fptr[rows + 1] - starts
    local = torch.repeat_interleave(torch.arange(rows.shape[0], device=fptr.device), counts)
    first_nz = torch.cumsum(counts, 0) - counts
    return local, starts[local] + torch.arange(local.shape[0], device=fptr.device) - first_nz[local]


def unary_rows(W: torch.Tensor, csr, rows: torch.Tensor) -> torch.Tensor:
    """U[r] = W x_r (K,) for the given feature rows only, by a gather over their stored CSR entries."""
    fptr, fidx, fval = csr
    local, nz = csr_row_nonzeros(fptr, rows)
    U = torch.zeros(rows.shape[0], W.shape[0], dtype=W.dtype, device=W.device)
    return U.index_add_(0, local, fval[nz, None] * W.T[fidx[nz]])


def features_csr(data, F: int, dtype=torch.float64, device=None):
    """CSR (row pointers, sorted column indices, values) of the feature rows of ``data`` (a ChainData, dense or
    sparse CSR ``X``) with the constant 1 appended as column F-1; dense input keeps only its nonzeros."""
    N = data.X.shape[0]
    if data.is_sparse:
        crow, col, val = data.X.crow_indices(), data.X.col_indices(), data.X.values()
    else:
        rows, col = torch.nonzero(data.X, as_tuple=True)
        val = data.X[rows, col]
        crow = torch.zeros(N + 1, dtype=torch.int64, device=data.X.device)
        crow[1:] = torch.cumsum(torch.bincount(rows, minlength=N), 0)
    counts = crow[1:] - crow[:-1] + 1
    here = crow.device                              # built where the data are, then moved once
    ptr = torch.zeros(N + 1, dtype=torch.int64, device=here)
    ptr[1:] = torch.cumsum(counts, 0)
    idx = torch.full((int(ptr[-1]),), F - 1, dtype=torch.int64, device=here)
    vals = torch.ones(int(ptr[-1]), dtype=dtype, device=here)
    keep = torch.ones(int(ptr[-1]), dtype=torch.bool, device=here)
    keep[ptr[1:] - 1] = False                       # the last slot of each row is the constant
    idx[keep] = col.to(here, torch.int64)
    vals[keep] = val.to(here, dtype)
    return ptr.to(device), idx.to(device), vals.to(device)

