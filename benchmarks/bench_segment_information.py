"""SemiMarkovChain's entropy, KL divergence and exact samples (ssvm_torch/segments/information.py) against
torch-struct 0.5's ``SemiMarkovCRF`` (``entropy`` by its entropy semiring over the parallel scan, ``sample`` by its
sampling semiring), one CPU thread, float32 scores of B full-length rows, and against our compiled log Z + backward
as the yardstick. torch-struct's entropy is NaN wherever a potential is -inf (its layout needs some:
segments/reference.py), so it gets the potentials with -1e4 in their place; its ``kl`` raises (AttributeError).
Shapes where its scan fits (benchmarks/bench_segments.py: B T/2 (L K)^3 floats at its first level). Medians of
repeats after a warm-up, a call over 2 s timed once.

Usage: python benchmarks/bench_segment_information.py [--quick] [--out benchmarks/results/segment_information_cpu.json]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_chain_information import timed, write_rows  # noqa: E402

from ssvm_torch.nn import SemiMarkovChain  # noqa: E402
from ssvm_torch.segments import segment_log_partition  # noqa: E402
from ssvm_torch.segments.reference import torch_struct_potentials  # noqa: E402

GRID = ((32, 50, 4, 9), (8, 30, 8, 9))


def point(B: int, T: int, L: int, K: int, repeats: int, n_samples: int) -> dict:
    import torch_struct
    g = torch.Generator().manual_seed(0)
    layer, other = SemiMarkovChain(K, L, loss="crf"), SemiMarkovChain(K, L, loss="crf")
    S, Q = torch.randn(B, T, L, K, generator=g), torch.randn(B, T, L, K, generator=g)
    lengths = torch.full((B,), T)
    first, last, trans = (p.detach() for p in (layer.start_transitions, layer.end_transitions, layer.transitions.t()))
    potentials = torch_struct_potentials(S, first, last, trans, lengths).clamp(min=-1e4)

    def grad_of(f, *xs):
        def run():
            f(*[x.detach().clone().requires_grad_() for x in xs]).sum().backward()
        return run

    gen = torch.Generator().manual_seed(0)
    calls = {
        "ours log Z + backward": grad_of(lambda x: segment_log_partition(x, first, last, trans, lengths=lengths), S),
        "ours entropy": lambda: layer.entropy(S, lengths=lengths),
        "ours entropy + backward": grad_of(lambda x: layer.entropy(x, lengths=lengths), S),
        "ours kl + backward": grad_of(lambda x, y: layer.kl(x, y, lengths=lengths, other=other), S, Q),
        f"ours sample n={n_samples}": lambda: layer.sample(S, lengths=lengths, n=n_samples, generator=gen),
        "torch-struct entropy": lambda: torch_struct.SemiMarkovCRF(potentials, lengths=lengths + 1).entropy,
        "torch-struct entropy + backward": grad_of(
            lambda x: torch_struct.SemiMarkovCRF(x, lengths=lengths + 1).entropy, potentials),
        f"torch-struct sample n={n_samples}":
            lambda: torch_struct.SemiMarkovCRF(potentials, lengths=lengths + 1).sample((n_samples,)),
    }
    ms = {name: 1e3 * timed(fn, repeats) for name, fn in calls.items()}
    ratios = {what: ms[f"torch-struct {what}"] / ms[f"ours {what}"]
              for what in ("entropy", "entropy + backward", f"sample n={n_samples}")}
    return {"B": B, "T": T, "L": L, "K": K, "ms": ms, "torch_struct_over_ours": ratios,
            "entropy + backward / log Z + backward": ms["ours entropy + backward"] / ms["ours log Z + backward"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first shape, 2 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--out", default="benchmarks/results/segment_information_cpu.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore")
    rows = []
    for B, T, L, K in (GRID[:1] if args.quick else GRID):
        row = point(B, T, L, K, 2 if args.quick else args.repeats, args.samples)
        rows.append(row)
        print(f"B {B} T {T} L {L} K {K} | " + "  ".join(f"{k} {v:.2f} ms" for k, v in row["ms"].items()))
        print("    torch-struct / ours: " + "  ".join(f"{k} {v:.1f}x" for k, v in row["torch_struct_over_ours"].items())
              + f" | entropy + backward / log Z + backward {row['entropy + backward / log Z + backward']:.2f}")
    write_rows(args.out, rows, args.repeats)


if __name__ == "__main__":
    main()
