#!/usr/bin/env python
"""What one decode step costs at each batch bucket of the rollout's generator, and what compiling that bucket costs.

The generator compiles one decode graph per batch bucket it meets (mindrl/rollout/generator.py: max_batch, halved
down to ``min_decode_bucket``) and moves the live rows into a smaller bucket once they fit. A bucket is worth its
compile only if a step there is cheaper than a step at the next larger one. This script builds a Generator on a
model with every bucket from --max-batch halved down to 1, compiles each (largest first, the rollout's order), then
times --calls decode calls per bucket (all rows live, at position --position), and prints the median step.

    python bench/decode_buckets.py                                         # the tiny policy, 512 rows (~30 s)
    python bench/decode_buckets.py --model scratch/real/smollm2-hf --max-batch 64   # the real model (~1.5 min)

The real model is bench_real.py's (``bash examples/real/run.sh --prepare``).
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "tiny", "policy"), help="an HF directory")
    ap.add_argument("--max-batch", type=int, default=512, help="the largest bucket (the rollout's pool)")
    ap.add_argument("--calls", type=int, default=12, help="timed decode calls per bucket (the first 2 not counted)")
    ap.add_argument("--position", type=int, default=40, help="the cache position every row decodes at")
    args = ap.parse_args(argv)
    if args.calls < 3:  # the median is of the calls after the first two
        ap.error(f"--calls {args.calls}: at least 3 (the first 2 calls are not counted)")
    sys.path.insert(0, ROOT)
    import numpy as np
    from mindrl.runtime import setup_context
    setup_context("graph")
    from mindspore import Tensor
    from mindrl.models import from_pretrained
    from mindrl.rollout.generator import Generator

    lm = from_pretrained(args.model)
    gen = Generator(lm.net, max_batch=args.max_batch, max_prompt_len=64, max_new_tokens=32, min_decode_bucket=1)
    print(f"model {args.model}; buckets {gen.decode_buckets}")
    print(f"{'bucket':>7}  {'compile + first call (s)':>24}  {'decode step, median (ms)':>24}")
    for b in sorted(gen.decode_buckets, reverse=True):
        started = time.perf_counter()
        gen.warmup(b)
        compiled = time.perf_counter() - started
        inputs = (Tensor(np.full(b, 1, np.int32)), Tensor(np.full(b, args.position, np.int32)),
                  Tensor(np.zeros(b, np.int32)))
        times = []
        for _ in range(args.calls):
            started = time.perf_counter()
            out = gen.decode_cell(*inputs)
            (out[0] if isinstance(out, tuple) else out).asnumpy()  # wait for the result
            times.append(time.perf_counter() - started)
        print(f"{b:>7}  {compiled:>24.2f}  {1000 * statistics.median(times[2:]):>24.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
