"""Containing reward functions: a time limit on every call, a check of every value, and failures as data.

Where a reward function runs (``placement``):

- ``inline``: the built-in verifiers, in the calling process. They are linear-time string scans of the response
  and label with no I/O and no user code, so they cannot hang (``tests/test_reward_containment.py`` feeds them
  100k-character adversarial texts); math-verify, the one built-in part that can run away, already runs in the
  timed ``MathVerifyPool``. Running them inline keeps the common path free of any inter-process cost.
- ``worker``: every other function that a fresh interpreter can load by name, i.e. those of a
  ``custom_reward_file`` and module-level functions of importable modules. They run in ``RewardPool``'s
  subprocess workers; a call that overruns ``timeout`` is abandoned by killing the worker (with its process
  group), which is replaced, and the batch carries on. Only this stops a call stuck in C code or in a sleep.
- ``thread``: callables a fresh interpreter cannot load (lambdas, closures, functions defined in ``__main__``).
  They run in a daemon thread of the calling process, one call at a time; a call that overruns is abandoned
  and the next ones go to a new thread. Python cannot kill a thread, so the abandoned call keeps running in
  the background (a busy loop also keeps taking its share of the GIL); define the function in an importable
  module to get the worker's hard stop.

Every value is checked by ``reward_value``: a finite real number (bool, int, float or a numpy scalar). A call
that raises, overruns or returns anything else is a ``Failure``; ``RewardComputer`` turns failures into
``reward_fallback`` or an error.
"""
import collections
import importlib
import importlib.util
import json
import math
import numbers
import os
import select
import sys
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from .workers import WorkerProcess, WorkerStartError, kill_all

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reward_worker.py")


# ---------------------------------------------------------------------------------------------
# values and failures


def reward_value(v):
    """``(float(v), None)`` for a finite real number, else ``(None, why)``."""
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


def call_reward(fn, response, label):
    """``fn(response, label)`` checked: ``(value, None)`` or ``(None, why)``; never raises."""
    try:
        return reward_value(fn(response, label))
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a failing reward is data, not a crash
        return None, f"raised {_short(e, 300)}"


@dataclass
class Failure:
    """One reward call that did not give a valid value."""

    name: str
    index: int
    why: str
    timeout: bool = False

    def message(self):
        return f"reward function {self.name!r} failed on sample {self.index}: {self.why}"


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
    """The functions of a worker's ``targets`` (``{name: {"spec": ...} | {"attr": "module:qualname"}}``)."""
    from .computer import load_custom_reward_file
    from .verifiers import VERIFIERS

    for spec in dict.fromkeys(t["spec"] for t in targets.values() if "spec" in t):
        load_custom_reward_file(spec)
    fns = {}
    for name, t in targets.items():
        if "spec" in t:
            fns[name] = VERIFIERS[name]
        else:
            module, _, qual = t["attr"].partition(":")
            obj = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
            fns[name] = obj
    return fns


# ---------------------------------------------------------------------------------------------
# the three ways to run a batch of calls; each returns [float | Failure] in sample order


def score_inline(name, fn, responses, labels, stop=False):
    out = []
    for i, (r, lab) in enumerate(zip(responses, labels)):
        value, why = call_reward(fn, r, lab)
        out.append(value if why is None else Failure(name, i, why))
        if stop and why is not None:
            break
    return out + [None] * (len(responses) - len(out))


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


class _Lane:
    """A contiguous share of a batch going through one worker slot."""

    def __init__(self, slot, indices):
        self.slot, self.todo = slot, collections.deque(indices)
        self.rid, self.deadline = None, None


