#!/usr/bin/env bash
# Launch SCRIPT on every worker of this node with msrun, and fail fast when a worker fails.
#
#   bash scripts/msrun_launch.sh SCRIPT [ARGS...]
#   bash scripts/msrun_launch.sh python -m mindrl.cli train --config cfg.yaml    # a module (msrun takes 'python')
#
# Environment (defaults in brackets):
#   NNODES [1]            number of machines
#   WORKERS_PER_NODE [2]  processes on this machine; world size = NNODES * WORKERS_PER_NODE.
#                         NPUS_PER_NODE and GPUS_PER_NODE (MindSpeed-RL's names) mean the same; when
#                         several are set they must agree (otherwise exit 2)
#   MASTER_ADDR [127.0.0.1]  address of node 0 (where msrun runs the scheduler)
#   MASTER_PORT [8118]    scheduler port on node 0. Unset on a one-machine job and 8118 taken (another job
#                         runs): a free port is picked and printed. Set, or on several machines: it must be free
#   NODE_RANK [0]         this machine's index; its workers get ranks NODE_RANK*WORKERS_PER_NODE + i
#   LOG_DIR [./log_dir]   worker_<rank>.log, scheduler.log (node 0) and msrun_node<NODE_RANK>.log
#   MSRUN_EXTRA_ARGS []   more msrun options, e.g. "--cluster_time_out=120 --bind_core=True"
#   FAIL_PATTERN ['^Traceback \(most recent call last\):']  a line (grep -E) that marks a worker as failed;
#                         empty: only worker exits are watched
#   POLL_INTERVAL [0.5]   seconds between checks;  KILL_GRACE [2]: seconds between SIGTERM and SIGKILL
#   TAIL_LINES [20]       lines of the failing worker's log to print;  QUIET [0]: 1 = don't echo msrun's output
#   STOP_WITH_PARENT [1]  1: stop the job when the process that started the launcher exits (a killed wrapper
#                         script); off by itself under nohup or setsid. 0: never
#
# Why not plain msrun: when one rank raises while the others wait in a collective, msrun only notices
# after the cluster heartbeat times out (~39 s on our machines) and does not say which rank failed.
# Here the worker logs are polled: at the first Python traceback (or a worker that msrun reports as
# exited with an error) the rank and the end of its log are printed, every process of the job is
# stopped and the launcher exits 1 within a few seconds; so does a scheduler that fails (MASTER_PORT
# taken), which plain msrun would wait on in silence. Exit status: 0 on success, 1 for a failed rank or
# scheduler, 2 for bad settings (a MASTER_PORT in use is refused before msrun starts), 128+N after
# signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP or a parent that exited), otherwise msrun's own status.
#
# No orphans: msrun and everything it starts carry MINDRL_LAUNCH_JOB=<id> in their environment, and
# "stop the job" means SIGTERM to every such process, SIGKILL after KILL_GRACE. That happens on a
# failed rank, on SIGTERM/SIGINT/SIGHUP to the launcher, and when the launcher's parent exits. If the
# launcher itself is killed with SIGKILL, a watchdog (this script in its own session) stops the job
# within about a second, and msrun gets SIGINT from the kernel at once (setpriv --pdeathsig), on which
# it kills its workers. See docs/parallel.md for what this does not cover.
#
# Multi-node: run the same command on every machine with its own NODE_RANK and MASTER_ADDR set to
# node 0's address. Only ranks on this machine are watched; a failure on another machine shows up
# here when msrun gives up on the cluster.
set -uo pipefail

KILL_GRACE="${KILL_GRACE:-2}"
POLL_INTERVAL="${POLL_INTERVAL:-0.5}"
JOB_VAR=MINDRL_LAUNCH_JOB   # the environment variable that marks every process of one job

proc_stat() {  # PID: PSTAT=(fields of /proc/PID/stat after the command name: state ppid pgrp session ...)
  local line
  PSTAT=()
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  read -r -a PSTAT <<<"${line##*) }"
}

job_pids() {  # TAG: live processes whose environment holds JOB_VAR=TAG (msrun and all it started)
  local f pid
  for f in $(grep -lzxF -- "$JOB_VAR=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$pid" != "$BASHPID" ] && echo "$pid"
  done
}

