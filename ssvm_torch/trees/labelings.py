"""The k best labelings of given structures whose labels are independent given the structure (a dependency
tree's relations, a binary tree's span labels), merged into the k best labeled structures of every row.

A labeled structure scores s(y) + sum over its parts t of D[t, l_t], D[t, l] = label score - the part's best
label score (<= 0, 0 for the best label), s(y) the structure's score under the label-reduced scores (each part
with its best label). Two facts make the k best labeled structures cheap once the k best structures are known:

* a structure outside the k best under the reduced scores has no labeling among the k best labeled structures
  (each of the k better structures' best labelings beats all of its labelings), so only the k best structures
  are expanded;
* the k best labelings of one structure are the k best sums of one entry per part's list: merged one part at a
  time, keeping the k best partial sums (a k x L' candidate table per step, L' = min(L, k), each candidate a
  distinct (partial labeling, label) pair), with back pointers; batched over every (row, structure).

O(m k L') per structure for m parts: compiled on the CPU (:func:`nb_kbest_labeled`), torch ops elsewhere.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..chain.checks import tracing
from ..devices import from_host, to_host
from .numba_kbest import keep_best


@nb.njit(cache=True, nogil=True)
def nb_kbest_labeled(scores, D, ids, k, pick, labels, best):
    """:func:`kbest_labeled` on host arrays: ``D`` / ``ids`` (B, S, m, L') the options sorted descending and their
    labels; fills ``pick`` (B, k) (-1 past a row's labeled structures), ``labels`` (B, k, m), ``best`` (B, k)."""
    B, S, m, Lk = D.shape
    vals = np.empty((S, k))
    count = np.zeros(S, dtype=np.int64)
    back = np.zeros((S, m, k), dtype=np.int64)          # per structure and part: prev rank * Lk + label rank
    cand = np.empty(k)
    code = np.empty(k, dtype=np.int64)
    for b in range(B):
        for s in range(S):
            count[s] = 0
            if not scores[b, s] > -np.inf:
                continue
            vals[s, 0], c = scores[b, s], 1
            for t in range(m):
                n = 0                                  # cand[:n] descending: the k best sums so far
                for p in range(c):                     # both lists descending: stop where no sum can enter
                    if n == k and not vals[s, p] + D[b, s, t, 0] > cand[n - 1]:
                        break
                    for q in range(Lk):
                        v = vals[s, p] + D[b, s, t, q]
                        if not v > -np.inf or (n == k and not v > cand[n - 1]):
                            break
                        n = keep_best(cand, code, n, k, v, p * Lk + q)
                c = n
                for r in range(c):
                    vals[s, r] = cand[r]
                    back[s, t, r] = code[r]
                if c == 0:
                    break
            count[s] = c
        n = count.sum()
        allv = np.empty(n)
        alls = np.empty(n, dtype=np.int64)
        allr = np.empty(n, dtype=np.int64)
        n = 0
        for s in range(S):
            for r in range(count[s]):
                allv[n], alls[n], allr[n] = vals[s, r], s, r
                n += 1
        order = np.argsort(-allv)
        for q in range(k):
            for t in range(m):
                labels[b, q, t] = 0
            if q >= n:
                pick[b, q], best[b, q] = -1, -np.inf
                continue
            s, r = alls[order[q]], allr[order[q]]
            pick[b, q], best[b, q] = s, allv[order[q]]
            for t in range(m - 1, -1, -1):
                c = back[s, t, r]
                labels[b, q, t] = ids[b, s, t, c % Lk]
                r = c // Lk


def kbest_labeled(scores: torch.Tensor, options: torch.Tensor, k: int, kernels: str = "auto"):
    """(pick (B, k) int64, labels (B, k, m) int64, scores (B, k)): the k best labeled structures of every row.

    ``scores`` (B, S): the row's S best structures under the label-reduced scores (-inf: no structure);
    ``options`` (B, S, m, L): per structure and part slot, the label scores relative to the part's best
    (max 0 over the labels; a slot without a part holds 0 at label 0 and -inf elsewhere). ``pick`` is the
    structure each rank labels (-1 past the row's labeled structures of finite score, score -inf there), labels
    the chosen label per slot (its label 0 on an empty slot). ``kernels``: "auto" (compiled for CPU tensors outside
    tracing) or "torch"."""
    B, S, m, L = options.shape
    Lk = min(L, k)
    D, ids = options.topk(Lk, dim=3)                                  # (B, S, m, Lk), descending
    if kernels == "auto" and options.device.type == "cpu" and not tracing():
        pick, labels, best = np.empty((B, k), dtype=np.int64), np.empty((B, k, m), dtype=np.int64), np.empty((B, k))
        nb_kbest_labeled(to_host(scores.double()), to_host(D.double()), to_host(ids), k, pick, labels, best)
        dev = options.device
        return from_host(pick, dev), from_host(labels, dev), from_host(best, dev, scores.dtype)
    cur = scores[:, :, None]                                          # (B, S, c): the best partial sums
    back = []
    for t in range(m):
        cand = (cur[:, :, :, None] + D[:, :, t, None, :]).flatten(2)  # (B, S, c * Lk)
        top = cand.topk(min(k, cand.shape[2]), dim=2)
        cur = top.values
        back.append(top.indices)
    flat = cur.flatten(1)                                             # (B, S * c)
    c = cur.shape[2]
    best, where = flat.topk(min(k, flat.shape[1]), dim=1)
    pick, rank = where // c, where % c
    labels = torch.zeros(B, best.shape[1], m, dtype=torch.int64, device=options.device)
    rows = torch.arange(B, device=options.device)[:, None]
    for t in range(m - 1, -1, -1):
        idx = back[t][rows, pick, rank]                               # (B, k): the candidate taken at part t
        labels[:, :, t] = ids[rows, pick, t, idx % Lk]
        rank = idx // Lk
    found = best > float("-inf")
    if best.shape[1] < k:                                             # fewer (structure, labeling) pairs than k
        pad = k - best.shape[1]
        best = torch.cat([best, best.new_full((B, pad), float("-inf"))], 1)
        pick = torch.cat([pick, pick.new_full((B, pad), -1)], 1)
        labels = torch.cat([labels, labels.new_zeros(B, pad, m)], 1)
        found = torch.cat([found, found.new_zeros(B, pad)], 1)
    return torch.where(found, pick, torch.full_like(pick, -1)), labels, best
