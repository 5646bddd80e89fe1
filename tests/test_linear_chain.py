"""ssvm_torch.nn.LinearChain against pytorch-crf (weights, NLL, paths, gradients, masks) and against
brute-force enumeration (hinge, decode, marginals, NLL, with and without the constraints of every
scheme); both kernels (numba, torch) and their agreement; bad input; export."""
import itertools

import pytest
import torch
from torchcrf import CRF

from ssvm_torch.chain.triton_viterbi import fused_available
from ssvm_torch.devices import host_guard
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain, allowed_transitions

# the Triton kernels on these CPU tensors under the interpreter that tests/conftest.py switches on without a GPU
# (Triton is in the dev extra); on a GPU tests/test_triton_chain.py checks them on CUDA tensors
TRITON = fused_available(torch.zeros(1, 1, 2))
KERNELS = ("numba", "torch") + (("triton",) if TRITON else ())
LABELS = {"BIO": ["O", "B-NP", "I-NP", "B-VP", "I-VP"], "IOB1": ["O", "I-NP", "B-NP", "I-VP"],
          "BIOES": ["O", "B-NP", "I-NP", "E-NP", "S-NP"]}


def reference(K, seed, batch_first=True):
    torch.manual_seed(seed)
    crf = CRF(K, batch_first=batch_first).double()
    for p in crf.parameters():
        torch.nn.init.normal_(p)
    return crf


def layer_like(crf, kernels, **kw):
    lay = LinearChain(crf.num_tags, batch_first=crf.batch_first, kernels=kernels, **kw).double()
    lay.load_state_dict(crf.state_dict())             # strict: the parameter names and shapes match
    return lay