class RewardPool:
    """Persistent subprocess workers that run user reward functions with at most ``timeout`` s per call.

    ``targets`` maps each name to how a worker loads it (``{"spec": custom_reward_file entry}`` or
    ``{"attr": "module:qualname"}``). ``score`` splits a batch into one contiguous share per worker and sends
    each share as one request; the worker answers call by call, so a call's clock starts at the previous
    answer. A call that overruns is a timeout ``Failure``: its worker (and that worker's process group) is
    killed, a new one starts, and the rest of the share goes to it. A worker that dies mid-call (a crash,
    ``os._exit``) fails that call the same way. Workers start on first use (or ``start()``) and live until
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
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = False
        weakref.finalize(self, kill_all, self._workers)  # kill the workers on garbage collection or at exit

    def pids(self):
        """Process ids of the live workers (for tests and diagnostics)."""
        return [w.pid for w in self._workers if w is not None]

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

    def _worker(self, slot):
        if self._workers[slot] is None:
            if self._closed:
                raise WorkerStartError("reward worker pool was closed while scoring")
            init = {"path": list(sys.path), "targets": self.targets}
            self._workers[slot] = WorkerProcess([_WORKER_SCRIPT, json.dumps(init)], self.startup_timeout,
                                                "reward worker", stderr=None, own_group=True)
        return self._workers[slot]

    def _drop(self, slot):
        w = self._workers[slot]
        if w is not None:
            w.kill()
            self._workers[slot] = None
            self.replaced += 1

    def score(self, name, responses, labels, stop=False):
        """``[float | Failure]`` for ``name`` on every sample; ``stop``: return at the first failure."""
        with self._lock:
            self._closed = False
            return self._score(name, list(responses), list(labels), stop)

    def _send(self, lane, name, responses, labels):
        """Send the lane's remaining samples as one request (starting a worker if the slot is empty)."""
        self._next_id += 1
        lane.rid = self._next_id
        msg = {"id": lane.rid, "name": name, "items": [[responses[i], labels[i]] for i in lane.todo]}
        try:
            self._worker(lane.slot).send(msg)
        except OSError:  # it died while idle: start another and send again
            self._drop(lane.slot)
            self._worker(lane.slot).send(msg)
        lane.deadline = time.monotonic() + self.timeout

    def _score(self, name, responses, labels, stop):
        n = len(responses)
        out = [None] * n
        shares = np.array_split(np.arange(n), min(self.num_workers, n)) if n else []
        lanes = [_Lane(slot, idx.tolist()) for slot, idx in enumerate(shares)]
        for lane in lanes:
            self._send(lane, name, responses, labels)

        def halt():
            """Stop at the first failure: busy workers would go on with their shares, so they are dropped."""
            for lane in lanes:
                if lane.todo:
                    self._drop(lane.slot)
            return out

        def lost(lane, failure):
            """The lane's worker is gone (killed on a timeout, or dead): fail the current sample and send the
            rest of the share to a new worker; True when scoring stops here."""
            out[lane.todo.popleft()] = failure
            self._drop(lane.slot)
            if stop:
                return True
            if lane.todo:
                t0 = time.monotonic()
                self._send(lane, name, responses, labels)  # starting a worker takes a while: others keep their time
                for other in lanes:
                    if other is not lane and other.todo:
                        other.deadline += time.monotonic() - t0
            return False

        while True:
            busy = [lane for lane in lanes if lane.todo]
            if not busy:
                return out
            wait = max(0.0, min(lane.deadline for lane in busy) - time.monotonic())
            ready = select.select([self._workers[lane.slot].fd for lane in busy], [], [], wait)[0]
            for lane in busy:
                w = self._workers[lane.slot]
                if w.fd not in ready:
                    continue
                alive = w.fill()
                msg = w.pop_line()
                while msg is not None and lane.todo:
                    if msg.get("id") == lane.rid:
                        i = lane.todo.popleft()
                        out[i] = msg["v"] if "err" not in msg else Failure(name, i, msg["err"])
                        lane.deadline = time.monotonic() + self.timeout
                        if stop and "err" in msg:
                            return halt()
                    msg = w.pop_line()
                if not alive and lane.todo:
                    w.kill()
                    why = f"the worker process {w.exit_text()} during the call; a new one was started"
                    if lost(lane, Failure(name, lane.todo[0], why)):
                        return halt()
            now = time.monotonic()
            for lane in lanes:
                if lane.todo and now >= lane.deadline:
                    if lost(lane, _timeout_failure(name, lane.todo[0], self.timeout,
                                                   "its worker process was killed and replaced")):
                        return halt()
