#!/usr/bin/env python
"""Which MindSpore operations keep their output past its last use inside one graph (CPU backend).

One graph computes --chunks chunks one after another: each chunk takes rows of an input, runs the operation on its
product with a weight ([--rows x 576] x [576 x --width], 32 MiB at the defaults), and adds the result's sum into a
scalar the next chunk waits for. Once a chunk's sum is taken its tensors are dead, so a runtime that reuses memory
holds one chunk's tensors at a time, however many chunks there are. For each operation the script runs the graph
with 1 chunk and with --chunks chunks, each in a child process, and prints how much more the process peaked with
more chunks, in units of one chunk's output: about 0 means the memory was reused, about 1 or more per extra chunk
means every chunk's output stayed until the graph ended.

    python bench/kernel_memory.py                 # every operation listed in OPS (about 3 minutes on 2 cores)
    python bench/kernel_memory.py --ops div,mul_reciprocal

Writes nothing.
"""
import argparse
import os
import subprocess
import sys

os.environ.setdefault("GLOG_v", "3")

import mindspore as ms  # noqa: E402
from mindspore import ops  # noqa: E402


# The operations, each a function of a chunk's product z (module-level: MindSpore's graph mode parses their source)
def mul(z):
    return z * 0.5


def add(z):
    return z + 1.0


def sub(z):
    return z - z * 0.5


def div(z):
    return z / (ops.abs(z) + 2.0)


def div_by_constant(z):
    return z / 3.0


def mul_reciprocal(z):
    return z * (1.0 / 3.0)


def exp(z):
    return ops.exp(z)


def log(z):
    return ops.log(ops.abs(z) + 1.0)


def rsqrt(z):
    return ops.rsqrt(ops.abs(z) + 1.0)


def silu(z):
    return ops.silu(z)


def softmax(z):
    return ops.softmax(z, -1)


def maximum(z):
    return ops.maximum(z, z * 0.5)


def select(z):
    return ops.select(z > 0, z, z * 2.0)


def cast(z):
    return z.astype(ms.float16).astype(ms.float32)


def transpose(z):
    return z.T * 1.0


def one_hot(z):
    rows = ops.zeros((z.shape[0],), ms.int32)
    return ops.one_hot(rows, z.shape[-1], ops.ones((), z.dtype), ops.zeros((), z.dtype)) * z


def strided_slice(z):
    return z[:, 1:] * 1.0


def concat(z):
    return ops.concat((z, z), 0) * 1.0


def broadcast_to(z):
    return ops.broadcast_to(z[:, :1], z.shape) * 1.0


def reshape(z):
    return z.reshape(z.shape[0] * 2, -1) * 1.0


def batch_transpose(z):
    return z.reshape(z.shape[0], 8, -1, 64).transpose(0, 2, 1, 3) * 1.0


OPS = {
    "mul": mul,
    "add": add,
    "sub": sub,
    "div": div,
    "div_by_constant": div_by_constant,
    "mul_reciprocal": mul_reciprocal,
    "exp": exp,
    "log": log,
    "rsqrt": rsqrt,
    "silu": silu,
    "softmax": softmax,
    "maximum": maximum,
    "select": select,
    "cast": cast,
    "transpose": transpose,
    "one_hot": one_hot,
    "strided_slice": strided_slice,
    "concat": concat,
    "broadcast_to": broadcast_to,
    "reshape": reshape,
    "batch_transpose": batch_transpose,
}


def source(name: str) -> str:
    import inspect
    return inspect.getsource(OPS[name]).strip().splitlines()[-1].replace("return ", "").strip()


def peak_gib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(op: str, chunks: int, rows: int, width: int) -> None:
    import numpy as np
    from mindspore import Tensor, nn
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    operation = OPS[op]
    product = ops.MatMul(transpose_b=True)

    class Chunks(nn.Cell):
        def construct(self, h, w):
            total = ops.zeros((), ms.float32)
            for i in range(chunks):
                hc = h[i * rows:(i + 1) * rows]
                if i:
                    hc = hc + total * 0.0  # waits for the chunk before
                z = product(hc, w)
                total = total + operation(z).sum()
            return total

    h = Tensor(np.full((chunks * rows, 576), 1e-3, np.float32))
    w = Tensor(np.full((width, 576), 1e-3, np.float32))
    before = peak_gib()
    Chunks()(h, w).asnumpy()
    print(f"{peak_gib() - before:.4f}")


def run_child(op, chunks, a) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", op, "--chunks", str(chunks), "--rows", str(a.rows),
                          "--width", str(a.width)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", help="comma-separated names from OPS (default: all)")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--rows", type=int, default=170)
    ap.add_argument("--width", type=int, default=49152, help="the product's columns (SmolLM2's vocabulary)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.chunks, a.rows, a.width)
        return
    names = a.ops.split(",") if a.ops else list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise SystemExit(f"kernel_memory: unknown operation(s) {', '.join(unknown)}; known: {', '.join(OPS)}")
    unit = a.rows * a.width * 4 / 2**30
    print(f"MindSpore {ms.__version__}, CPU; one chunk's output {unit * 1024:.0f} MiB; peak growth from 1 to "
          f"{a.chunks} chunks, in chunk outputs per extra chunk")
    print(f"{'operation':<18} {'expression':<44} kept per extra chunk")
    for name in names:
        one, many = run_child(name, 1, a), run_child(name, a.chunks, a)
        kept = (many - one) / unit / (a.chunks - 1)
        print(f"{name:<18} {source(name)[:44]:<44} {kept:5.2f}", flush=True)


if __name__ == "__main__":
    main()
