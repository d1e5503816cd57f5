"""Minimal safetensors reader/writer on numpy, with bf16 support and precise errors.

Why not ``safetensors.numpy``: numpy has no bfloat16, and real checkpoints are bf16. The format is
tiny (8-byte little-endian header length, JSON header, raw bytes), so we read it directly: bf16 is
widened to fp32 exactly by shifting the 16 bits into the high half of a uint32. Reading also checks
every tensor's byte range against the file size, so a truncated download is named, not a crash.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Callable, Dict, Iterable, List, Optional

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names the file (and tensor)."""


class SafetensorsFile:
    """Lazy view of one .safetensors file: names, shapes, and tensors read on demand (memory-mapped)."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.exists(path):
            raise CheckpointError(f"{path}: file not found")
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: truncated or not a safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100 * 2**20:
                raise CheckpointError(f"{path}: truncated or not a safetensors file (header length {n}, file {size} bytes)")
            try:
                header = json.loads(fh.read(n))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise CheckpointError(f"{path}: corrupt safetensors header: {err}") from None
        self.metadata = header.pop("__metadata__", None) or {}
        self.header = header
        self.data_start = 8 + n
        data_len = size - self.data_start
        for name, info in header.items():
            begin, end = info["data_offsets"]
            if end > data_len:
                raise CheckpointError(
                    f"{path}: truncated: tensor {name!r} needs bytes up to {end} of the data section but the file "
                    f"has {data_len}; re-download or re-export the checkpoint")
            if info["dtype"] not in _DTYPES and info["dtype"] != "BF16":
                raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        self._mm: Optional[np.memmap] = None

    def keys(self):
        return list(self.header)

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def dtype(self, name):
        return self.header[name]["dtype"]

    def get(self, name: str, widen_bf16: bool = True) -> np.ndarray:
        if name not in self.header:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}")
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self.header[name]
        begin, end = info["data_offsets"]
        raw = self._mm[self.data_start + begin:self.data_start + end]
        shape = tuple(info["shape"])
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(shape)
        return np.frombuffer(raw, dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")).reshape(shape).copy()


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit pattern (round to nearest even), as uint16."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


class TensorEntry:
    """One tensor to write: its name, safetensors dtype code, shape, and its little-endian bytes in pieces.

    Writers take entries rather than arrays so that a 2 GB embedding can be cast and written piece by piece.
    """

    def __init__(self, name: str, code: str, shape, chunks: Callable[[], Iterable[bytes]]):
        self.name, self.code, self.shape, self.chunks = name, code, tuple(int(d) for d in shape), chunks

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _ITEMSIZE[self.code]

    @classmethod
    def from_array(cls, name: str, array, dtype: Optional[str] = None, path: str = "") -> "TensorEntry":
        """``dtype``: None keeps the array's dtype; "float32" / "float16" / "bfloat16" casts floating arrays."""
        arr = np.asarray(array)
        if dtype == "bfloat16" and arr.dtype.kind == "f":
            return cls(name, "BF16", arr.shape, lambda: [to_bf16_bits(arr).astype("<u2").tobytes()])
        if dtype in ("float32", "float16") and arr.dtype.kind == "f":
            arr = arr.astype(dtype)
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _NAMES:
            raise CheckpointError(f"{path}: cannot store tensor {name!r} of dtype {arr.dtype}")
        return cls(name, _NAMES[arr.dtype], arr.shape, lambda: [arr.astype(arr.dtype.newbyteorder("<")).tobytes()])


_ITEMSIZE = {code: np.dtype(dt).itemsize for code, dt in _DTYPES.items()}
_ITEMSIZE["BF16"] = 2


