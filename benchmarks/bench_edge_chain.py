"""The edge-potential linear chain (ssvm_torch/chain/edge_chain.py) on CPU against torch-struct's LinearChainCRF on the
same potentials phi (B, N-1, K, K): log Z + backward (the CRF's training step; torch-struct's partition by its
log-depth scan, its gradient by autograd), the marginals, the best labeling (torch-struct's argmax: the gradient of
the max semiring's scan) and, where K <= 17, the 5 best labelings (torch-struct's ``topk(5)``, its k-max semiring's
scan, one call timed) and the entropy + backward (ours: the normalized entropy semiring in torch; torch-struct's:
its entropy semiring's scan). Ours: the compiled kernels (one numba thread) and the torch scan (what CUDA runs).
Per case the largest differences of log Z, marginals, entropy and the n best scores against torch-struct. One
thread, median of ``--repeats`` calls after one untimed call.

Writes benchmarks/results/edge_chain_cpu.json.
Usage: python benchmarks/bench_edge_chain.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import torch  # noqa: E402

from ssvm_torch.chain import edge_chain  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from commits import median_ms  # noqa: E402

RESULTS = Path(__file__).parent / "results"
#: (B, N, K): a tagger's batch (POS: 17 UPOS, CoNLL-2000's 45 BIOES chunk tags), long rows, one sentence
CASES = ((32, 50, 9), (32, 50, 17), (32, 50, 45), (8, 200, 17), (1, 50, 45))


def torch_struct_crf(phi, lengths):
    """torch-struct's distribution on a copy of ``phi`` unless it requires grad (its marginals and argmax set
    requires_grad on the tensor they are given, which would put our later calls on the autograd path)."""
    import torch_struct
    phi = phi if phi.requires_grad else phi.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # torch-struct's distributions lack arg_constraints
        return torch_struct.LinearChainCRF(phi, lengths=lengths)


def logz_backward(phi, lengths, kernels):
    p = phi.detach().clone().requires_grad_(True)
    edge_chain.log_partition(p, lengths, kernels).sum().backward()
    return p.grad


def torch_struct_logz_backward(phi, lengths):
    p = phi.detach().clone().requires_grad_(True)
    torch_struct_crf(p, lengths).partition.sum().backward()
    return p.grad


def entropy_backward(phi, lengths):
    p = phi.detach().clone().requires_grad_(True)
    edge_chain.entropy(p, lengths).sum().backward()
    return p.grad


def torch_struct_entropy_backward(phi, lengths):
    p = phi.detach().clone().requires_grad_(True)
    torch_struct_crf(p, lengths).entropy.sum().backward()
    return p.grad


def case(B: int, N: int, K: int, dtype, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    phi = torch.randn(B, N - 1, K, K, generator=g, dtype=dtype)
    lengths = torch.randint(max(2, N // 2), N + 1, (B,), generator=g)
    lengths[0] = N                                       # torch-struct asks for one row of the full length
    ref = torch_struct_crf(phi, lengths)
    ours_tags, ours_scores = edge_chain.decode(phi, lengths)
    ref_tags = ref.argmax.detach()                       # (B, N-1, K, K) edge indicators
    ref_scores = (ref_tags * phi).sum((1, 2, 3))
    row = {"B": B, "N": N, "K": K, "dtype": str(dtype).replace("torch.", ""),
           "largest_logz_difference": float((edge_chain.log_partition(phi, lengths) - ref.partition.detach())
                                            .abs().max()),
           "largest_marginal_difference": float((edge_chain.marginals(phi, lengths) - ref.marginals.detach())
                                                .abs().max()),
           "largest_best_score_difference": float((ours_scores - ref_scores).abs().max())}
    row["ms"] = {
        "numba_logz_backward": median_ms(lambda: logz_backward(phi, lengths, "numba"), repeats),
        "torch_logz_backward": median_ms(lambda: logz_backward(phi, lengths, "torch"), repeats),
        "torch_struct_logz_backward": median_ms(lambda: torch_struct_logz_backward(phi, lengths), repeats),
        "numba_marginals": median_ms(lambda: edge_chain.marginals(phi, lengths, "numba"), repeats),
        "torch_struct_marginals": median_ms(lambda: torch_struct_crf(phi, lengths).marginals, repeats),
        "numba_decode": median_ms(lambda: edge_chain.decode(phi, lengths, "numba"), repeats),
        "torch_decode": median_ms(lambda: edge_chain.decode(phi, lengths, "torch"), repeats),
        "torch_struct_argmax": median_ms(lambda: torch_struct_crf(phi, lengths).argmax, repeats)}
    if K <= 17:                  # torch-struct's entropy semiring at K 45 takes minutes a call on the CPU
        row["ms"]["torch_entropy_backward"] = median_ms(lambda: entropy_backward(phi, lengths), repeats)
        row["ms"]["torch_struct_entropy_backward"] = median_ms(lambda: torch_struct_entropy_backward(phi, lengths),
                                                               max(1, repeats // 2))
        row["largest_entropy_difference"] = float((edge_chain.entropy(phi, lengths) - ref.entropy.detach())
                                                  .abs().max())
    if K <= 17:                  # and its k-max semiring's topk seconds a call at K 9
        row["ms"]["numba_nbest5"] = median_ms(lambda: edge_chain.nbest(phi, lengths, 5), repeats)
        row["ms"]["torch_struct_topk5"] = median_ms(lambda: torch_struct_crf(phi, lengths).topk(5), 1)
        top = torch_struct_crf(phi, lengths).topk(5).detach()
        row["largest_nbest_score_difference"] = float(((top * phi[None]).sum((2, 3, 4)).T
                                                       - edge_chain.nbest(phi, lengths, 5)[1]).abs().max())
    ms = row["ms"]
    row["speedup_vs_torch_struct"] = {
        "logz_backward": ms["torch_struct_logz_backward"] / ms["numba_logz_backward"],
        "torch_path_logz_backward": ms["torch_struct_logz_backward"] / ms["torch_logz_backward"],
        "marginals": ms["torch_struct_marginals"] / ms["numba_marginals"],
        "decode": ms["torch_struct_argmax"] / ms["numba_decode"],
        "torch_path_decode": ms["torch_struct_argmax"] / ms["torch_decode"]}
    if "numba_nbest5" in ms:
        row["speedup_vs_torch_struct"]["nbest5"] = ms["torch_struct_topk5"] / ms["numba_nbest5"]
    if "torch_entropy_backward" in ms:
        row["speedup_vs_torch_struct"]["entropy_backward"] = (ms["torch_struct_entropy_backward"]
                                                              / ms["torch_entropy_backward"])
    return row


#: (B, N, K) of the GPU section (bench_gpu.py --sections edge_chain)
DEVICE_SHAPES = ((512, 50, 9), (32, 50, 45), (8, 200, 17))


def device_figures(device, repeats: int, shapes=DEVICE_SHAPES) -> dict:
    """bench_gpu.py's edge_chain section: log Z + backward and the best labeling by our torch scan on ``device``
    (float32; one launch per position) against torch-struct's log-depth scan on the same device, medians of
    ``repeats`` after a warm-up, the device synchronised."""
    from bench_gpu import timed

    def ms(call):
        call()                                             # warm-up: caches, allocations, the first launches
        return 1e3 * timed(call, device, repeats)
    out = {}
    for B, N, K in shapes:
        g = torch.Generator().manual_seed(0)
        phi = torch.randn(B, N - 1, K, K, generator=g).to(device)
        lengths = torch.randint(max(2, N // 2), N + 1, (B,), generator=g)
        lengths[0] = N
        lengths = lengths.to(device)
        row = {"torch_logz_backward_ms": ms(lambda: logz_backward(phi, lengths, "torch")),
               "torch_struct_logz_backward_ms": ms(lambda: torch_struct_logz_backward(phi, lengths)),
               "torch_decode_ms": ms(lambda: edge_chain.decode(phi, lengths, "torch")),
               "torch_struct_argmax_ms": ms(lambda: torch_struct_crf(phi, lengths).argmax)}
        row["logz_backward_vs_torch_struct"] = row["torch_struct_logz_backward_ms"] / row["torch_logz_backward_ms"]
        row["decode_vs_torch_struct"] = row["torch_struct_argmax_ms"] / row["torch_decode_ms"]
        out[f"{B}x{N}x{K}"] = row
        print(f"edge chain {B}x{N}x{K} on {device}: log Z + backward {row['torch_logz_backward_ms']:.2f} ms "
              f"(torch-struct x{row['logz_backward_vs_torch_struct']:.2f}), decode {row['torch_decode_ms']:.2f} ms "
              f"(x{row['decode_vs_torch_struct']:.2f})", flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS / "edge_chain_cpu.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for B, N, K in CASES:
        for dtype in (torch.float32, torch.float64):
            row = case(B, N, K, dtype, args.repeats)
            rows.append(row)
            s = row["speedup_vs_torch_struct"]
            print(f"B {B} N {N} K {K} {row['dtype']}: log Z + backward {row['ms']['numba_logz_backward']:.2f} ms "
                  f"(torch-struct {row['ms']['torch_struct_logz_backward']:.2f}: x{s['logz_backward']:.1f}; torch path "
                  f"x{s['torch_path_logz_backward']:.1f}), marginals x{s['marginals']:.1f}, decode "
                  f"{row['ms']['numba_decode']:.2f} ms (x{s['decode']:.1f}; torch path x{s['torch_path_decode']:.1f}); "
                  f"|d log Z| {row['largest_logz_difference']:.1e}, |d mu| {row['largest_marginal_difference']:.1e}",
                  flush=True)
    out = {"machine": platform.machine(), "torch": torch.__version__, "threads": 1, "repeats": args.repeats,
           "load_average_at_start": list(os.getloadavg()), "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
