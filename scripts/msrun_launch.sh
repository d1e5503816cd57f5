#!/usr/bin/env bash
# Launch SCRIPT on every worker of this node with msrun, and fail fast when a worker fails.
#
#   bash scripts/msrun_launch.sh SCRIPT [ARGS...]
#   bash scripts/msrun_launch.sh python -m mindrl.cli train --config cfg.yaml    # a module (msrun takes 'python')
#
# Environment (defaults in brackets):
#   NNODES [1]            number of machines
#   WORKERS_PER_NODE [2]  processes on this machine; world size = NNODES * WORKERS_PER_NODE
#   MASTER_ADDR [127.0.0.1]  address of node 0 (where msrun runs the scheduler)
#   MASTER_PORT [8118]    scheduler port on node 0
#   NODE_RANK [0]         this machine's index; its workers get ranks NODE_RANK*WORKERS_PER_NODE + i
#   LOG_DIR [./log_dir]   worker_<rank>.log, scheduler.log (node 0) and msrun_node<NODE_RANK>.log
#   MSRUN_EXTRA_ARGS []   more msrun options, e.g. "--cluster_time_out=120 --bind_core=True"
#   FAIL_PATTERN ['^Traceback \(most recent call last\):']  a line (grep -E) that marks a worker as failed;
#                         empty: only worker exits are watched
#   POLL_INTERVAL [0.5]   seconds between checks;  KILL_GRACE [2]: seconds between SIGTERM and SIGKILL
#   TAIL_LINES [20]       lines of the failing worker's log to print;  QUIET [0]: 1 = don't echo msrun's output
#
# Why not plain msrun: when one rank raises while the others wait in a collective, msrun only notices
# after the cluster heartbeat times out (~39 s on our machines) and does not say which rank failed.
# Here the worker logs are polled: at the first Python traceback (or a worker that msrun reports as
# exited with an error) the rank and the end of its log are printed, msrun, its scheduler and every
# worker (each worker runs in its own session, msrun starts them with setsid) are killed, and the
# launcher exits 1 within a few seconds. Exit status: 0 on success, 1 for a failed rank, otherwise
# msrun's own status (130 on Ctrl-C).
#
# Multi-node: run the same command on every machine with its own NODE_RANK and MASTER_ADDR set to
# node 0's address. Only ranks on this machine are watched; a failure on another machine shows up
# here when msrun gives up on the cluster.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  [ "$#" -lt 1 ] && exit 2 || exit 0
fi

NNODES="${NNODES:-1}"
WORKERS_PER_NODE="${WORKERS_PER_NODE:-2}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-8118}"
NODE_RANK="${NODE_RANK:-0}"
LOG_DIR="${LOG_DIR:-./log_dir}"
MSRUN_EXTRA_ARGS="${MSRUN_EXTRA_ARGS:-}"
FAIL_PATTERN="${FAIL_PATTERN-^Traceback \(most recent call last\):}"
POLL_INTERVAL="${POLL_INTERVAL:-0.5}"
KILL_GRACE="${KILL_GRACE:-2}"
TAIL_LINES="${TAIL_LINES:-20}"
QUIET="${QUIET:-0}"

say() { echo "msrun_launch: $*" >&2; }
die() { say "$*"; exit 2; }

for var in NNODES WORKERS_PER_NODE MASTER_PORT NODE_RANK TAIL_LINES; do
  [[ "${!var}" =~ ^[0-9]+$ ]] || die "$var must be a non-negative integer, got '${!var}'"
done
[ "$NNODES" -ge 1 ] && [ "$WORKERS_PER_NODE" -ge 1 ] || die "NNODES and WORKERS_PER_NODE must be >= 1"
[ "$NODE_RANK" -lt "$NNODES" ] || die "NODE_RANK=$NODE_RANK must be < NNODES=$NNODES"

if [ -f "$ROOT/.venv/bin/activate" ]; then
  # shellcheck disable=SC1091
  . "$ROOT/.venv/bin/activate"  # msrun starts workers with the 'python' found on PATH
