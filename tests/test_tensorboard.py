"""The TensorBoard writer's own encoding (mindrl/trainer/tensorboard.py) against tensorboardX's: the same Event
bytes as its protos serialize, the same TFRecord checksum, files its Event proto reads back, and no torch import
(tensorboardX's package imports torch whenever it is installed)."""
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("tensorboardX")


def reference_event(wall_time, step=0, file_version="", scalars=(), session_status=0):
    from tensorboardX.proto.event_pb2 import Event, SessionLog
    from tensorboardX.summary import scalar
    from tensorboardX.proto.summary_pb2 import Summary
    event = Event(wall_time=wall_time, step=step)
    if file_version:  # one of the oneof "what": set, even to "", it is written
        event.file_version = file_version
    if scalars:
        event.summary.CopyFrom(Summary(value=[v for name, x in scalars for v in scalar(name, x).value]))
    if session_status:
        event.session_log.CopyFrom(SessionLog(status=session_status))
    return event.SerializeToString()


@pytest.mark.parametrize("kwargs", [
    dict(wall_time=1765152000.123456, file_version="brain.Event:2"),
    dict(wall_time=1765152000.5, step=7, file_version="brain.Event:2"),
    dict(wall_time=1765152000.5, step=300, session_status=1),
    dict(wall_time=1765152000.25, step=1, scalars=[("actor/pg_loss", -0.0123)]),
    dict(wall_time=1.0, step=2 ** 40, scalars=[("eval/pass_at_8", 0.0)]),
    dict(wall_time=2.0, step=-3, scalars=[("x", 1e40), ("y", -1e40), ("z", float("nan")), ("w", float("inf"))]),
    dict(wall_time=3.0, step=5, scalars=[("timing/all", 12), ("flag", True), ("πκ/ü", 1e-45)]),
    dict(wall_time=0.0, step=0),
])
def test_event_bytes_equal_tensorboardx_protos(kwargs):
    from mindrl.trainer.tensorboard import event_bytes
    assert event_bytes(**kwargs) == reference_event(**kwargs)


def test_record_checksum_equals_tensorboardx(rng):
    from tensorboardX.record_writer import masked_crc32c as reference
    from mindrl.trainer.tensorboard import masked_crc32c
    for n in (0, 1, 8, 13, 100, 4096):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert masked_crc32c(data) == reference(data), n


def test_written_file_reads_back_with_tensorboardx(tmp_path):
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c
    from mindrl.trainer.tensorboard import ScalarWriter
    w = ScalarWriter(str(tmp_path), purge_step=3)
    w.write(3, {"actor/pg_loss": 0.25, "eval/pass@8": 0.5, "note": "not a number", "n": 4})
    w.write(4, {"actor/pg_loss": -1.5})
    w.close()
    (name,) = os.listdir(tmp_path)
    data, events = (tmp_path / name).read_bytes(), []
    while data:
        (n,) = struct.unpack("Q", data[:8])
        assert struct.unpack("I", data[8:12])[0] == masked_crc32c(data[:8])
        body = data[12:12 + n]
        assert struct.unpack("I", data[12 + n:16 + n])[0] == masked_crc32c(body)
        events.append(Event.FromString(body))
        data = data[16 + n:]
    assert events[0].file_version == "brain.Event:2" and events[0].step == 0
    assert events[1].step == 3 and events[2].session_log.status == 1  # the purge: TensorBoard drops steps >= 3
    got = [(e.step, v.tag, v.simple_value) for e in events[3:] for v in e.summary.value]
    assert got == [(3, "actor/pg_loss", 0.25), (3, "eval/pass_at_8", 0.5), (3, "n", 4.0), (4, "actor/pg_loss", -1.5)]
    assert all(math.isclose(e.wall_time, events[0].wall_time, abs_tol=60) for e in events)


def test_the_writer_does_not_import_torch():
    pytest.importorskip("torch")  # only meaningful where tensorboardX would import it
    code = ("import sys, tempfile; from mindrl.trainer.tensorboard import ScalarWriter; "
            "ScalarWriter(tempfile.mkdtemp()).write(1, {'x': 1.0}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