def right_padded(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    return torch.arange(T)[None, :] < lengths[:, None]


def compacted(E, tags, mask, b):
    """Row b with its masked-off positions removed, as a batch of one."""
    on = mask[b]
    return E[b, on][None], tags[b, on][None]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("seed", range(3))
def test_nll_paths_and_gradients_equal_pytorch_crf_on_right_padded_masks(kernels, seed):
    K, B, T = 5, 6, 7
    crf = reference(K, seed)
    lay = layer_like(crf, kernels, loss="crf")
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(B, T, K, generator=g, dtype=torch.float64, requires_grad=True)
    tags, mask = torch.randint(K, (B, T), generator=g), right_padded(B, T, seed)
    nll = lay(E, tags, mask, reduction="none")
    llh = crf(E, tags, mask, reduction="none")
    torch.testing.assert_close(nll, -llh, rtol=0, atol=1e-10)
    for red in ("sum", "mean", "token_mean"):
        torch.testing.assert_close(lay(E, tags, mask, reduction=red), -crf(E, tags, mask, reduction=red),
                                   rtol=0, atol=1e-10)
    mine = torch.autograd.grad(nll.sum(), [E, *lay.parameters()])
    theirs = torch.autograd.grad(-llh.sum(), [E, *crf.parameters()])
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert lay.decode(E, mask, as_lists=True) == crf.decode(E, mask)
    labels = lay.decode(E, mask)
    assert labels.dtype == torch.int64 and labels.shape == (B, T)
    assert bool((labels[~mask] == -1).all()) and bool((labels[mask] >= 0).all())


@pytest.mark.parametrize("kernels", KERNELS)
def test_time_major_layout_as_pytorch_crf(kernels):
    K, B, T = 4, 3, 5
    crf = reference(K, 7, batch_first=False)
    lay = layer_like(crf, kernels, loss="crf")
    E = torch.randn(T, B, K, dtype=torch.float64)
    tags, mask = torch.randint(K, (T, B)), right_padded(B, T, 1).t()
    torch.testing.assert_close(lay(E, tags, mask), -crf(E, tags, mask), rtol=0, atol=1e-10)
    assert lay.decode(E, mask, as_lists=True) == crf.decode(E, mask)
    assert lay.decode(E, mask).shape == (B, T)                      # decode is batch-first


@pytest.mark.parametrize("kernels", KERNELS)
def test_masks_with_an_off_first_position_gaps_and_empty_rows_equal_the_compacted_rows(kernels):
    K, B, T = 4, 4, 6
    crf = reference(K, 3)
    g = torch.Generator().manual_seed(3)
    E = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    tags = torch.randint(K, (B, T), generator=g)
    mask = torch.tensor([[0, 1, 1, 0, 1, 1], [1, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]]).bool()
    for loss in ("crf", "hinge"):
        lay = layer_like(crf, kernels, loss=loss)
        per_row = lay(E, tags, mask, reduction="none")
        labels = lay.decode(E, mask)
        for b in range(B):
            if not bool(mask[b].any()):
                assert float(per_row[b]) == 0.0 and bool((labels[b] == -1).all())
                continue
            Eb, tb = compacted(E, tags, mask, b)
            torch.testing.assert_close(per_row[b], lay(Eb, tb, reduction="sum"), rtol=0, atol=1e-10)
            if loss == "crf":                                  # pytorch-crf on the compacted row
                torch.testing.assert_close(per_row[b], -crf(Eb, tb, reduction="sum"), rtol=0, atol=1e-10)
                assert labels[b][mask[b]].tolist() == crf.decode(Eb)[0]
            assert bool((labels[b][~mask[b]] == -1).all())
    m = layer_like(crf, kernels).marginals(E, mask)
    torch.testing.assert_close(m.sum(-1), mask.double(), rtol=0, atol=1e-12)


def brute(E, mask, lay, tags, cost, rowc):
    """Per row: (max_y Delta + s, argmax, gold score, log Z, marginals) by enumerating every allowed labeling."""
    K = lay.num_tags
    st, en, tr = (p.detach() for p in (lay.start_transitions, lay.end_transitions, lay.transitions))
    cons = lay.constraint_masks
    out = []
    for b in range(E.shape[0]):
        pos = torch.nonzero(mask[b])[:, 0].tolist()
        gold = tags[b, pos].tolist()

        def ok(y):
            if cons is None:
                return True
            return bool(cons["start"][y[0]]) and bool(cons["end"][y[-1]]) and all(
                bool(cons["transitions"][y[i], y[i + 1]]) for i in range(len(y) - 1))

        def score(y):
            return float(st[y[0]] + en[y[-1]] + sum(E[b, p, k] for p, k in zip(pos, y))
                         + sum(tr[y[i], y[i + 1]] for i in range(len(y) - 1)))
        ys = [y for y in itertools.product(range(K), repeat=len(pos)) if ok(y)]
        aug = [score(y) + rowc[b] * sum(float(cost[g, p]) for g, p in zip(gold, y)) for y in ys]
        i = max(range(len(ys)), key=aug.__getitem__)
        dec = max(ys, key=score)
        s = torch.tensor([score(y) for y in ys], dtype=torch.float64)
        logz = torch.logsumexp(s, 0)
        marg = torch.zeros(len(pos), K, dtype=torch.float64)
        for y, p in zip(ys, torch.exp(s - logz)):
            for t, k in enumerate(y):
                marg[t, k] += p
        out.append((aug[i], ys[i], dec, score(gold), float(logz), marg))
    return out


def constrained_case(scheme, seed, B=4, T=4):
    labels = LABELS[scheme]
    K = len(labels)
    cons = allowed_transitions(scheme, labels)
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0], [1, 0, 1, 1], [0, 0, 0, 1]]).bool()[:B]
    # a gold labeling that the constraints allow: the best one under random scores
    lay = LinearChain(K, batch_first=True, constraints=cons, kernels="numba").double()
    tags = lay.decode(torch.randn(B, T, K, generator=g, dtype=torch.float64), mask).clamp(min=0)
    return K, cons, E, mask, tags


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("scheme", [None, "BIO", "IOB1", "BIOES"])
@pytest.mark.parametrize("token_loss", ["hamming", "normalized", "vector", "matrix"])
def test_hinge_decode_marginals_and_nll_equal_brute_force(kernels, scheme, token_loss):
    K, cons, E, mask, tags = constrained_case(scheme or "BIO", 11)
    cons = cons if scheme else None
    g = torch.Generator().manual_seed(5)
    cost = {"vector": torch.rand(K, generator=g, dtype=torch.float64) + 0.5,
            "matrix": torch.rand(K, K, generator=g, dtype=torch.float64) * (1 - torch.eye(K, dtype=torch.float64))}
    tl = cost.get(token_loss, token_loss)
    lay = LinearChain(K, batch_first=True, constraints=cons, token_loss=tl, kernels=kernels).double()
    torch.nn.init.normal_(lay.transitions)
    C = lay.token_cost
    lengths = mask.sum(1)
    rowc = [1.0 / max(int(n), 1) if token_loss == "normalized" else 1.0 for n in lengths]
    ref = brute(E, mask, lay, tags, C, rowc)
    H = lay(E, tags, mask, reduction="none")
    torch.testing.assert_close(H, torch.tensor([r[0] - r[3] for r in ref], dtype=torch.float64), rtol=0, atol=1e-10)
    assert bool((H >= -1e-12).all())
    labels = lay.decode(E, mask)
    for b, r in enumerate(ref):
        assert tuple(labels[b][mask[b]].tolist()) == r[2]
    m = lay.marginals(E, mask)
    for b, r in enumerate(ref):
        torch.testing.assert_close(m[b][mask[b]], r[5], rtol=0, atol=1e-10)
    torch.testing.assert_close(lay.log_partition(E, mask), torch.tensor([r[4] for r in ref], dtype=torch.float64),
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(lay.score(E, tags, mask), torch.tensor([r[3] for r in ref], dtype=torch.float64),
                               rtol=0, atol=1e-10)
    lay.loss = "crf"
    torch.testing.assert_close(lay(E, tags, mask, reduction="none"),
                               torch.tensor([r[4] - r[3] for r in ref], dtype=torch.float64), rtol=0, atol=1e-10)


@pytest.mark.parametrize("kernels", KERNELS)
def test_hinge_gradient_is_the_statistics_of_the_loss_augmented_labeling_minus_the_gold(kernels):
    K, cons, E, mask, tags = constrained_case("BIOES", 2)
    lay = LinearChain(K, batch_first=True, constraints=cons, kernels=kernels).double()
    torch.nn.init.normal_(lay.transitions)
    E = E.requires_grad_(True)
    w = torch.tensor([0.5, 2.0, -1.0, 1.5], dtype=torch.float64)
    (lay(E, tags, mask, reduction="none") * w).sum().backward()
    ref = brute(E.detach(), mask, lay, tags, lay.token_cost, [1.0] * 4)
    expect = [torch.zeros_like(t) for t in (E, lay.start_transitions, lay.end_transitions, lay.transitions)]
    for b, r in enumerate(ref):
        pos = torch.nonzero(mask[b])[:, 0].tolist()
        for y, c in ((r[1], w[b]), (tags[b, pos].tolist(), -w[b])):
            for p, k in zip(pos, y):
                expect[0][b, p, k] += c
            expect[1][y[0]] += c
            expect[2][y[-1]] += c
            for i in range(len(y) - 1):
                expect[3][y[i], y[i + 1]] += c
    got = (E.grad, lay.start_transitions.grad, lay.end_transitions.grad, lay.transitions.grad)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernels", KERNELS)
def test_bio_constrained_decode_never_starts_a_chunk_with_i(kernels):
    labels = ["O", "B-NP", "I-NP", "B-VP", "I-VP", "B-PP", "I-PP"]
    K = len(labels)
    lay = LinearChain(K, batch_first=True, constraints=allowed_transitions("BIO", labels), kernels=kernels)
    torch.nn.init.normal_(lay.transitions, std=3.0)
    g = torch.Generator().manual_seed(0)
    E = torch.randn(200, 30, K, generator=g) * 3
    mask = torch.rand(200, 30, generator=g) > 0.2                   # gaps: the chain skips masked-off positions
    free = LinearChain(K, batch_first=True, kernels=kernels)
    free.load_state_dict(lay.state_dict())
    seen_bad_unconstrained = 0
    for layer, must_hold in ((lay, True), (free, False)):
        for row in layer.decode(E, mask, as_lists=True):
            bad = any(labels[y].startswith("I-") and (i == 0 or labels[row[i - 1]] == "O"
                                                     or labels[row[i - 1]][2:] != labels[y][2:])
                      for i, y in enumerate(row))
            if must_hold:
                assert not bad
            else:
                seen_bad_unconstrained += bad
    assert seen_bad_unconstrained > 0                               # the constraint did the work


def test_numba_and_torch_kernels_agree_in_float32_and_half_precision_is_accepted():
    K, B, T = 9, 16, 12
    g = torch.Generator().manual_seed(1)
    E = torch.randn(B, T, K, generator=g)
    tags, mask = torch.randint(K, (B, T), generator=g), torch.rand(B, T, generator=g) > 0.3
    out = {}
    for kernels in KERNELS:
        for loss in ("hinge", "crf"):
            lay = LinearChain(K, batch_first=True, loss=loss, kernels=kernels)
            torch.manual_seed(0)
            lay.reset_parameters()
            Eg = E.clone().requires_grad_(True)
            v = lay(Eg, tags, mask, reduction="none")
            v.sum().backward()
            out[kernels, loss] = (v.detach(), Eg.grad, lay.transitions.grad, lay.decode(E, mask), lay.marginals(E, mask))
            assert v.dtype == torch.float32
    for loss in ("hinge", "crf"):
        for a, b in zip(out["numba", loss], out["torch", loss]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    lay = LinearChain(K, batch_first=True, loss="crf")
    for half in (torch.float16, torch.bfloat16):
        v = lay(E.to(half), tags, mask)
        assert v.dtype == torch.float32 and torch.isfinite(v)


def test_torch_path_makes_no_host_copy_under_the_device_guard():
    """The path CUDA runs, checked on CPU: no numpy, no default-device factory in any call."""
    K, B, T = 5, 3, 4
    dev = torch.device("cpu")
    cons = allowed_transitions("BIO", ["O", "B-NP", "I-NP", "B-VP", "I-VP"])
    layers = [LinearChain(K, batch_first=True, loss=loss, kernels="torch", constraints=c).to(dev)
              for loss in ("hinge", "crf", "softmax_margin") for c in (None, cons)]
    with host_guard() as guard:
        g = torch.Generator(device=dev).manual_seed(0)
        E = torch.randn(B, T, K, generator=g, device=dev, requires_grad=True)
        tags = torch.randint(2, (B, T), generator=g, device=dev)
        mask = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]], device=dev).bool()
        for lay in layers:
            lay(E, tags if lay.constraint_masks is None else torch.zeros_like(tags), mask).backward()
            lay.decode(E, mask)
            lay.decode(E, mask, nbest=3)
            lay.marginals(E, mask)
        assert guard.host_copies == 0
    assert E.grad is not None


