"""What every backend of the tree package shares: the checks of arc scores, masks / lengths and head
arrays (each error names the argument, the row and what was expected), and the dispatch test.

Checks on values run as vectorized torch ops on the tensors' device (one host read of a flag per check),
so they cost O(B N^2) against the kernels' O(B N^3) and work unchanged on CUDA."""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..chain.checks import refuse_bad_scores, tracing
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from .numba_checks import tree_fault_codes

KERNELS = ("auto", "numba", "torch")
NUMBA_DTYPES = (torch.float32, torch.float64)
#: the smallest batch that the compiled kernels spread over threads
PARALLEL_MIN = 8


def use_numba(S: torch.Tensor, kernels: str, scores: str = "arc scores") -> bool:
    """The compiled kernels serve CPU float32 / float64 scores outside tracing (``kernels`` auto or numba);
    ``scores`` names them in the refusal of ``kernels="numba"`` (the segment package shares this test)."""
    ok = S.device.type == "cpu" and S.dtype in NUMBA_DTYPES and not tracing()
    if kernels == "numba" and not ok:
        raise SSVMInputError(f"kernels: 'numba' needs CPU float32/float64 {scores} outside tracing, got "
                             f"{S.device} {S.dtype}")
    return ok and kernels in ("auto", "numba")


def parallel_rows(B: int) -> bool:
    """Whether the compiled kernels run a batch of B rows over numba's threads (torch has more than one and B >=
    :data:`PARALLEL_MIN`), numba's thread count set to torch's first (the span package shares this rule)."""
    threads = torch.get_num_threads()
    if threads < 2 or B < PARALLEL_MIN:
        return False
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return True


def host_batch(S: torch.Tensor, lengths: torch.Tensor):
    """(scores, lengths) as the compiled kernels read them: a contiguous host array and int64 lengths."""
    return to_host(S.detach().contiguous()), np.ascontiguousarray(to_host(lengths), dtype=np.int64)


def check_scores(S, field: str = "arc_scores") -> torch.Tensor:
    """``S`` as a (B, N, N) float tensor (half precision computed in float32); NaN and +inf refused, -inf
    allowed (an arc that may not be taken)."""
    check(torch.is_tensor(S) and S.is_floating_point(), field, "a float tensor (B, N, N)",
          getattr(S, "dtype", type(S).__name__))
    check(S.dim() == 3 and S.shape[1] == S.shape[2] and S.shape[1] >= 1, field,
          "shape (B, N, N): [batch, modifier, head] with position 0 the root", tuple(S.shape))
    check(S.device.type != "meta", field, "a tensor with data (on the CPU or a GPU)", "a meta tensor")
    refuse_bad_scores(S.detach(), field)
    return S.float() if S.dtype in (torch.float16, torch.bfloat16) else S


def resolve_lengths(S: torch.Tensor, mask=None, lengths=None) -> torch.Tensor:
    """The number of words n_b of every row (int64 on the scores' device) from ``mask`` (B, N) bool, False
    at the root position 0 and on for positions 1..n_b only, or ``lengths`` (B,) in [0, N-1]; neither
    means every row has N-1 words."""
    B, N = S.shape[0], S.shape[1]
    if mask is not None and lengths is not None:
        raise SSVMInputError("mask, lengths: expected one of them (or neither), got both")
    if lengths is not None:
        check(torch.is_tensor(lengths) and not lengths.is_floating_point() and tuple(lengths.shape) == (B,), "lengths",
              f"an integer tensor of shape ({B},)", (getattr(lengths, "dtype", type(lengths).__name__),
                                                      tuple(getattr(lengths, "shape", ()))))
        check(lengths.device.type != "meta", "lengths", "a tensor with data (on the CPU or a GPU)", "a meta tensor")
        lengths = lengths.to(S.device, torch.int64)
        if not tracing():
            bad = (lengths < 0) | (lengths > N - 1)
            if bool(bad.any()):
                b = int(bad.nonzero()[0, 0])
                raise SSVMInputError(f"lengths: expected values in [0, {N - 1}] (words after the root), got "
                                     f"{int(lengths[b])} at row {b}")
        return lengths
    if mask is None:
        return torch.full((B,), N - 1, dtype=torch.int64, device=S.device)
    check(torch.is_tensor(mask) and tuple(mask.shape) == (B, N) and mask.device == S.device, "mask",
          f"a bool tensor (B, N) = ({B}, {N}) on {S.device}",
          (getattr(mask, "shape", type(mask).__name__), getattr(mask, "device", None)))
    if mask.dtype != torch.bool:
        check(not mask.is_floating_point(), "mask", "a bool tensor (or integers 0/1)", mask.dtype)
        if not tracing() and not bool(((mask == 0) | (mask == 1)).all()):
            raise SSVMInputError("mask: expected values 0 or 1 (a bool tensor, or integers 0/1)")
        mask = mask.bool()
    lengths = mask.sum(1)
    if not tracing():
        if bool(mask[:, 0].any()):
            b = int(mask[:, 0].nonzero()[0, 0])
            raise SSVMInputError(f"mask: position 0 is the root and must be off, row {b} has it on")
        pos = torch.arange(N, device=S.device)
        prefix = (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None])
        bad = (prefix != mask).any(1)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise SSVMInputError(f"mask: expected the words of a row at positions 1..n with nothing after them, row "
                                 f"{b} has on-positions {mask[b].nonzero().flatten().tolist()[:12]}")
    return lengths


