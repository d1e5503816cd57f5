"""Writing files so that a crash never leaves a damaged one under a real name.

Every writer in mindrl stages its output beside the target as ``.<name>.tmp-<owner>`` (a hidden sibling on the
same filesystem, so the final ``os.replace`` is atomic) and renames it only when the content is complete. The
owner is the writing process's pid, or a fixed tag when several msrun ranks fill one staging directory. One
naming scheme means one function can find what a killed process left behind (:func:`stale_staging`).

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
    """Staging entries directly in ``directory`` whose writer is gone (pid no longer alive, or a fixed tag)."""
    if not os.path.isdir(directory):
        return []
    out = []
    for entry in sorted(os.listdir(directory)):
        m = _STAGING.match(entry)
        if not m:
            continue
        owner = m.group("owner")
        if owner.isdigit() and _alive(int(owner)):
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


# -- reading back what was written: a manifest of sizes and checksums -----------------------------------------------
MANIFEST = "manifest.json"
DIGEST = "xxh3_64"  # about 10 GB/s on one core: checking a checkpoint costs far less than reading its tensors
_verified = set()   # (path, size, mtime_ns, digest) already checked by this process: a file is hashed once


class DamagedFile(ValueError):
    """A file that is missing, or whose size or checksum differs from its manifest's record."""


def file_digest(path: str) -> str:
    import xxhash
    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 23), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: str, header: dict) -> dict:
    """List every file under ``directory`` with its size and checksum in ``directory/manifest.json`` (written last,
    atomically): the files are read back from disk, so what is recorded is what a later load will read."""
    files = {}
    for dirpath, _, names in os.walk(directory):
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, directory)
            if rel != MANIFEST:
                files[rel] = {"size": os.path.getsize(full), DIGEST: file_digest(full)}
    manifest = {**header, "files": dict(sorted(files.items()))}
    write_json(os.path.join(directory, MANIFEST), manifest)
    return manifest


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        raise DamagedFile(f"{directory}: no {MANIFEST}: not a complete mindrl checkpoint")
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
        files = manifest["files"]
        assert isinstance(files, dict)
    except (ValueError, KeyError, AssertionError, UnicodeDecodeError) as err:
        raise DamagedFile(f"{path}: unreadable manifest ({err.__class__.__name__}: {err})") from None
    return manifest


def verify_manifest(directory: str, select=None) -> dict:
    """Check the files ``directory/manifest.json`` lists (those whose relative path passes ``select``, default
    all): present, same size, same checksum. Manifests written before checksums existed record sizes only, and
    only sizes are checked there. Raises DamagedFile naming the first bad file; returns the manifest."""
    manifest = read_manifest(directory)
    for rel, rec in manifest["files"].items():
        if select is not None and not select(rel):
            continue
        full = os.path.join(directory, rel)
        size, digest = (rec, None) if isinstance(rec, int) else (rec.get("size"), rec.get(DIGEST))
        if not os.path.exists(full):
            raise DamagedFile(f"{full}: listed in the manifest but missing")
        st = os.stat(full)
        if st.st_size != size:
            raise DamagedFile(f"{full}: size {st.st_size} differs from the manifest's {size} (corrupt or truncated)")
        key = (os.path.abspath(full), st.st_size, st.st_mtime_ns, digest)
        if digest is None or key in _verified:
            continue
        if file_digest(full) != digest:
            raise DamagedFile(f"{full}: checksum differs from the manifest's ({DIGEST}): the file was damaged "
                              f"after it was written")
        _verified.add(key)
    return manifest
