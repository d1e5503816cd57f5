"""Writing files so that a crash never leaves a damaged one under a real name.

Every writer in mindrl stages its output beside the target as ``.<name>.tmp-<owner>`` (a hidden sibling on the
same filesystem, so the final ``os.replace`` is atomic) and renames it only when the content is complete. The
owner is the writing process's pid, or a tag ending in the pid of the process that renames it (``ranks<pid>``: the
main rank, when several msrun ranks fill one staging directory). One naming scheme means one function can find
what a killed process left behind (:func:`stale_staging`), and never takes a live process's for a leftover.

Standard library only: the config loader and msrun's scheduler process import this.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from typing import Iterator, List, Optional

# a writer that insists on a file extension (MindSpore's save_checkpoint appends ".ckpt" otherwise) keeps it last
_STAGING = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<owner>[A-Za-z0-9]+)(?P<suffix>\.[a-z]+)?$")


def staging_path(path: str, owner: Optional[str] = None, suffix: str = "") -> str:
    """The hidden sibling where ``path`` is assembled before it is renamed into place."""
    path = os.path.abspath(path)
    tag = str(os.getpid()) if owner is None else owner
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{tag}{suffix}")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def publish(staged: str, path: str) -> None:
    """Move the finished ``staged`` file or directory to ``path``, replacing what was there.

    A file or a symbolic link replaces atomically. A non-empty directory cannot be replaced by ``os.replace``: the
    old one is first renamed aside (a staging name, so a crash in between leaves nothing a reader mistakes for
    real), then removed.
    """
    old = None
    if os.path.isdir(path) and not os.path.islink(path):
        if os.listdir(path):
            old = staging_path(path, f"old{os.getpid()}")  # a staging name: found and removed if we crash here
            os.rename(path, old)
        else:
            os.rmdir(path)
    elif os.path.lexists(path) and os.path.isdir(staged) and not os.path.islink(staged):
        os.remove(path)
    os.replace(staged, path)
    if old:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_path(path: str, owner: Optional[str] = None, directory: bool = False, suffix: str = "") -> Iterator[str]:
    """``with atomic_path(p) as tmp:`` write ``tmp`` (a file, or with ``directory=True`` a directory that is
    created for you); on success it becomes ``p``, on any error it is removed and ``p`` is untouched."""
    staged = staging_path(path, owner, suffix)
    parent = os.path.dirname(staged)
    os.makedirs(parent, exist_ok=True)
    _remove(staged)
    if directory:
        os.makedirs(staged)
    try:
        yield staged
        publish(staged, path)
    except BaseException:
        _remove(staged)
        raise


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def write_json(path: str, obj, indent: int = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False) + "\n")


def stale_staging(directory: str) -> List[str]:
    """Staging entries directly in ``directory`` whose writer is gone: the pid its owner tag ends in is no longer
    alive, or the tag holds no pid (mindrl before per-process tags wrote a fixed ``ranks``)."""
    if not os.path.isdir(directory):
        return []
    out = []
    for entry in sorted(os.listdir(directory)):
        m = _STAGING.match(entry)
        if not m:
            continue
        pid = re.search(r"\d+$", m.group("owner"))
        if pid and _alive(int(pid.group())):
            continue
        out.append(os.path.join(directory, entry))
    return out


def remove_stale_staging(directory: str) -> List[str]:
    """Remove what crashed writers left in ``directory``; returns the removed paths (for a log line)."""
    removed = stale_staging(directory)
    for path in removed:
        _remove(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
