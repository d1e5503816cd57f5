"""TensorBoard scalars written in the calling thread, so that a failed write (a full disk) is one OSError here.

tensorboardX's SummaryWriter writes from a thread of its own and flushes again at exit: on a full disk a run
ended with three tracebacks (its thread's, the flush's and its atexit hook's), and once its thread had died, its
bounded queue would block the next add_scalar. This writer writes what SummaryWriter writes for add_scalar (the
same files: TFRecords of Event protos), one unbuffered write per step, so nothing is left pending that a close or
the interpreter's exit would try to write again.

It encodes the few protobuf fields a scalar needs itself rather than importing tensorboardX: that package imports
torch whenever torch is installed (2-3 s and 180 MB of every run's memory, for tensor types a scalar never meets).
tests/test_tensorboard.py holds the bytes equal to tensorboardX's protos and checksum.
"""
from __future__ import annotations

import math
import os
import re
import socket
import struct
import time

# -- protobuf's wire format, for the fields of Event, Summary and SessionLog a scalar's record uses ---------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire_type)
    return key + (_varint(len(payload)) + payload if wire_type == 2 else payload)


def _float32(value: float) -> bytes:
    """``value`` as protobuf's float: rounded to float32, beyond its range an infinity (as the protos store it)."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def event_bytes(wall_time: float, step: int = 0, file_version: str = "", scalars=(), session_status: int = 0) -> bytes:
    """A serialized ``Event`` (tensorboard/compat/proto/event.proto): wall_time (1, double), step (2, int64),
    and one of file_version (3), summary (5: Summary.value (1) of tag (1) and simple_value (2, float)) or
    session_log (7: SessionLog.status (1), START = 1). Fields at their default are left out, as protobuf leaves them."""
    out = _field(1, 1, struct.pack("<d", wall_time)) if wall_time else b""
    if step:
        out += _field(2, 0, _varint(step))
    if file_version:
        out += _field(3, 2, file_version.encode())
    if scalars:
        values = b"".join(_field(1, 2, (_field(1, 2, name.encode()) if name else b"")
                                 + _field(2, 5, _float32(float(v)))) for name, v in scalars)  # a oneof: always
        out += _field(5, 2, values)
    if session_status:
        out += _field(7, 2, _field(1, 0, _varint(session_status)))
    return out


def _crc32c_table():
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1  # Castagnoli's polynomial, reflected
        table.append(n)
    return table


_CRC32C = _crc32c_table()
SESSION_START = 1


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C of ``data``, rotated right by 15 bits plus a constant."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(data: bytes) -> bytes:
    """One TFRecord: length, its checksum, the serialized event, its checksum."""
    header = struct.pack("Q", len(data))
    return header + struct.pack("I", masked_crc32c(header)) + data + struct.pack("I", masked_crc32c(data))


def tag(name: str) -> str:
    """The TensorBoard tag of a metric: ``@`` (pass@k, mean@n) spelled ``_at_``, any other character tensorboardX
    would refuse made ``_`` (as it would, but without its log line for every such name at every step)."""
    return re.sub(r"[^-/\w.]", "_", name.replace("@", "_at_"))


class ScalarWriter:
    """``write(step, metrics)`` puts the numbers among ``metrics`` into an event file under ``logdir``;
    ``purge_step``: a resumed run's first step (TensorBoard drops the interrupted run's events from it on)."""

    def __init__(self, logdir: str, purge_step=None):
        os.makedirs(logdir, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{str(now)[:10]}.{socket.gethostname()}"  # SummaryWriter's name
        self._fh = open(os.path.join(logdir, name), "ab", buffering=0)
        first = [event_bytes(now, file_version="brain.Event:2")]
        if purge_step is not None:
            first += [event_bytes(now, purge_step, file_version="brain.Event:2"),
                      event_bytes(now, purge_step, session_status=SESSION_START)]
        self._put(first)

    def _put(self, events) -> None:
        data = memoryview(b"".join(_record(e) for e in events))
        while data:  # an unbuffered write may take part of it
            data = data[self._fh.write(data):]

    def write(self, step: int, metrics: dict) -> None:
        now = time.time()
        self._put([event_bytes(now, step, scalars=[(tag(k), v)]) for k, v in metrics.items()
                   if isinstance(v, (int, float))])

    def close(self) -> None:
        self._fh.close()
