"""A checkpoint's manifest: every file with its size and xxh3 checksum, sealed by a checksum of the manifest itself.

Format 2, ``manifest.json``::

    {
      "files": {"policy/model.safetensors": {"size": 1234, "xxh3_64": "0123456789abcdef"}, ...},
      "manifest_xxh3_64": "<xxh3 of the manifest's text without this field>",
      "step": 10,
      "version": 2
    }

Why the manifest checks itself: a list of checksums can be damaged into one that checks less (a renamed
``xxh3_64`` key read as an older size-only record let a flipped weight through). So the file must be exactly the
canonical text of what it holds (sorted keys, two-space indent, ASCII), carry the checksum of that text without
its own field, and hold exactly the fields of format 2: any one-byte change breaks one of the three. Format 1 (no
``version``, no checksum of its own) is refused, never read as something weaker; ``mindrl reseal`` checks a
format-1 checkpoint's files against its manifest and writes format 2.

A listed path is relative, inside the checkpoint (no ``..``, no absolute path), and what it names, symbolic links
followed, is inside the checkpoint directory too: a checkpoint reads nothing but its own files.

Standard library and xxhash only, like mindrl.io.
"""
from __future__ import annotations

import json
import os
import re
from typing import Iterable, Optional

from mindrl.io import write_text

MANIFEST = "manifest.json"
VERSION = 2
DIGEST = "xxh3_64"  # about 10 GB/s on one core: checking a checkpoint costs far less than reading its tensors
SELF_DIGEST = "manifest_xxh3_64"
_FIELDS = {"files", SELF_DIGEST, "step", "version"}
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_verified = set()   # (path, size, mtime_ns, digest) already checked by this process: a file is hashed once


class DamagedFile(ValueError):
    """A file that is missing, or whose size or checksum differs from its manifest's record (or a damaged
    manifest)."""


class ManifestFormat(DamagedFile):
    """A manifest of another format than this mindrl writes (older or newer): refused, not read as another."""


def file_digest(path: str) -> str:
    import xxhash
    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 23), b""):
            h.update(chunk)
    return h.hexdigest()


def _canonical(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False) + "\n"


def _self_digest(manifest: dict) -> str:
    import xxhash
    body = {k: v for k, v in manifest.items() if k != SELF_DIGEST}
    return xxhash.xxh3_64(_canonical(body).encode("ascii")).hexdigest()


def write_manifest(directory: str, header: dict, files: Optional[Iterable[str]] = None) -> dict:
    """Seal ``directory``: list ``files`` (relative paths; default every file under it) with sizes and checksums
    read back from disk, so what is recorded is what a later load will read, in ``directory/manifest.json``
    (written last, atomically). ``header`` is ``{"step": N}``."""
    if set(header) != {"step"}:
        raise ValueError(f"a manifest's header is {{'step': N}}, not {header}")
    if files is None:
        files = [os.path.relpath(os.path.join(d, n), directory) for d, _, names in os.walk(directory) for n in names]
    records = {rel: {"size": os.path.getsize(os.path.join(directory, rel)),
                     DIGEST: file_digest(os.path.join(directory, rel))} for rel in files if rel != MANIFEST}
    manifest = {"files": dict(sorted(records.items())), "step": int(header["step"]), "version": VERSION}
    manifest[SELF_DIGEST] = _self_digest(manifest)
    write_text(os.path.join(directory, MANIFEST), _canonical(manifest))
    return manifest


