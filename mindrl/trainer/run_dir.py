"""One directory per run.

``logging.log_dir`` (default ``runs/<name>/<run_id>``) is the run directory: the resolved ``config.yaml``,
``run.json``, ``metrics.jsonl``, ``tensorboard/``, ``report.png``/``report.md`` and, when ``actor_config.save``
says ``<run_dir>/ckpt`` (as the shipped examples do), the checkpoints. ``<run_id>`` becomes

- ``logging.run_id`` when the user names the run;
- for a resume (``actor_config.finetune: false``) from a checkpoint inside a run directory, that run's id, so the
  resumed run continues its own directory (its metrics file then holds each step once);
- otherwise a new id, the start time ``YYYYmmdd-HHMMSS`` (``-2``, ``-3``, ... when that is taken).

The main rank claims the directory (``mkdir`` without ``exist_ok`` for a new id) and holds a lock on its
``run.lock`` for as long as it lives, so two runs never write into one, even when both are started with the same
``logging.run_id`` (a resume too waits for the run it continues to be gone); every other msrun rank receives the id
from it. Beside the run directories, ``latest`` is a symbolic link to the newest one, so
``runs/<name>/latest/ckpt`` names the last run's checkpoints.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from typing import Optional

import numpy as np

from mindrl.config import ConfigError
from mindrl.io import atomic_path, remove_stale_staging, write_json
from mindrl.trainer.checkpointer import resumed_step

RUN_ID = "<run_id>"
RUN_DIR = "<run_dir>"
MARKER = "run.json"
LATEST = "latest"
LOCK = "run.lock"
_ID_BYTES = 128
_held = {}  # real path of a run directory this process claimed -> the descriptor holding its lock


def find_run_dir(path: str) -> Optional[str]:
    """The run directory holding ``path`` (a checkpoint root, an ``iter_*`` directory or a file in one), or None."""
    here = os.path.realpath(path)
    for _ in range(4):  # <run>/ckpt/iter_*/policy at most
        if os.path.isfile(os.path.join(here, MARKER)):
            return here
        here = os.path.dirname(here)
    return None


def holds_run(directory: str) -> bool:
    """True when ``directory`` already holds a run's records, a metrics.jsonl with rows (a new run must not write
    into it; a trainer that was built but never trained leaves only run.json, which the next one replaces)."""
    path = os.path.join(directory, "metrics.jsonl")
    return os.path.isfile(path) and os.path.getsize(path) > 0


def resume_run_id(load: Optional[str], resuming: bool) -> Optional[str]:
    """The id of the run a resume continues: that of the run directory holding the checkpoint ``load``."""
    if not resuming or not load:
        return None
    found = find_run_dir(load)
    return os.path.basename(found) if found else None


def _claim(template: str, wanted: Optional[str], resuming: bool) -> str:
    """Create the run directory for ``template`` and return its id (main rank). Raises ConfigError when a new
    run would write into a directory that holds another run's records."""
    if wanted is not None or RUN_ID not in template:
        path = template.replace(RUN_ID, wanted or "")
        if holds_run(path) and not resuming:
            raise ConfigError(f"logging.log_dir: {path} already holds a run (its metrics.jsonl); a new "
                              f"run writes into a directory of its own: keep {RUN_ID} in logging.log_dir (the "
                              f"default, runs/<name>/{RUN_ID}), pick another logging.run_id, or resume that run "
                              f"with actor_config.finetune=false actor_config.load=<its checkpoints>")
        os.makedirs(path, exist_ok=True)
        _lock(path)
        return wanted or os.path.basename(os.path.normpath(path))
    base = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        run_id = base if n == 1 else f"{base}-{n}"
        path = template.replace(RUN_ID, run_id)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        _lock(path)
        return run_id
    raise ConfigError(f"logging.log_dir: no free run id under {os.path.dirname(template)}")


