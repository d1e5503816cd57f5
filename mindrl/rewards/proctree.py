"""Every process a reward worker's calls started, found wherever it went, and killed (Linux; elsewhere a no-op).

A reward function may start processes in a new session or process group, or daemonize them (a double fork): the
worker's process-group kill misses all of those. Two marks find them:

- the worker is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan among its descendants is
  reparented to the worker instead of to init, so while the worker lives its process tree holds them all;
- the worker's environment carries its own tag (``TAG_VAR``), which its descendants inherit: they are found once
  the worker is gone too (killed on a timeout, or crashed), unless they cleared their environment.

Killing stops every member first (SIGSTOP: a stopped process cannot fork) and scans again until no new one shows
up, then sends SIGKILL. Without ``/proc`` (not Linux) nothing is found, and only the process-group kill is left.
"""
import ctypes
import os
import signal
import time

TAG_VAR = "MINDRL_REWARD_WORKER"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Make this process the reaper of its orphaned descendants; False where the kernel cannot (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _scan(tag):
    """``({pid: ppid} of every live process, {pids whose environment holds TAG_VAR=tag}})``."""
    parents, tagged = {}, set()
    entry_of_tag = f"{TAG_VAR}={tag}".encode() if tag else None
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents, tagged
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] in (b"Z", b"X"):  # dead already: its parent reaps it
                continue
            parents[int(entry)] = int(fields[1])
            if entry_of_tag:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if entry_of_tag in fh.read().split(b"\0"):
                        tagged.add(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return parents, tagged


def _members(root, parents, tagged):
    """``root`` (if alive; None: none), its descendants, the tagged processes and theirs."""
    kids = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = set(), [pid for pid in (root, *tagged) if pid is not None]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(kids.get(pid, ()))
    return found & parents.keys()


def kill_tree(root, tag=None, keep_root=False, timeout=5.0):
    """SIGKILL ``root`` (a pid that cannot have been reused: a child not yet reaped, or this process; None for none),
    every live descendant of it and every process tagged ``tag`` (``keep_root``: all but root, the way a worker
    cleans up after itself). Returns how many were killed."""
    stopped = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _members(root, *_scan(tag))
        if keep_root:
            found.discard(root)
        new = found - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return len(stopped)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:  # gone meanwhile
        pass


def reap_children(timeout=5.0):
    """Wait for this process's dead children (with a subreaper these include killed orphans, which reach it as
    their parents die) until it has none, or ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.002)


def clean_up_after_calls():
    """Kill every process this worker's calls started, and reap them (run in the worker, a subreaper)."""
    kill_tree(os.getpid(), keep_root=True)
    reap_children()
