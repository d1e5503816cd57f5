#!/usr/bin/env python
"""Where a GRPO step's time goes: bench_grpo.py's mindrl side under MindSpore's profiler.

Builds bench_grpo.py's model and prompts (same flags: --layers, --hidden, --new-tokens, --beta, ...), runs
--warmup steps unprofiled (the first compiles), then profiles --steps steps and prints:

- the stage split mindrl logs itself (timing/rollout, timing/update, ...), averaged over the profiled steps;
- kernel time by operator type (MindSpore's cpu_op_type_info), with each type's share of all kernel time;
- kernel time by graph part: forward, backward (``Gradients/`` in the kernel's full name) and optimizer;
- the costliest kernels by scope (every decoder layer's counted together).

    python bench/profile_grpo.py                      # the bench model, 2 profiled steps, about 2 minutes
    python bench/profile_grpo.py --new-tokens 512     # any bench_grpo.py model flag
    python bench/profile_grpo.py --quick              # tiny smoke run

The profiler's own files go to a temporary directory (printed; --keep leaves it there). Kernel time is less than
the step's wall time: Python, graph launches and host-side work between kernels are not in it.
"""
import argparse
import collections
import csv
import glob
import os
import re
import sys
import tempfile

import common

HERE = os.path.dirname(os.path.abspath(__file__))


def part_of(full_name: str) -> str:
    """forward / backward / optimizer, from a kernel's full scope name."""
    if "Gradients/" in full_name:
        return "backward"
    if "optimizer" in full_name.lower() or "adam" in full_name.lower():
        return "optimizer"
    return "forward and decode"


def read_profile(out_dir, top: int = 15) -> dict:
    """The profiler's CPU operator tables under ``out_dir`` (its FRAMEWORK directory), read once:
    ``types``: the rows of cpu_op_type_info; ``parts``: {graph part: ms} (:func:`part_of`); ``scopes``:
    [(scope, ms, calls)] of the ``top`` costliest kernels by scope, every layer's counted as one (the layers
    compute in one block per path, ``block-LayerBlock``, ``prefill_block-PrefillBlock``, ``decode_block-DecodeBlock``;
    a numbered ``layers-CellList/<i>-DecoderLayer`` scope, as before them, is read as ``N-DecoderLayer``) and
    MindSpore's op numbers dropped: which product or pass the time is in.
    Plain lists and dicts, so that a side run in its own process can hand them back as JSON."""
    type_csv = glob.glob(os.path.join(out_dir, "**", "cpu_op_type_info_*.csv"), recursive=True)
    detail_csv = glob.glob(os.path.join(out_dir, "**", "cpu_op_detail_info_*.csv"), recursive=True)
    if not type_csv or not detail_csv:
        raise SystemExit(f"the profiler wrote no CPU operator tables under {out_dir}")
    with open(type_csv[0]) as fh:
        types = list(csv.DictReader(fh))
    parts, by_scope, calls = collections.Counter(), collections.Counter(), collections.Counter()
    with open(detail_csv[0]) as fh:
        for row in csv.DictReader(fh):
            ms = float(row["op_total_time(ms)"])
            parts[part_of(row["full_op_name"])] += ms
            scope = re.sub(r"/\d+-DecoderLayer", "/N-DecoderLayer", re.sub(r"-op\d+", "", row["full_op_name"]))
            by_scope[scope] += ms
            calls[scope] += int(row["op_occurrences"])
    return {"types": types, "parts": dict(parts),
            "scopes": [(k, v, calls[k]) for k, v in by_scope.most_common(top)]}


def print_profile(profile: dict, profiled: int, top: int = 15) -> None:
    """Kernel time per step of :func:`read_profile`'s tables over ``profiled`` steps: in all, by graph part, by
    operator type (the ``top`` types) and by scope, each with its share of all kernel time."""
    types = profile["types"]
    total = sum(float(r["total_compute_time"]) for r in types)
    calls = sum(int(r["type_occurrences"]) for r in types)
    print(f"kernel time: {total / 1000 / profiled:.3f} s per step in {calls / profiled:.0f} kernel launches; "
          f"by graph part:")
    for k, v in sorted(profile["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:28} {v / 1000 / profiled:8.3f} s  {100 * v / total:5.1f}%")
    print(f"by operator type (top {top}):")
    print(f"  {'type':28} {'s/step':>8} {'share':>6} {'calls/step':>10} {'avg ms':>8}")
    for r in sorted(types, key=lambda r: -float(r["total_compute_time"]))[:top]:
        t = float(r["total_compute_time"])
        print(f"  {r['op_type']:28} {t / 1000 / profiled:8.3f} {100 * t / total:5.1f}% "
              f"{int(r['type_occurrences']) / profiled:10.0f} {float(r['avg_time(ms)']):8.3f}")
    print(f"by scope (top {len(profile['scopes'])}; every decoder layer as N):")
    for scope, t, n in profile["scopes"]:
        print(f"  {t / 1000 / profiled:8.3f} s {100 * t / total:5.1f}% {n / profiled:7.0f} calls  {scope}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model_args(ap)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient: > 0 adds a reference model")
    ap.add_argument("--warmup", type=int, default=2, help="unprofiled steps first (the first one compiles)")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--top", type=int, default=15, help="operator types to list")
    ap.add_argument("--keep", action="store_true", help="keep the profiler's output directory")
    a = ap.parse_args()
    common.apply_quick(a, steps=a.steps)
    sys.path.insert(0, HERE)
    import bench_grpo
    # removed at exit (even when the run fails) unless --keep
    d = tempfile.mkdtemp(prefix="profile_grpo_") if a.keep else common.scratch_dir("profile_grpo_")
    params = sum(p.numel() for p in bench_grpo.make_assets(d, a).parameters())
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))

    import mindspore as ms
    a.steps, profiled = a.warmup + a.steps, a.steps
    trainer = bench_grpo.mindrl_trainer(d, a)
    for _ in range(a.warmup):
        trainer.train_step()
    prof_dir = os.path.join(d, "profile")
    profiler = ms.Profiler(output_path=prof_dir)
    stages = collections.Counter()
    for _ in range(profiled):
        m = trainer.train_step()
        for k, v in m.items():
            if k.startswith("timing/"):
                stages[k] += v / profiled
    profiler.analyse()
    profile = read_profile(prof_dir, a.top)

    print(f"\nGRPO step, {params / 1e6:.1f}M parameters, 2 prompts x 8 samples, {a.prompt_len}+{a.new_tokens} "
          f"tokens, beta {a.beta}, {a.threads} threads; {profiled} profiled steps")
    print("stages (s per step, mindrl's own timing):")
    for k, v in sorted(stages.items(), key=lambda kv: -kv[1]):
        if v >= 0.005:
            print(f"  {k:28} {v:8.3f}")
    print_profile(profile, profiled, a.top)
    if a.keep:
        print(f"profiler output kept in {prof_dir}")


if __name__ == "__main__":
    main()
