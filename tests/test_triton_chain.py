"""The Triton backend of the chain package (chain/triton_*.py) on the device it runs on -- CUDA where
there is a GPU, CPU tensors under Triton's interpreter without one (tests/conftest.py) -- against the
numba backend on the CPU: decode, loss-augmented decode, the hinge, CRF and softmax-margin losses with
every gradient, log Z and the marginals, with gap masks, an off first position, an empty row, BIO /
BIOES constraints, cost matrices, K up to 40, float64 and float32/float16 input; the store's
lengths-based decoder (``viterbi_fused``) on the same kernel."""
import pytest
import torch

from ssvm_torch.chain import triton_viterbi
from ssvm_torch.chain.triton_viterbi import fused_available, viterbi_fused
from ssvm_torch.chain.torch_viterbi import viterbi_loop
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain, allowed_transitions

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
pytestmark = pytest.mark.skipif(not fused_available(torch.zeros(1, 1, 2, device=DEV)),
                                reason="needs Triton (the dev extra) and a GPU or TRITON_INTERPRET=1")
LABELS = {"BIO": ["O", "B-NP", "I-NP", "B-VP", "I-VP"], "BIOES": ["O", "B-NP", "I-NP", "E-NP", "S-NP"]}


def batch(K, seed, B=7, T=9, dtype=torch.float64):
    """Emissions, a mask with gaps (row 1: first position off, row 2: empty, row 3: one position) and tags."""
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(B, T, K, generator=g, dtype=dtype)
    mask = torch.rand(B, T, generator=g) < 0.7
    mask[0], mask[2], mask[3] = True, False, False
    mask[1, 0], mask[3, 4] = False, True
    return E, mask


def pair(K, scheme, loss, token_loss="hamming", seed=0):
    """(layer on DEV with the Triton kernels, the same layer on the CPU with numba), same parameters."""
    cons = None if scheme is None else allowed_transitions(scheme, LABELS[scheme])
    torch.manual_seed(seed)
    ref = LinearChain(K, batch_first=True, loss=loss, constraints=cons, token_loss=token_loss, kernels="numba").double()
    for p in ref.parameters():
        torch.nn.init.normal_(p)
    ours = LinearChain(K, batch_first=True, loss=loss, constraints=cons, token_loss=token_loss, kernels="triton")
    ours = ours.double().to(DEV)
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def run(lay, E, tags, mask, dev):
    """Per-row loss, its gradients (weights 1..B), the decode, the marginals and log Z (with its gradient)."""
    E = E.detach().clone().to(dev).requires_grad_()
    w = torch.arange(1, E.shape[0] + 1, dtype=E.dtype, device=dev)
    lay.zero_grad()
    loss = lay(E, tags.to(dev), mask.to(dev), reduction="none")
    (loss * w).sum().backward()
    grads = [E.grad.clone()] + [p.grad.clone() for p in (lay.start_transitions, lay.end_transitions, lay.transitions)]
    E2 = E.detach().clone().requires_grad_()
    logz = lay.log_partition(E2, mask.to(dev))
    (logz * w).sum().backward()
    out = [loss.detach(), *grads, lay.decode(E.detach(), mask.to(dev)), lay.marginals(E.detach(), mask.to(dev)),
           logz.detach(), E2.grad]
    return [x.cpu() for x in out]


def assert_same(got, want):
    """:func:`run`'s outputs equal: the decode exactly, the rest to 1e-9."""
    names = ["loss", "dE", "dstart", "dend", "dtrans", "decode", "marginals", "logz", "dlogz"]
    for name, a, b in zip(names, got, want):
        if name == "decode":
            assert torch.equal(a, b), name
        else:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


CASES = [(5, None, "hamming"), (5, "BIO", "hamming"), (5, "BIOES", "normalized"), (9, None, "matrix"),
         (40, None, "hamming")]


@pytest.mark.parametrize("K,scheme,token_loss,loss", [
    (*case, loss) if case[0] < 40 or loss == "hinge" or CUDA else pytest.param(*case, loss, marks=pytest.mark.slow)
    for case in CASES for loss in ("hinge", "crf", "softmax_margin")])      # K = 40 beyond the hinge: slow tier on CPU
