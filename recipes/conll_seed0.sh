#!/usr/bin/env bash
# The seed-000 study: first 1,000 CoNLL training sentences, batch FW vs BCFW-uniform vs BCFW-gap,
# exact gap every 100 iterations; figures and iteration counts from benchmarks/bench_conll.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
exec "$venv/bin/python" "$root/benchmarks/bench_conll.py" --parts seed0 "$@"
