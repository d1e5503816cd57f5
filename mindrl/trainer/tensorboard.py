"""TensorBoard scalars written in the calling thread, so that a failed write (a full disk) is one OSError here.

tensorboardX's SummaryWriter writes from a thread of its own and flushes again at exit: on a full disk a run
ended with three tracebacks (its thread's, the flush's and its atexit hook's), and once its thread had died, its
bounded queue would block the next add_scalar. This writer takes only tensorboardX's protobufs and record format
(what SummaryWriter writes for add_scalar, the same files): one unbuffered write per step, so nothing is left
pending that a close or the interpreter's exit would try to write again.
"""
from __future__ import annotations

import os
import re
import socket
import struct
import time

from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.record_writer import masked_crc32c
from tensorboardX.summary import scalar


def _record(event) -> bytes:
    """One TFRecord: length, its checksum, the serialized event, its checksum."""
    data = event.SerializeToString()
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
        first = [Event(wall_time=now, file_version="brain.Event:2")]
        if purge_step is not None:
            first += [Event(wall_time=now, step=purge_step, file_version="brain.Event:2"),
                      Event(wall_time=now, step=purge_step, session_log=SessionLog(status=SessionLog.START))]
        self._put(first)

    def _put(self, events) -> None:
        data = memoryview(b"".join(_record(e) for e in events))
        while data:  # an unbuffered write may take part of it
            data = data[self._fh.write(data):]

    def write(self, step: int, metrics: dict) -> None:
        now = time.time()
        self._put([Event(wall_time=now, step=step, summary=scalar(tag(k), v)) for k, v in metrics.items()
                   if isinstance(v, (int, float))])

    def close(self) -> None:
        self._fh.close()