def test_triton_losses_gradients_decode_and_marginals_equal_numba(loss, K, scheme, token_loss):
    if loss == "crf":
        token_loss = "hamming"            # the CRF takes no task cost (LinearChain refuses one)
    if token_loss == "matrix":
        token_loss = torch.rand(K, K, generator=torch.Generator().manual_seed(K), dtype=torch.float64)
        token_loss.fill_diagonal_(0.0)
    ours, ref = pair(K, scheme, loss, token_loss, seed=K)
    E, mask = batch(K, seed=K)
    # gold tags: an allowed labeling under the constraints (the decode of other scores), 0 where masked off
    tags = torch.where(mask, ref.decode(torch.randn_like(E), mask), 0)
    got, want = run(ours, E, tags, mask, DEV), run(ref, E, tags, mask, torch.device("cpu"))
    assert_same(got, want)
    assert bool((got[5][2] == -1).all()) and float(got[0][2]) == 0.0      # the empty row


@pytest.mark.parametrize("loss,K", [(loss, K) if K == 5 or loss == "hinge" or CUDA
                                    else pytest.param(loss, K, marks=pytest.mark.slow)      # K = 40: the interpreter's
                                    for K in (5, 40) for loss in ("hinge", "crf", "softmax_margin")])  # longest
def test_padded_rows_walked_to_their_ends_equal_numba(loss, K):
    """Rows that end before T (a padded batch; K = 40 puts one or two rows in a program, so the programs'
    ends differ): the kernels stop at their rows' last masked-on position and the gradient past it is 0."""
    ours, ref = pair(K, None, loss, seed=K + 1)
    E, mask = batch(K, seed=K + 1, T=12)
    for b, end in enumerate([12, 3, 0, 5, 9, 1, 7]):
        mask[b, end:] = False
    tags = torch.where(mask, ref.decode(torch.randn_like(E), mask), 0)
    got, want = run(ours, E, tags, mask, DEV), run(ref, E, tags, mask, torch.device("cpu"))
    assert_same(got, want)
    assert bool((got[1][~mask] == 0).all()) and bool((got[8][~mask] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_computes_low_precision_in_float32_like_numba(dtype):
    K = 5
    ours, ref = pair(K, "BIO", "crf", seed=3)
    ours, ref = ours.float(), ref.float()
    E, mask = batch(K, seed=3, dtype=torch.float32)
    tags = torch.where(mask, ref.decode(torch.randn_like(E), mask), 0)
    a = ours(E.to(dtype).to(DEV), tags.to(DEV), mask.to(DEV), reduction="none").cpu()
    b = ref(E.to(dtype).float(), tags, mask, reduction="none")
    assert a.dtype == torch.float32
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert torch.equal(ours.decode(E.to(dtype).to(DEV), mask.to(DEV)).cpu(), ref.decode(E.to(dtype).float(), mask))


@pytest.mark.long
@pytest.mark.parametrize("variant,unroll,sort", [("tile", False, False), ("tile", False, True), ("rows", False, True),
                                                ("rows", True, False), ("transposed", False, False),
                                                ("transposed", False, True)])
def test_the_stores_lengths_decoder_runs_on_the_same_kernel(variant, unroll, sort):
    """viterbi_fused (lengths, per-sequence token losses, constraints) = the torch loop, with the chains taken
    in their order or sorted by length (each program walking only to its longest chain)."""
    g = torch.Generator().manual_seed(5)
    B, T, K = 11, 8, 26
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    U, f, la, tr = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((B, T, K), (K,), (K,), (K, K)))
    gt = torch.where(torch.arange(T)[None] < lengths[:, None], torch.randint(0, K, (B, T), generator=g), -1)
    pen = (torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.float64),
           torch.zeros(K, K, dtype=torch.float64).masked_fill_(torch.rand(K, K, generator=g) < 0.3, float("-inf")))
    tl = torch.rand(B, generator=g, dtype=torch.float64)
    for kw in ({}, {"gt": gt}, {"gt": gt, "token_loss": tl}, {"gt": gt, "penalty": pen}):
        a = viterbi_loop(U, lengths, f, la, tr, **kw)
        dkw = {k: (tuple(x.to(DEV) for x in v) if isinstance(v, tuple) else v.to(DEV)) for k, v in kw.items()}
        b = viterbi_fused(*(x.to(DEV) for x in (U, lengths, f, la, tr)), variant=variant, unroll=unroll, sort=sort, **dkw)
        assert torch.equal(a[0], b[0].cpu()), sorted(kw)
        torch.testing.assert_close(a[1], b[1].cpu(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", ["tile", "rows", "transposed"])
def test_masked_chains_in_order_of_their_ends_decode_the_same(variant):
    """The layer's masked decode (gaps, an empty row, a row with one position, chains ending early) with the
    rows taken in order of their last masked-on position: the same labels, scores and gold scores as in batch
    order, whose equality to numba the layer's tests check."""
    from ssvm_torch.chain.triton_viterbi import hamming_cost, launch_viterbi
    K = 6
    E, mask = batch(K, seed=8, B=13, T=11)
    mask[5, 4:] = False                        # chains that end early, so the programs' ends differ
    mask[8, 2:] = False
    g = torch.Generator().manual_seed(9)
    gold = torch.where(mask, torch.randint(0, K, mask.shape, generator=g), 0)
    f, la, tr = (torch.randn(*sh, generator=g, dtype=E.dtype) for sh in ((K,), (K,), (K, K)))
    args = [x.to(DEV) for x in (E, f, la, tr)]
    kw = dict(mask=mask.to(DEV), gt=gold.to(DEV), rowc=torch.rand(13, generator=g, dtype=E.dtype).to(DEV),
              cost=hamming_cost(K, E.dtype, DEV), gold_score=True, variant=variant, block_b=4)
    a = launch_viterbi(*args, sort=False, **kw)
    b = launch_viterbi(*args, sort=True, **kw)
    assert torch.equal(a[0], b[0]) and (a[0][~mask.to(DEV)] == -1).all()
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    torch.testing.assert_close(a[2], b[2], rtol=0, atol=0)


def test_forcing_triton_where_it_cannot_run_names_the_reason():
    lay = LinearChain(70, batch_first=True, kernels="triton").to(DEV)
    E = torch.randn(2, 3, 70, device=DEV)
    with pytest.raises(SSVMInputError, match="kernels: 'triton' needs .*at most 64 tags"):
        lay.decode(E)


DECODERS = [("fused", None), ("fused", 1), ("fused-rows", 1), ("fused-transposed", None)]
GAP_TASKS = [("ocr-small", {}), ("conll2000", dict(features="sha-pereira", tags="bioes", constraints="bioes"))]


# every variant on OCR; on CoNLL (BIOES constraints) the row and transposed variants are slow in the interpreter
@pytest.mark.long
@pytest.mark.parametrize("task,options,decoder,sort_from", [
    pytest.param(t, o, d, s, marks=pytest.mark.slow) if t == "conll2000" and d != "fused" and not CUDA else (t, o, d, s)
    for t, o in GAP_TASKS for d, s in DECODERS])
def test_the_fused_gap_pass_gives_the_torch_paths_terms(task, options, decoder, sort_from, monkeypatch):
    """The chain store's exact gap pass in one Triton kernel (ragged chains, the loss-augmented Viterbi,
    s(y_i), <M_i, theta_i>, the wrong positions) against its padded torch path, after a few passes
    (M_i away from the gold labelings), with and without BIOES constraints, the kernel's variants."""
    from ssvm_torch import Solver, SolverConfig
    from ssvm_torch.tasks import load_task
    from ssvm_torch import make_store
    problem = load_task(task, train_size=40 if task == "conll2000" else None, **options)
    data = problem.train.subset(range(40))
    store = make_store(problem.model, data, 0.05, device=DEV, kernels="torch")
    Solver(store, SolverConfig(passes=2, gap_check=2, batch_size=8, seed=3)).run()
    monkeypatch.setenv("SSVM_CUDA_VITERBI", decoder)
    if sort_from is not None:                # the chains sorted by length from this many on (40 here)
        monkeypatch.setattr(triton_viterbi, "STORE_SORT_FROM_B", sort_from)
    fused, padded = store.gap_terms(True), store.gap_terms(False)
    assert torch.equal(fused[0], padded[0])
    for name, a, b in zip(("aug", "m_theta", "gt_score", "loss"), fused[1:], padded[1:]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
