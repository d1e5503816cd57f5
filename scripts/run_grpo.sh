#!/usr/bin/env bash
# GRPO training on several processes (and machines) with msrun: `mindrl train` on every worker.
#
#   bash scripts/run_grpo.sh [key.sub=value ...]          # extra arguments are config overrides
#   CONFIG=my.yaml WORKERS_PER_NODE=4 bash scripts/run_grpo.sh rl_config.train_iters=10
#
# Environment (defaults in brackets):
#   CONFIG [examples/grpo/tiny_math.yaml]   training yaml; relative paths in it resolve against the
#                                           current directory, so run from the repository root
#   NNODES [1]  WORKERS_PER_NODE [2] (or NPUS_PER_NODE / GPUS_PER_NODE; if several are set they must agree)
#   MASTER_ADDR [127.0.0.1]  MASTER_PORT [8118; unset on one machine with 8118 taken: a free port, printed]
#   NODE_RANK [0]  LOG_DIR [./log_dir]
#   and the launcher's knobs (FAIL_PATTERN, KILL_GRACE, QUIET, MSRUN_EXTRA_ARGS, STOP_WITH_PARENT): see
#   scripts/msrun_launch.sh
#
# Two machines, 2 workers each (world size 4); node 0's address is 10.0.0.1:
#   node 0:  NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 bash scripts/run_grpo.sh
#   node 1:  NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 bash scripts/run_grpo.sh
#
# If a worker fails, its rank and the end of its log are printed, the whole job on this machine is
# killed and the script exits 1 (see scripts/msrun_launch.sh). Logs: $LOG_DIR/worker_<rank>.log.
# SIGTERM, SIGINT or SIGHUP to this script (it becomes the launcher: exec) stops msrun and every worker;
# so does SIGKILL, through the launcher's watchdog.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
CONFIG="${CONFIG:-examples/grpo/tiny_math.yaml}"
if [ ! -f "$CONFIG" ]; then
  echo "run_grpo: config $CONFIG not found (relative to $(pwd); set CONFIG or run from the repository root)" >&2
  exit 2
fi
# WORKERS_PER_NODE and MASTER_PORT get their defaults in the launcher (it reads NPUS_PER_NODE and GPUS_PER_NODE too,
# and moves a one-machine job off a taken default port only when MASTER_PORT was not set)
export NNODES="${NNODES:-1}" MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export NODE_RANK="${NODE_RANK:-0}" LOG_DIR="${LOG_DIR:-./log_dir}"
export GLOG_v="${GLOG_v:-3}"

# msrun takes 'python' as its task followed by the interpreter's arguments: running the module keeps
# the package directory off sys.path (running mindrl/cli.py as a file would shadow top-level modules)
exec bash "$HERE/msrun_launch.sh" python -m mindrl.cli train --config "$CONFIG" "$@"