stop_job() {  # TAG [LEADER]: SIGTERM to every process of the job (and LEADER's group), SIGKILL after KILL_GRACE
  local tag="$1" leader="${2:-}" sig pids waited limit
  for sig in TERM KILL; do
    [ -n "$leader" ] && { kill -s "$sig" -- "-$leader" 2>/dev/null || kill -s "$sig" "$leader" 2>/dev/null; }
    pids=$(job_pids "$tag")
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -s "$sig" $pids 2>/dev/null
    # after SIGTERM, KILL_GRACE; after SIGKILL, up to 5 s for the kernel to tear them down (a worker holding
    # gigabytes takes a moment on a loaded machine), so that none is left when this returns
    limit=$((KILL_GRACE * 10))
    [ "$sig" = KILL ] && limit=50
    for ((waited = 0; waited < limit; waited++)); do
      if [ -z "$(job_pids "$tag")" ] && { [ -z "$leader" ] || ! proc_stat "$leader" || [ "${PSTAT[0]}" = Z ]; }; then
        return
      fi
      sleep 0.1
    done
  done
}

watchdog() {  # LAUNCHER_PID LAUNCHER_START TAG LOG: when the launcher is gone (even SIGKILL), stop its job
  trap '' INT HUP  # in its own session; only a signal sent to it by pid reaches it
  # SIGTERM from the launcher: the job is over, quit at once (wait returns on a trapped signal). The nap goes too:
  # every background job, since the signal can land between 'sleep &' and reading its pid from $!
  # shellcheck disable=SC2046
  trap 'kill $(jobs -p) 2>/dev/null; wait; exit 0' TERM
  while proc_stat "$1" && [ "${PSTAT[0]}" != Z ] && [ "${PSTAT[19]}" = "$2" ]; do
    sleep "$POLL_INTERVAL" &
    wait $!
  done
  trap - TERM
  if [ -n "$(job_pids "$3")" ]; then
    echo "msrun_launch: the launcher (pid $1) is gone; its watchdog is stopping the job" >>"$4"
    stop_job "$3"
  fi
}

if [ "${1:-}" = --watchdog ]; then  # internal: started by the launcher below
  watchdog "$2" "$3" "$4" "$5"
  exit 0
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  [ "$#" -lt 1 ] && exit 2 || exit 0
fi

say() { echo "msrun_launch: $*" >&2; }
die() { say "$*"; exit 2; }

# MindSpeed-RL's scripts say NPUS_PER_NODE (GPUS_PER_NODE elsewhere); all three name the same number
per_node=""
per_node_from=""
for var in WORKERS_PER_NODE NPUS_PER_NODE GPUS_PER_NODE; do
  [ -n "${!var:-}" ] || continue
  [[ "${!var}" =~ ^[0-9]+$ ]] || die "$var must be a non-negative integer, got '${!var}'"
  if [ -z "$per_node_from" ]; then
    per_node=${!var}
    per_node_from=$var
  elif [ $((10#${!var})) -ne $((10#$per_node)) ]; then
    die "$per_node_from=$per_node and $var=${!var} disagree; set only one of them"
  fi
done

NNODES="${NNODES:-1}"
WORKERS_PER_NODE="${per_node:-2}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
PORT_CHOSEN=0   # 1: the user named MASTER_PORT (or several machines must agree on it), so it is never replaced
if [ -n "${MASTER_PORT:-}" ]; then PORT_CHOSEN=1; fi
MASTER_PORT="${MASTER_PORT:-8118}"
NODE_RANK="${NODE_RANK:-0}"
LOG_DIR="${LOG_DIR:-./log_dir}"
MSRUN_EXTRA_ARGS="${MSRUN_EXTRA_ARGS:-}"
FAIL_PATTERN="${FAIL_PATTERN-^Traceback \(most recent call last\):}"
TAIL_LINES="${TAIL_LINES:-20}"
QUIET="${QUIET:-0}"
STOP_WITH_PARENT="${STOP_WITH_PARENT:-1}"

for var in NNODES WORKERS_PER_NODE MASTER_PORT NODE_RANK TAIL_LINES KILL_GRACE; do
  [[ "${!var}" =~ ^[0-9]+$ ]] || die "$var must be a non-negative integer, got '${!var}'"
done
[ "$NNODES" -ge 1 ] && [ "$WORKERS_PER_NODE" -ge 1 ] || die "NNODES and WORKERS_PER_NODE must be >= 1"
[ "$NODE_RANK" -lt "$NNODES" ] || die "NODE_RANK=$NODE_RANK must be < NNODES=$NNODES"
[[ "$STOP_WITH_PARENT" =~ ^[01]$ ]] || die "STOP_WITH_PARENT must be 0 or 1, got '$STOP_WITH_PARENT'"

if [ -f "$ROOT/.venv/bin/activate" ]; then
  # shellcheck disable=SC1091
  . "$ROOT/.venv/bin/activate"  # msrun starts workers with the 'python' found on PATH
fi
command -v msrun >/dev/null 2>&1 || die "msrun not found on PATH (install mindspore or create $ROOT/.venv)"

port_in_use() {  # ADDR PORT: true when binding it fails with EADDRINUSE (unknown, e.g. no python: false)
  python - "$1" "$2" 2>/dev/null <<'PY'
import errno, socket, sys
try:
    infos = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), type=socket.SOCK_STREAM)
    with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to a server
        s.bind(infos[0][4])
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRINUSE else 1)
sys.exit(1)
PY
}
free_port() {  # ADDR: a port the kernel hands out as free on ADDR
  python - "$1" 2>/dev/null <<'PY'
import socket, sys
infos = socket.getaddrinfo(sys.argv[1], 0, type=socket.SOCK_STREAM)
with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
    s.bind(infos[0][4])
    print(s.getsockname()[1])
PY
}
# msrun's scheduler (node 0) cannot bind a port that is taken, and then the workers wait for it in silence.
# A second job on one machine with the default port gets a free one (nobody else needs to know it)
if [ "$NODE_RANK" = 0 ] && [ "$NNODES" = 1 ] && [ "$PORT_CHOSEN" = 0 ] && port_in_use "$MASTER_ADDR" "$MASTER_PORT"; then
  port=$(free_port "$MASTER_ADDR") || port=""
  if [ -n "$port" ]; then
    say "the default MASTER_PORT=$MASTER_PORT is in use on $MASTER_ADDR (another job?): using free port $port"
    MASTER_PORT=$port
  fi
