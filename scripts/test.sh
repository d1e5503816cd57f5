#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite (slow tests included).
#   bash scripts/test.sh                 # everything, as CI runs it
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate            # msrun starts workers with `python` from PATH
export GLOG_v=3
# two test files at a time (pytest-xdist; a file's tests stay together, so its fixtures are built once): most of a
# test is MindSpore compiling graphs on one core, and CI has two; files go out in tests/conftest.py's order (longest
# first; xdist would reorder them by test count); the slowest tests are listed at the end
python -m pytest -p no:cacheprovider -q -n "${MINDRL_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  --durations=40 "$@"
