#!/usr/bin/env python
"""Rollout speed: mindrl (MindSpore GRAPH, KV cache) against transformers `generate` (PyTorch CPU).

Both sides run the same random-init Qwen2 (built with transformers, saved with save_pretrained, loaded
by mindrl's from_pretrained), in float32, with the same number of CPU threads, in one process:

* greedy, P prompts x L tokens, N new tokens, no eos (every row runs to the limit);
* greedy with stop ids the model really emits (picked from the first run so the mean row length is
  about N/2), so rows finish at different steps: mindrl compacts finished rows into smaller decode
  batches, transformers keeps decoding them as padding until every row is done;
* sampling, n=8 samples for each of 2 prompts (temperature 1, no top-k/top-p);
* log-probs of B x T given tokens (mindrl's scoring graph vs a torch forward + log_softmax + gather).

Throughput is new tokens per second (log-probs: scored tokens per second), median of --repeats timed
runs after warm-up, the two sides alternating so that load from other processes hits both alike.
MindSpore's first call (graph compile + run) is reported separately.

    python bench/bench_generate.py                  # the PLATFORM.md sizes (a few minutes on 2 cores)
    python bench/bench_generate.py --quick          # tiny smoke run (seconds)
    python bench/bench_generate.py --breakdown      # also: where mindrl's decode time goes
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=1408)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--samples", type=int, default=8, help="n for the sampling workload")
    p.add_argument("--sample-prompts", type=int, default=2)
    p.add_argument("--logprob-batch", type=int, default=16)
    p.add_argument("--logprob-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch and MindSpore CPU threads (the same for both)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--breakdown", action="store_true", help="time mindrl's prefill/decode/sampling/host parts")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate, args.vocab = 64, 2, 4, 2, 128, 512
        args.prompts, args.prompt_len, args.new_tokens = 4, 16, 16
        args.logprob_batch, args.logprob_len, args.repeats = 4, 32, 1
    return args


def timed(fn, repeats):
    """(median seconds, last result) over `repeats` calls."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def first_eos_lengths(rows, stops):
    """Tokens per row up to and including the first stop id (all of them when there is none)."""
    stops = set(stops or ())
    out = []
    for row in rows:
        row = list(row)
        hit = [i for i, t in enumerate(row) if t in stops]
        out.append(hit[0] + 1 if hit else len(row))
    return out


def pick_stops(rows, new_tokens, max_ids=8):
    """Stop ids the model really emits, added one by one (each time the id that brings the mean row length
    closest to half of ``new_tokens``), so rows finish at different steps, like eos in a real rollout.
    A random-init model loops over few tokens per row, so one id rarely stops many rows."""
    emitted = sorted({t for row in rows for t in row})
    stops = []
    target = new_tokens / 2
    while len(stops) < max_ids:
        best, best_gap = None, None
        for tok in emitted:
            if tok in stops:
                continue
            gap = abs(np.mean(first_eos_lengths(rows, stops + [tok])) - target)
            if best_gap is None or gap < best_gap:
                best, best_gap = tok, gap
        if best is None:
            break
        stops.append(best)
        if np.mean(first_eos_lengths(rows, stops)) <= target:
            break
    return stops


class _Synced:
    def __init__(self, arr):
        self._arr = arr

    def asnumpy(self):
        return self._arr