def test_state_dict_holds_exactly_pytorch_crf_parameters_whatever_the_options():
    labels = LABELS["BIOES"]
    crf = CRF(len(labels))
    for loss, cost in (("hinge", torch.rand(len(labels))), ("softmax_margin", torch.rand(len(labels))),
                       ("crf", "hamming")):                # the CRF takes no task cost (refused otherwise)
        lay = LinearChain(len(labels), loss=loss, constraints=allowed_transitions("BIOES", labels),
                          token_loss=cost)
        assert set(lay.state_dict()) == {"start_transitions", "end_transitions", "transitions"}
        lay.load_state_dict(crf.state_dict())
        crf.load_state_dict(lay.state_dict())
        assert torch.equal(lay.transitions, crf.transitions)       # constraints never touch the values


def test_allowed_transitions_follow_the_schemes():
    c = allowed_transitions("BIO", ["O", "B-NP", "I-NP", "B-VP", "I-VP"])
    assert c["start"].tolist() == [True, True, False, True, False]
    assert c["end"].all()
    t = c["transitions"]
    assert t[1, 2] and t[2, 2] and not t[0, 2] and not t[3, 2] and not t[4, 2] and t[4, 4] and t[0, 3]
    c = allowed_transitions("IOB1", {0: "O", 1: "I-NP", 2: "B-NP", 3: "I-VP"})   # AllenNLP's dict form
    assert c["start"].tolist() == [True, True, False, True]
    assert c["transitions"][1, 2] and c["transitions"][2, 2] and not c["transitions"][0, 2] and not c["transitions"][3, 2]
    c = allowed_transitions("bioes", LABELS["BIOES"])                # O B I E S
    assert c["start"].tolist() == [True, True, False, False, True]
    assert c["end"].tolist() == [True, False, False, True, True]
    t = c["transitions"]
    assert t[1, 2] and t[1, 3] and not t[1, 0] and not t[1, 1] and t[3, 0] and t[4, 1] and not t[0, 3]
    assert torch.equal(allowed_transitions("IOB2", ["O", "B-X", "I-X"])["transitions"],
                       allowed_transitions("BIO", ["O", "B-X", "I-X"])["transitions"])


