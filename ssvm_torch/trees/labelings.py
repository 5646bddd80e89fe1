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

O(m k L') per structure for m parts, on the scores' device.
"""
from __future__ import annotations

import torch


def kbest_labeled(scores: torch.Tensor, options: torch.Tensor, k: int):
    """(pick (B, k) int64, labels (B, k, m) int64, scores (B, k)): the k best labeled structures of every row.

    ``scores`` (B, S): the row's S best structures under the label-reduced scores (-inf: no structure);
    ``options`` (B, S, m, L): per structure and part slot, the label scores relative to the part's best
    (max 0 over the labels; a slot without a part holds 0 at label 0 and -inf elsewhere). ``pick`` is the
    structure each rank labels (-1 past the row's labeled structures of finite score, score -inf there), labels
    the chosen label per slot (its label 0 on an empty slot)."""
    B, S, m, L = options.shape
    Lk = min(L, k)
    D, ids = options.topk(Lk, dim=3)                                  # (B, S, m, Lk), descending
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
