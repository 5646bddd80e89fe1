#!/usr/bin/env bash
# Create or reuse the project's virtual environment (.venv) and install the package into it.
# Re-installs only when pyproject.toml, constraints.txt or this script changed since the last install.
# Prints one line per step; pip's own output goes to .venv/pip-install.log (shown if a step fails).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SSVM_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
t0=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  echo "[env] creating $venv" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.ssvm-torch-stamp"
log="$venv/pip-install.log"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" "$root/scripts/env.sh" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  step() {
    echo "[env] $1 (log: $log)" >&2
    shift
    if ! "$@" >>"$log" 2>&1; then
      echo "[env] failed; the end of $log:" >&2
      tail -n 30 "$log" >&2
      exit 1
    fi
  }
  : >"$log"
  step "upgrading pip" "$venv/bin/python" -m pip install --upgrade pip
  # byte-compiled at install on purpose (no --no-compile): with PYTHONDONTWRITEBYTECODE set, as on these
  # machines, every test process would otherwise compile torch's modules again at import
  step "installing ssvm-torch[dev] with constraints.txt (torch pinned to the CPU wheel; about a minute)" \
    "$venv/bin/python" -m pip install -c "$root/constraints.txt" -e "$root[dev]"
  # SuPar's second-order TreeCRF is a test reference (tests/test_sibling_trees.py); its package pins
  # transformers, stanza and more, which its structs do not import: installed without them
  step "installing supar 1.1.4 without its dependencies (the second-order trees' test reference)" \
    "$venv/bin/python" -m pip install --no-deps "supar==1.1.4"
  echo "$want" > "$stamp"
  echo "[env] ready in $((SECONDS - t0)) s: $venv (ssvm-train and ssvm-path are in $venv/bin)" >&2
fi
echo "$venv"