def test_bad_input_gets_a_clear_error_naming_the_field():
    labels = LABELS["BIO"]
    K = len(labels)
    lay = LinearChain(K, batch_first=True, constraints=allowed_transitions("BIO", labels))
    E, tags = torch.randn(2, 3, K), torch.zeros(2, 3, dtype=torch.int64)
    cases = [
        (lambda: lay(E[..., :3], tags), "emissions: expected a last dimension"),
        (lambda: lay(E[0], tags), "emissions: expected a float tensor of 3"),
        (lambda: lay(E.long(), tags), "emissions: expected a float tensor"),
        (lambda: lay(E, tags[:, :2]), "tags: expected shape"),
        (lambda: lay(E, tags.float()), "tags: expected an integer tensor"),
        (lambda: lay(E, torch.full_like(tags, K)), f"tags: expected values in [0, {K - 1}]"),
        # negative tags are unobserved (partial annotation): a loss takes them, a score needs every tag
        (lambda: lay.score(E, torch.full_like(tags, -1)), "row 0, position 0 is unobserved"),
        (lambda: lay(E.masked_fill(torch.rand(2, 3, K) > 0.5, float("nan")), tags), "emissions: expected scores without NaN or inf"),
        (lambda: lay(E, tags, torch.ones(2, 2, dtype=torch.bool)), "mask: expected a tensor"),
        (lambda: lay(E, tags, torch.full((2, 3), 2)), "mask: expected values 0 or 1 (a bool tensor, or integers 0/1), got 2"),
        (lambda: lay(E, tags, reduction="avg"), "reduction: expected one of"),
        (lambda: lay(E, torch.tensor([[0, 2, 0], [1, 2, 2]])), "tags: row 0, position 1"),  # O -> I-NP
        (lambda: LinearChain(0), "num_tags: expected an int >= 1"),
        (lambda: LinearChain(K, loss="svm"), "loss: expected one of"),
        (lambda: LinearChain(K, token_loss=torch.ones(K, K)), "zero diagonal"),
        (lambda: LinearChain(K, token_loss=-torch.ones(K)), "token_loss: expected finite values >= 0"),
        (lambda: LinearChain(K, constraints={"start": torch.zeros(K, dtype=torch.bool),
                                             "end": torch.ones(K, dtype=torch.bool),
                                             "transitions": torch.ones(K, K, dtype=torch.bool)}),
         "constraints: expected at least one allowed start tag"),
        (lambda: LinearChain(K, constraints={"start": torch.ones(K)}), "constraints: expected a dict"),
        (lambda: allowed_transitions("BIO", ["O", "B-NP", "X-NP"]), "labels: expected 'O' or one of"),
        (lambda: allowed_transitions("BILOU", labels), "scheme: expected one of"),
    ]
    for call, text in cases:
        with pytest.raises(SSVMInputError, match=None) as err:
            call()
        assert text in str(err.value), (text, str(err.value))
    # constraints that allow no sequence of some length: only S-X may start and nothing may follow it
    no_two = {"start": torch.tensor([True, False]), "end": torch.tensor([True, True]),
              "transitions": torch.tensor([[False, False], [True, True]])}
    for kernels in KERNELS:
        bad = LinearChain(2, batch_first=True, constraints=no_two, kernels=kernels)
        assert bad.decode(torch.randn(1, 1, 2)).tolist() == [[0]]
        for call in (lambda: bad.decode(torch.randn(1, 2, 2)),
                     lambda: bad.marginals(torch.randn(1, 2, 2))):
            with pytest.raises(SSVMInputError, match="row 0"):
                call()


