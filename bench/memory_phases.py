#!/usr/bin/env python
"""Where a real-model RL step's memory goes: resident memory around each graph's compile and first runs.

Runs mindrl's side of bench_real.py (SmolLM2-135M-Instruct, the same prompts, settings and overrides) in this
process for --steps steps, with MindSpore's graph compile (`_CellGraphExecutor.compile`) and every top-level Cell
call wrapped: it prints resident memory (VmRSS) and the process's peak so far (VmHWM) in GiB before start-up,
after it, and around each graph's compile and its first --runs calls (and any later call that raised the peak).
A call's line includes its compile when it compiled. Nothing is timed against a peer: this finds the phase that
sets the peak, bench_real.py measures it against TRL's.

    python bench/memory_phases.py               # GRPO, 2 steps (after `bash examples/real/run.sh --prepare`)
    python bench/memory_phases.py --only ppo    # PPO (reference, reward model, critic)
    python bench/memory_phases.py --quick       # a tiny random LLaMA: a smoke run
    python bench/memory_phases.py --recompute   # the trained networks recompute every layer (bench_real's side)
    python bench/memory_phases.py --layer-graphs   # their updates one decoder layer per graph call (the same)

Writes only to a temporary directory, removed at exit.
"""
import argparse
import os
import subprocess
import sys

import common

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_real  # noqa: E402


def memory():
    """(VmRSS, VmHWM) of this process in GiB."""
    got = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                got[key] = int(value.split()[0]) / 2**20
    return got["VmRSS"], got["VmHWM"]


def show(what, before, after):
    print(f"{what:34} rss {before[0]:5.2f} -> {after[0]:5.2f}  peak {before[1]:5.2f} -> {after[1]:5.2f}", flush=True)


def watch(runs: int) -> None:
    """Print memory around every new graph compile and the first ``runs`` calls of each top-level Cell."""
    import mindspore.nn as nn
    from mindspore.graph.api import _CellGraphExecutor
    from mindrl.runtime import compiled_anew
    compile_graph, call_cell = _CellGraphExecutor.compile, nn.Cell.__call__
    calls, depth = {}, [0]

    def compile(executor, obj, *args, **kw):
        before = memory()
        out = compile_graph(executor, obj, *args, **kw)
        if compiled_anew(out):
            show(f"  compile {type(obj).__name__}", before, memory())
        return out

    def call(cell, *args, **kw):
        if depth[0]:  # a Cell inside a graph being built or run: its graph's call reports
            return call_cell(cell, *args, **kw)
        depth[0] += 1
        try:
            name, before = type(cell).__name__, memory()
            out = call_cell(cell, *args, **kw)
            after, n = memory(), calls.get(type(cell).__name__, 0)
            calls[name] = n + 1
            if n < runs or after[1] > before[1] + 0.01:
                show(f"run {name} #{n + 1}", before, after)
            return out
        finally:
            depth[0] -= 1

    _CellGraphExecutor.compile = compile
    nn.Cell.__call__ = call


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["grpo", "ppo"], default="grpo")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="calls of each graph always printed")
    ap.add_argument("--model", default=bench_real.MODEL)
    ap.add_argument("--quick", action="store_true", help="a tiny random LLaMA and tokenizer, 1 step: a smoke run")
    ap.add_argument("--recompute", action="store_true", help="every layer of the trained networks recomputed in the "
                                                             "backward (bench_real.py's mindrl_recompute side)")
    ap.add_argument("--layer-graphs", action="store_true", help="the trained networks' updates one decoder layer per "
                                                                "graph call (bench_real.py's mindrl_layers side)")
    a = ap.parse_args()
    if a.recompute and a.layer_graphs:
        raise SystemExit("memory_phases: --recompute or --layer-graphs, not both (mindrl refuses the two together)")
    # bench_real.py's defaults: the same prompts, widths and batch
    a.new_tokens, a.grpo_prompts, a.ppo_prompts, a.micro_batch, a.threads = 24, 8, 16, 8, 2
    a.max_prompt, a.pad_to_multiple_of, a.lora = 64, 8, 0
    d = common.scratch_dir("memory_phases_")
    if a.quick:
        a.model, a.steps, a.new_tokens, a.grpo_prompts, a.ppo_prompts, a.micro_batch = \
            bench_real.make_quick_model(d), 1, 8, 2, 4, 4
        a.max_prompt = 128
    elif not os.path.exists(os.path.join(a.model, "config.json")):
        raise SystemExit(f"{a.model}: no model there; run `bash examples/real/run.sh --prepare` first, or pass --model")
    bench_real.make_prompts(d, a.model, a)
    if a.only == "ppo":  # in a child process: building it imports PyTorch, whose memory is not mindrl's
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); import bench_real; "
                        f"bench_real.make_rm({d!r}, {a.model!r})"], check=True)
    import mindspore  # noqa: F401  (MindSpore's own share is then in the first line)
    how = ", recomputing every layer" if a.recompute else ", updates one layer per graph call" if a.layer_graphs else ""
    print(f"{a.only} on {os.path.basename(a.model)}, {a.steps} steps{how}; GiB", flush=True)
    show("before start-up (MindSpore imported)", memory(), memory())
    watch(a.runs)
    res = bench_real.run_mindrl(d, a, a.only, a.model, extra=bench_real.side_overrides(
        "mindrl_recompute" if a.recompute else "mindrl_layers" if a.layer_graphs else "mindrl", a.only))
    final = memory()
    print(f"end: rss {final[0]:.2f}, peak {final[1]:.2f} GiB; steps (s) {[round(r['time'], 1) for r in res['rows']]}")


if __name__ == "__main__":
    main()