def write_safetensors(path: str, entries: List[TensorEntry], metadata: Optional[Dict[str, str]] = None) -> int:
    """The one safetensors writer: header, then each entry's bytes, staged and renamed (see mindrl.io).

    Returns the number of data bytes. Raises CheckpointError when an entry yields another size than its header.
    """
    from mindrl.io import atomic_path
    header, offset = {}, 0
    for e in entries:
        header[e.name] = {"dtype": e.code, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data section 8-byte aligned
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(struct.pack("<Q", len(head)))
            fh.write(head)
            for e in entries:
                written = 0
                for blob in e.chunks():
                    fh.write(blob)
                    written += len(blob)
                if written != e.nbytes:
                    raise CheckpointError(f"{path}: tensor {e.name!r} produced {written} bytes, expected {e.nbytes}")
            fh.flush()
            os.fsync(fh.fileno())
    return offset


def save_safetensors(tensors: Dict[str, np.ndarray], path: str, dtype: Optional[str] = None,
                     metadata: Optional[Dict[str, str]] = None) -> None:
    """Write numpy tensors (sorted by name). ``dtype``: None keeps each array's dtype, or
    "float32" / "float16" / "bfloat16" for every floating tensor."""
    write_safetensors(path, [TensorEntry.from_array(n, tensors[n], dtype, path) for n in sorted(tensors)], metadata)


INDEX = "model.safetensors.index.json"


def open_hf_checkpoint(directory: str, listed: Optional[set] = None) -> Dict[str, SafetensorsFile]:
    """Map every tensor name to the SafetensorsFile holding it (single file or sharded index).

    ``listed``: for the part of a sealed mindrl checkpoint, the names its manifest lists in ``directory``. Only
    those are read, and a weights file there that it does not list is refused: an index added after sealing would
    otherwise be preferred over the sealed ``model.safetensors``. An index may name files inside ``directory`` only.
    """
    from mindrl.manifest import inside
    index = os.path.join(directory, INDEX)
    single = os.path.join(directory, "model.safetensors")
    if listed is not None:
        added = sorted((n for n in os.listdir(directory) if n.endswith((".safetensors", INDEX)) and n not in listed),
                       key=lambda n: (n != INDEX, n))  # the index first: it is what a load would have preferred
        if added:
            more = f" (and {len(added) - 1} more such file(s))" if len(added) > 1 else ""
            raise CheckpointError(f"{os.path.join(directory, added[0])}: not listed in the checkpoint's manifest{more}: "
                                  f"added after the checkpoint was sealed, so it is not read; remove it")
    if os.path.exists(index):
        try:
            with open(index) as fh:
                weight_map = json.load(fh)["weight_map"]
        except (json.JSONDecodeError, KeyError) as err:
            raise CheckpointError(f"{index}: corrupt index ({err})") from None
        for f in sorted(set(weight_map.values())):
            if not inside(f) or (listed is not None and f not in listed):
                raise CheckpointError(f"{index}: weight_map names {f!r}, which is not " + (
                    "a file inside its directory" if not inside(f) else "listed in the checkpoint's manifest"))
        files = {f: SafetensorsFile(os.path.join(directory, f)) for f in sorted(set(weight_map.values()))}
        out = {}
        for name, fname in weight_map.items():
            if name not in files[fname].header:
                raise CheckpointError(f"{os.path.join(directory, fname)}: index lists {name!r} but the file lacks it")
            out[name] = files[fname]
        return out
    if os.path.exists(single):
        f = SafetensorsFile(single)
        return {name: f for name in f.keys()}
    candidates = sorted(x for x in os.listdir(directory) if x.endswith(".safetensors")) if os.path.isdir(directory) else []
    if candidates:
        out = {}
        for fname in candidates:
            f = SafetensorsFile(os.path.join(directory, fname))
            out.update({name: f for name in f.keys()})
        return out
    raise CheckpointError(f"{directory}: no model.safetensors or model.safetensors.index.json found")


def write_hf_weights(directory: str, entries: List[TensorEntry], max_shard_bytes: int = 4 * 2**30) -> List[str]:
    """HF weights in ``directory``: ``model.safetensors``, or ``model-0000i-of-0000N.safetensors`` shards plus
    ``model.safetensors.index.json`` when larger than ``max_shard_bytes``. Returns the file names written."""
    from mindrl.io import write_json
    os.makedirs(directory, exist_ok=True)
    shards, current, size = [], [], 0
    for e in entries:
        if current and size + e.nbytes > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(e)
        size += e.nbytes
    shards.append(current)
    if len(shards) == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), shards[0], {"format": "pt"})
        return ["model.safetensors"]
    files, weight_map, total = [], {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(directory, fname), shard, {"format": "pt"})
        weight_map.update({e.name: fname for e in shard})
        files.append(fname)
    write_json(os.path.join(directory, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files + ["model.safetensors.index.json"]


def save_sharded(tensors: Dict[str, np.ndarray], directory: str, dtype: Optional[str] = None,
                 max_shard_bytes: int = 4 * 2**30) -> List[str]:
    """Numpy tensors as HF weights (see :func:`write_hf_weights`)."""
    entries = [TensorEntry.from_array(n, tensors[n], dtype, directory) for n in sorted(tensors)]
    return write_hf_weights(directory, entries, max_shard_bytes)
