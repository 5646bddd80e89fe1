#!/usr/bin/env bash
# CoNLL-2000, all 8,936 training sentences, BCFW + gap sampling at the reference grid lambda in
# {1e-2, 1e-4} plus 1/n (Lacoste-Julien et al. 2013) and 3e-2, with the papers' setting (Sha & Pereira
# attributes, BIO tags, no constraints, normalized Hamming loss; not ssvm-train's conll2000 defaults).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
for lam in 1e-2 1e-4 1.1190689346463742e-4 3e-2; do
  "$venv/bin/ssvm-train" --dataset conll2000 --features sha-pereira --min-count 1 --tags bio --constraints none \
    --loss normalized --lam "$lam" --solver bcfw --sampling gap --gap-check 10 \
    --passes "${PASSES:-100}" --out "$root/runs/conll-lam$lam" --overwrite "$@"
done
