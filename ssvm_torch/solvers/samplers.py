"""Block samplers for BCFW: uniform, random permutation per pass, and gap sampling.

Gap sampling is Alg. 2 of Osokin et al. 2016: block i is drawn with probability proportional to
its last computed block gap g_i. Every g_i starts at +inf, so the first n draws visit each block
once (uniformly among the unvisited, i.e. a random permutation); each step writes the gap it
computed for its block, and an exact gap pass overwrites all of them. A sum-tree keeps every draw
and update O(log n) and exact (no chunking, so probabilities reflect every update). Negative
block gaps, which exist only as floating-point noise around 0, get probability 0.

Every sampler owns the block gap estimates ``gaps`` (the stale g_i of the last step or gap pass on
each block, +inf before the first): their sum is the gap estimate of the history records, and the
cache's local criterion reads them.

All randomness comes from one seeded CPU torch.Generator, drawn in chunks of ``chunk`` numbers: the
draws are host-side (they pick which block the next step touches), whatever the store's device, so a
trajectory is the same on CPU and CUDA.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..devices import to_host
from ..errors import check


class _Stream:
    """Buffered uniform(0,1) or integer draws from a seeded torch.Generator (reproducible, resumable)."""

    def __init__(self, seed: int, chunk: int = 4096):
        self.gen = torch.Generator().manual_seed(int(seed))
        self.chunk = chunk
        self.buf = np.empty(0)
        self.pos = 0

    def uniform(self) -> float:
        if self.pos >= self.buf.shape[0]:
            self.buf = to_host(torch.rand(self.chunk, generator=self.gen, dtype=torch.float64, device="cpu"))
            self.pos = 0
        u = self.buf[self.pos]
        self.pos += 1
        return u

    def permutation(self, n: int) -> np.ndarray:
        return to_host(torch.randperm(n, generator=self.gen, device="cpu"))

    def state_dict(self):
        return {"gen": self.gen.get_state(), "buf": self.buf.copy(), "pos": self.pos}

    def load_state_dict(self, s):
        self.gen.set_state(s["gen"])
        self.buf, self.pos = s["buf"].copy(), int(s["pos"])


class Sampler:
    def __init__(self, n: int, seed: int):
        self.n = n
        self.stream = _Stream(seed)
        self.gaps = np.full(n, np.inf)

    def next(self) -> int:
        raise NotImplementedError

    def draw(self, tau: int) -> list[int]:
        """``tau`` distinct blocks for one mini-batch step, drawn with this sampler's law without
        replacement (a block drawn twice is drawn again). ``draw(1) == [next()]``, and the draws
        depend only on the seed and the block gaps, never on how the work is split."""
        out, seen = [], set()
        while len(out) < tau:
            i = self.next()
            if i not in seen:
                seen.add(i)
                out.append(i)
        return out

    def update(self, i: int, gap: float) -> None:
        """The block gap of i computed by the step just taken."""
        self.gaps[i] = gap
        self._update(i, gap)

    def update_many(self, blocks, gaps) -> None:
        """:meth:`update` of each (block, gap) in order (a mini-batch step's distinct blocks)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        gaps = np.asarray(gaps, dtype=np.float64)
        self.gaps[blocks] = gaps
        self._update_many(blocks, gaps)

    def _update_many(self, blocks: np.ndarray, gaps: np.ndarray) -> None:
        for i, g in zip(blocks.tolist(), gaps.tolist()):
            self._update(i, g)

    def set_all(self, gaps) -> None:
        """Exact block gaps of a full gap pass (or known ones, e.g. eq. (12) after a path step)."""
        self.gaps[:] = gaps
        self._set_all(self.gaps)

    def estimate(self) -> float | None:
        """Sum of the stale block gaps, once every block has one (else None)."""
        return float(self.gaps.sum()) if np.isfinite(self.gaps).all() else None

    def _update(self, i: int, gap: float) -> None:
        pass

    def _set_all(self, gaps: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict:
        return {"stream": self.stream.state_dict()}

    def load_state_dict(self, s: dict) -> None:
        self.stream.load_state_dict(s["stream"])


class UniformSampler(Sampler):
    def next(self) -> int:
        return min(int(self.stream.uniform() * self.n), self.n - 1)


class PermSampler(Sampler):
    """A fresh random permutation of the blocks every pass."""

    def __init__(self, n, seed):
        super().__init__(n, seed)
        self.perm = np.empty(0, dtype=np.int64)
        self.pos = 0

    def next(self) -> int:
        if self.pos >= self.perm.shape[0]:
            self.perm = self.stream.permutation(self.n)
            self.pos = 0
        i = int(self.perm[self.pos])
        self.pos += 1
        return i

    def draw(self, tau: int) -> list[int]:
        """The next ``tau`` blocks of the permutation; where a draw crosses into the next pass, the
        blocks already taken are skipped and put back at the front of that pass (still once per pass)."""
        out, seen, skipped = [], set(), []
        while len(out) < tau:
            i = self.next()
            if i in seen:
                skipped.append(i)
            else:
                seen.add(i)
                out.append(i)
        if skipped:
            self.perm = np.concatenate([self.perm[:self.pos], np.asarray(skipped, dtype=self.perm.dtype),
                                        self.perm[self.pos:]])
        return out

    def state_dict(self):
        return {**super().state_dict(), "perm": self.perm.copy(), "pos": self.pos}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.perm, self.pos = s["perm"].copy(), int(s["pos"])


@nb.njit(cache=True)
def _tree_set(tree, size, i, value):
    j = size + i
    delta = value - tree[j]
    while j >= 1:
        tree[j] += delta
        j //= 2


@nb.njit(cache=True)
def _tree_set_many(tree, size, blocks, values):
    """:func:`_tree_set` of each block in order, negative values as 0."""
    for q in range(blocks.shape[0]):
        v = values[q]
        _tree_set(tree, size, blocks[q], v if v > 0.0 else 0.0)


@nb.njit(cache=True)
def _tree_pick(tree, size, n, u):
    """The block of the uniform ``u``: the leaf of :func:`_tree_find`, or min(u n, n - 1) when the tree
    holds no mass -- its root is 0, or the walk ends on a zero leaf, which only the rounding of the
    internal sums leaves behind once every positive leaf is 0 (without this, a draw of more blocks
    than have a positive gap would pick the same drawn block forever)."""
    if tree[1] > 0.0:
        i = _tree_find(tree, size, u)
        if i < n and tree[size + i] > 0.0:
            return i
    return min(int(u * n), n - 1)


@nb.njit(cache=True)
def _tree_draw(tree, size, n, buf, pos, tau, out, count, seen, held_i, held_v, nheld):
    """The tree phase of :meth:`GapSampler.draw`, resumed at ``count`` blocks drawn, reading the
    uniforms buf[pos:] as :meth:`GapSampler.next` would one by one: a block already drawn is drawn
    again, a drawn block's leaf is held at 0 until the draw ends. Returns (count, pos, nheld): it
    stops at tau blocks or when the buffer is used up."""
    while count < tau and pos < buf.shape[0]:
        u = buf[pos]
        pos += 1
        i = _tree_pick(tree, size, n, u)
        if seen[i]:
            continue
        seen[i] = True
        out[count] = i
        count += 1
        leaf = tree[size + i]
        if leaf > 0.0:
            held_i[nheld] = i
            held_v[nheld] = leaf
            nheld += 1
            _tree_set(tree, size, i, 0.0)
    return count, pos, nheld


@nb.njit(cache=True)
def _tree_build(tree, size, values):
    tree[:] = 0.0
    for i in range(values.shape[0]):
        tree[size + i] = values[i]
    for j in range(size - 1, 0, -1):
        tree[j] = tree[2 * j] + tree[2 * j + 1]


@nb.njit(cache=True)
def _tree_find(tree, size, u):
    """Leaf index i with prefix(i) <= u * total < prefix(i+1)."""
    target = u * tree[1]
    j = 1
    while j < size:
        left = tree[2 * j]
        if target < left:
            j = 2 * j
        else:
            target -= left
            j = 2 * j + 1
    return j - size


class GapSampler(Sampler):
    """p_i proportional to the stale block gap g_i (Alg. 2 of Osokin et al. 2016)."""

    def __init__(self, n, seed):
        super().__init__(n, seed)
        self.size = 1 << max(1, (n - 1).bit_length())
        self.tree = np.zeros(2 * self.size)
        self.unvisited = self.stream.permutation(n).astype(np.int64)   # the blocks whose g_i is still +inf
        self.pos = 0

    def next(self) -> int:
        if self.pos < self.unvisited.shape[0]:
            i = int(self.unvisited[self.pos])
            self.pos += 1
            return i
        return int(_tree_pick(self.tree, self.size, self.n, self.stream.uniform()))   # every gap 0: uniform

    def draw(self, tau: int) -> list[int]:
        """``tau`` distinct blocks, p proportional to g_i without replacement: each drawn leaf is set
        to 0 for the rest of the draw and restored after (unvisited blocks come first, as in next();
        the draws are those of calling next() until tau distinct blocks came, in compiled loops)."""
        check(1 <= tau <= self.n, "tau", f"an int in [1, n = {self.n}]", tau)
        out = np.empty(tau, dtype=np.int64)
        held_i, held_v = np.empty(tau, dtype=np.int64), np.empty(tau)
        seen = np.zeros(self.n, dtype=np.bool_)
        take = min(tau, self.unvisited.shape[0] - self.pos)            # unvisited blocks: distinct already
        count = nheld = 0
        if take > 0:
            first = self.unvisited[self.pos:self.pos + take]
            self.pos += take
            out[:take] = first
            seen[first] = True
            count = take
            leaves = self.tree[self.size + first]
            hold = first[leaves > 0.0]
            if hold.shape[0]:
                held_i[:hold.shape[0]], held_v[:hold.shape[0]] = hold, self.tree[self.size + hold]
                nheld = hold.shape[0]
                _tree_set_many(self.tree, self.size, hold, np.zeros(hold.shape[0]))
        st = self.stream
        while count < tau:
            if st.pos >= st.buf.shape[0]:
                st.uniform()                        # refills the buffer (and takes its first number)
                st.pos -= 1
            count, st.pos, nheld = _tree_draw(self.tree, self.size, self.n, st.buf, st.pos, tau, out, count, seen,
                                              held_i, held_v, nheld)
        _tree_set_many(self.tree, self.size, held_i[:nheld], held_v[:nheld])
        return out.tolist()

    def _update(self, i, gap):
        _tree_set(self.tree, self.size, i, gap if gap > 0.0 else 0.0)

    def _update_many(self, blocks, gaps):
        _tree_set_many(self.tree, self.size, blocks, gaps)

    def _set_all(self, gaps):
        self.pos = self.unvisited.shape[0]
        _tree_build(self.tree, self.size, np.maximum(np.asarray(gaps, dtype=np.float64), 0.0))

    def probabilities(self) -> np.ndarray:
        """Current sampling distribution over blocks (for monitoring and tests)."""
        if self.pos < self.unvisited.shape[0]:
            p = np.zeros(self.n)
            p[self.unvisited[self.pos:]] = 1.0
            return p / p.sum()
        leaves = self.tree[self.size:self.size + self.n]
        return leaves / leaves.sum() if leaves.sum() > 0 else np.full(self.n, 1.0 / self.n)

    def state_dict(self):
        return {**super().state_dict(), "tree": self.tree.copy(), "unvisited": self.unvisited.copy(),
                "pos": self.pos}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.tree, self.unvisited, self.pos = s["tree"].copy(), s["unvisited"].copy(), int(s["pos"])


SAMPLERS = {"uniform": UniformSampler, "perm": PermSampler, "gap": GapSampler}
