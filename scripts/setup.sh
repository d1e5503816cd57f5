#!/usr/bin/env bash
# Create the virtual environment at .venv (reused when it is already there) and install mindrl into it.
#   bash scripts/setup.sh          # runtime dependencies
#   bash scripts/setup.sh --test   # plus pytest, torch==2.13.0 and transformers (test/bench oracles)
# Re-running is cheap: pip runs again only when setup.cfg changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
if [ ! -x .venv/bin/python ]; then
  py=""
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      py=$cand; break
    fi
  done
  [ -n "$py" ] || { echo "setup: mindspore 2.10 needs Python 3.11; none found on PATH" >&2; exit 1; }
  "$py" -m venv .venv
fi
stamp=".venv/.mindrl-installed${extras}"
want="$(sha256sum setup.cfg pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".${extras}"
  echo "$want" > "$stamp"
fi
.venv/bin/python -c 'import numpy, mindspore; assert numpy.__version__ < "2", "numpy>=2 breaks mindspore 2.10"'