def test_script_refuses_clearly_and_export_traces_decode_through_the_torch_path():
    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 5)
            self.crf = LinearChain(5, batch_first=True, constraints=allowed_transitions("BIO", LABELS["BIO"]))

        def forward(self, x, mask):
            return self.crf.decode(self.proj(x), mask)
    model = Tagger().eval()
    with pytest.raises(SSVMInputError, match="torch.jit.script"):
        torch.jit.script(model)
    x, mask = torch.randn(3, 6, 4), torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 1]]).bool()
    exported = torch.export.export(model, (x, mask))
    x2 = torch.randn(3, 6, 4)
    assert torch.equal(exported.module()(x2, mask), model(x2, mask))


def test_a_thousand_tags_at_batch_8_length_25():
    K, B, T = 1000, 8, 25
    lay = LinearChain(K, batch_first=True)
    E = torch.randn(B, T, K, requires_grad=True)
    tags = torch.randint(K, (B, T))
    for loss in ("hinge", "crf"):
        lay.loss = loss
        lay(E, tags).backward()
    assert lay.decode(E).shape == (B, T) and torch.allclose(lay.marginals(E).sum(-1), torch.ones(B, T))


@pytest.mark.parametrize("K", [3, 9, 16, 23])
def test_both_viterbi_loop_orders_give_the_layer_the_same_labels_losses_and_gradients(K):
    """The loop order the numba Viterbi picks by K (chain/numba_viterbi.py) is a speed choice only:
    decode, the per-row hinge (the loss-augmented max) and its gradient are bit-identical under either
    order forced, with ties (integer emissions) and without, a ragged mask and BIO-like constraints."""
    from ssvm_torch.chain.numba_viterbi import forced_loop_order
    g = torch.Generator().manual_seed(K)
    allowed = torch.rand(K, K, generator=g) > 0.2
    allowed[:, 0] = True
    lay = LinearChain(K, batch_first=True, constraints={"start": torch.ones(K, dtype=torch.bool),
                                                        "end": torch.ones(K, dtype=torch.bool),
                                                        "transitions": allowed})
    for ties in (False, True):
        E = torch.randint(-2, 3, (6, 11, K), generator=g).float() if ties else torch.randn(6, 11, K, generator=g)
        mask = torch.arange(11)[None] < torch.tensor([11, 7, 1, 0, 11, 4])[:, None]
        tags = torch.zeros(6, 11, dtype=torch.int64)
        seen = []
        for order in ("rowwise", "columnwise", "auto"):
            with forced_loop_order(order):
                Eg = E.clone().requires_grad_(True)
                per_row = lay(Eg, tags, mask, reduction="none")
                per_row.sum().backward()
                seen.append((lay.decode(E, mask), per_row.detach(), Eg.grad))
        for other in seen[1:]:
            assert all(torch.equal(a, b) for a, b in zip(seen[0], other))
    with pytest.raises(ValueError, match="loop order: expected one of"):
        with forced_loop_order("diagonal"):
            pass


