#!/usr/bin/env bash
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
exec "$venv/bin/ssvm-train" --dataset ocr-large --lam 1e-3 --solver bcfw --sampling gap --gap-check 10 \
  --passes 200 --checkpoint --out "$root/runs/ocr-large" --overwrite "$@"
