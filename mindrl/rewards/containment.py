"""Containing reward functions: a time limit on every call, a check of every value, and failures as data.

Where a reward function runs (``placement``):

- ``worker``: every function that a fresh interpreter can load by name: the built-in verifiers, the functions of
  a ``custom_reward_file`` and module-level functions of importable modules. They run in ``RewardPool``'s
  subprocess workers; a call that overruns ``timeout`` is abandoned by killing the worker (with its process
  group), which is replaced, and the batch carries on. Only this stops a call stuck in C code: a regex
  backtracking on a model's output (``re`` holds the GIL while it matches) would stop every thread of the
  process it runs in, the one meant to time it included.
- ``thread``: callables a fresh interpreter cannot load (lambdas, closures, functions defined in ``__main__``).
  They run in a daemon thread of the calling process, one call at a time; a call that overruns is abandoned
  and the next ones go to a new thread. Python cannot kill a thread, so the abandoned call keeps running in
  the background (a busy loop also keeps taking its share of the GIL); define the function in an importable
  module to get the worker's hard stop.

Every value is checked by ``reward_value``: a finite real number (bool, int, float or a numpy scalar). A call
that raises, overruns or returns anything else is a ``Failure``; ``RewardComputer`` turns failures into
``reward_fallback`` or an error. A built-in with a ``prepare`` stage (``math_acc``, ``base_acc``) may also answer
a ``(gold, pred)`` pair, which ``RewardComputer`` checks with math-verify (``verifiers.py``).
"""
import importlib
import importlib.util
import json
import math
import mmap
import numbers
import os
import select
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from .custom import load_custom_reward_file
from .verifiers import VERIFIERS
from .workers import WorkerProcess, WorkerStartError, kill_all

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reward_worker.py")


# ---------------------------------------------------------------------------------------------
# values and failures


def reward_value(v):
    """``(float(v), None)`` for a finite real number, else ``(None, why)``."""
    if type(v) is float and math.isfinite(v):  # the common case, without the ABC check below
        return v, None
    if isinstance(v, (numbers.Real, np.bool_)):  # numpy registers its number scalars as numbers.Real
        try:
            x = float(v)
        except (OverflowError, TypeError, ValueError) as e:
            return None, f"returned {type(v).__name__} {_short(v)}, which is not a float ({e})"
        if math.isfinite(x):
            return x, None
        return None, f"returned {x!r}, not a finite number"
    what = "None" if v is None else f"{type(v).__name__} {_short(v)}"
    return None, f"returned {what}, expected a finite real number (bool, int or float)"


def _short(v, limit=60):
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_reward(fn, response, label, pairs=False):
    """``fn(response, label)`` checked: ``(value, None)`` or ``(None, why)``; never raises. ``pairs``: a built-in's
    ``prepare`` stage, which may also answer a ``(gold, pred)`` pair for math-verify (returned as the value)."""
    try:
        v = fn(response, label)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a failing reward is data, not a crash
        return None, f"raised {_short(e, 300)}"
    if pairs and isinstance(v, tuple) and len(v) == 2:
        return v, None
    return reward_value(v)


@dataclass
class Failure:
    """One reward call that did not give a valid value."""

    name: str
    index: int
    why: str
    timeout: bool = False
    response: str | None = None  # the sample, when the caller filled it in: shown in the message
    label: str | None = None

    def message(self):
        sample = f" (response {_short(self.response)}, label {_short(self.label)})" if self.response is not None \
            else ""
        return f"reward function {self.name!r} failed on sample {self.index}{sample}: {self.why}"


# ---------------------------------------------------------------------------------------------
# where a function runs


def importable_path(fn):
    """``"module:qualname"`` when a fresh interpreter with this process's ``sys.path`` finds ``fn`` there
    (a module-level function of an importable module); None for lambdas, closures and ``__main__``."""
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qual or module == "__main__" or "<" in qual:
        return None
    mod = sys.modules.get(module)
    if mod is None or getattr(mod, "__spec__", None) is None or mod.__spec__.name != module:
        return None
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return f"{module}:{qual}" if obj is fn else None


def load_targets(targets):
    """``{name: (function, pairs)}`` for a worker's ``targets`` (``{name: {"spec": ...} | {"attr": "module:qualname",
    "pairs": bool}}``)."""
    for spec in dict.fromkeys(t["spec"] for t in targets.values() if "spec" in t):
        load_custom_reward_file(spec)
    fns = {}
    for name, t in targets.items():
        if "spec" in t:
            fns[name] = (VERIFIERS[name], False)
        else:
            module, _, qual = t["attr"].partition(":")
            obj = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
            fns[name] = (obj, bool(t.get("pairs")))
    return fns


