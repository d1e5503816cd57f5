#!/usr/bin/env python
"""What compiling an update graph costs: seconds, and resident memory the process keeps afterwards.

Builds a LLaMA decoder with the real-model example's depth and attention layout (SmolLM2-135M: 30 layers, GQA)
but a narrow width (--width), so that weights, gradients and activations are a few MB and what grows is the
compiler's. Compiles the GRPO update's graph (AccumulateGrad over ActorLossCell, prompts shared by --group samples;
--group 0 for one row per response) --graphs times, each for a fresh network, and prints per compile its seconds
and the resident memory (VmRSS) after it, after glibc's malloc_trim, and the first one's front end alone
(MS_DEV_PRECOMPILE_ONLY=1 in a child process). Nothing runs: only compiles. With --phases, one more child process
compiles the graph under MindSpore's compile profile (compile_config.COMPILE_PROFILE) and the script prints where
that compile's seconds went: type inference, the front end's optimization passes (automatic differentiation,
inlining, the type inference they repeat), the back end (kernels, memory), and the passes that took longest.

    python bench/profile_compile.py                 # 30 layers, 2 compiles: about 1.5 minutes on 2 cores
    python bench/profile_compile.py --phases        # and where a compile's seconds go (one more compile)
    python bench/profile_compile.py --graphs 1 --set SINGLE_EVAL=1   # under a MindSpore compile switch
    python bench/profile_compile.py --layers 15     # any depth
    python bench/profile_compile.py --width 256     # the kept memory hardly depends on the width

Writes nothing.
"""
import argparse
import ctypes
import gc
import os
import subprocess
import sys
import time

os.environ.setdefault("GLOG_v", "3")


def rss_gb() -> float:
    from mindrl.trainer.metrics import memory_metrics
    return memory_metrics()["memory/rss_gb"]


def trim() -> None:
    """Give glibc's free heap pages back to the system (what it holds but does not use)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def build(a, seed):
    from mindrl.algorithms.losses import ActorLoss
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import build_network
    from mindrl.trainer.actor_graphs import ActorLossCell
    from mindrl.trainer.inputs import grouped_dummy_inputs
    from mindrl.trainer.updater import AccumulateGrad
    cfg = ModelConfig(model_type="llama", vocab_size=512, hidden_size=a.width, intermediate_size=2 * a.width,
                      num_layers=a.layers, num_heads=9, n_kv_heads=3, head_dim=8,
                      max_position_embeddings=256, tie_word_embeddings=True, eos_token_id=2, pad_token_id=2).validate()
    net = build_network(cfg, seed=seed)
    acc = AccumulateGrad(ActorLossCell(net, ActorLoss(), 1.0, False, a.group), net.trainable_params())
    return acc, grouped_dummy_inputs(acc.inputs, 1, a.group, a.prompt, a.response) if a.group else None


def compile_once(acc, arrays, a):
    t0 = time.perf_counter()
    if arrays is None:
        acc.compile_for(8, a.prompt + a.response, a.response)
    else:
        acc.compile_for(0, 0, 0, arrays)
    return time.perf_counter() - t0


def phases(text: str) -> str:
    """MindSpore's compile profile (printed by a compile with COMPILE_PROFILE=1) summed up in one line: the top-level
    actions by seconds, then the four longest passes within them."""
    import re
    top = [(m.group(1), float(m.group(2))) for m in re.finditer(r"^\[([\w-]+)\]: ([0-9.e-]+)", text, re.M)]
    total = re.search(r"^TotalTime = ([0-9.e-]+)", text, re.M)
    if not top or not total:
        return "no compile profile found in the child's output"
    passes = [(m.group(1), float(m.group(2)))
              for m in re.finditer(r"^    ([\w-]+\.[\w.-]+)\s*:\s*([0-9.]+)s :", text, re.M)]
    big = sorted(top, key=lambda kv: -kv[1])
    shown = [f"{name} {secs:.1f} s" for name, secs in big[:3]]
    rest = float(total.group(1)) - sum(secs for _, secs in big[:3])
    longest = ", ".join(f"{name} {secs:.1f} s" for name, secs in sorted(passes, key=lambda kv: -kv[1])[:4])
    return (f"one compile under MindSpore's compile profile, {float(total.group(1)):.1f} s: " + ", ".join(shown) +
            f", the rest {rest:.1f} s; the longest passes: {longest}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--width", type=int, default=72, help="hidden size (9 query heads and 3 key/value heads of 8)")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt sharing it; 0: one row per response")
    ap.add_argument("--prompt", type=int, default=48)
    ap.add_argument("--response", type=int, default=24)
    ap.add_argument("--graphs", type=int, default=2)
    ap.add_argument("--phases", action="store_true", help="also print where one compile's seconds go (MindSpore's "
                    "compile profile, in a child process)")
    ap.add_argument("--front-end-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a MindSpore compile switch (mindspore.graph._parse.compile_config), for every compile; "
                         "repeatable")
    ap.add_argument("--profiled", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    switches = dict(kv.split("=", 1) for kv in a.set)
    if a.profiled:  # MindSpore prints its compile profile on stdout when the compile ends
        switches["COMPILE_PROFILE"] = "1"
    if switches:
        import mindspore.graph._parse.compile_config as compile_config
        unknown = sorted(k for k in switches if k not in compile_config.__all__)
        if unknown:
            raise SystemExit(f"profile_compile: not a MindSpore compile switch: {', '.join(unknown)} (see "
                             f"{compile_config.__file__})")
        for name, value in switches.items():
            setattr(compile_config, name, value)
    from mindrl.runtime import setup_context
    setup_context("graph")
    before = rss_gb()
    if a.profiled:
        acc, arrays = build(a, 0)
        compile_once(acc, arrays, a)
        return
    if a.front_end_only:
        acc, arrays = build(a, 0)
        compile_once(acc, arrays, a)
        trim()
        print(f"FRONT {rss_gb() - before:.3f}", flush=True)
        return
    print(f"update graph of a {a.layers}-layer LLaMA {a.width} wide (group {a.group}"
          f"{''.join(f', {kv}' for kv in a.set)}); resident before: {before:.2f} GiB", flush=True)
    kept = []
    for i in range(a.graphs):
        acc, arrays = build(a, i)
        secs = compile_once(acc, arrays, a)
        grown = rss_gb()
        trim()
        kept.append(acc)
        print(f"compile {i + 1}: {secs:.1f} s; resident {grown:.2f} GiB, after malloc_trim {rss_gb():.2f} GiB",
              flush=True)
    shape = ["--layers", str(a.layers), "--width", str(a.width), "--group", str(a.group), "--prompt", str(a.prompt),
             "--response", str(a.response)] + [f"--set={kv}" for kv in a.set]
    child = subprocess.run([sys.executable, __file__, "--front-end-only"] + shape, capture_output=True, text=True,
                           env=dict(os.environ, MS_DEV_PRECOMPILE_ONLY="1"))
    front = [ln for ln in child.stdout.splitlines() if ln.startswith("FRONT ")]
    if front:
        print(f"the first compile's front end alone (MS_DEV_PRECOMPILE_ONLY=1) kept {float(front[0].split()[1]):.2f} GiB "
              "after malloc_trim")
    else:
        print("the front-end-only compile failed:", child.stderr[-500:])
    if a.phases:
        child = subprocess.run([sys.executable, __file__, "--profiled"] + shape, capture_output=True, text=True)
        print(phases(child.stdout + child.stderr) if child.returncode == 0 else
              f"the profiled compile failed: {child.stderr[-500:]}")


if __name__ == "__main__":
    main()