class _Timer:
    """Wraps a graph cell: forces the result to host so its wall time is the device time."""

    def __init__(self, cell, sync=True):
        self.cell, self.sync, self.seconds, self.calls = cell, sync, 0.0, 0
        self.by_rows = {}  # batch rows -> [seconds, calls]

    def __call__(self, *a):
        t0 = time.perf_counter()
        out = self.cell(*a)
        if self.sync:
            out = _Synced(out.asnumpy())
        dt = time.perf_counter() - t0
        self.seconds += dt
        self.calls += 1
        slot = self.by_rows.setdefault(int(a[0].shape[0]), [0.0, 0])
        slot[0] += dt
        slot[1] += 1
        return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    os.environ["MINDRL_THREADS"] = str(args.threads)
    from mindrl.runtime import setup_context
    setup_context("graph", threads=args.threads)
    from mindrl.models import from_pretrained
    from mindrl.rollout import generate

    P, L, N = args.prompts, args.prompt_len, args.new_tokens
    max_pos = max(2048, L + N, args.logprob_len)
    torch.manual_seed(args.seed)
    hf_cfg = transformers.Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max_pos, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    hf = transformers.Qwen2ForCausalLM(hf_cfg).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    nparams = sum(p.numel() for p in hf.parameters())
    with tempfile.TemporaryDirectory(prefix="mindrl_bench_") as workdir:
        hf.save_pretrained(workdir)
        lm = from_pretrained(workdir)
    assert lm.eos_token_ids == [], lm.eos_token_ids

    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(1, args.vocab, size=(P, L))
    prompt_list = prompts.tolist()
    hf_ids = torch.tensor(prompts, dtype=torch.long)
    hf_mask = torch.ones_like(hf_ids)
    print(f"model: Qwen2 random init, {nparams / 1e6:.1f}M params, hidden {args.hidden}, {args.layers} layers, "
          f"heads {args.heads}/{args.kv_heads}, vocab {args.vocab}, float32; threads {args.threads} "
          f"(torch {torch.__version__}, transformers {transformers.__version__})", flush=True)
    rows = []  # (workload, ours tok/s, theirs tok/s, our first call s, agreement text)

    def hf_generate(ids, mask, **kw):
        with torch.no_grad():
            return hf.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, **kw)[:, ids.shape[1]:].tolist()

    def bench_pair(name, ours_fn, theirs_fn, count_ours, count_theirs, agree_fn, warm=1):
        t0 = time.perf_counter()
        ours_first = ours_fn()
        first = time.perf_counter() - t0
        for _ in range(warm):
            ours_fn()
        theirs_fn()  # warm-up
        # alternate the two sides, so load from other processes hits both alike
        ours_times, theirs_times = [], []
        for _ in range(args.repeats):
            dt, ours_out = timed(ours_fn, 1)
            ours_times.append(dt)
            dt, theirs_out = timed(theirs_fn, 1)
            theirs_times.append(dt)
        ours_t, theirs_t = statistics.median(ours_times), statistics.median(theirs_times)
        ours_tps, theirs_tps = count_ours(ours_out) / ours_t, count_theirs(theirs_out) / theirs_t
        agree = agree_fn(ours_out, theirs_out)
        rows.append((name, ours_tps, theirs_tps, first, max(0.0, first - ours_t), agree))
        print(f"  {name}: mindrl {ours_tps:.0f} tok/s ({ours_t:.2f} s), transformers {theirs_tps:.0f} tok/s "
              f"({theirs_t:.2f} s); {agree}", flush=True)
        return ours_first, ours_out, theirs_out

    def same_rows(a, b):
        return f"{sum(x == y for x, y in zip(a, b))}/{len(a)} rows identical"

    # (a) greedy to the limit
    name_a = f"greedy {P}x{L} +{N}, no eos"
    _, greedy_ours, _ = bench_pair(
        name_a,
        lambda: generate(lm, prompt_list, max_new_tokens=N, eos_token_id=[]),
        lambda: hf_generate(hf_ids, hf_mask, max_new_tokens=N, do_sample=False),
        lambda out: sum(map(len, out)), lambda out: sum(map(len, out)), same_rows)

    # (a') greedy with stop ids the model emits: rows finish at different steps
    eos = pick_stops(greedy_ours, N) if N > 1 else []
    if eos:
        lengths = first_eos_lengths(greedy_ours, eos)
        name_e = f"greedy {P}x{L} +<={N}, {len(eos)} eos ids"

        def cut(rows_):
            return [r[:n] for r, n in zip(rows_, first_eos_lengths(rows_, eos))]

        bench_pair(name_e, lambda: generate(lm, prompt_list, max_new_tokens=N, eos_token_id=eos),
                   lambda: hf_generate(hf_ids, hf_mask, max_new_tokens=N, do_sample=False, eos_token_id=eos),
                   lambda out: sum(map(len, out)), lambda out: sum(first_eos_lengths(out, eos)),
                   lambda a, b: same_rows(a, cut(b)))
        print(f"    eos ids {eos}: rows stop after {min(lengths)}..{max(lengths)} tokens (mean "
              f"{np.mean(lengths):.0f}, {sum(n < N for n in lengths)}/{P} rows before the limit)", flush=True)

    # (b) n samples per prompt
    S, K = args.sample_prompts, args.samples
    sp = prompt_list[:S]
    sp_ids = torch.tensor(sp, dtype=torch.long)
    seeds = iter(range(10**6))

    def hf_sample():
        torch.manual_seed(next(seeds))
        return hf_generate(sp_ids, torch.ones_like(sp_ids), max_new_tokens=N, do_sample=True,
                           temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=K)

    bench_pair(f"sample n={K} x {S} prompts +{N}",
               lambda: generate(lm, sp, max_new_tokens=N, do_sample=True, temperature=1.0, n=K, seed=next(seeds),
                                eos_token_id=[]),
               hf_sample, lambda out: sum(map(len, out)), lambda out: sum(map(len, out)),
               lambda a, b: f"{len(a)} vs {len(b)} sequences")

    # (c) log-probs of given tokens
    B, T = args.logprob_batch, args.logprob_len
    lp_ids = rng.integers(0, args.vocab, size=(B, T)).astype(np.int32)
    lp_torch = torch.tensor(lp_ids, dtype=torch.long)

    def torch_lp():
        with torch.no_grad():
            logits = hf(input_ids=lp_torch).logits[:, :-1].float()
            return torch.log_softmax(logits, -1).gather(-1, lp_torch[:, 1:, None]).squeeze(-1).numpy()

    bench_pair(f"log-probs {B}x{T}", lambda: lm.log_probs(lp_ids, micro_batch_size=B), torch_lp,
               lambda out: B * T, lambda out: B * T,
               lambda a, b: f"max |diff| {float(np.abs(np.asarray(a) - b).max()):.1e}", warm=4)

    # table
    print()
    print(f"| workload | mindrl tok/s | transformers tok/s | mindrl/transformers | mindrl first call s "
          f"(compile est.) | check |")
    print("|---|---|---|---|---|---|")
    for name, ours, theirs, first, comp, agree in rows:
        print(f"| {name} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f} | {first:.1f} ({comp:.1f}) | {agree} |")
    print()
    for name, ours, theirs, *_ in rows:
        print(f"ratio mindrl/transformers [{name}]: {ours / theirs:.2f}")

    if args.breakdown:
        breakdown(lm, f"greedy {P}x{L} +{N}, no eos", prompt_list, max_new_tokens=N, eos_token_id=[])
        if eos:
            breakdown(lm, f"greedy {P}x{L} +<={N}, eos {eos}", prompt_list, max_new_tokens=N, eos_token_id=eos)
        breakdown(lm, f"sample n={K} x {S} prompts +{N}", sp, max_new_tokens=N, do_sample=True, n=K,
                  eos_token_id=[])
    return 0


