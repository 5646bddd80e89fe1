#!/usr/bin/env bash
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
exec "$venv/bin/ssvm-train" --dataset ocr-small --lam 0.01 --solver bcfw --sampling gap --gap-check 10 \
  --passes 200 --gap-threshold 1e-3 --out "$root/runs/ocr-small" --overwrite "$@"
