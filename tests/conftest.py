import itertools
import os
import random

import torch

# Triton reads TRITON_INTERPRET when a kernel is defined (at import): without a GPU its interpreter runs
# the kernels of ssvm_torch/chain/triton_*.py on CPU tensors, so the tests check them on every machine.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numba
import numpy as np
import pytest

from ssvm_torch import ChainData, ExplicitData, ExplicitModel
from ssvm_torch.stores import BoxedDual

torch.set_num_threads(1)


FILE_SECONDS = os.path.join(os.path.dirname(__file__), "file_seconds.json")
_seconds_by_file: dict = {}


def _tier(item_or_report) -> str:
    """The tier whose seconds a test's time counts in: "long" for tests marked long, else "quick"."""
    return "long" if "long" in item_or_report.keywords else "quick"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The test files in decreasing order of their measured seconds (tests/file_seconds.json: each file's
    seconds per tier), counting only the tiers this run selected (trylast: after ``-m`` has deselected),
    each file's tests in their own order: xdist's ``--dist loadfile`` hands files out in collection order,
    one at a time as workers free up, so a heavy file collected last would run alone at the end (longest
    first is the classic bound for this scheduling, within 4/3 of the best). A file not in the table goes
    last; the order changes only how long the run takes, never what it checks."""
    import json
    try:
        with open(FILE_SECONDS) as f:
            seconds = json.load(f)
    except (OSError, ValueError):
        return
    rank, tiers = {}, {}
    for item in items:
        file = item.nodeid.split("::")[0]
        rank.setdefault(file, len(rank))
        tiers.setdefault(file, set()).add(_tier(item))
    order = {file: (-sum(seconds.get(file, {}).get(tier, 0.0) for tier in tiers[file]), rank[file]) for file in rank}
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])


def pytest_sessionfinish(session, exitstatus):
    """With SSVM_TEST_TIMES=1, the seconds of each test file of this run (setup, call and teardown of its
    tests, summed per tier) are written to tests/file_seconds.json for the ordering above, by the xdist
    controller or the single process: the table's seconds of each tier this run ran are replaced by this run's,
    those of a tier it did not run are kept."""
    if os.environ.get("SSVM_TEST_TIMES") != "1" or hasattr(session.config, "workerinput") or not _seconds_by_file:
        return
    import json
    try:
        with open(FILE_SECONDS) as f:
            table = json.load(f)
    except (OSError, ValueError):
        table = {}
    ran = {tier for by_tier in _seconds_by_file.values() for tier in by_tier}
    table = {file: {tier: s for tier, s in by_tier.items() if tier not in ran} for file, by_tier in table.items()}
    for file, by_tier in _seconds_by_file.items():
        table.setdefault(file, {}).update({tier: round(s, 1) for tier, s in by_tier.items()})
    table = {file: by_tier for file, by_tier in table.items() if by_tier}
    rows = [f" {json.dumps(file)}: {json.dumps(by_tier, sort_keys=True)}"
            for file, by_tier in sorted(table.items(), key=lambda kv: -sum(kv[1].values()))]
    with open(FILE_SECONDS, "w") as f:
        f.write("{\n" + ",\n".join(rows) + "\n}\n")


def pytest_runtest_logreport(report):
    """With SSVM_TORCH_FAILURE_LOG set (scripts/device_check.sh), each failure's report is appended to
    that file as it happens: a run cut off by its time limit still says why its tests failed. Every
    report's seconds are summed per file and tier (pytest_sessionfinish)."""
    by_tier, tier = _seconds_by_file.setdefault(report.nodeid.split("::")[0], {}), _tier(report)
    by_tier[tier] = by_tier.get(tier, 0.0) + (report.duration or 0.0)
    path = os.environ.get("SSVM_TORCH_FAILURE_LOG")
    if path and report.failed and getattr(report, "node", None) is None:     # xdist's controller copy has .node
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts with one torch thread, whatever the test before it in this worker left: the code
    under test sets the process's thread count (a recipe's ``threads``, ``ssvm-train --threads``), and
    torch's parallel reductions round differently with another count, so a reference computed in this
    process after such a test no longer equals, bit for bit, one computed in a fresh one-thread process
    (test_distributed's gather case failed that way in CI, depending on which files ran first). Numba gets its
    default count back likewise (a module's ``threads`` sets it too: ssvm_torch.devices.use_threads), so the
    parallel kernels' tests run with every core whichever test ran before them."""
    torch.set_num_threads(1)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    yield


@pytest.fixture(autouse=True)
def seeded_global_generators():
    """Every test starts from the same global torch / numpy / random state, whatever ran before it in this worker:
    a test that draws from them (a layer's initial parameters, nn.Linear) then sees the same numbers in any
    order of files and workers (test_segment_information's sampling test failed at random before this)."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    yield


@pytest.fixture(autouse=True, scope="session")
def feature_cache_of_this_session(tmp_path_factory):
    """Featurized designs go to a folder of this test session, not the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SSVM_TORCH_CACHE", str(tmp_path_factory.mktemp("feature-cache")))
    yield
    mp.undo()


def assert_tau_one_takes_bcfw_steps(make_store_fn, seed: int = 7):
    """MiniBatchStep with tau = 1 and FWStep, driven by samplers of the same seed on fresh stores from
    ``make_store_fn()``, take the same steps: the same blocks, step sizes and gaps, the same w."""
    from ssvm_torch import SolverConfig
    from ssvm_torch.solvers.config import SolverState
    from ssvm_torch.solvers.samplers import SAMPLERS
    from ssvm_torch.solvers.steps import FWStep, MiniBatchStep
    cfg = SolverConfig(solver="bcfw", sampling="gap", seed=seed)
    runs = []
    for rule_cls in (FWStep, MiniBatchStep):
        store = make_store_fn()
        sampler = SAMPLERS["gap"](store.n, cfg.seed)
        rule, st = rule_cls(store, cfg, sampler), SolverState()
        drawn = []
        for _ in range(3 * store.n):
            i = sampler.draw(1) if rule_cls is MiniBatchStep else sampler.next()
            rule.step(i, st)
            drawn.append(i[0] if isinstance(i, list) else i)
        runs.append((drawn, sampler.gaps.copy(), store.w.clone(), st.gamma_sum))
    (d1, g1, w1, s1), (d2, g2, w2, s2) = runs
    assert d1 == d2
    np.testing.assert_allclose(g2, g1, rtol=1e-9, atol=1e-14)
    assert torch.allclose(w2, w1, rtol=1e-9, atol=1e-12)
    assert s2 == pytest.approx(s1, rel=1e-9)


def assert_certified(hist, store, lam, H):
    """The last record of a solver run on ``store`` is certified by an independent primal: its primal is
    lam/2 |w|^2 + mean(H) (H_i computed outside the store, e.g. by enumeration), its gap that primal minus the
    store's dual; and the run lowered the gap."""
    w = store.w
    primal = lam / 2 * float(w @ w) + float(H.mean())
    dual = store.ell - lam / 2 * float(w @ w)
    last = hist[-1]
    assert last.get("primal_last", last["primal"]) == pytest.approx(primal, abs=1e-10)
    assert last.get("gap_last", last["gap"]) == pytest.approx(primal - dual, abs=1e-10)
    assert hist[0]["gap"] > last["gap"] >= -1e-12


def same_bcfw_runs(model, data_a, data_b, lam, kernels) -> bool:
    """Whether BCFW with gap sampling walks the same trajectory, bit for bit (final w and every recorded gap), on
    the stores of two data sets."""
    from ssvm_torch import Solver, SolverConfig, make_store
    runs = []
    for d in (data_a, data_b):
        store = make_store(model, d, lam, kernels=kernels)
        hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=4, gap_check=2, seed=1)).run()
        runs.append((store.w.clone(), [r["gap"] for r in hist]))
    return torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


