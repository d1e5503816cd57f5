#!/usr/bin/env python
"""How a GRPO step's cost grows with the model and with the response length, on this machine.

Runs bench_grpo.py's two sides (mindrl, and TRL's GRPOTrainer where it is asked for) on random-init Qwen2 models of
the shipped shapes, 2 prompts x 8 samples of 64 prompt tokens per step, every completion running to the limit:

- models, 128 response tokens: the 31M bench model (model_configs/bench_qwen2_30m.yaml), a 124M one (12 layers,
  hidden 768, GQA 12/4, vocab 32000), and Qwen2.5-0.5B's exact shape (model_configs/qwen2_5_0_5b.yaml: 24 layers,
  hidden 896, GQA 14/2, vocab 151936, tied head; 494M);
- response length at 31M: 128, 512 and 2048 tokens.

For each case it prints seconds per step split by stage (rollout, old log-probs, update, the rest), e2e_tps
(MindSpeed-RL's formula), peak resident memory, the step floor of bench/common.py step_floor (decode reading the
weights once per token, the update's 6 x parameters x tokens FLOPs, at the sgemm and memory speeds measured in the
same process) and, with --trl, TRL's step time and the ratio. Then how each stage grows: the exponent b of
time ~ size^b between neighbouring cases.

    python bench/bench_scale.py                 # mindrl only, about 15 minutes
    python bench/bench_scale.py --trl           # and TRL at the three model sizes (128 tokens), about 45 minutes
    python bench/bench_scale.py --quick         # two tiny cases: a smoke run
"""
import argparse
import json
import math
import os
import sys

import common

HERE = os.path.dirname(os.path.abspath(__file__))
GRPO = os.path.join(HERE, "bench_grpo.py")

# name -> bench_grpo.py model flags (the 0.5B case also ties its head, as Qwen2.5-0.5B does)
MODELS = {
    "31M": ["--layers", "8", "--hidden", "512", "--heads", "8", "--kv-heads", "2", "--ffn", "1408", "--vocab", "8192"],
    "124M": ["--layers", "12", "--hidden", "768", "--heads", "12", "--kv-heads", "4", "--ffn", "2048",
             "--vocab", "32000"],
    "494M": ["--layers", "24", "--hidden", "896", "--heads", "14", "--kv-heads", "2", "--ffn", "4864",
             "--vocab", "151936", "--tied"],
    "tiny": ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "512"],
}
# (model, response tokens, micro-batch): the micro-batch keeps the update's activations in memory
CASES = [("31M", 128, 16), ("124M", 128, 8), ("494M", 128, 4), ("31M", 512, 8), ("31M", 2048, 2)]
QUICK = [("tiny", 16, 16), ("tiny", 32, 8)]


def run_case(model, new_tokens, micro, a, trl):
    d = common.scratch_dir(f"bench_scale_{model}_{new_tokens}_")
    flags = MODELS[model] + ["--new-tokens", str(new_tokens), "--prompt-len", str(prompt_len(model)),
                             "--micro-batch", str(micro), "--steps", str(a.steps), "--threads", str(a.threads)]
    params = sum(p.numel() for p in __import__("bench_grpo").make_assets(d, common.parse_model_args(flags)).parameters())
    out = {"model": model, "params": params, "new_tokens": new_tokens, "micro": micro}
    out["mindrl"] = common.run_side(sys.executable, GRPO, "mindrl", d, flags, a.threads)
    if trl:
        try:  # TRL may not fit at the biggest size: report that instead of losing the cases already run
            out["trl"] = common.run_side(sys.executable, GRPO, "trl", d, flags, a.threads)
        except SystemExit as e:
            out["trl_failed"] = str(e)
    return out


def prompt_len(model):
    return 16 if model == "tiny" else 64


def steady(values):
    tail = values[2:] if len(values) > 2 else values[-1:]
    return sorted(tail)[len(tail) // 2]


def report(results):
    print(f"\n{'case':20} {'params':>8} {'step s':>8} {'rollout':>8} {'old_lp':>7} {'update':>7} {'other':>6} "
          f"{'e2e_tps':>8} {'peak GB':>8} {'floor s':>8} {'of floor':>8} {'TRL s':>7} {'x TRL':>6} {'TRL GB':>7}")
    rows = []
    for r in results:
        m = r["mindrl"]
        i = len(m["times"]) - 1 if len(m["times"]) <= 2 else max(range(2, len(m["times"])),
                                                                 key=lambda k: -abs(m["times"][k] - steady(m["times"])))
        step, split = steady(m["times"]), m["split"][i]
        tokens = 16 * (prompt_len(r["model"]) + r["new_tokens"])
        floor = common.step_floor(r["params"], 16, prompt_len(r["model"]), r["new_tokens"], m["limits"])["step_s"]
        other = step - split["timing/rollout"] - split["timing/old_log_p"] - split["timing/update"]
        trl = steady(r["trl"]["times"]) if "trl" in r else None
        name = f"{r['model']}, {r['new_tokens']} tok"
        print(f"{name:20} {r['params'] / 1e6:7.0f}M {step:8.2f} {split['timing/rollout']:8.2f} "
              f"{split['timing/old_log_p']:7.2f} {split['timing/update']:7.2f} {other:6.2f} {tokens / step:8.1f} "
              f"{m['peak_rss_gb']:8.2f} {floor:8.2f} {100 * floor / step:7.0f}% "
              + (f"{trl:7.2f} {trl / step:5.2f}x {r['trl']['peak_rss_gb']:7.2f}" if trl
                 else f"{'failed' if 'trl_failed' in r else '-':>7} {'-':>6} {'-':>7}"))
        rows.append((r, step, split))
    print("\ngrowth exponent b in time ~ x^b between cases that differ in one thing (x: parameters, or response "
          "tokens):")
    by_size = sorted((x for x in rows if x[0]["new_tokens"] == rows[0][0]["new_tokens"]), key=lambda x: x[0]["params"])
    by_len = sorted((x for x in rows if x[0]["model"] == rows[0][0]["model"]), key=lambda x: x[0]["new_tokens"])
    for series, what, key in ((by_size, "parameters", "params"), (by_len, "response tokens", "new_tokens")):
        for (a, sa, pa), (b, sb, pb) in zip(series, series[1:]):
            x = b[key] / a[key]
            parts = {"step": (sa, sb), "rollout": (pa["timing/rollout"], pb["timing/rollout"]),
                     "update": (pa["timing/update"], pb["timing/update"])}
            print(f"  {a['model']}/{a['new_tokens']} -> {b['model']}/{b['new_tokens']} ({what} x{x:.1f}): "
                  + ", ".join(f"{k} b={math.log(max(v[1], 1e-9) / max(v[0], 1e-9)) / math.log(x):.2f}"
                              for k, v in parts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trl", action="store_true", help="also run TRL at the three model sizes (128 tokens)")
    ap.add_argument("--steps", type=int, default=4, help="steps per case; the first 2 are warm-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="comma-separated case names, e.g. 494M/128")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    cases = QUICK if a.quick else CASES
    if a.only:
        wanted = set(a.only.split(","))
        cases = [c for c in cases if f"{c[0]}/{c[1]}" in wanted]
    results = []
    for model, new_tokens, micro in cases:
        print(f"running {model}, {new_tokens} response tokens ...", flush=True)
        results.append(run_case(model, new_tokens, micro, a, a.trl and new_tokens == cases[0][1]))
    report(results)
    print("\nRESULTS " + json.dumps(results))


if __name__ == "__main__":
    main()