# ---------------------------------------------------------------------------------------------
# the two ways to run a batch of calls; each returns [float | Failure] in sample order (and pairs, see above)


def _timeout_failure(name, index, timeout, what):
    return Failure(name, index, f"no result within verifier_timeout={timeout:g}s; the call was abandoned "
                                f"({what})", timeout=True)


class _ThreadJob:
    """Calls ``fn`` on samples ``start..`` one after another in a daemon thread, publishing each result."""

    def __init__(self, fn, responses, labels, start, stop):
        self.cond = threading.Condition()
        self.results = {}
        self.done = start  # samples before this one have a result
        self.cancelled = False
        args = (fn, responses, labels, start, stop)
        self.thread = threading.Thread(target=self._run, args=args, daemon=True, name="mindrl-reward-call")
        self.thread.start()

    def _run(self, fn, responses, labels, start, stop):
        for i in range(start, len(responses)):
            result = call_reward(fn, responses[i], labels[i])
            with self.cond:
                if self.cancelled:
                    return
                self.results[i] = result
                self.done = i + 1
                self.cond.notify()
            if stop and result[1] is not None:
                return


class ThreadCaller:
    """Runs a callable with a per-call time limit in daemon threads (see the module docstring)."""

    def __init__(self, timeout):
        self.timeout = float(timeout)
        self.abandoned = 0  # calls left running in the background

    def score(self, name, fn, responses, labels, stop=False):
        n, out, start = len(responses), [None] * len(responses), 0
        while start < n:
            job = _ThreadJob(fn, responses, labels, start, stop)
            seen, deadline = start, time.monotonic() + self.timeout
            with job.cond:
                while seen < n:
                    if job.done > seen:
                        for i in range(seen, job.done):
                            value, why = job.results.pop(i)
                            out[i] = value if why is None else Failure(name, i, why)
                            if stop and why is not None:
                                return out
                        seen, deadline = job.done, time.monotonic() + self.timeout
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        job.cancelled = True
                        self.abandoned += 1
                        out[seen] = _timeout_failure(name, seen, self.timeout, "it keeps running in a "
                                                     "background thread: define the function in an importable "
                                                     "module so that a worker process can be killed instead")
                        break
                    job.cond.wait(left)
            if stop and seen < n and isinstance(out[seen], Failure):
                return out
            start = seen + 1
        return out


def _shared_file():
    """A file descriptor for memory shared with worker processes (inherited through ``pass_fds``)."""
    try:
        return os.memfd_create("mindrl-reward-board")
    except (AttributeError, OSError):  # no memfd (not Linux): an unlinked temporary file maps the same way
        with tempfile.TemporaryFile() as fh:
            return os.dup(fh.fileno())


class Board:
    """What a worker tells the trainer through shared memory, so that it writes no line per call: ``starts[j]``,
    when it began call ``j`` of its current request (``time.monotonic_ns()``: CLOCK_MONOTONIC, the same clock in
    every process; 0 before), and ``values[j]``, that call's checked value (NaN until then, and for a call whose
    result is a line on the pipe: a failure or a math pair). A worker killed in the middle of a batch leaves every
    value it computed, and the board says which call was running and since when.

    The trainer creates it (``Board()``) and grows it (``grow``); a worker attaches to the same file
    (``Board(fd)``) and maps the size each request names (``attach``).
    """

    def __init__(self, fd=None):
        self.owner = fd is None
        self.fd = _shared_file() if fd is None else fd
        self.cap, self.mm, self.starts, self.values = 0, None, None, None
        if self.owner:
            self.grow(1024)

    def attach(self, cap):
        """Map ``cap`` calls' worth of the file (after the trainer grew it)."""
        self.starts = self.values = None  # numpy views must go before their mmap can close
        if self.mm is not None:
            self.mm.close()
        self.mm = mmap.mmap(self.fd, 16 * cap)
        self.starts = np.frombuffer(self.mm, np.int64, cap, 0)
        self.values = np.frombuffer(self.mm, np.float64, cap, 8 * cap)
        self.cap = cap

    def grow(self, n):
        if n > self.cap:
            cap = max(1024, 1 << (n - 1).bit_length())
            os.ftruncate(self.fd, 16 * cap)
            self.attach(cap)

    def clear(self, m):
        self.starts[:m] = 0
        self.values[:m] = np.nan

    def close(self):
        self.starts = self.values = None
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.owner and self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Lane:
    """One request: a contiguous share of a batch sent to one worker slot. ``items``: the samples' indices in the
    batch, in the order of the request's calls; ``pos``: the first call without a recorded result."""

    def __init__(self, slot, items):
        self.slot, self.items = slot, list(items)
        self.rid, self.sent, self.pos, self.finished = None, 0, 0, False
        self.lines = {}  # call -> result that came as a line (a failure, a pair)
        self.waiting = (0, 0)  # (call, since when the trainer has seen it next without a start on the board)


