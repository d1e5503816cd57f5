#!/usr/bin/env bash
# Set up .venv with the test extras and run the whole test suite (slow tests included).
#   bash scripts/test.sh                 # everything, as CI runs it
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate            # msrun starts workers with `python` from PATH
export GLOG_v=3
# three test files at a time on CI's two cores (pytest-xdist; a file's tests stay together, so its fixtures are built
# once): with two, a fifth of the cores' time went unused (tests waiting on subprocesses, launchers, signals), and
# three took 1464 s against 1549 s here, with at least 4 GB of memory left (test_recipes.py's 16 GB step goes
# first); files go out in tests/conftest.py's order (longest first; xdist would reorder them by test count); the
# slowest tests are listed at the end. One op thread per process (MINDRL_THREADS=1) instead of two did not help:
# 303 s against 293 s for test_rl_loop, test_dpo and test_ppo_loop (7 Dec); most of a test's time is MindSpore
# compiling the tiny model's graphs (16 of a GRPO demo process's 26 s), single-threaded
python -m pytest -p no:cacheprovider -q -n "${MINDRL_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  --durations=40 "$@"