def word_mask(lengths: torch.Tensor, N: int) -> torch.Tensor:
    """(B, N) bool: positions 1..n_b."""
    pos = torch.arange(N, device=lengths.device)
    return (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None])


def arc_mask(lengths: torch.Tensor, N: int) -> torch.Tensor:
    """(B, N, N) bool, [m, h]: the arcs a tree of each row may hold, m a word (1..n_b), h the root or another
    word."""
    pos = torch.arange(N, device=lengths.device)
    inside = pos[None, :] <= lengths[:, None]
    return inside[:, :, None] & inside[:, None, :] & ((pos[:, None] != pos[None, :]) & (pos[:, None] >= 1))[None]


def tree_faults(heads: torch.Tensor, lengths: torch.Tensor, multiroot: bool, projective: bool,
                compiled: bool = False) -> torch.Tensor:
    """(B,) int codes of the first fault of every row of ``heads`` (B, N): 0 none, 1 a head out of range or a
    self-loop, 2 a cycle, 3 not exactly one root child (single-root), 4 crossing arcs (projective). ``compiled``
    (CPU tensors; the losses pass :func:`use_numba` of their scores) runs the compiled check
    (:mod:`ssvm_torch.trees.numba_checks`: one pass per row, where the torch ops build (B, N, N) pairwise tensors
    and took a fifth of a hinge loss + backward at B 32 of 40 words), else torch operations on the heads' device."""
    if compiled:
        out = np.empty(heads.shape[0], dtype=np.int64)
        tree_fault_codes(np.ascontiguousarray(to_host(heads.detach()), dtype=np.int64),
                         np.ascontiguousarray(to_host(lengths), dtype=np.int64), multiroot, projective, out)
        return from_host(out, heads.device)
    B, N = heads.shape
    word = word_mask(lengths, N)
    h = heads.to(torch.int64)
    pos = torch.arange(N, device=heads.device)
    out_of_range = word & ((h < 0) | (h > lengths[:, None]) | (h == pos[None, :]))
    code = torch.where(out_of_range.any(1), 1, 0)
    P = torch.where(word & ~out_of_range, h, torch.zeros_like(h))          # a parent pointer, 0 at the root
    for _ in range(max(1, math.ceil(math.log2(max(N, 2)))) + 1):
        P = P.gather(1, P)                                                  # pointer doubling
    cyclic = (word & (P != 0)).any(1)
    code = torch.where((code == 0) & cyclic, 2, code)
    if not multiroot:
        roots = (word & (h == 0)).sum(1)
        code = torch.where((code == 0) & (roots != 1) & (lengths > 0), 3, code)
    if projective:
        lo = torch.minimum(h, pos[None, :])
        hi = torch.maximum(h, pos[None, :])
        rows = max(1, (1 << 22) // (N * N))              # rows per chunk: the pairwise tensors stay ~4M entries
        crossed = []
        for r in range(0, B, rows):
            a_lo, a_hi = lo[r:r + rows, :, None], hi[r:r + rows, :, None]
            b_lo, b_hi = lo[r:r + rows, None, :], hi[r:r + rows, None, :]
            both = word[r:r + rows, :, None] & word[r:r + rows, None, :]
            crossed.append((both & (a_lo < b_lo) & (b_lo < a_hi) & (a_hi < b_hi)).flatten(1).any(1))
        crossing = torch.cat(crossed) if crossed else torch.zeros(0, dtype=torch.bool, device=heads.device)
        code = torch.where((code == 0) & crossing, 4, code)
    return code


FAULTS = {1: "a head out of [0, n] or a word that heads itself", 2: "a cycle", 3: "not exactly one word attached "
          "to the root (single-root trees; use multiroot=True for several)", 4: "crossing arcs (a non-projective "
          "tree: use projective=False, or projectivize the gold trees)"}


def integer_heads(heads, lengths: torch.Tensor, N: int, field: str) -> torch.Tensor:
    """``heads`` as int64 on the lengths' device after the checks every head tensor meets: an integer tensor
    (not bool) of shape (B, N) holding data."""
    B = lengths.shape[0]
    check(torch.is_tensor(heads) and not heads.is_floating_point() and heads.dtype != torch.bool, field,
          f"an integer tensor (B, N) = ({B}, {N})", getattr(heads, "dtype", type(heads).__name__))
    check(tuple(heads.shape) == (B, N), field, f"shape (B, N) = ({B}, {N}) like the arc scores", tuple(heads.shape))
    check(heads.device.type != "meta", field, "a tensor with data (on the CPU or a GPU)", "a meta tensor")
    return heads.to(lengths.device, torch.int64)


def not_a_tree(heads, lengths, code, b: int, multiroot: bool, projective: bool, field: str) -> SSVMInputError:
    """The error for row ``b`` of ``heads`` whose :func:`tree_faults` code is ``code[b]``: the tree kind it is
    not, the fault, and its first 20 heads."""
    row = heads[b, 1:int(lengths[b]) + 1].tolist()
    return SSVMInputError(f"{field}: row {b} is not a {'projective ' if projective else ''}"
                          f"{'multi' if multiroot else 'single'}-root dependency tree over its {int(lengths[b])} "
                          f"words ({FAULTS[int(code[b])]}); heads of words 1..n: {row[:20]}"
                          + (" ..." if len(row) > 20 else ""))


def check_heads(heads, lengths: torch.Tensor, N: int, multiroot: bool, projective: bool, field: str = "heads",
                compiled: bool = False) -> torch.Tensor:
    """``heads`` (B, N) as int64 on the lengths' device after the checks: heads[b, m] in [0, n_b] for the
    words m = 1..n_b (other positions ignored), forming a tree of the chosen kind; -1 elsewhere. ``compiled``:
    :func:`tree_faults`' (the torch check, which makes no host copy, where the scores take the torch path)."""
    heads = integer_heads(heads, lengths, N, field)
    word = word_mask(lengths, N)
    if not tracing():
        code = tree_faults(heads, lengths, multiroot, projective, compiled)
        if bool((code != 0).any()):
            raise not_a_tree(heads, lengths, code, int((code != 0).nonzero()[0, 0]), multiroot, projective, field)
    return torch.where(word, heads, torch.full_like(heads, -1))


def check_partial_heads(heads, lengths: torch.Tensor, N: int, multiroot: bool, projective: bool,
                        field: str = "heads", compiled: bool = False) -> torch.Tensor:
    """``heads`` (B, N) of a loss with partial annotation (:mod:`ssvm_torch.trees.partial`): at a word a head
    in [0, n_b] (not the word itself) is observed, a negative one unobserved. A row with every head observed
    must be a tree of the chosen kind (:func:`check_heads`); in the others the observed heads are checked one
    by one (whether they leave a tree is found by decoding C). Returns int64 heads, negative words kept, -1
    off the words."""
    heads = integer_heads(heads, lengths, N, field)
    word = word_mask(lengths, N)
    partial = (word & (heads < 0)).any(1)
    if tracing() or not bool(partial.any()):
        return check_heads(heads, lengths, N, multiroot, projective, field, compiled)
    code = tree_faults(heads, lengths, multiroot, projective, compiled)
    wrong = (code != 0) & ~partial                      # a row with every head given must be a tree
    if bool(wrong.any()):
        raise not_a_tree(heads, lengths, code, int(wrong.nonzero()[0, 0]), multiroot, projective, field)
    pos = torch.arange(N, device=heads.device)
    bad = word & (heads >= 0) & ((heads > lengths[:, None]) | (heads == pos[None, :]))
    if bool(bad.any()):
        b, m = (int(v) for v in bad.nonzero()[0])
        raise SSVMInputError(f"{field}: row {b}, word {m}: head {int(heads[b, m])} is out of [0, {int(lengths[b])}] "
                             "or the word itself (a negative head is unobserved)")
    return torch.where(word & (heads >= 0), heads, torch.full_like(heads, -1))