fi
command -v msrun >/dev/null 2>&1 || die "msrun not found on PATH (install mindspore or create $ROOT/.venv)"

WORLD=$((NNODES * WORKERS_PER_NODE))
FIRST_RANK=$((NODE_RANK * WORKERS_PER_NODE))
LOCAL_RANKS=$(seq "$FIRST_RANK" $((FIRST_RANK + WORKERS_PER_NODE - 1)))
mkdir -p "$LOG_DIR" || die "cannot create LOG_DIR=$LOG_DIR"
MSRUN_LOG="$LOG_DIR/msrun_node${NODE_RANK}.log"
# stale logs from an earlier run would look like a failure of this one
for r in $LOCAL_RANKS; do rm -f "$LOG_DIR/worker_$r.log"; done
rm -f "$MSRUN_LOG"
[ "$NODE_RANK" = 0 ] && rm -f "$LOG_DIR/scheduler.log"

# shellcheck disable=SC2086
set -- --worker_num="$WORLD" --local_worker_num="$WORKERS_PER_NODE" --master_addr="$MASTER_ADDR" \
  --master_port="$MASTER_PORT" --node_rank="$NODE_RANK" --log_dir="$LOG_DIR" --join=True \
  $MSRUN_EXTRA_ARGS "$@"
say "world size $WORLD (node $NODE_RANK of $NNODES, ranks $FIRST_RANK..$((FIRST_RANK + WORKERS_PER_NODE - 1))), scheduler $MASTER_ADDR:$MASTER_PORT, logs in $LOG_DIR"
say "msrun $*"

# msrun gets its own session so that one signal reaches it, its scheduler and its log tails
setsid msrun "$@" >"$MSRUN_LOG" 2>&1 </dev/null &
MSRUN_PID=$!
MSRUN_PGID=$(ps -o pgid= -p "$MSRUN_PID" 2>/dev/null | tr -d ' ')
[ -n "$MSRUN_PGID" ] || MSRUN_PGID=$MSRUN_PID
ECHO_PID=""
if [ "$QUIET" != 1 ]; then
  tail -n +1 -F --pid="$MSRUN_PID" "$MSRUN_LOG" 2>/dev/null &
  ECHO_PID=$!
fi

declare -A WORKER_PID=()   # rank -> pid of the worker (a session leader: its group holds its children)

alive() {  # process exists and is not a zombie
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$state" ] && [[ "$state" != Z* ]]
}

scan_workers() {  # learn rank -> pid from msrun's children (their environment has MS_ROLE and RANK_ID)
  local child pgid env role rank
  # msrun's children: the scheduler, the workers (session leaders: msrun starts them with setsid) and
  # 'tail -f' log echoes (same environment as a worker, but in msrun's group)
  while read -r child pgid; do
    [ -n "$child" ] && [ "$child" = "$pgid" ] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$child/environ") || continue
    role=$(sed -n 's/^MS_ROLE=//p' <<<"$env")
    rank=$(sed -n 's/^RANK_ID=//p' <<<"$env")
    if [ "$role" = MS_WORKER ] && [ -n "$rank" ]; then WORKER_PID[$rank]=$child; fi
  done < <(ps -o pid=,pgid= --ppid "$MSRUN_PID" 2>/dev/null)
}

kill_job() {
  local sig pid waited=0
  scan_workers
  for sig in TERM KILL; do
    for pid in "${WORKER_PID[@]}"; do kill -s "$sig" -- "-$pid" 2>/dev/null || kill -s "$sig" "$pid" 2>/dev/null; done
    if [ "$MSRUN_PGID" != "$(ps -o pgid= -p $$ | tr -d ' ')" ]; then
      kill -s "$sig" -- "-$MSRUN_PGID" 2>/dev/null
    else
      kill -s "$sig" "$MSRUN_PID" 2>/dev/null
    fi
    [ "$sig" = KILL ] && break
    waited=0
    while [ "$waited" -lt $((KILL_GRACE * 10)) ]; do
      local any=0
      alive "$MSRUN_PID" && any=1
      for pid in "${WORKER_PID[@]}"; do alive "$pid" && any=1; done
      [ "$any" = 0 ] && break 2
      sleep 0.1
      waited=$((waited + 1))
    done
  done
  wait "$MSRUN_PID" 2>/dev/null
  [ -n "$ECHO_PID" ] && kill "$ECHO_PID" 2>/dev/null && wait "$ECHO_PID" 2>/dev/null
}