def _lock(path: str) -> None:
    """Hold an exclusive lock on ``path/run.lock`` (which names its holder) until this process ends. Why flock: the
    kernel releases it however the process ends, kill -9 included, so no lock is ever stale and none needs taking
    over; a pid file would need a liveness guess and a race-free takeover. Raises ConfigError while another live
    process holds it."""
    if os.path.realpath(path) in _held:
        return  # this process claimed it already (the Python API building a second trainer for the same run)
    lock = os.path.join(path, LOCK)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the processes this one starts
    except OSError as err:
        raise ConfigError(f"logging.log_dir: cannot create {lock} ({err.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "a process"
        os.close(fd)
        raise ConfigError(f"logging.log_dir: {path} is in use by another run ({holder}, holding {lock}); wait for it "
                          f"to end, or give this run another logging.run_id") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, host {socket.gethostname()}\n".encode())
    _held[os.path.realpath(path)] = fd


def _share(run_id: str, is_main: bool, exchange) -> str:
    """Every rank gets the main rank's ``run_id`` (bytes through a float32 sum: exact for values < 2**24)."""
    if exchange is None or exchange.world == 1:
        return run_id
    buf = np.zeros(_ID_BYTES, np.float32)
    if is_main:
        raw = run_id.encode()[:_ID_BYTES]
        buf[:len(raw)] = np.frombuffer(raw, np.uint8)
    got = exchange.all_sum(buf).astype(np.uint8)
    return bytes(got[got > 0]).decode()


def set_up_run_dir(lg, is_main: bool, exchange=None, *, load: Optional[str] = None, resuming: bool = False,
                   checkpoints: Optional[str] = None) -> str:
    """Resolve ``lg.log_dir`` (a logging section) to this run's directory, create it (main rank), write
    ``run.json`` and point ``latest`` at it. ``load``/``resuming``: the checkpoint a resume reads, whose run
    directory it continues. Returns the run directory; ``lg.log_dir`` and ``lg.run_id`` are updated in place."""
    wanted = lg.run_id or resume_run_id(load, resuming)
    templated = RUN_ID in lg.log_dir
    run_id, problem = "", None
    if is_main:
        try:
            run_id = _claim(lg.log_dir, wanted, resuming)
        except ConfigError as err:
            problem = err
    run_id = _share(run_id, is_main, exchange)
    if problem is not None:
        raise problem
    if not run_id:  # the main rank refused the directory (and says why)
        raise ConfigError("logging.log_dir: refused by rank 0 (see its log)")
    lg.log_dir, lg.run_id = lg.log_dir.replace(RUN_ID, run_id), run_id
    if is_main:
        _write_marker(lg, load if resuming else None, expand_run_dir(checkpoints, lg.log_dir))
        if templated:
            _point_latest(lg.log_dir, run_id)
    return lg.log_dir


def claim_run(cfg, saves, is_main: bool, exchange, *, load: Optional[str], resuming: bool) -> str:
    """:func:`set_up_run_dir` for a whole config: ``saves`` are the dotted keys of its checkpoint paths (the first
    is the one run.json names), each with ``<run_dir>`` replaced. What the user wrote is kept in ``cfg.meta.templates``
    for config.yaml: a rerun of that file gets a directory of its own, not this one's."""
    def get(dotted):
        section, key = dotted.split(".")
        return getattr(getattr(cfg, section) or object(), key, None)

    templates = cfg.meta.templates
    templates.setdefault("logging.log_dir", cfg.logging.log_dir)
    run_dir = set_up_run_dir(cfg.logging, is_main, exchange, load=load, resuming=resuming, checkpoints=get(saves[0]))
    for dotted in saves:
        if get(dotted):
            templates.setdefault(dotted, get(dotted))
            section, key = dotted.split(".")
            setattr(getattr(cfg, section), key, expand_run_dir(get(dotted), run_dir))
    return run_dir


def expand_run_dir(path: Optional[str], run_dir: str) -> Optional[str]:
    """``path`` with ``<run_dir>`` replaced (checkpoint directories kept inside the run directory)."""
    return path.replace(RUN_DIR, run_dir) if path else path


def _write_marker(lg, resumed_from: Optional[str], checkpoints: Optional[str]) -> None:
    path = os.path.join(lg.log_dir, MARKER)
    info = {}
    if os.path.isfile(path):
        try:
            with open(path) as fh:
                info = json.load(fh)
        except ValueError:
            info = {}
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    info.setdefault("run_id", lg.run_id)
    info.setdefault("name", lg.name)
    info.setdefault("started", now)
    if checkpoints:
        info["checkpoints"] = checkpoints
    if resumed_from:
        info.setdefault("resumed", []).append({"at": now, "from": resumed_from, "step": _step_of(resumed_from)})
    info["command"] = " ".join(sys.argv)
    write_json(path, info)


def _step_of(checkpoint: str) -> Optional[int]:
    """The step a resume from ``checkpoint`` starts at (the picture marks it), or None when it cannot be read."""
    try:
        return resumed_step(checkpoint)
    except Exception:  # noqa: BLE001 - the trainer names a bad checkpoint; the record only loses its step
        return None


def _point_latest(run_dir: str, run_id: str) -> None:
    """``<parent>/latest -> <run_id>`` (replaced atomically) when the run directory's last part is its id. The link
    is staged under mindrl.io's one naming scheme, so a start-up here removes what a killed one left behind."""
    if os.path.basename(os.path.normpath(run_dir)) != run_id:
        return  # <run_id> inside a longer name: no single parent to hold the link
    parent = os.path.dirname(os.path.normpath(run_dir))
    link = os.path.join(parent, LATEST)
    if os.path.exists(link) and not os.path.islink(link):
        return  # a real directory named "latest": a run the user named so; leave it
    remove_stale_staging(parent)
    try:
        with atomic_path(link) as tmp:
            os.symlink(run_id, tmp)
    except OSError:  # a filesystem without symbolic links: the run works, only the shortcut is missing
        pass