fi
if [ "$NODE_RANK" = 0 ] && port_in_use "$MASTER_ADDR" "$MASTER_PORT"; then
  die "MASTER_PORT=$MASTER_PORT is in use on $MASTER_ADDR (another job or program holds it): set MASTER_PORT to a free port"
fi

WORLD=$((NNODES * WORKERS_PER_NODE))
FIRST_RANK=$((NODE_RANK * WORKERS_PER_NODE))
LOCAL_RANKS=$(seq "$FIRST_RANK" $((FIRST_RANK + WORKERS_PER_NODE - 1)))
mkdir -p "$LOG_DIR" || die "cannot create LOG_DIR=$LOG_DIR"
MSRUN_LOG="$LOG_DIR/msrun_node${NODE_RANK}.log"
# stale logs from an earlier run would look like a failure of this one
for r in $LOCAL_RANKS; do rm -f "$LOG_DIR/worker_$r.log"; done
rm -f "$MSRUN_LOG"
[ "$NODE_RANK" = 0 ] && rm -f "$LOG_DIR/scheduler.log"

# Watch the parent only when the launcher was not detached on purpose: nohup ignores SIGHUP (bit 0 of
# SigIgn), setsid makes the launcher a session leader, and a parent that is init is already gone.
proc_stat $$
PARENT_PID=${PSTAT[1]}
LAUNCHER_START=${PSTAT[19]}
WATCH_PARENT=$STOP_WITH_PARENT
sig_ignored=$(sed -n 's/^SigIgn:[[:space:]]*//p' "/proc/$$/status")
if (( 0x${sig_ignored:-0} & 1 )) || [ "${PSTAT[3]}" = $$ ] || [ "$PARENT_PID" -le 1 ]; then WATCH_PARENT=0; fi
# A signal ignored when a shell starts cannot be trapped (POSIX): say so rather than seem to ignore it later.
# nohup ignores SIGHUP; a non-interactive shell starts its '&' jobs with SIGINT (and SIGQUIT) ignored.
ignored_names=""
stopper="SIGTERM will"
for bit_name in 2:SIGINT 1:SIGHUP 16384:SIGTERM; do  # bits of SigIgn: 1 << (signal number - 1)
  (( 0x${sig_ignored:-0} & ${bit_name%%:*} )) || continue
  ignored_names="${ignored_names:+$ignored_names and }${bit_name#*:}"
  [ "${bit_name#*:}" = SIGTERM ] && stopper="SIGKILL of this launcher will (its watchdog then stops the job)"
done
[ -n "$ignored_names" ] && say "$ignored_names ignored (inherited from the process that started this one): they will not stop the job; $stopper"

# shellcheck disable=SC2086
set -- --worker_num="$WORLD" --local_worker_num="$WORKERS_PER_NODE" --master_addr="$MASTER_ADDR" \
  --master_port="$MASTER_PORT" --node_rank="$NODE_RANK" --log_dir="$LOG_DIR" --join=True \
  $MSRUN_EXTRA_ARGS "$@"