def _load(directory: str):
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        raise DamagedFile(f"{directory}: no {MANIFEST}: not a complete mindrl checkpoint")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        manifest = json.loads(raw.decode("utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError(f"a JSON {type(manifest).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as err:
        raise DamagedFile(f"{path}: unreadable manifest ({err.__class__.__name__}: {err})") from None
    return path, raw, manifest


def is_format_1(manifest: dict) -> bool:
    """The manifests mindrl wrote before format 2: a step and files, nothing else."""
    return set(manifest) == {"step", "files"}


def read_manifest(directory: str) -> dict:
    """``directory/manifest.json``, checked as a whole (see the module's docstring); raises DamagedFile naming it."""
    path, raw, manifest = _load(directory)
    if is_format_1(manifest):
        raise ManifestFormat(f"{path}: a manifest of format 1, which has no checksum of its own (damage to it could "
                             f"go unseen), so it is not read; re-seal the checkpoint with `mindrl reseal "
                             f"{directory}`, which first checks every file against it")
    version = manifest.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version != VERSION:
        raise ManifestFormat(f"{path}: a manifest of format {version}; this mindrl reads format {VERSION} only (a "
                             f"newer mindrl wrote it, or it was damaged)")
    if raw != _canonical(manifest).encode("ascii"):
        raise DamagedFile(f"{path}: not the text mindrl wrote (it was changed after it was written)")
    if manifest.get(SELF_DIGEST) != _self_digest(manifest):
        raise DamagedFile(f"{path}: its own checksum ({SELF_DIGEST}) differs: the manifest was damaged after it was "
                          f"written")
    problem = _schema_problem(manifest)
    if problem:
        raise DamagedFile(f"{path}: {problem}")
    return manifest


def _schema_problem(manifest: dict) -> Optional[str]:
    """What in a self-consistent manifest is not format 2, or None: unknown or missing fields are refused."""
    if set(manifest) != _FIELDS:
        return f"fields {sorted(manifest)}, expected {sorted(_FIELDS)}"
    step, files = manifest["step"], manifest["files"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"step {step!r} is not a whole number from 0"
    if not isinstance(files, dict):
        return "files is not an object"
    for rel, rec in files.items():
        if not inside(rel):
            return f"lists {rel!r}, which is not a path inside the checkpoint"
        if not isinstance(rec, dict) or set(rec) != {"size", DIGEST}:
            return f"{rel!r}: record {rec!r}, expected {{'size': N, '{DIGEST}': '<16 hex digits>'}}"
        size, digest = rec["size"], rec[DIGEST]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str) or \
                not _HEX16.match(digest):
            return f"{rel!r}: record {rec!r} is not a size and a checksum"
    return None


def inside(rel) -> bool:
    """A relative path that stays inside its directory: no absolute path, no '..', no empty or '.' part."""
    return isinstance(rel, str) and not rel.startswith("/") and "\\" not in rel and "\0" not in rel and \
        all(part not in ("", ".", "..") for part in rel.split("/"))


def contained(directory: str, rel: str) -> bool:
    """True when ``directory/rel``, symbolic links followed, is inside ``directory`` (itself resolved)."""
    root = os.path.realpath(directory)
    return os.path.realpath(os.path.join(directory, rel)).startswith(root + os.sep)


def check_file(directory: str, rel: str, size: int, digest: Optional[str]) -> None:
    """One listed file: inside the checkpoint, present, of ``size`` bytes and (unless None) checksum ``digest``."""
    full = os.path.join(directory, rel)
    if not inside(rel) or not contained(directory, rel):
        raise DamagedFile(f"{full}: outside the checkpoint directory (a symbolic link or path leading out of it); "
                          f"a checkpoint reads only its own files")
    if not os.path.exists(full):
        raise DamagedFile(f"{full}: listed in the manifest but missing")
    st = os.stat(full)
    if st.st_size != size:
        raise DamagedFile(f"{full}: size {st.st_size} differs from the manifest's {size} (corrupt or truncated)")
    key = (os.path.abspath(full), st.st_size, st.st_mtime_ns, digest)
    if digest is None or key in _verified:
        return
    if file_digest(full) != digest:
        raise DamagedFile(f"{full}: checksum differs from the manifest's ({DIGEST}): the file was damaged after it "
                          f"was written")
    _verified.add(key)


def verify_manifest(directory: str, select=None) -> dict:
    """Check the manifest, then the files it lists (those whose relative path passes ``select``, default all):
    inside the checkpoint, present, same size, same checksum. Raises DamagedFile naming the first bad one."""
    manifest = read_manifest(directory)
    for rel, rec in manifest["files"].items():
        if select is None or select(rel):
            check_file(directory, rel, rec["size"], rec[DIGEST])
    return manifest


def reseal(directory: str) -> Optional[dict]:
    """Upgrade a format-1 manifest: check every file it lists against it (sizes, and checksums where it recorded
    them), then seal those files, and no others, with format 2. Returns ``{"files": n, "by_checksum": k}``, or None
    when the manifest is format 2 already. Raises DamagedFile naming what does not match."""
    path, _, manifest = _load(directory)
    if not is_format_1(manifest):
        read_manifest(directory)  # format 2 (or refused as damaged, or of another format)
        return None
    files, step = manifest["files"], manifest["step"]
    if not isinstance(files, dict) or not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise DamagedFile(f"{path}: not a format-1 manifest (step {step!r}, files of type {type(files).__name__})")
    by_checksum = 0
    for rel, rec in files.items():
        if isinstance(rec, int) and not isinstance(rec, bool):  # the oldest records: a size
            rec = {"size": rec}
        if not isinstance(rec, dict) or "size" not in rec or not set(rec) <= {"size", DIGEST}:
            raise DamagedFile(f"{path}: {rel!r}: record {rec!r} is not a size (and a checksum)")
        check_file(directory, rel, rec["size"], rec.get(DIGEST))
        by_checksum += DIGEST in rec
    write_manifest(directory, {"step": step}, files)
    return {"files": len(files), "by_checksum": by_checksum}