def assert_descends(records):
    """CCCP's records: the objective never rises and ends below where it began."""
    objectives = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(objectives, objectives[1:])) and objectives[-1] < objectives[0]


def without_time(history):
    """A run's records without their seconds: what a resumed run must repeat exactly."""
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


def chain_score(U, first, last, trans, y):
    """Score of one labeling by the definition (independent of the DP)."""
    s = first[y[0]] + last[y[-1]] + sum(U[t, y[t]] for t in range(len(y)))
    return s + sum(trans[y[t + 1], y[t]] for t in range(len(y) - 1))


def brute_force_chain(U, first, last, trans, gt=None, token_loss=None):
    """max over all K^T labelings of score (+ Hamming loss against gt: token_loss per wrong
    position, default 1/T, the normalized Hamming loss)."""
    T, K = U.shape
    best = -np.inf
    for y in itertools.product(range(K), repeat=T):
        v = chain_score(U, first, last, trans, y)
        if gt is not None:
            wrong = np.sum(np.asarray(y) != np.asarray(gt))
            v += wrong / T if token_loss is None else token_loss * wrong
        best = max(best, v)
    return best


def explicit(psi, losses, gt=None):
    """An explicit-output SSVM (block i: candidates psi_i(y), losses L_i(y)) as (model, data)."""
    data = ExplicitData(psi, losses, gt)
    return ExplicitModel.for_data(data), data


