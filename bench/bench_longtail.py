#!/usr/bin/env python
"""Long-tail rollouts on a real model: continuous batching and partial rollout against TRL, one run.

The model is bench_real.py's (SmolLM2-135M-Instruct, `bash examples/real/run.sh --prepare`). The prompts mix three
kinds whose answers differ by two orders of magnitude in length, in the model's chat template: "What is 47 + 38?
Answer with the number only." (a few tokens), "Count from 1 to 23, separated by commas." (tens of tokens) and
"Write a short story about a fox who finds a key." (runs to --new-tokens). GRPO as in bench_real.py (8 samples per
prompt, one update per step, the last_number rule reward, stop at end of turn), --prompts prompts per step. Sides:

* ``mindrl``: every response of the step decodes at once (the default pool: the whole batch);
* ``mindrl_pool``: a pool of --pool decode slots (generate_config.max_num_seqs), refilled as responses end
  (continuous batching);
* ``mindrl_partial``: partial rollout (rl_config.partial_rollout_max_split --split, so a round gives a response at
  most --new-tokens / --split tokens) with TIS (rl_config.tis_cap 2), every response of a round in the pool (or
  --partial-pool slots);
* ``before`` (with --before REV): mindrl's code at git revision REV (taken with `git archive` into the scratch
  directory), with the --pool setting under the key that revision knew (generate_config.micro_batch_size): before
  continuous batching, a pool smaller than the batch decoded fixed chunks, each waiting for its longest response;
* ``trl``: TRL's GRPOTrainer (HF generate; bench_real.py's settings).

    python bench/bench_longtail.py                      # 4 sides x 5 steps (the first 2 warm-up)
    python bench/bench_longtail.py --sides mindrl,mindrl_partial --no-trl   # some sides only
    python bench/bench_longtail.py --before 1a2b3c4     # and mindrl's generator as it was at that commit
    python bench/bench_longtail.py --quick              # a tiny random LLaMA: a smoke run (~3 min)

Prints each side's step times, e2e_tps (real prompt + response tokens trained per second), the rollout's share of the
step and the stale share of the trained tokens, then the ratios against ``mindrl`` and ``trl``.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

import common
import bench_real

ROOT = common.ROOT
ANIMALS = ["fox", "owl", "cat", "bear", "crow", "frog", "wolf", "mouse"]
THINGS = ["finds a key", "loses its way", "learns to swim", "meets a robot", "builds a boat", "climbs a mountain"]


def long_tail_rows(count: int, seed: int) -> list:
    """(prompt, label) rows: a third each of additions, counting and stories (label -1: no number is right)."""
    r = random.Random(seed)
    rows = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            a, b = r.randint(10, 99), r.randint(10, 99)
            rows.append({"prompt": f"What is {a} + {b}? Answer with the number only.", "labels": str(a + b)})
        elif kind == 1:
            n = r.randint(5, 40)
            rows.append({"prompt": f"Count from 1 to {n}, separated by commas.", "labels": str(n)})
        else:
            rows.append({"prompt": f"Write a short story about a {r.choice(ANIMALS)} who {r.choice(THINGS)}.",
                         "labels": "-1"})
    r.shuffle(rows)
    return rows


def make_prompts(d, model_dir, a):
    from mindrl.data.preprocess import cli_main
    with open(os.path.join(d, "prompts.jsonl"), "w") as fh:
        for row in long_tail_rows(256, seed=7):
            fh.write(json.dumps(row) + "\n")
    rc = cli_main(["--config", os.path.join(ROOT, "examples", "real", "data.yaml"), f"input={d}/prompts.jsonl",
                   f"output_prefix={d}/prompts", f"tokenizer_name_or_path={model_dir}", "--overwrite",
                   f"max_prompt_length={a.max_prompt}"])
    assert rc == 0


def side_settings(side, a) -> dict:
    if side == "mindrl":
        return {}
    if side == "before":
        return {"generate_config.micro_batch_size": a.pool}
    if side == "mindrl_pool":
        return {"generate_config.max_num_seqs": a.pool}
    out = {"rl_config.partial_rollout_max_split": a.split, "rl_config.tis_cap": 2.0}
    if a.partial_pool:
        out["generate_config.max_num_seqs"] = a.partial_pool
    return out


def export_revision(rev: str, d: str) -> str:
    """mindrl's package at ``rev``, unpacked under ``d`` (git archive: the repository itself is not touched)."""
    out = os.path.join(d, f"mindrl_{rev}")
    os.makedirs(out, exist_ok=True)
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev, "mindrl"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=tar, check=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=bench_real.MODEL, help="the HF directory of the model")
    ap.add_argument("--steps", type=int, default=5, help="steps per side; the first 2 are warm-up")
    ap.add_argument("--new-tokens", type=int, default=192, help="at most this many new tokens per response")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step (x 8 samples)")
    ap.add_argument("--pool", type=int, default=16, help="decode slots of the pool sides")
    ap.add_argument("--split", type=int, default=4, help="partial rollout's rounds (partial_rollout_max_split)")
    ap.add_argument("--partial-pool", type=int, default=0, help="decode slots of the partial-rollout side (0: the "
                    "whole batch, so rows parked between rounds keep their cache)")
    ap.add_argument("--sides", help="comma-separated sides to run (default: mindrl, mindrl_pool, mindrl_partial, "
                    "before with --before, trl unless --no-trl)")
    ap.add_argument("--micro-batch", type=int, default=8, help="responses per forward/backward, both sides")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-prompt", type=int, default=64)
    ap.add_argument("--pad-to-multiple-of", type=int, default=8)
    ap.add_argument("--before", help="also run mindrl's code at this git revision (side `before`)")
    ap.add_argument("--no-trl", action="store_true", help="mindrl's sides only")
    ap.add_argument("--quick", action="store_true", help="a tiny random LLaMA, 3 steps of 24 tokens: a smoke run")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--code", help=argparse.SUPPRESS)
    a = ap.parse_args()
    # bench_real's side functions read these
    a.grpo_prompts, a.ppo_prompts, a.lora = a.prompts, a.prompts, 0
    if a.side:
        if a.code:  # the `before` side: that revision's mindrl package first on the path
            sys.path.insert(0, a.code)
        if a.side == "trl":
            res = bench_real.run_trl_grpo(a.dir, a, a.model)
        else:
            res = bench_real.run_mindrl(a.dir, a, "grpo", a.model, extra=side_settings(a.side, a))
            import mindrl
            res["code"] = os.path.dirname(os.path.dirname(mindrl.__file__))
        print("RESULT " + json.dumps(res), flush=True)
        return
    if a.quick:
        a.steps, a.new_tokens, a.prompts, a.pool, a.micro_batch, a.max_prompt = 3, 24, 2, 8, 4, 128
        a.grpo_prompts = a.ppo_prompts = a.prompts
    d = common.scratch_dir("bench_longtail_")
    if a.quick:
        a.model = bench_real.make_quick_model(d)
    elif not os.path.exists(os.path.join(a.model, "config.json")):
        raise SystemExit(f"{a.model}: no model there; run `bash examples/real/run.sh --prepare` first, or pass --model")
    make_prompts(d, a.model, a)
    args = ["--model", a.model]
    for k in ("steps", "new_tokens", "prompts", "pool", "split", "partial_pool", "micro_batch", "threads",
              "max_prompt", "pad_to_multiple_of"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    sides = ["mindrl", "mindrl_pool", "mindrl_partial"] + (["before"] if a.before else []) + \
        ([] if a.no_trl else ["trl"])
    if a.sides:
        sides = a.sides.split(",")
        unknown = set(sides) - {"mindrl", "mindrl_pool", "mindrl_partial", "before", "trl"}
        if unknown or ("before" in sides and not a.before):
            raise SystemExit(f"bench_longtail: --sides {a.sides}: unknown {sorted(unknown)}, or `before` without "
                             f"--before REV")
    results = {}
    for side in sides:
        extra = ["--code", export_revision(a.before, d)] if side == "before" else []
        results[side] = common.run_side(sys.executable, __file__, side, d, args + extra, a.threads)
    report(results, a)


def report(results, a):
    print(f"\nGRPO, long-tail prompts, {a.prompts} prompts x {bench_real.SAMPLES} samples, up to {a.new_tokens} new "
          f"tokens (stop at end of turn), pool sides {a.pool} slots, partial rollout {a.split} rounds, "
          f"{a.threads} threads")
    print(f"{'side':15} {'step 1':>7} {'median step':>12} {'e2e_tps':>8} {'rollout':>8} {'stale':>6} {'peak RSS':>9}"
          f"   steps (s) / mean, max response tokens")
    med = {}
    for side, r in results.items():
        rows = r["rows"]
        steady = common.steady(rows)
        med[side] = common.median_tps(rows)
        rollout = statistics.median(x["split"].get("rollout", 0.0) / x["time"] for x in steady) if "split" in rows[0] \
            else float("nan")
        stale = statistics.median(x.get("stale", 0.0) for x in steady)
        print(f"{side:15} {rows[0]['time']:6.1f}s {statistics.median(x['time'] for x in steady):11.2f}s "
              f"{med[side]:8.1f} {rollout:7.0%} {stale:6.0%} {r['peak_rss_gb']:7.2f}GB   "
              f"{[round(x['time'], 1) for x in rows]} / {[round(x.get('response_mean', 0), 1) for x in rows]}, "
              f"{[x.get('response_max') for x in rows]}")
    for side, r in results.items():
        work = [x.get("work") for x in common.steady(r["rows"]) if x.get("work")]
        if work:
            print(f"{side:15} rollout work, median per steady step: " + ", ".join(
                f"{k} {statistics.median(w.get(k, 0) for w in work):g}" for k in work[0]))
    for base in ("mindrl", "before", "trl"):
        if base in med:
            print(f"e2e_tps against {base}: " + ", ".join(f"{s} {med[s] / med[base]:.2f}x" for s in med if s != base))


if __name__ == "__main__":
    main()