show_log() {  # the end of a worker's log without MindSpore's INFO/WARNING lines
  local log="$1"
  grep -vE '^\[(INFO|WARNING|DEBUG)\]' "$log" 2>/dev/null | tail -n "$TAIL_LINES" | sed 's/^/    /' >&2
}

report_failure() {  # rank, reason
  local rank="$1" log="$LOG_DIR/worker_$1.log"
  sleep 0.3  # let the worker finish writing its traceback
  say "rank $rank failed: $2 (log: $log); last lines:"
  show_log "$log"
}

rank_of_pid() {
  local r
  for r in "${!WORKER_PID[@]}"; do [ "${WORKER_PID[$r]}" = "$1" ] && { echo "$r"; return; }; done
}

find_failed_rank() {  # prints "rank<TAB>reason" of the first failed local rank, if any
  local r log pid
  if [ -n "$FAIL_PATTERN" ]; then
    for r in $LOCAL_RANKS; do
      log="$LOG_DIR/worker_$r.log"
      if [ -s "$log" ] && grep -qE -m1 -- "$FAIL_PATTERN" "$log" 2>/dev/null; then
        printf '%s\tPython traceback in its log\n' "$r"; return
      fi
    done
  fi
  # msrun noticed a worker that exited non-zero (killed, or an error without a traceback)
  pid=$(sed -n 's/.*Worker process \([0-9]*\) exit with exception.*/\1/p' "$MSRUN_LOG" 2>/dev/null | head -n 1)
  if [ -n "$pid" ]; then
    r=$(rank_of_pid "$pid")
    code=$(sed -n "s/.*Worker process $pid exit with exception. Error code: \([-0-9]*\).*/\1/p" "$MSRUN_LOG" | head -n 1)
    printf '%s\texited with code %s\n' "${r:-?}" "${code:-?}"
  fi
}

on_signal() {
  say "interrupted: stopping the job"
  kill_job
  exit 130
}
trap on_signal INT TERM

while alive "$MSRUN_PID"; do
  [ "${#WORKER_PID[@]}" -lt "$WORKERS_PER_NODE" ] && scan_workers
  failure=$(find_failed_rank)
  if [ -n "$failure" ]; then
    rank=${failure%%$'\t'*}
    reason=${failure#*$'\t'}
    if [ "$rank" = "?" ]; then
      say "a worker failed: $reason (see $LOG_DIR)"
    else
      report_failure "$rank" "$reason"
    fi
    say "stopping the job (msrun pid $MSRUN_PID and ${#WORKER_PID[@]} worker(s))"
    kill_job
    exit 1
  fi
  sleep "$POLL_INTERVAL"
done

wait "$MSRUN_PID"
rc=$?
[ -n "$ECHO_PID" ] && { wait "$ECHO_PID" 2>/dev/null; }
if [ "$rc" -eq 0 ]; then
  say "job finished; logs in $LOG_DIR (worker_<rank>.log, msrun_node$NODE_RANK.log)"
  exit 0
fi
for pid in "${WORKER_PID[@]}"; do  # msrun normally kills its workers itself; make sure
  alive "$pid" && kill -s KILL -- "-$pid" 2>/dev/null
done
failure=$(find_failed_rank)
if [ -n "$failure" ] && [ "${failure%%$'\t'*}" != "?" ]; then
  report_failure "${failure%%$'\t'*}" "${failure#*$'\t'}"
else
  say "msrun exited with status $rc; no local worker shows a traceback"
  if [ -f "$LOG_DIR/scheduler.log" ]; then
    say "scheduler errors:"
    grep -E 'ERROR|timed out|Error' "$LOG_DIR/scheduler.log" | tail -n 5 | sed 's/^/    /' >&2
  fi
fi
say "logs in $LOG_DIR"
exit "$rc"
