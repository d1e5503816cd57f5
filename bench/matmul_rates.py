#!/usr/bin/env python
"""MindSpore's CPU MatMul against PyTorch's at a model's shapes: the forward product of each linear layer and the two
products of its backward (dx = dy @ W^T, a transposed second operand; dW = x^T @ dy, a transposed first one), in
GFLOP/s, with the ratio MindSpore/PyTorch, one run.

mindrl stores a linear layer's weight W as [in, out], so its forward is a plain MatMul and MindSpore's autodiff makes
the backward's two products with ``transpose_b`` and ``transpose_a``. Each product runs --reps times in one compiled
graph (GRAPH mode, distinct operands each time, so nothing is computed once and reused), the best of --repeat calls;
PyTorch runs the same products one after the other (its eager kernels need no graph). Both sides use --threads.

    python bench/matmul_rates.py                   # SmolLM2-135M's MLP and attention shapes, 1920 rows (~2 min)
    python bench/matmul_rates.py --rows 240        # one GRPO micro-batch's rows
    python bench/matmul_rates.py --shapes 896x4864 # other [in x out] pairs (both directions are measured)
    python bench/matmul_rates.py --quick           # tiny shapes: a smoke run

The rows are tokens: bench_real.py's GRPO update pushes 1,920 (8 shared prompts of 48 tokens and 64 responses of
24) through every layer per step.
"""
import argparse
import os
import time

import numpy as np


def parse_shapes(text):
    """'576x1536,576x576' -> [(576, 1536), (1536, 576), (576, 576)]: each pair in both directions (up and down)."""
    out = []
    for item in text.split(","):
        din, dout = (int(v) for v in item.lower().split("x"))
        for pair in ((din, dout), (dout, din)):
            if pair not in out:
                out.append(pair)
    return out


def products(rows, din, dout):
    """{name: (transpose_a, transpose_b, a shape, b shape)} of a linear layer's forward and backward products."""
    return {"forward x@W": (False, False, (rows, din), (din, dout)),
            "backward dx=dy@W^T": (False, True, (rows, dout), (din, dout)),
            "backward dW=x^T@dy": (True, False, (rows, din), (rows, dout))}


def mindspore_seconds(ta, tb, a_list, b_list, repeat):
    """Seconds per product: ``len(a_list)`` products in one graph, the best of ``repeat`` calls."""
    import mindspore as ms
    from mindspore import nn, ops

    class Products(nn.Cell):
        def __init__(self):
            super().__init__()
            self.matmul = ops.MatMul(transpose_a=ta, transpose_b=tb)

        def construct(self, a_all, b_all):
            acc = 0.0
            for a, b in zip(a_all, b_all):
                acc = acc + self.matmul(a, b)[0, 0]  # one element out: the products stay in the graph
            return acc

    net = Products()
    a_all = tuple(ms.Tensor(x) for x in a_list)
    b_all = tuple(ms.Tensor(x) for x in b_list)
    net(a_all, b_all).asnumpy()  # compile
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        net(a_all, b_all).asnumpy()
        best = min(best, time.perf_counter() - start)
    return best / len(a_list)


def torch_seconds(ta, tb, a_list, b_list, repeat):
    import torch
    a_all = [torch.from_numpy(x) for x in a_list]
    b_all = [torch.from_numpy(x) for x in b_list]
    best = float("inf")
    for _ in range(repeat + 1):  # the first is warm-up
        start = time.perf_counter()
        acc = 0.0
        for a, b in zip(a_all, b_all):
            acc += float(((a.t() if ta else a) @ (b.t() if tb else b))[0, 0])
        best = min(best, time.perf_counter() - start)
    return best / len(a_list)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1920, help="rows of x (tokens)")
    ap.add_argument("--shapes", default="576x1536,576x576,576x192",
                    help="[in x out] of the linear layers, comma-separated (default: SmolLM2-135M's MLP, q/o and "
                         "k/v projections); each is measured in both directions")
    ap.add_argument("--reps", type=int, default=8, help="products per graph call")
    ap.add_argument("--repeat", type=int, default=5, help="calls timed; the best counts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.shapes, a.reps, a.repeat = 256, "64x128", 2, 2
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import mindspore as ms
    import torch
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.device_context.cpu.op_tuning.threads_num(a.threads)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    print(f"float32 products, {a.rows} rows, {a.threads} threads; GFLOP/s (best of {a.repeat} calls of {a.reps} "
          f"products)")
    print(f"{'layer [in x out]':18} {'product':20} {'mindspore':>10} {'pytorch':>10} {'ratio':>7}")
    ratios = []
    for din, dout in parse_shapes(a.shapes):
        for name, (ta, tb, sa, sb) in products(a.rows, din, dout).items():
            a_list = [rng.standard_normal(sa, dtype=np.float32) for _ in range(a.reps)]
            b_list = [rng.standard_normal(sb, dtype=np.float32) for _ in range(a.reps)]
            flops = 2.0 * a.rows * din * dout
            ms_rate = flops / mindspore_seconds(ta, tb, a_list, b_list, a.repeat) / 1e9
            pt_rate = flops / torch_seconds(ta, tb, a_list, b_list, a.repeat) / 1e9
            ratios.append(ms_rate / pt_rate)
            print(f"{f'{din} x {dout}':18} {name:20} {ms_rate:10.2f} {pt_rate:10.2f} {ms_rate / pt_rate:6.2f}x",
                  flush=True)
    print(f"ratio mindspore/pytorch: geometric mean {float(np.exp(np.mean(np.log(ratios)))):.2f}x, "
          f"lowest {min(ratios):.2f}x, highest {max(ratios):.2f}x")


if __name__ == "__main__":
    main()
