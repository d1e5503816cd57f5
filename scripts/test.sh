#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite (slow tests included).
#   bash scripts/test.sh                 # everything, as CI runs it
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate            # msrun starts workers with `python` from PATH
export GLOG_v=3
python -m pytest -p no:cacheprovider -q "$@"