def test_the_one_reduction_finiteness_check_still_refuses_nan_and_inf_and_accepts_overflowing_sums():
    """The input check's fast path is a sum; finite scores whose float32 sum overflows must pass
    the full check instead of being refused, and a single NaN / inf entry must still be refused."""
    lay = LinearChain(3, batch_first=True)
    big = torch.full((2, 4, 3), 3e38)                      # finite, sum overflows float32
    assert lay.decode(big).shape == (2, 4)
    for bad in (float("nan"), float("inf"), float("-inf")):
        E = torch.randn(2, 4, 3)
        E[1, 2, 0] = bad
        with pytest.raises(SSVMInputError, match="emissions: expected scores without NaN or inf, found 1 such"):
            lay.decode(E)


def test_under_torch_compile_nan_emissions_are_refused_by_the_documented_check_outside_the_graph():
    """docs/nn.md: a traced graph skips the value checks, so NaN emissions decode to tags under
    torch.compile; ssvm_torch.chain.refuse_bad_scores, called outside the compiled region, refuses them."""
    from ssvm_torch.chain import refuse_bad_scores
    lay = LinearChain(3, batch_first=True)
    E = torch.randn(2, 4, 3)
    E[1, 2, 1] = float("nan")
    compiled = torch.compile(lambda e: lay.decode(e), backend="eager", fullgraph=False)
    assert compiled(E).shape == (2, 4)                           # the documented gap: no error inside the graph
    with pytest.raises(SSVMInputError, match="emissions: expected scores without NaN or inf, found 1 such"):
        refuse_bad_scores(E, "emissions", allow_neg_inf=False)
    with pytest.raises(SSVMInputError, match="emissions: expected scores without NaN or inf"):
        lay.decode(E)                                            # eager: refused as always


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("emissions_dtype, layer_dtype", [(torch.float64, torch.float32),
                                                          (torch.float32, torch.float64)])