say "world size $WORLD (node $NODE_RANK of $NNODES, ranks $FIRST_RANK..$((FIRST_RANK + WORKERS_PER_NODE - 1))), scheduler $MASTER_ADDR:$MASTER_PORT, logs in $LOG_DIR"
say "msrun $*"

declare -A WORKER_PID=()   # rank -> pid of the worker (a session leader: its group holds its children)
SCHED_PID=""               # msrun's scheduler on node 0 (in msrun's group)
SCHED_GONE_POLLS=0         # polls since the scheduler was seen gone while a worker still ran
SCHED_FAILURE=""
MSRUN_PID=""
ECHO_PID=""
JOB_TAG="$$.$LAUNCHER_START.$RANDOM$RANDOM"

alive() {  # process exists and is not a zombie
  proc_stat "$1" && [ "${PSTAT[0]}" != Z ]
}

kill_job() {
  local leader=""
  # msrun leads its own session (setsid); its group is signalled too, but never a group that is not its own
  [ -n "$MSRUN_PID" ] && proc_stat "$MSRUN_PID" && [ "${PSTAT[2]}" = "$MSRUN_PID" ] && leader=$MSRUN_PID
  stop_job "$JOB_TAG" "$leader"
  # our child, so its pid cannot have been reused: this catches an msrun killed before it carried the tag
  [ -n "$MSRUN_PID" ] && { kill -s KILL "$MSRUN_PID" 2>/dev/null; wait "$MSRUN_PID" 2>/dev/null; }
  [ -n "$ECHO_PID" ] && kill "$ECHO_PID" 2>/dev/null && wait "$ECHO_PID" 2>/dev/null
}

stop_and_exit() {  # WHY STATUS
  trap '' INT TERM HUP  # a second Ctrl-C must not interrupt the cleanup
  say "$1: stopping the job"
  kill_job
  exit "$2"
}
trap 'stop_and_exit "interrupted by SIGINT" 130' INT
trap 'stop_and_exit "interrupted by SIGTERM" 143' TERM
trap 'stop_and_exit "interrupted by SIGHUP" 129' HUP

# The watchdog is in its own session, so a signal to our process group or a closed terminal leaves it
# to do its job; it has no tag itself and holds none of our output streams. Every exit of ours that
# runs (all but SIGKILL) comes after the job is stopped, and stops the watchdog and waits for it, so
# that nothing started here outlives the launcher.
setsid bash "${BASH_SOURCE[0]}" --watchdog "$$" "$LAUNCHER_START" "$JOB_TAG" "$MSRUN_LOG" \
  </dev/null >/dev/null 2>&1 &
WATCHDOG_PID=$!
stop_watchdog() {  # SIGTERM: its trap stops its nap and waits for it. One started with SIGTERM ignored cannot trap
  local i          # it: after a second, SIGKILL to its process group (it leads its own session: it and its nap)
  kill -s TERM "$WATCHDOG_PID" 2>/dev/null
  for ((i = 0; i < 20; i++)); do
    alive "$WATCHDOG_PID" || break
    sleep 0.05
  done
  kill -s KILL -- "-$WATCHDOG_PID" 2>/dev/null
  wait "$WATCHDOG_PID" 2>/dev/null
}
trap stop_watchdog EXIT
# msrun gets its own session so that one signal reaches it, its scheduler and its log tails; with
# --pdeathsig the kernel sends it SIGINT (msrun then kills its workers) the moment the launcher dies
PDEATH=()
if command -v setpriv >/dev/null 2>&1 && setpriv --pdeathsig INT true 2>/dev/null; then PDEATH=(setpriv --pdeathsig INT); fi
env "$JOB_VAR=$JOB_TAG" setsid "${PDEATH[@]}" msrun "$@" >"$MSRUN_LOG" 2>&1 </dev/null &
MSRUN_PID=$!
if [ "$QUIET" != 1 ]; then
  tail -n +1 -F --pid="$MSRUN_PID" "$MSRUN_LOG" 2>/dev/null &
  ECHO_PID=$!
fi

scan_workers() {  # learn rank -> pid (and the scheduler's pid) from msrun's children's MS_ROLE and RANK_ID
  local child pgid env role rank
  # msrun's children: the scheduler (in msrun's group), the workers (session leaders: msrun starts them with
  # setsid) and 'tail -f' log echoes (a worker's environment, but in msrun's group)
  while read -r child pgid; do
    [ -n "$child" ] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$child/environ") || continue
    role=$(sed -n 's/^MS_ROLE=//p' <<<"$env")
    rank=$(sed -n 's/^RANK_ID=//p' <<<"$env")
    if [ "$role" = MS_SCHED ]; then SCHED_PID=$child; fi
    if [ "$child" = "$pgid" ] && [ "$role" = MS_WORKER ] && [ -n "$rank" ]; then WORKER_PID[$rank]=$child; fi
  done < <(ps -o pid=,pgid= --ppid "$MSRUN_PID" 2>/dev/null)
}