def _close_all(workers, boards):
    kill_all(workers)
    for b in boards:
        b.close()


class RewardPool:
    """Persistent subprocess workers that run reward functions with at most ``timeout`` s per call.

    ``targets`` maps each name to how a worker loads it (``{"spec": custom_reward_file entry}`` or
    ``{"attr": "module:qualname", "pairs": bool}``). ``score`` splits a batch into one contiguous share per worker
    and sends each share as one request. The worker writes each call's start and value to a shared ``Board`` and
    one line when the request is done (plus a line per failure or pair), so a batch costs two pipe messages, not
    two per call. The trainer sleeps until the running call's deadline (its start + ``timeout``): a call that
    overruns is a timeout ``Failure``: its worker (and that worker's process group) is killed, a new one starts,
    and the rest of the share goes to it. A worker that dies mid-call (a crash, ``os._exit``) fails that call the
    same way. Workers start on first use (or ``start()``; ``spawn()`` starts them without waiting) and live until
    ``close()``, garbage collection or interpreter exit.
    """

    def __init__(self, targets, timeout=5.0, num_workers=1, startup_timeout=120.0):
        if num_workers < 1 or timeout <= 0:
            raise ValueError("RewardPool needs num_workers >= 1 and timeout > 0")
        self.targets = dict(targets)
        self.timeout = float(timeout)
        self.num_workers = int(num_workers)
        self.startup_timeout = float(startup_timeout)
        self.replaced = 0  # workers killed after a timeout or found dead
        self._workers = [None] * self.num_workers
        self._boards = [Board() for _ in range(self.num_workers)]
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = False
        # kill the workers and free the boards on garbage collection or at exit
        weakref.finalize(self, _close_all, self._workers, self._boards)

    def pids(self):
        """Process ids of the live workers (for tests and diagnostics)."""
        return [w.pid for w in self._workers if w is not None]

    def spawn(self):
        """Start the workers without waiting for them to be ready (they load while the trainer builds)."""
        with self._lock:
            self._closed = False
            for slot in range(self.num_workers):
                if self._workers[slot] is None:
                    self._workers[slot] = self._new_worker(slot, wait=False)

    def start(self):
        with self._lock:
            self._closed = False
            for slot in range(self.num_workers):
                self._worker(slot)

    def close(self):
        """Kill the workers. Without the lock: a call stuck in ``score`` (in another thread) must not keep them
        alive; that call then fails, as no new worker starts until the next ``start`` or ``score``."""
        self._closed = True
        for slot, w in enumerate(list(self._workers)):
            if w is not None:
                w.kill()
                self._workers[slot] = None

    def _new_worker(self, slot, wait=True):
        init = {"path": list(sys.path), "targets": self.targets, "board": self._boards[slot].fd}
        return WorkerProcess([_WORKER_SCRIPT, json.dumps(init)], self.startup_timeout, "reward worker",
                             stderr=None, own_group=True, pass_fds=(self._boards[slot].fd,), wait=wait)

    def _worker(self, slot):
        w = self._workers[slot]
        if w is None:
            if self._closed:
                raise WorkerStartError("reward worker pool was closed while scoring")
            w = self._workers[slot] = self._new_worker(slot)
        elif not w.ready:
            try:
                w.wait_ready()
            except WorkerStartError:
                self._workers[slot] = None
                raise
        return w

    def _drop(self, slot):
        w = self._workers[slot]
        if w is not None:
            w.kill()
            self._workers[slot] = None
            self.replaced += 1

    def score(self, name, responses, labels, stop=False):
        """``[float | Failure]`` for ``name`` on every sample (``(gold, pred)`` pairs for a ``pairs`` target);
        ``stop``: return at the first failure."""
        with self._lock:
            self._closed = False
            return self._score(name, list(responses), list(labels), stop)

    def _send(self, lane, name, responses, labels, stop):
        """Send the lane's calls as one request (starting a worker if the slot is empty)."""
        board, m = self._boards[lane.slot], len(lane.items)
        board.grow(m)
        board.clear(m)
        self._next_id += 1
        lane.rid = self._next_id
        msg = {"id": lane.rid, "name": name, "cap": board.cap, "stop": stop,
               "items": [[responses[i], labels[i]] for i in lane.items]}
        try:
            self._worker(lane.slot).send(msg)
        except OSError:  # it died while idle: start another and send again
            self._drop(lane.slot)
            self._worker(lane.slot).send(msg)
        lane.sent = time.monotonic_ns()
        lane.waiting = (0, lane.sent)

    def _score(self, name, responses, labels, stop):
        n = len(responses)
        out = [None] * n
        shares = np.array_split(np.arange(n), min(self.num_workers, n)) if n else []
        lanes = [_Lane(slot, idx.tolist()) for slot, idx in enumerate(shares)]
        for lane in lanes:
            self._send(lane, name, responses, labels, stop)
        limit = int(self.timeout * 1e9)
        failed = []

        def advance(lane):
            """Record the results the board and the lines hold, from ``lane.pos`` on."""
            board, m, first = self._boards[lane.slot], len(lane.items), lane.pos
            starts, values = board.starts[first:m].tolist(), board.values[first:m].tolist()
            for j in range(first, m):
                if j in lane.lines:
                    got = lane.lines.pop(j)
                elif starts[j - first] and not math.isnan(values[j - first]):
                    got = values[j - first]
                else:
                    return
                out[lane.items[j]] = got
                if isinstance(got, Failure):
                    failed.append(got)
                lane.pos = j + 1

        def read(lane, block=True):
            """Take the lines the worker wrote; False when it has exited."""
            w = self._workers[lane.slot]
            alive = True
            while True:
                if not block and not select.select([w.fd], [], [], 0)[0]:
                    break
                alive = w.fill()
                block = False
                if not alive:
                    break
            msg = w.pop_line()
            while msg is not None:
                if msg.get("id") == lane.rid:
                    if "done" in msg:
                        lane.finished = True
                    elif "err" in msg:
                        lane.lines[msg["i"]] = Failure(name, lane.items[msg["i"]], msg["err"])
                        lane.finished = lane.finished or stop  # the worker stopped there by itself: keep it
                    else:
                        lane.lines[msg["i"]] = tuple(msg["pair"])
                msg = w.pop_line()
            return alive

        def deadline(lane):
            """When the lane's running call overruns: its start on the board + timeout (a call not started yet:
            from when the trainer first saw it next)."""
            board, j = self._boards[lane.slot], lane.pos
            start = int(board.starts[j]) if j < len(lane.items) else 0  # past the end: the done line is due
            if not start:
                if lane.waiting[0] != j:
                    lane.waiting = (j, time.monotonic_ns())
                start = lane.waiting[1]
            return start + limit

        def lost(lane, why, timeout):
            """The lane's worker is gone (killed on a timeout, or dead): fail the running call and send the rest
            of the share to a new worker."""
            j = lane.pos
            failure = _timeout_failure(name, lane.items[j], self.timeout, why) if timeout else \
                Failure(name, lane.items[j], why)
            out[lane.items[j]] = failure
            failed.append(failure)
            self._drop(lane.slot)
            rest = lane.items[j + 1:]
            lane.items, lane.pos, lane.lines, lane.finished = rest, 0, {}, not rest or stop
            if rest and not stop:
                self._send(lane, name, responses, labels, stop)

        def halt():
            """Stop at the first failure: busy workers would go on with their shares, so they are dropped."""
            for lane in lanes:
                if not lane.finished:
                    self._drop(lane.slot)
                    lane.finished = True
            return out

        while True:
            busy = [lane for lane in lanes if not lane.finished]
            if not busy:
                break
            now = time.monotonic_ns()
            wait = max(0, min(deadline(lane) for lane in busy) - now) / 1e9
            try:
                ready = select.select([self._workers[lane.slot].fd for lane in busy], [], [], wait)[0]
            except (AttributeError, OSError, ValueError):  # close() from another thread took the workers
                if self._closed:
                    raise WorkerStartError("reward worker pool was closed while scoring") from None
                raise
            for lane in busy:
                w = self._workers[lane.slot]
                if w.fd in ready:
                    alive = read(lane)
                    advance(lane)
                    if lane.finished:
                        while lane.pos < len(lane.items) and not (stop and failed):  # defensive: no result
                            lane.lines[lane.pos] = Failure(name, lane.items[lane.pos], "the worker gave no result")
                            advance(lane)
                    elif not alive:
                        w.kill()
                        lost(lane, f"the worker process {w.exit_text()} during the call; a new one was started",
                             False)
                    if stop and failed:
                        return halt()
            now = time.monotonic_ns()
            for lane in lanes:
                if not lane.finished and now >= deadline(lane):
                    read(lane, block=False)  # lines it wrote before it hung
                    advance(lane)
                    if lane.finished or now < deadline(lane):
                        continue
                    if lane.pos == len(lane.items):  # every call answered, but no done line: do not wait on it
                        self._drop(lane.slot)
                        lane.finished = True
                        continue
                    lost(lane, "its worker process was killed and replaced", True)
                    if stop:
                        return halt()
        return out