class CheckedBox(BoxedDual):
    """Box constraints that assert lower <= w <= upper on their coordinates after every move of
    every kind (through the store's public moves) and count the checks."""

    checks = 0

    def _check(self):
        w = self.w[self.idx]
        assert bool((w >= self.lower).all()) and bool((w <= self.upper).all())
        self.checks += 1

    def fw_move(self, *args):
        super().fw_move(*args)
        self._check()

    def pair_move(self, *args):
        super().pair_move(*args)
        self._check()

    def move_all(self, *args):
        super().move_all(*args)
        self._check()

    def add_psi(self, *args):
        super().add_psi(*args)
        self._check()

    def recompute(self):
        super().recompute()
        self._check()


def random_chain_data(rng, n, K, F, tmin=1, tmax=5, binary=False):
    xs, ys = [], []
    for _ in range(n):
        T = int(rng.integers(tmin, tmax + 1))
        x = rng.integers(0, 2, size=(T, F)).astype(float) if binary else rng.normal(size=(T, F))
        xs.append(x)
        ys.append(rng.integers(0, K, size=T))
    return ChainData.from_sequences(xs, ys, K)


def all_segmentations(T, K, L, outside=None):
    """Every segmentation of T positions into segments of 1..L positions with labels in [0, K) (the outside
    label's segments of one position only), as (T,) rows in the segment package's convention."""
    out = []

    def grow(t, row):
        if t == T:
            out.append(list(row))
            return
        for width in range(1, min(L, T - t) + 1):
            for k in range(K):
                if k == outside and width > 1:
                    continue
                grow(t + width, row + [k] + [-1] * (width - 1))
    grow(0, [])
    return out


def random_segment_data(rng, n, K, L, F, tmin=1, tmax=4, outside=None, sparse=False):
    """n random rows with random gold segmentations (segments of 1..L positions; the ``outside`` label's of one
    position), as ChainData with 2K states (models/semimarkov.py)."""
    from ssvm_torch.segments.convert import segment_states
    xs, ys = [], []
    for _ in range(n):
        T = int(rng.integers(tmin, tmax + 1))
        choices = all_segmentations(T, K, L, outside)
        seg = torch.tensor([choices[int(rng.integers(len(choices)))]])
        ys.append(segment_states(seg, torch.tensor([T]), K)[0].numpy())
        x = rng.normal(size=(T, F))
        xs.append(x * (rng.uniform(size=x.shape) < 0.6) if sparse else x)
    data = ChainData.from_sequences(xs, ys, 2 * K)
    return ChainData(data.X.to_sparse_csr(), data.Y, data.offsets, data.n_states) if sparse else data


@pytest.fixture(scope="session")
def ocr_small():
    from ssvm_torch import load_ocr
    return load_ocr("small")


def random_dependency_data(rng, n, d, lmin=1, lmax=5, per_arc=3, projective_only=False):
    """n random sentences of lmin..lmax words with random gold trees (projective ones if asked; otherwise
    any tree, so some are non-projective; above 6 words a random attachment order), ``per_arc`` random binary
    features per arc out of d and 0-2 per head token (data/trees.py's token design)."""
    from ssvm_torch.data.trees import DependencyData
    from tree_reference import all_trees
    lengths = rng.integers(lmin, lmax + 1, size=n)
    heads = []
    for L in lengths:
        if L > 6 and not projective_only:          # too many trees to enumerate: attach words in a random order
            order, tree = rng.permutation(int(L)) + 1, np.zeros(int(L) + 1, dtype=np.int64)
            for k, m in enumerate(order):
                tree[m] = 0 if k == 0 else order[int(rng.integers(k))]
            heads.append(tree[1:])
            continue
        trees = all_trees(int(L), projective_only, False)
        heads.append(trees[int(rng.integers(len(trees)))][1:])
    n_arcs = lengths * lengths
    counts = rng.integers(1, per_arc + 1, size=int(n_arcs.sum()))
    ids = np.concatenate([rng.choice(d, size=c, replace=False) for c in counts]).astype(np.int32)
    zero = np.zeros(1, dtype=np.int64)
    tok_counts = rng.integers(0, 3, size=int(lengths.sum() + n))
    tok_ids = np.concatenate([rng.choice(d, size=c, replace=False) for c in tok_counts]).astype(np.int32)
    return DependencyData(torch.tensor(np.concatenate([zero, np.cumsum(lengths)])), torch.tensor(np.concatenate(heads)),
                          torch.zeros(int(lengths.sum()), dtype=torch.int64),
                          torch.tensor(np.concatenate([zero, np.cumsum(n_arcs)])),
                          torch.tensor(np.concatenate([zero, np.cumsum(counts)])), torch.tensor(ids), d, "random-trees",
                          tok_ptr=torch.tensor(np.concatenate([zero, np.cumsum(tok_counts)])), tok_ids=torch.tensor(tok_ids))


