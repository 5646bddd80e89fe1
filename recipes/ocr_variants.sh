#!/usr/bin/env bash
# The 8-method study of Osokin et al. 2016 on OCR ({uniform, gap} x {BCFW, BCPFW} x {cache, none}),
# the gap-staleness trade-off and the cache F/nu grid; see benchmarks/bench_variants.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
exec "$venv/bin/python" "$root/benchmarks/bench_variants.py" "$@"