check_scheduler() {  # sets SCHED_FAILURE to why msrun's scheduler failed, if it did. The workers then wait for
  local pid          # it until MS_TOPO_TIMEOUT and msrun waits for them: a silent hang without this check
  SCHED_FAILURE=""
  [ -n "$SCHED_PID" ] && ! alive "$SCHED_PID" || { SCHED_GONE_POLLS=0; return; }
  if [ -n "$FAIL_PATTERN" ] && grep -qE -m1 -- "$FAIL_PATTERN" "$LOG_DIR/scheduler.log" 2>/dev/null; then
    SCHED_FAILURE="a Python traceback in its log"; return
  fi
  for pid in "${WORKER_PID[@]}"; do
    alive "$pid" || continue
    # msrun reaps the scheduler only once every worker has exited, so until then it is a zombie whose exit
    # status /proc still shows (field 52): 0 when every worker has finished with it, and a worker may then take
    # seconds more to exit (its own exit handlers, a busy machine); anything else is a scheduler that failed
    if proc_stat "$SCHED_PID" && [ "${PSTAT[0]}" = Z ] && [[ "${PSTAT[49]:-}" =~ ^[0-9]+$ ]]; then
      SCHED_GONE_POLLS=0
      if ((PSTAT[49] & 127)); then
        SCHED_FAILURE="it was killed by signal $((PSTAT[49] & 127)) while the workers still ran"
      elif ((PSTAT[49] != 0)); then
        SCHED_FAILURE="it exited with status $((PSTAT[49] >> 8)) while the workers still ran"
      fi
      return
    fi
    # its status unknown (reaped, or a kernel without field 52): one still running for a few polls means the
    # workers wait for a scheduler that is no more
    ((++SCHED_GONE_POLLS >= 6)) && SCHED_FAILURE="it exited while the workers still ran"
    return
  done
}

report_scheduler_failure() {  # REASON
  local log="$LOG_DIR/scheduler.log"
  sleep 0.3  # let it finish writing its traceback
  if port_in_use "$MASTER_ADDR" "$MASTER_PORT"; then
    say "msrun's scheduler exited: port $MASTER_PORT is in use on $MASTER_ADDR; set MASTER_PORT to a free port (log: $log); last lines:"
  else
    say "msrun's scheduler exited: $1; see its log (log: $log); last lines:"
  fi
  show_log "$log"
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

fail_job() {
  say "stopping the job (msrun pid $MSRUN_PID and ${#WORKER_PID[@]} worker(s))"
  kill_job
  exit 1
}

while alive "$MSRUN_PID"; do
  if [ "$WATCH_PARENT" = 1 ] && { ! proc_stat $$ || [ "${PSTAT[1]}" != "$PARENT_PID" ]; }; then
    stop_and_exit "the launcher's parent (pid $PARENT_PID) exited" 129
  fi
  { [ "${#WORKER_PID[@]}" -lt "$WORKERS_PER_NODE" ] || { [ "$NODE_RANK" = 0 ] && [ -z "$SCHED_PID" ]; }; } &&
    scan_workers
  failure=$(find_failed_rank)
  if [ -n "$failure" ]; then  # first: a failed rank is the more precise cause when the scheduler then exits too
    rank=${failure%%$'\t'*}
    reason=${failure#*$'\t'}
    if [ "$rank" = "?" ]; then
      say "a worker failed: $reason (see $LOG_DIR)"
    else
      report_failure "$rank" "$reason"
    fi
    fail_job
  fi
  if [ "$NODE_RANK" = 0 ]; then
    check_scheduler
    if [ -n "$SCHED_FAILURE" ]; then
      report_scheduler_failure "$SCHED_FAILURE"
      fail_job
    fi
  fi
  sleep "$POLL_INTERVAL"
done

wait "$MSRUN_PID"
rc=$?
[ -n "$ECHO_PID" ] && { wait "$ECHO_PID" 2>/dev/null; }
leftover=$(job_pids "$JOB_TAG")
if [ -n "$leftover" ]; then  # msrun kills its workers itself; anything they started may still run
  say "stopping $(wc -w <<<"$leftover") process(es) of the job still running after msrun exited"
  stop_job "$JOB_TAG"
fi
if [ "$rc" -eq 0 ]; then
  say "job finished; logs in $LOG_DIR (worker_<rank>.log, msrun_node$NODE_RANK.log)"
  exit 0
fi
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
