"""A small pool of persistent worker processes that run math-verify with a hard per-item timeout.

Why processes, and why these: math-verify's own timeouts use ``signal.alarm``, which only works
in the main thread, and even there a signal cannot interrupt a long C-level computation (sympy
expanding ``9^{9^{9^9}}``). Killing a process always works. The workers are fresh
interpreters running ``_math_worker.py``, started as ``workers.py`` says why (``subprocess``, not
``multiprocessing``). Nothing here uses signals in the calling process, so any thread of any process may
call it.
"""
import collections
import math
import os
import select
import threading
import time
import weakref

from .workers import WorkerProcess, kill_all

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_math_worker.py")


def _start_worker(startup_timeout):
    return WorkerProcess([_WORKER_SCRIPT], startup_timeout, "math verifier worker")


class MathVerifyPool:
    """``verify_batch([(gold, pred), ...]) -> [bool, ...]`` with at most ``timeout`` seconds per item.

    An item that overruns is answered False, its worker is killed and replaced, and ``timeouts``
    is incremented (log it: a steady count means answers that are pathological or a timeout that
    is too small). Workers start on first use and live until ``close()`` or interpreter exit.
    ``verify_batch_detail`` answers None instead of False for an item that was cut (overran, or its worker died),
    for verifiers that score a cut check differently from a wrong answer. An item may carry a third element, a dict
    of request options for the worker (``gold_cfg``/``pred_cfg``: math-verify's extraction targets, see
    ``_math_worker.py``).
    """

    def __init__(self, num_workers=1, timeout=5.0, startup_timeout=120.0):
        if num_workers < 1 or timeout <= 0:
            raise ValueError("MathVerifyPool needs num_workers >= 1 and timeout > 0")
        self.num_workers = int(num_workers)
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        # math-verify's own alarm per call (whole seconds; parse gold, parse pred and verify each
        # get it) ends most slow items without a worker restart. Below 3 s it could not be both
        # >= 1 s and clearly shorter than the hard timeout, so it is off (0) and the kill decides.
        self.inner_timeout = int(math.floor(self.timeout / 3)) if self.timeout >= 3 else 0
        self.timeouts = 0
        self.errors = 0
        self._workers = []
        self._next_id = 0
        self._lock = threading.Lock()
        # kill the workers when the pool is garbage collected or at interpreter exit
        weakref.finalize(self, kill_all, self._workers)

    def start(self):
        """Start the workers now (optional: to keep their ~1 s start-up out of the first step)."""
        with self._lock:
            self._ensure()

    def _ensure(self):
        while len(self._workers) < self.num_workers:
            self._workers.append(_start_worker(self.startup_timeout))

    def close(self):
        with self._lock:
            kill_all(self._workers)

    def verify_batch(self, pairs):
        return [bool(ok) for ok in self.verify_batch_detail(pairs)]

    def verify_batch_detail(self, pairs):
        """``[True | False | None]``: None for an item cut by the timeout or by its worker's death."""
        with self._lock:
            return self._run(list(pairs))

    def _run(self, pairs):
        results = [None] * len(pairs)
        if not pairs:
            return results
        self._ensure()
        pending = collections.deque(range(len(pairs)))
        busy = {}  # worker -> (item index, request id, deadline)
        while pending or busy:
            for w in self._workers:
                if w not in busy and pending:
                    i = pending.popleft()
                    self._next_id += 1
                    gold, pred, *opts = pairs[i]
                    req = {"id": self._next_id, "gold": gold, "pred": pred, "t": self.inner_timeout}
                    for extra in opts:
                        req.update({k: v for k, v in extra.items() if k not in req})
                    try:
                        w.send(req)
                    except (BrokenPipeError, OSError):
                        pending.appendleft(i)  # dead worker: replace it and retry the item
                        self._replace(w)
                        break
                    busy[w] = (i, self._next_id, time.monotonic() + self.timeout)
            if not busy:
                continue
            now = time.monotonic()
            wait = max(0.0, min(d for _, _, d in busy.values()) - now)
            ready = select.select([w.fd for w in busy], [], [], wait)[0]
            for w in list(busy):
                if w.fd not in ready:
                    continue
                alive = w.fill()
                msg = w.pop_line()
                while msg is not None and w in busy:
                    i, rid, _ = busy[w]
                    if msg.get("id") == rid:
                        results[i] = bool(msg.get("ok"))
                        del busy[w]
                    msg = w.pop_line()
                if not alive and w in busy:  # crashed mid-item: cut (None), counted as an error, not as a hang
                    self.errors += 1
                    del busy[w]
                    self._replace(w)
            now = time.monotonic()
            for w, (i, _, deadline) in list(busy.items()):
                if now >= deadline:
                    self.timeouts += 1
                    del busy[w]
                    self._replace(w)
        return results

    def _replace(self, w):
        w.kill()
        self._workers[self._workers.index(w)] = _start_worker(self.startup_timeout)


_default_pool = None


def default_pool():
    """Process-wide pool used by the plain ``math_acc(response, label)`` call."""
    global _default_pool
    if _default_pool is None:
        _default_pool = MathVerifyPool()
    return _default_pool
