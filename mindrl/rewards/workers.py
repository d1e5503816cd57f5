"""One persistent worker process speaking JSON lines over pipes: the plumbing both worker pools share.

The math pool (``math_pool.py``, math-verify) and the reward pool (``containment.py``, user reward functions)
each start plain ``subprocess`` workers (fork+exec of a fresh interpreter), never ``multiprocessing``: that
neither re-imports the trainer's ``__main__`` (spawn and forkserver do, running an msrun entry script a second
time) nor forks a process that holds MindSpore threads. Nothing here uses signals in the calling process, so
any thread of any process may drive a worker.

Protocol: the worker writes ``{"ready": true}`` (or ``{"ready": false, "error": "..."}``) once it has started,
then answers requests written to its stdin, one JSON object per line each way.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid

from .proctree import TAG_VAR, kill_tree


class WorkerStartError(RuntimeError):
    """A worker process did not come up (a setup problem, never one sample's failure)."""


class WorkerProcess:
    """``argv`` run with ``sys.executable``; waits up to ``startup_timeout`` s for the ready line.

    ``own_group``: the worker leads a new process group (session), carries a tag of its own in its environment
    (``proctree``), and ``kill()`` kills the whole group and every process that descends from the worker or carries
    its tag, so processes a user's reward function started die with it, in whatever session they are. ``what``
    names the worker in errors.
    """

    def __init__(self, argv, startup_timeout, what, env=None, stderr=subprocess.DEVNULL, own_group=False,
                 pass_fds=(), wait=True):
        full_env = dict(os.environ, **(env or {}))
        full_env.setdefault("OMP_NUM_THREADS", "1")
        self.own_group = own_group
        self.tag = uuid.uuid4().hex if own_group else None
        if self.tag:
            full_env[TAG_VAR] = self.tag
        self.proc = subprocess.Popen(
            [sys.executable, "-u", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=full_env,
            close_fds=True,
            pass_fds=pass_fds,
            start_new_session=own_group,
        )
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.what, self.deadline, self.ready = what, time.monotonic() + startup_timeout, False
        self.startup_timeout = startup_timeout
        if wait:
            self.wait_ready()

    def wait_ready(self):
        """Wait for the ready line (``wait=False`` left it for later: the worker loads meanwhile)."""
        if self.ready:
            return
        hello = self.read_line(self.deadline)
        if hello is None or not hello.get("ready"):
            why = hello.get("error") if hello else f"no answer within {self.startup_timeout:.0f}s"
            self.kill()
            raise WorkerStartError(f"{self.what} did not start: {why}")
        self.ready = True

    @property
    def pid(self):
        return self.proc.pid

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def pop_line(self):
        """A complete reply already read, or None."""
        if b"\n" not in self.buf:
            return None
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def fill(self):
        """Read what is available; False when the worker has exited (EOF)."""
        chunk = os.read(self.fd, 1 << 16)
        self.buf += chunk
        return bool(chunk)

    def read_line(self, deadline):
        while True:
            msg = self.pop_line()
            if msg is not None:
                return msg
            left = max(0.0, deadline - time.monotonic())  # past the deadline: still take what is there
            if not select.select([self.fd], [], [], left)[0] or not self.fill():
                return None

    def exit_text(self):
        """How the worker ended, for an error message (after EOF)."""
        code = self.proc.poll()
        if code is None:
            return "closed its output"
        return f"exited with signal {-code}" if code < 0 else f"exited with code {code}"

    def kill(self):
        if self.own_group:  # a worker already reaped (poll) is no root: its pid may be another process's now
            kill_tree(self.proc.pid if self.proc.poll() is None else None, self.tag)
        if self.proc.poll() is None:
            if self.own_group:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    self.proc.kill()
            else:
                self.proc.kill()
        elif self.own_group:
            try:  # the leader is gone; children it left in its group go too
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def kill_all(workers):
    """Kill every worker in the list (``None`` entries are empty slots) and empty it."""
    for w in workers:
        if w is not None:
            w.kill()
    workers.clear()
