#!/usr/bin/env python
"""Start-up time with MindSpore's compile cache: first launch (cold cache) against second launch (warm).

Each launch is a fresh `mindrl train` process on the shipped demo (1 step, no eval), with
`runtime.enable_compile_cache=true` and a cache directory private to this benchmark. The time to the end
of start-up is read from the process's own log line "start-up took", so data and reward time is excluded.

    python bench/bench_startup.py            # needs dataset/tiny_math/*.mindrecord (bash scripts/run_demo.sh makes them)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(cache_dir, extra=()):
    cmd = [sys.executable, "-m", "mindrl.cli", "train", "--config", "examples/grpo/tiny_math.yaml",
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
    return float(m.group(1)), float(step.group(1)) if step else float("nan"), wall


def main():
    if not os.path.exists(os.path.join(ROOT, "dataset", "tiny_math", "prompts.mindrecord")):
        raise SystemExit("run `bash scripts/run_demo.sh rl_config.train_iters=1` once to create the demo data")
    d = tempfile.mkdtemp(prefix="bench_startup_")
    try:
        cold = launch(d)
        warm = launch(d)
        other = launch(d, ["rl_config.global_batch_size=32"])  # another shape: must not reuse the cache
        entries = sorted(os.listdir(os.path.join(d, "cache")))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{'launch':28} {'start-up (s)':>12} {'first step (s)':>15} {'process (s)':>12}")
    for name, (s, step, wall) in (("cold cache", cold), ("warm cache (same config)", warm),
                                  ("other shapes (new key)", other)):
        print(f"{name:28} {s:12.2f} {step:15.2f} {wall:12.2f}")
    print(f"cache keys created: {len(entries)} (expected 2: one per config/shape)")
    print(f"ratio warm/cold start-up: {warm[0] / cold[0]:.2f}  (saving {cold[0] - warm[0]:.1f} s)")


if __name__ == "__main__":
    main()
