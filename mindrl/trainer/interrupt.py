"""Ctrl-C (SIGINT) and SIGTERM: the first one lets the step in progress finish, then the run saves a checkpoint, writes
its report, prints the command that resumes it and exits 130 (SIGINT) or 143 (SIGTERM); a second one stops at once.

Why the step finishes rather than being abandoned: a step is one rollout and one update; cut anywhere inside, the
weights, the optimizer and the data position would not belong to one step, and nothing safe could be saved.

Why a thread waits for the signals (``sigwaitinfo``) instead of a Python handler: MindSpore replaces the SIGINT
handler while a compiled graph runs with one that sends SIGTERM to the process, so Ctrl-C mid-step arrived as a
SIGTERM and killed the run (exit 143, no message). With both signals blocked in every thread, no handler runs at all:
the waiting thread receives them as they were sent. The processes the trainer starts (reward and math-verify
workers) inherit the blocked signals, so a Ctrl-C to the terminal's process group, or a scheduler's SIGTERM to every
process of the job, leaves them running until the step they score has finished; the trainer ends them when it
exits. ``install`` must run before any thread starts (first thing in a command): a thread started earlier would keep
the signals unblocked and could take one.

Several processes (msrun): each rank sees its own signals, at its own point in the step; at every step boundary the
ranks add up their requests (one small all-reduce), so all of them stop after the same step and save it together.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after saving what it could. ``exit_code`` is 128 + the signal number
    (130 for Ctrl-C, 143 for SIGTERM), ``checkpoint`` the checkpoint written (or None), ``resume`` the command line
    that continues the run (or None)."""

    def __init__(self, signum: int, checkpoint: Optional[str], resume: Optional[str]):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.checkpoint, self.resume = signum, checkpoint, resume
        self.exit_code = 128 + signum


class _State:
    def __init__(self):
        self.prog = "mindrl"
        self.installed = False      # the waiting thread runs (a command installed it)
        self.requested = None       # the signal of the first request, while a loop is listening
        self.listener = None        # () -> the line a first request prints; None: no loop listens, stop at once
        self.at_once = "nothing was saved"   # what a stop at once loses, said in its line
        self.quiet = False          # a rank other than the main one prints nothing
        self.scheduler = False      # msrun's scheduler process (MS_ROLE=MS_SCHED)
        self.lock = threading.Lock()


_state = _State()


def install(prog: str, at_once: str = "it was starting up: no step was trained or saved") -> None:
    """Block SIGINT and SIGTERM in this thread (and so in every thread and process started after) and start the
    thread that receives them. Call it first thing in a command, before anything starts a thread. Until a loop
    listens, a signal stops at once, its line saying ``at_once``."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    _state.prog, _state.at_once = prog, at_once
    # msrun's scheduler runs the same command; the workers' step-boundary agreement needs it alive, so a signal
    # that reaches it too (a launcher's SIGTERM to the whole job) is left to the workers; a second one ends it
    _state.scheduler = os.environ.get("MS_ROLE") == "MS_SCHED"
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    threading.Thread(target=_wait, name="mindrl-signals", daemon=True).start()
    _state.installed = True


def _wait() -> None:
    while True:
        info = signal.sigwaitinfo(SIGNALS)
        _received(info.si_signo)


def _say(text: str) -> None:
    if not _state.quiet:
        print(f"{_state.prog}: {text}", file=sys.stderr, flush=True)


def _received(signum: int) -> None:
    if _state.scheduler:
        if _state.requested is None:
            _state.requested = signum
            return
        os._exit(128 + signum)
    with _state.lock:
        first = _state.requested is None and _state.listener is not None
        if first:
            _state.requested = signum
            line = _state.listener()
    if first:
        _say(f"{_NAMES[signum]} received: {line}")
        return
    again = "again" if _state.requested is not None else "received"
    _say(f"{_NAMES[signum]} {again}: stopped at once; {_state.at_once}")
    os._exit(128 + signum)


def listen(describe: Callable[[], str], at_once: str, main: bool) -> None:
    """From now on a first signal is a request (``describe()`` says what happens next) and a second one stops at
    once (``at_once`` says what is lost). Without ``install`` (the Python API) plain handlers do the same on the
    main thread, where a second signal raises KeyboardInterrupt instead of ending the process."""
    _state.listener, _state.at_once, _state.quiet = describe, at_once, not main
    _state.requested = None
    if not _state.installed and threading.current_thread() is threading.main_thread():
        _state.previous = {s: signal.signal(s, _handler) for s in SIGNALS}


def _handler(signum, frame):  # the Python API's: on the main thread, between two bytecodes
    if _state.requested is not None:
        raise KeyboardInterrupt
    _received(signum)


def update(at_once: str) -> None:
    """What a stop at once would lose now (after a save, less)."""
    _state.at_once = at_once


def stop_listening() -> None:
    """Signals stop at once again (the loop is over); the Python API's handlers are put back."""
    _state.listener = None
    previous = getattr(_state, "previous", None)
    if previous:
        for s, h in previous.items():
            signal.signal(s, h)
        _state.previous = None


def requested() -> Optional[int]:
    """The signal of this process's pending request, or None."""
    return _state.requested


def agreed(exchange, world: int) -> Optional[int]:
    """The request all ranks act on at a step boundary (a collective: every rank calls it, every step): SIGINT when
    any rank got one, else SIGTERM when any did, else None."""
    import numpy as np
    mine = _state.requested
    if world <= 1 or exchange is None:
        return mine
    flags = np.array([mine == signal.SIGINT, mine == signal.SIGTERM], np.float32)
    total = exchange.all_sum(flags)
    if total[0] > 0:
        return int(signal.SIGINT)
    return int(signal.SIGTERM) if total[1] > 0 else None


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name