def binary_trees(i, j):
    """Every binary bracketing of the words i..j-1 (fenceposts i..j) as a list of (i, j) spans."""
    if j - i == 1:
        return [[(i, j)]]
    return [[(i, j)] + left + right for k in range(i + 1, j) for left in binary_trees(i, k)
            for right in binary_trees(k, j)]


def all_labeled_trees(n, L):
    """Every labeled binary tree over n words as labeled charts (K, n + 1, n + 1), -1 off the tree."""
    out = []
    for tree in binary_trees(0, n):
        for labels in itertools.product(range(L), repeat=len(tree)):
            chart = torch.full((n + 1, n + 1), -1, dtype=torch.int64)
            for (i, j), lab in zip(tree, labels):
                chart[i, j] = lab
            out.append(chart)
    return torch.stack(out)


def random_span_data(rng, n, F, L, lmin=1, lmax=4, per=2):
    """n random sentences of lmin..lmax words with random labeled binary trees (L labels) and 1..per random binary
    features per fencepost out of F (data/span_data.py's layout)."""
    from ssvm_torch.data.span_data import SpanData
    lengths = rng.integers(lmin, lmax + 1, size=n)
    spans, counts, ids = [], [], []
    for m in lengths:
        trees = binary_trees(0, int(m))
        tree = trees[int(rng.integers(len(trees)))]
        spans += sorted((i, j, int(rng.integers(L))) for i, j in tree)
        for _ in range(int(m) + 1):
            f = sorted(rng.choice(F, size=int(rng.integers(1, per + 1)), replace=False).tolist())
            ids += f
            counts.append(len(f))
    zero = np.zeros(1, dtype=np.int64)
    return SpanData(torch.tensor(np.concatenate([zero, np.cumsum(lengths)])),
                    torch.tensor(np.concatenate([zero, np.cumsum(counts)])), torch.tensor(ids, dtype=torch.int64),
                    torch.tensor(spans, dtype=torch.int64), F, L, "random-spans")


@pytest.fixture(params=["one tile", "small tiles"])
def tiles(request, monkeypatch):
    """The Triton tree kernels (ssvm_torch/trees/triton_eisner.py, triton_sibling.py) with one tile per
    width, then with tiles smaller than the sentence: several span and split / sibling chunks per width."""
    if request.param == "small tiles":
        from ssvm_torch.trees import triton_eisner
        cuda = torch.cuda.is_available()
        monkeypatch.setattr(triton_eisner, "BLOCK_I", 16 if cuda else 4)
        monkeypatch.setattr(triton_eisner, "BLOCK_D", 16 if cuda else 2)
    return request.param


@pytest.fixture
def torch_struct_deps(monkeypatch):
    """torch-struct 0.5 under torch 2.x: ``_Struct._get_dimension`` sets requires_grad on the padded scores
    before masking them in place, which torch refuses; the patch only drops that flag (the dependency
    algorithms themselves, and the semi-Markov one, are unchanged; tests/test_trees.py, tests/test_segments.py)."""
    import torch_struct.helpers as helpers
    monkeypatch.setattr(helpers._Struct, "_get_dimension",
                        lambda self, edge: (edge[0] if isinstance(edge, list) else edge).shape)
    import torch_struct
    return torch_struct


SIBLING_TEST_TEMPLATE = "hp|sp|mp hp|sp|mp|dir sp|mp|sdist sw|mw sw|mp|dir"


def random_sibling_data(rng, n, d, lmin=1, lmax=4, per_arc=3, projective_only=True, vocab=3, table_max=None,
                        first_child=True):
    """:func:`random_dependency_data` with second-order features: random column codes (``vocab`` values per
    column) and :data:`SIBLING_TEST_TEMPLATE`'s dictionary from the gold trees (``table_max`` 0: every item
    looked up in a hash; ``first_child`` False: no first-child parts)."""
    from ssvm_torch.data.sibling_features import TABLE_MAX, SiblingTemplate, build_designs
    from ssvm_torch.data.trees import DependencyData
    data = random_dependency_data(rng, n, d, lmin, lmax, per_arc, projective_only)
    W = int(data.offsets[-1])
    codes = rng.integers(3, 3 + vocab, size=(W, 5)).astype(np.int64)
    radix = np.full(5, 3 + vocab, dtype=np.int64)
    template = SiblingTemplate.parse(SIBLING_TEST_TEMPLATE, first_child=first_child)
    (sib,) = build_designs(template, [codes], radix, data.offsets.numpy(),
                           data.heads.numpy(), d, 1, TABLE_MAX if table_max is None else table_max)
    return DependencyData(data.offsets, data.heads, data.labels, data.arc_off, data.ptr, data.ids,
                          d + sib.n_features, "random-sibling-trees", tok_ptr=data.tok_ptr, tok_ids=data.tok_ids,
                          sib=sib)