def test_emissions_and_parameters_of_different_dtypes(emissions_dtype, layer_dtype, kernels):
    """A float64 encoder under a float32 layer (or the reverse): every call computes in the emissions' dtype on
    both backends (the torch recursion raised "expected m1 and m2 to have the same dtype" where the compiled path
    ran), the values those of the layer's parameters in the emissions' dtype, the gradient reaching the parameters
    in their own dtype."""
    g = torch.Generator().manual_seed(3)
    B, T, K = 3, 5, 4
    mask = torch.arange(T)[None] < torch.tensor([5, 1, 3])[:, None]
    tags = torch.randint(0, K, (B, T), generator=g)
    E = torch.randn(B, T, K, generator=g, dtype=emissions_dtype)
    for loss in ("crf", "hinge", "softmax_margin"):
        layer = LinearChain(K, batch_first=True, loss=loss, kernels=kernels).to(layer_dtype)
        same = LinearChain(K, batch_first=True, loss=loss, kernels=kernels).to(emissions_dtype)
        same.load_state_dict(layer.state_dict())
        value = layer(E, tags, mask, reduction="none")
        assert value.dtype == emissions_dtype
        torch.testing.assert_close(value, same(E, tags, mask, reduction="none"))
        value.sum().backward()
        assert layer.transitions.grad.dtype == layer_dtype and torch.isfinite(layer.transitions.grad).all()
    calls = {"log_partition": lambda m: m.log_partition(E, mask), "marginals": lambda m: m.marginals(E, mask),
             "entropy": lambda m: m.entropy(E, mask), "kl": lambda m: m.kl(E, E.flip(0), mask),
             "score": lambda m: m.score(E, tags, mask), "mbr": lambda m: m.decode(E, mask, mbr=True),
             "decode": lambda m: m.decode(E, mask), "nbest": lambda m: m.decode(E, mask, nbest=2)}
    for name, call in calls.items():
        ours, reference = call(layer), call(same)
        assert ours.dtype == reference.dtype, name
        torch.testing.assert_close(ours, reference, msg=name)
    assert layer.sample(E, mask, n=2).shape == (B, 2, T)
