#!/usr/bin/env bash
# Regularization path on OCR-small (eps = 0.1): the eps-approximate path, the heuristic path, and grid
# search 2^15 ... 2^-10 warm and cold (benchmarks/bench_path.py does the same for OCR-small and scene).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
"$venv/bin/ssvm-path" --dataset ocr-small --eps 0.1 --kappa 0.9 --lam-min 9.765625e-4 --grid --out "$root/runs/path-ocr-small" --overwrite "$@"
"$venv/bin/ssvm-path" --dataset ocr-small --eps 0.1 --heuristic --lam-min 9.765625e-4 --out "$root/runs/path-ocr-small-heuristic" --overwrite "$@"
