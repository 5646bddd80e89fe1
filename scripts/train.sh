#!/usr/bin/env bash
# Main job: BCFW + gap sampling on OCR-large (lambda = 1e-3); prints the exact duality gap and test error.
# Extra arguments are passed to ssvm-train (e.g. --passes 100 --dataset ocr-small --lam 0.01).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
exec "$venv/bin/ssvm-train" --dataset ocr-large --lam 1e-3 --solver bcfw --sampling gap \
  --gap-check 10 --passes 50 --out runs/ocr-large-bcfw-gap --overwrite "$@"
