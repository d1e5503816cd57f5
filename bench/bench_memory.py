#!/usr/bin/env python
"""Memory and time of one training update at 1k-token sequences: mindrl with and without activation recompute
(MindFormers' recompute_config.recompute) against PyTorch with and without gradient checkpointing.

Every side trains the same random-init Qwen2 (default: the 31M bench model, 8 layers, hidden 512, GQA 8/2, vocab
8192, fp32) on the same --batch x --seq-len tokens: forward, next-token log-likelihood loss, backward, global-norm
clip, AdamW. Each side runs in a process of its own; a thread samples its resident memory every 5 ms during the
steps, so "update peak" is the most memory the update needed beyond what the process held before it (weights,
optimizer state once created, the framework). mindrl's loss with and without recompute must be the same number.

    python bench/bench_memory.py                 # 4 x 1024 tokens, about 3 minutes
    python bench/bench_memory.py --seq-len 2048  # longer sequences
    python bench/bench_memory.py --quick         # a tiny smoke run
    python bench/bench_memory.py --lora 16 --layers 24 --hidden 896 --heads 14 --kv-heads 2 --ffn 4864 \
        --vocab 151936 --tied --batch 2 --seq-len 512   # LoRA r=16 against full fine-tuning, Qwen2.5-0.5B's shape

With --lora R the sides are full fine-tuning and rank-R LoRA (alpha 2R, every projection) on both frameworks:
mindrl's adapters (models/lora.py) against PEFT's on PyTorch; recompute and checkpointing are left out.
"""
import argparse
import json
import os
import sys
import threading
import time

import common

SIDES = ("mindrl", "mindrl+recompute", "torch", "torch+checkpointing")
LORA_SIDES = ("mindrl", "mindrl+lora", "torch", "torch+peft")


class PeakSampler:
    """Resident memory of this process, sampled every 5 ms while running."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def __enter__(self):
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def batch(a):
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.integers(1, a.vocab - 1, size=(a.batch, a.seq_len)).astype(np.int32)


def run_mindrl(d, a, recompute, lora=0):
    import numpy as np
    from mindspore import Tensor
    from mindrl.models.config import load_model_config
    from mindrl.models.lm import build_network
    from mindrl.models.weights import load_into
    from mindrl.runtime import setup_context
    from mindrl.trainer.sft import SFTStep, loss_positions
    setup_context("graph", a.threads)
    config = load_model_config(f"{d}/model").replace(recompute=recompute)
    lm = build_network(config, init=False)
    load_into(lm, f"{d}/model")
    if lora:  # the base frozen: the step's parameters are the adapters
        from mindrl.models.lora import PROJECTIONS, LoraSpec, add_lora
        add_lora(lm, LoraSpec(lora, 2.0 * lora, PROJECTIONS))
    step = SFTStep(lm, clip_grad=1.0)
    ids = batch(a)
    args = (Tensor(ids), Tensor(loss_positions(np.ones_like(ids))), Tensor(np.float32(1e-5)))
    losses, times = [], []
    float(step(*args).asnumpy())  # compile, and create the optimizer state, before measuring
    with PeakSampler() as mem:
        before = mem.rss()
        for _ in range(a.steps):
            t = time.perf_counter()
            losses.append(float(step(*args).asnumpy()))
            times.append(time.perf_counter() - t)
    return {"losses": losses, "times": times, "update_peak_gb": (mem.peak - before) / 2 ** 30,
            "peak_gb": mem.peak / 2 ** 30}


def run_torch(d, a, checkpointing, lora=0):
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/model", dtype=torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable()
    if lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(r=lora, lora_alpha=2 * lora, target_modules="all-linear",
                                                           lora_dropout=0.0))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.0)
    ids = torch.tensor(batch(a), dtype=torch.long)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        return float(loss.detach())
    step()  # the optimizer state exists from here on, as on the mindrl side
    losses, times = [], []
    with PeakSampler() as mem:
        before = mem.rss()
        for _ in range(a.steps):
            t = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t)
    return {"losses": losses, "times": times, "update_peak_gb": (mem.peak - before) / 2 ** 30,
            "peak_gb": mem.peak / 2 ** 30}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model_args(ap)
    ap.add_argument("--batch", type=int, default=4, help="sequences per update")
    ap.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence")
    ap.add_argument("--steps", type=int, default=3, help="measured updates per side (after one warm-up update)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank: full fine-tuning against LoRA on both sides")
    ap.add_argument("--which", help=argparse.SUPPRESS)
    a = ap.parse_args()
    common.apply_quick(a, steps=2)
    if a.quick:
        a.batch, a.seq_len = 2, 64
    if a.side:
        name = a.which
        lora = a.lora if name.endswith(("+lora", "+peft")) else 0
        out = (run_mindrl(a.dir, a, name.endswith("recompute"), lora) if name.startswith("mindrl")
               else run_torch(a.dir, a, name.endswith("checkpointing"), lora))
        print("RESULT " + json.dumps(out), flush=True)
        return
    a.prompt_len, a.new_tokens = a.seq_len, 0  # the model's context must hold the sequences
    d = common.scratch_dir("bench_memory_")
    params = sum(p.numel() for p in common.make_assets(d, a).parameters())
    flags = [x for x in sys.argv[1:]]
    results = {}
    sides = LORA_SIDES if a.lora else SIDES
    for name in sides:
        try:
            results[name] = common.run_side(sys.executable, __file__, "mindrl" if name.startswith("mindrl")
                                            else "trl", d, flags + ["--which", name], a.threads)
        except SystemExit:  # e.g. killed for memory: the table says so
            results[name] = None
    print(f"\nOne update (forward, backward, clip, AdamW) of {a.batch} x {a.seq_len} tokens, model L{a.layers} "
          f"H{a.hidden} GQA {a.heads}/{a.kv_heads} V{a.vocab} ({params / 1e6:.1f}M), fp32, {a.threads} threads")
    print(f"{'side':22} {'update peak GB':>15} {'process peak GB':>16} {'median step s':>14}   first loss")
    med = {n: sorted(r["times"])[len(r["times"]) // 2] for n, r in results.items() if r}
    for name, r in results.items():
        if r is None:
            print(f"{name:22} {'failed (out of memory?)':>15}")
            continue
        print(f"{name:22} {r['update_peak_gb']:15.2f} {r['peak_gb']:16.2f} {med[name]:14.2f}   "
              f"{r['losses'][0]:.6f}")
    if results.get("mindrl") and results.get("mindrl+recompute"):
        same = results["mindrl"]["losses"] == results["mindrl+recompute"]["losses"]
        print(f"mindrl's losses with and without recompute identical: {same}")
    for ours, peer in (("mindrl", "torch"), ("mindrl+recompute", "torch+checkpointing"), ("mindrl+lora", "torch+peft")):
        if ours in med and peer in med:
            print(f"ratio {ours}/{peer} update speed: {med[peer] / med[ours]:.2f}x")
    for ours, full in (("mindrl+lora", "mindrl"), ("torch+peft", "torch")):
        if results.get(ours) and results.get(full):
            print(f"{ours}: process peak {results[ours]['peak_gb'] / results[full]['peak_gb']:.2f}x of {full}'s, "
                  f"update peak {results[ours]['update_peak_gb'] / max(results[full]['update_peak_gb'], 1e-9):.2f}x, "
                  f"step {med[full] / med[ours]:.2f}x as fast")


if __name__ == "__main__":
    main()
