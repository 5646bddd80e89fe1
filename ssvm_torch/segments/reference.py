"""torch-struct's ``SemiMarkovCRF`` as an independent reference of the segment package (tests and
benchmarks/bench_segments.py; no operation dispatches here): :func:`torch_struct_potentials` writes the
package's scores (:mod:`ssvm_torch.segments`) in the layout torch-struct 0.5 reads.

torch-struct's potentials are ``edge[b, t, w, k, k']`` (B, N-1, L+1, K, K): a segment of label k and w positions
after position t, following a segment of label k'. Its position 0 carries a free initial label that no
segment covers, so our position t is its t+1 and N = n+1; width 0 is never read. Its pitfalls, handled here and
pinned by tests/test_segments.py:

* the initial label is summed over in log Z: here it is label 0, the others -inf, and ``first`` goes onto the
  segments that start at position 0;
* ``last`` has no place of its own: it goes onto every segment that ends at the row's last position;
* only segments that *start* beyond a shorter row's end are masked: those that pass its end are -inf here;
* a batch of rows of different lengths is wrong for the longer rows (its chart initialisation reads
  min(lengths) for every row): call it on rows of one length.
"""
from __future__ import annotations

import torch


def torch_struct_potentials(S: torch.Tensor, first: torch.Tensor, last: torch.Tensor, trans: torch.Tensor,
                            lengths: torch.Tensor) -> torch.Tensor:
    """(B, T, L+1, K, K) potentials whose torch-struct log Z (with ``lengths + 1``) is the package's log Z of the
    rows, and whose marginals summed over the previous label are the package's segment marginals (width 0
    dropped)."""
    B, T, L, K = S.shape
    neg = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    edge = torch.cat([torch.full((B, T, 1, K, K), float("-inf"), dtype=S.dtype, device=S.device),
                      S[..., None] + trans], 2)
    start = torch.where(torch.arange(K, device=S.device) == 0, (S[:, 0] + first)[..., None], neg)
    edge = torch.cat([torch.cat([edge[:, :1, :1], start[:, None]], 2), edge[:, 1:]], 1)
    end = torch.arange(T, device=S.device)[:, None] + torch.arange(L + 1, device=S.device)[None, :]    # (T, L+1)
    n = lengths.to(S.device)[:, None, None]
    edge = edge + torch.where((end[None] == n)[..., None, None], last[:, None], torch.zeros((), dtype=S.dtype))
    return torch.where((end[None] > n)[..., None, None], neg, edge)
