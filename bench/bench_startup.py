#!/usr/bin/env python
"""Start-up time with MindSpore's compile cache: first launch (cold cache) against second launch (warm).

Each launch is a fresh `mindrl train` process on the shipped demo (1 step, no eval), with
`runtime.enable_compile_cache=true` and a cache directory private to this benchmark. The time to the end
of start-up is read from the process's own log line "start-up took", so data and reward time is excluded; the
peak is the step's ``memory/peak_rss_gb`` from the launch's metrics.jsonl (the process's peak resident memory in GiB,
compiling included).

    python bench/bench_startup.py            # needs dataset/tiny_math/*.mindrecord (bash scripts/run_demo.sh makes them)
    python bench/bench_startup.py --config examples/real/ppo.yaml --no-other   # the real model (run.sh --prepare)

``--config`` takes another training config, and ``key=value`` arguments after the options are added to each launch.
``--no-other`` skips the third launch (another batch size, which must make a new cache key).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


DEMO = "examples/grpo/tiny_math.yaml"


def launch(cache_dir, extra=(), config=DEMO):
    cmd = [sys.executable, "-m", "mindrl.cli", "train", "--config", config,
           "rl_config.train_iters=1", "actor_config.lr_warmup_iters=0", "actor_config.save=null",
           "actor_config.save_interval=0", "eval.path=null", "logging.progress_bar=false",
           f"logging.log_dir={cache_dir}/logs/<run_id>", "runtime.enable_compile_cache=true",
           f"runtime.compile_cache_path={cache_dir}/cache", *extra]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    wall = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    m = re.search(r"start-up took ([0-9.]+) s", res.stdout + res.stderr)
    step = re.search(r"timing/all=([0-9.]+)", res.stdout + res.stderr)
    return float(m.group(1)), float(step.group(1)) if step else float("nan"), wall, peak_gb(cache_dir)


def peak_gb(cache_dir):
    """The newest launch's ``memory/peak_rss_gb`` from its metrics.jsonl (its first and only step's)."""
    logs = glob.glob(os.path.join(cache_dir, "logs", "*", "metrics.jsonl"))
    if not logs:
        return float("nan")
    with open(max(logs, key=os.path.getmtime)) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return next((r["memory/peak_rss_gb"] for r in reversed(rows) if "memory/peak_rss_gb" in r), float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=DEMO, help=f"training config (default {DEMO}, the demo)")
    ap.add_argument("--no-other", action="store_true", help="skip the launch with another batch size")
    ap.add_argument("overrides", nargs="*", help="key=value added to every launch")
    args = ap.parse_args()
    if args.config == DEMO and not os.path.exists(os.path.join(ROOT, "dataset", "tiny_math", "prompts.mindrecord")):
        raise SystemExit("run `bash scripts/run_demo.sh rl_config.train_iters=1` once to create the demo data")
    d = tempfile.mkdtemp(prefix="bench_startup_")
    runs = []
    try:
        runs.append(("cold cache", launch(d, args.overrides, args.config)))
        runs.append(("warm cache (same config)", launch(d, args.overrides, args.config)))
        if not args.no_other:  # another shape: must not reuse the cache
            runs.append(("other shapes (new key)",
                         launch(d, [*args.overrides, "rl_config.global_batch_size=32"], args.config)))
        entries = sorted(os.listdir(os.path.join(d, "cache")))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{args.config}{' ' + ' '.join(args.overrides) if args.overrides else ''}")
    print(f"{'launch':28} {'start-up (s)':>12} {'first step (s)':>15} {'process (s)':>12} {'peak RSS (GiB)':>15}")
    for name, (s, step, wall, peak) in runs:
        print(f"{name:28} {s:12.2f} {step:15.2f} {wall:12.2f} {peak:15.2f}")
    print(f"cache keys created: {len(entries)} (expected {len(runs) - 1}: one per config/shape)")
    cold, warm = runs[0][1], runs[1][1]
    print(f"ratio warm/cold start-up: {warm[0] / cold[0]:.2f}  (saving {cold[0] - warm[0]:.1f} s)")


if __name__ == "__main__":
    main()
