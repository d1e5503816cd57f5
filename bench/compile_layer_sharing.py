#!/usr/bin/env python
"""What compiling costs when a graph's decoder layers share one Cell: a design experiment for the first step.

mindrl's graphs unroll their 30 layers, each layer a Cell of its own (models/decoder.py), and MindSpore's front
end parses, infers and optimizes every one of them (`python bench/profile_compile.py --phases`). This script
builds one forward and backward of a LLaMA with SmolLM2-135M's shapes (30 layers, 576 wide, 9 query and 3
key/value heads, vocabulary 49,152, tied head; one micro-batch of 8 rows x 72 positions; mindrl's RMSNorm and
masked softmax with their own backward) three ways, each in its own process:

- ``per_layer_cells``: one graph, a Cell per layer (weights as each Cell's inputs, as mindrl's layers hold theirs);
- ``shared_cell``: one graph, one Cell called by all 30 layers with each layer's weights as its inputs;
- ``layer_graphs``: no whole graph: one layer's forward graph and one layer's backward graph (its forward run again
  inside, as with recompute), each compiled once and called 30 times from Python, and the head's own graph.

It prints each way's first call (compiling, then running), its median call after that, the process's peak memory,
and checks that the three give the same loss and gradients (the sum of absolute gradient values of every weight).

    python bench/compile_layer_sharing.py              # about 3 minutes on 2 cores
    python bench/compile_layer_sharing.py --layers 10

Writes nothing. (The shared way did not carry over: mindrl's decoder recast with one shared block compiled its
GRPO update graph no faster under bench/profile_compile.py; docs/performance.md, "Real model", has the figures.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("GLOG_v", "3")
H, NH, KV, D, F, V = 576, 9, 3, 64, 1536, 49152
B, S = 8, 72
WAYS = ("per_layer_cells", "shared_cell", "layer_graphs")


def run_way(way: str, layers: int, calls: int) -> dict:
    import resource
    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn, ops
    from mindrl.models.decoder import MaskedSoftmax, _RMSNormFunction, rotation_matrix
    from mindrl.runtime import setup_context
    setup_context("graph", 2)
    rng = np.random.default_rng(0)

    class LayerMath(nn.Cell):
        """One LLaMA decoder layer, its weights as inputs."""

        def __init__(self):
            super().__init__()
            self.norm = _RMSNormFunction(1e-5)
            self.softmax = MaskedSoftmax()
            self.mm = ops.MatMul(transpose_b=True)
            self.bmm_t = ops.BatchMatMul(transpose_b=True)
            self.bmm = ops.BatchMatMul()
            self.rot = Tensor(rotation_matrix(D))

        def lin(self, x, w):
            return self.mm(x.reshape(-1, x.shape[-1]), w).reshape(x.shape[:-1] + (w.shape[0],))

        def rope(self, x, cos, sin):
            return x * cos + ops.matmul(x.reshape(-1, D), self.rot).reshape(x.shape) * sin

        def construct(self, x, cq, sq, ck, sk, mask, n1, wq, wk, wv, wo, n2, wg, wu, wd):
            h = self.norm(x, n1)
            r = NH // KV
            q = self.rope(self.lin(h, wq).reshape(B, S, NH, D), cq, sq)
            q = q.reshape(B, S, KV, r, D).transpose(0, 2, 3, 1, 4).reshape(B, KV, r * S, D)
            k = self.rope(self.lin(h, wk).reshape(B, S, KV, D), ck, sk).transpose(0, 2, 1, 3)
            v = self.lin(h, wv).reshape(B, S, KV, D).transpose(0, 2, 1, 3)
            o = self.bmm(self.softmax(self.bmm_t(q, k), mask), v)
            x = x + self.lin(o.reshape(B, KV, r, S, D).transpose(0, 3, 1, 2, 4).reshape(B, S, NH * D), wo)
            h = self.norm(x, n2)
            return x + self.lin(ops.silu(self.lin(h, wg)) * self.lin(h, wu), wd)

    class HeadLoss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.norm = _RMSNormFunction(1e-5)
            self.mm = ops.MatMul(transpose_b=True)

        def construct(self, x, nf, emb, tgt):
            lp = ops.log_softmax(self.mm(self.norm(x, nf).reshape(-1, H), emb), -1)
            return -ops.gather_elements(lp, 1, tgt.reshape(-1, 1)).mean()

    def weight(*shape, name):
        return Parameter(Tensor((rng.standard_normal(shape) * 0.02).astype(np.float32)), name=name)

    def ones(name):
        return Parameter(Tensor(np.ones(H, np.float32)), name=name)

    per_layer = [[ones(f"n1.{i}"), weight(NH * D, H, name=f"q.{i}"), weight(KV * D, H, name=f"k.{i}"),
                  weight(KV * D, H, name=f"v.{i}"), weight(H, NH * D, name=f"o.{i}"), ones(f"n2.{i}"),
                  weight(F, H, name=f"g.{i}"), weight(F, H, name=f"u.{i}"), weight(H, F, name=f"d.{i}")]
                 for i in range(layers)]
    emb, nf = weight(V, H, name="emb"), ones("nf")
    params = [p for ws in per_layer for p in ws] + [emb, nf]
    ids = Tensor(rng.integers(0, V, (B, S)).astype(np.int32))
    tgt = Tensor(rng.integers(0, V, (B, S)).astype(np.int32))
    causal = np.triu(np.full((S, S), -1e9, np.float32), 1)
    mask = Tensor(np.tile(causal, (NH // KV, 1)).reshape(1, 1, NH // KV * S, S))
    ang = np.arange(S)[:, None] / (10000 ** (np.arange(D // 2) / (D // 2)))
    ang = np.concatenate([ang, ang], -1)

    def table(t, n, scale=1.0):
        return Tensor(np.ascontiguousarray(np.broadcast_to((t * scale)[None, :, None, :], (B, S, n, D)), np.float32))

    rope = (table(np.cos(ang), NH, D ** -0.5), table(np.sin(ang), NH, D ** -0.5), table(np.cos(ang), KV),
            table(np.sin(ang), KV))

    if way == "layer_graphs":
        layer, head = LayerMath(), HeadLoss()

        class LayerBackward(nn.Cell):
            def __init__(self):
                super().__init__()
                self.f, self.grad = layer, ops.GradOperation(get_all=True, sens_param=True)

            def construct(self, x, cq, sq, ck, sk, mask, n1, wq, wk, wv, wo, n2, wg, wu, wd, dy):
                return self.grad(self.f)(x, cq, sq, ck, sk, mask, n1, wq, wk, wv, wo, n2, wg, wu, wd, dy)

        class HeadBackward(nn.Cell):
            def __init__(self):
                super().__init__()
                self.f, self.grad = head, ops.GradOperation(get_all=True)

            def construct(self, x, nf, emb, tgt):
                return self.f(x, nf, emb, tgt), self.grad(self.f)(x, nf, emb, tgt)

        backward, head_backward = LayerBackward(), HeadBackward()

        def step():
            ws = [[p.value() for p in w] for w in per_layer]  # tensors: a Parameter argument compiles anew per layer
            xs = [ops.gather(emb, ids, 0)]
            for i in range(layers):
                xs.append(layer(xs[-1], *rope, mask, *ws[i]))
            loss, g = head_backward(xs[-1], nf.value(), emb.value(), tgt)
            dx, dnf, demb = g[0], g[1], g[2]
            grads = [None] * layers
            for i in reversed(range(layers)):
                out = backward(xs[i], *rope, mask, *ws[i], dx)
                dx, grads[i] = out[0], list(out[6:])
            demb = demb + ops.unsorted_segment_sum(dx.reshape(-1, H), ids.reshape(-1), V)
            return loss, [g for gs in grads for g in gs] + [demb, dnf]
    else:
        class Whole(nn.Cell):
            def __init__(self):
                super().__init__()
                self.params = ms.ParameterTuple(params)
                self.shared = LayerMath() if way == "shared_cell" else None
                self.layers = nn.CellList([LayerMath() for _ in range(layers)]) if way == "per_layer_cells" else None
                self.head = HeadLoss()

            def construct(self, ids, tgt):
                ps = self.params
                x = ops.gather(ps[9 * layers], ids, 0)
                for i in range(layers):
                    f = self.shared if self.layers is None else self.layers[i]
                    j = 9 * i
                    x = f(x, rope[0], rope[1], rope[2], rope[3], mask, ps[j], ps[j + 1], ps[j + 2], ps[j + 3],
                          ps[j + 4], ps[j + 5], ps[j + 6], ps[j + 7], ps[j + 8])
                return self.head(x, ps[9 * layers + 1], ps[9 * layers], tgt)

        class Step(nn.Cell):
            def __init__(self):
                super().__init__()
                self.net = Whole()
                self.grad = ops.GradOperation(get_by_list=True)

            def construct(self, ids, tgt):
                return self.net(ids, tgt), self.grad(self.net, self.net.params)(ids, tgt)

        whole = Step()

        def step():
            loss, grads = whole(ids, tgt)
            return loss, list(grads)

    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        loss, grads = step()
        sums = [float(np.abs(g.asnumpy()).sum()) for g in grads]
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    return {"times": times, "loss": float(loss.asnumpy()), "grad_sums": sums, "peak_gib": peak}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--calls", type=int, default=5, help="forward and backward calls per way (the first compiles)")
    ap.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.way:
        print("RESULT " + json.dumps(run_way(a.way, a.layers, a.calls)), flush=True)
        return
    print(f"one forward and backward of a {a.layers}-layer LLaMA with SmolLM2-135M's shapes, {B} rows x {S} positions")
    print(f"{'way':16} {'first call':>10} {'median call':>12} {'peak RSS':>9}")
    results = {}
    for way in WAYS:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--way", way, "--layers", str(a.layers),
                              "--calls", str(a.calls)], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="2"))
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode or not line:
            raise SystemExit(f"{way} failed: {out.stderr[-3000:]}")
        r = results[way] = json.loads(line[0][7:])
        print(f"{way:16} {r['times'][0]:9.1f}s {statistics.median(r['times'][1:]):11.2f}s {r['peak_gib']:7.2f}GiB",
              flush=True)
    base = results["per_layer_cells"]
    for way in WAYS[1:]:
        r = results[way]
        worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(r["grad_sums"], base["grad_sums"]))
        same = abs(r["loss"] - base["loss"]) < 1e-5 and worst < 1e-3
        print(f"{way} against per_layer_cells: loss {r['loss']:.6f} vs {base['loss']:.6f}, largest relative "
              f"difference of a weight's gradient sum {worst:.1e}: {'the same' if same else 'DIFFERENT'}")
        if not same:
            raise SystemExit(1)
    print(f"first call: shared_cell {results['shared_cell']['times'][0] / base['times'][0]:.2f}x per_layer_cells's, "
          f"layer_graphs {results['layer_graphs']['times'][0] / base['times'][0]:.2f}x")


if __name__ == "__main__":
    main()
