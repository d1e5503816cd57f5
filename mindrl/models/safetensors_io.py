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
from typing import Dict, Iterable, Optional

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


def save_safetensors(tensors: Dict[str, np.ndarray], path: str, dtype: Optional[str] = None,
                     metadata: Optional[Dict[str, str]] = None) -> None:
    """Write tensors atomically (temp file + rename). ``dtype``: None keeps each array's dtype, or
    "float32" / "float16" / "bfloat16" for every floating tensor."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        if dtype == "bfloat16" and arr.dtype.kind == "f":
            data, code = to_bf16_bits(arr).tobytes(), "BF16"
        else:
            if dtype in ("float32", "float16") and arr.dtype.kind == "f":
                arr = arr.astype(dtype)
            arr = np.ascontiguousarray(arr)
            if arr.dtype not in _NAMES:
                raise CheckpointError(f"{path}: cannot store tensor {name!r} of dtype {arr.dtype}")
            data, code = arr.astype(arr.dtype.newbyteorder("<")).tobytes(), _NAMES[arr.dtype]
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data section 8-byte aligned
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for blob in blobs:
            fh.write(blob)
    os.replace(tmp, path)


def open_hf_checkpoint(directory: str) -> Dict[str, SafetensorsFile]:
    """Map every tensor name to the SafetensorsFile holding it (single file or sharded index)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(index):
        try:
            with open(index) as fh:
                weight_map = json.load(fh)["weight_map"]
        except (json.JSONDecodeError, KeyError) as err:
            raise CheckpointError(f"{index}: corrupt index ({err})") from None
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


def save_sharded(tensors: Dict[str, np.ndarray], directory: str, dtype: Optional[str] = None,
                 max_shard_bytes: int = 4 * 2**30) -> Iterable[str]:
    """Write HF-style model.safetensors (or shards + index when larger than ``max_shard_bytes``)."""
    os.makedirs(directory, exist_ok=True)
    itemsize = {"bfloat16": 2, "float16": 2, "float32": 4}.get(dtype or "", 4)
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        nbytes = int(np.asarray(tensors[name]).size) * itemsize
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += nbytes
    shards.append(current)
    if len(shards) == 1:
        path = os.path.join(directory, "model.safetensors")
        save_safetensors(shards[0], path, dtype, {"format": "pt"})
        return [path]
    names, weight_map = [], {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_safetensors(shard, os.path.join(directory, fname), dtype, {"format": "pt"})
        names.append(fname)
        weight_map.update({k: fname for k in shard})
    tmp = os.path.join(directory, "model.safetensors.index.json.tmp")
    with open(tmp, "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh, indent=2)
    os.replace(tmp, os.path.join(directory, "model.safetensors.index.json"))
    return names
