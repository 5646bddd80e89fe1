#!/usr/bin/env bash
# Release check: build the wheel and the sdist, `twine check` them, install the wheel into a fresh
# virtual environment with constraints.txt (outside the repository: nothing of it on sys.path), and
# run scripts/smoke.py there (import, a 5-pass OCR-small run, an estimator, the nn layer).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/log"
step() {
  echo "[wheel] $1" >&2
  shift
  if ! "$@" >>"$log" 2>&1; then
    echo "[wheel] failed; the end of the log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}
step "building the wheel and the sdist" "$venv/bin/python" -m build --outdir "$work/dist" "$root"
step "twine check" "$venv/bin/twine" check --strict "$work/dist/"*
step "fresh venv" python3 -m venv "$work/venv"
# --no-compile: pip would byte-compile every module of torch, scipy and lightning; the one smoke process
# compiles only what it imports
step "installing the wheel with constraints.txt" "$work/venv/bin/python" -m pip install --no-compile -c "$root/constraints.txt" \
  "$(ls "$work/dist/"*.whl)[sklearn]"
cp "$root/scripts/smoke.py" "$work/smoke.py"
cd "$work"
SSVM_TORCH_DATA="$root/datasets" "$work/venv/bin/python" "$work/smoke.py"