def breakdown(lm, label, prompts, **kw):
    """Where one generate call spends its time (graph calls synced, sampling, the rest)."""
    import mindrl.rollout.generator as G
    from mindrl.rollout import generate
    generate(lm, prompts, **kw)
    gen = next(iter(lm._generators.values()))
    cells = {k: _Timer(getattr(gen, k)) for k in ("prefill_cell", "decode_cell")}
    cells["reorder_cell"] = _Timer(gen.reorder_cell, sync=False)
    original_sample = G.Sampler.sample
    sample_time = [0.0]

    def sample(self, *a, **kw):
        t0 = time.perf_counter()
        out = original_sample(self, *a, **kw)
        sample_time[0] += time.perf_counter() - t0
        return out

    for k, v in cells.items():
        setattr(gen, k, v)
    G.Sampler.sample = sample
    try:
        t0 = time.perf_counter()
        generate(lm, prompts, **kw)
        total = time.perf_counter() - t0
    finally:
        G.Sampler.sample = original_sample
        for k, v in cells.items():
            setattr(gen, k, v.cell)
    print(f"\nmindrl breakdown, {label}: total {total:.2f} s")
    parts = {k.replace("_cell", ""): v.seconds for k, v in cells.items()}
    parts["sampling (host numpy)"] = sample_time[0]
    parts["other host work"] = total - sum(parts.values())
    for k, v in parts.items():
        calls = cells.get(k + "_cell").calls if k + "_cell" in cells else ""
        per = f", {v / calls * 1e3:.1f} ms/call x {calls}" if calls else ""
        print(f"  {k:<24} {v:6.2f} s  {100 * v / total:5.1f}%{per}")
    for rows, (sec, calls) in sorted(cells["decode_cell"].by_rows.items()):
        print(f"    decode batch {rows:>3}: {calls:>4} steps, {sec / calls * 1e3:.1f} ms/step, "
              f"{sec / calls / rows * 1e3:.2f} ms/row-step")


if __name__ == "__main__":
    sys.exit(main())
