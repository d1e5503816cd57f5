#!/usr/bin/env python
"""Make the tiny policy shipped in examples/tiny/policy/: a 0.5M-parameter Qwen2-architecture model,
supervised warm-up on the demo task (examples/tiny/task.py), loss on the answer tokens only.

    python scripts/make_tiny_model.py                    # ~2500 steps, writes examples/tiny/policy/
    python scripts/make_tiny_model.py --steps 200 --out /tmp/p   # a quick, weaker one

It prints held-out greedy accuracy at the end. The warm-up stops early on purpose (about 35-40%
accuracy), so GRPO has something to improve: see README "What the demo shows".
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
sys.path.insert(0, ROOT)

import task  # noqa: E402

TINY = dict(model_type="qwen2", vocab_size=192, hidden_size=128, intermediate_size=512, num_layers=2, num_heads=4,
            n_kv_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            qkv_bias=True, eos_token_id=2, pad_token_id=0)


def encode_batch(tok, pids, length):
    ids = np.zeros((len(pids), length), np.int32)
    attn = np.zeros_like(ids)
    loss = np.zeros_like(ids)
    for i, pid in enumerate(pids):
        prompt, answer = task.problem(pid)
        p = tok.encode(prompt)
        a = tok.encode(answer) + [tok.eos_token_id]
        seq = (p + a)[:length]
        ids[i, :len(seq)] = seq
        attn[i, :len(seq)] = 1
        loss[i, len(p):len(seq)] = 1
    return ids, attn, loss


def heldout_accuracy(model, tok, limit=None):
    from mindrl.rollout import generate
    ids = task.heldout_ids()[:limit]
    prompts = [tok.encode(task.problem(pid)[0]) for pid in ids]
    outs = generate(model, prompts, max_new_tokens=6, eos_token_id=tok.eos_token_id, max_batch=250)
    right = sum(tok.decode(o, skip_special_tokens=True).strip() == task.problem(pid)[1] for o, pid in zip(outs, ids))
    return right / len(ids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "examples", "tiny", "policy"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "examples", "tiny", "tokenizer"))
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=TINY["num_layers"], help="decoder layers (the policy has 2)")
    args = ap.parse_args(argv)

    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import PretrainedLM, build_network
    from mindrl.runtime import setup_context
    from mindrl.trainer.optim import lr_at
    from mindrl.trainer.sft import SFTStep, run_sft_step

    setup_context("graph")
    tok = load_tokenizer(args.tokenizer)
    cfg = ModelConfig(**dict(TINY, num_layers=args.layers), source="scripts/make_tiny_model.py").validate()
    net = build_network(cfg, seed=args.seed)
    step_cell = SFTStep(net, lr_weight_decay=0.01)
    pids = task.training_ids(args.steps * args.batch, seed=1000 + args.seed)
    t0 = time.time()
    for step in range(args.steps):
        ids, attn, loss_mask = encode_batch(tok, pids[step * args.batch:(step + 1) * args.batch], 16)
        lr = lr_at(step, lr=args.lr, min_lr=args.lr * 0.1, warmup=args.warmup, total=args.steps, style="cosine")
        loss = run_sft_step(step_cell, ids, attn, loss_mask, lr)
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss:.4f} lr {lr:.2e} ({time.time() - t0:.0f}s)", flush=True)
    net.set_train(False)
    model = PretrainedLM(net, cfg)
    acc = heldout_accuracy(model, tok)
    print(f"held-out greedy accuracy: {acc:.3f} after {args.steps} steps ({time.time() - t0:.0f}s)")
    model.save_pretrained(args.out, tokenizer_dir=args.tokenizer)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
