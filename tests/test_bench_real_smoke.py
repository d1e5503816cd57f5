"""The real-model benchmark runs end to end at tiny sizes (--quick: a tiny random LLaMA with SmolLM2's chat template),
GRPO and PPO, mindrl and TRL each in its own process, and prints its comparison lines."""
import ast
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_bench_real_quick():
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_real.py"), "--quick", "--recompute"],
                          capture_output=True, text=True, timeout=1200, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for algo in ("GRPO", "PPO"):
        table = out[out.index(f"\n{algo} on "):]
        for side in ("mindrl", "mindrl_recompute", "trl"):
            row = re.search(rf"^{side} +([\d.]+)s +([\d.]+)s +([\d.]+)s +([\d.]+) +([\d.]+)GB", table, re.M)
            assert row, out
            startup, first, median, tps, peak = map(float, row.groups())
            assert first > 0 and median > 0 and tps > 0 and 0.1 < peak < 24, row.group(0)
        ratio = re.search(rf"^ratio mindrl/trl {algo.lower()} e2e_tps: ([\d.]+)x; peak RSS mindrl/trl: ([\d.]+)x",
                          table, re.M)
        assert ratio and float(ratio.group(1)) > 0, out
        assert re.search(rf"^ratio mindrl_recompute/trl {algo.lower()} e2e_tps: [\d.]+x", table, re.M), out
        # --recompute: every layer of the trained networks (the quick model's 2), and none on the plain side
        trained = "policy 2 of 2 layers" + (", critic 2 of 2 layers" if algo == "PPO" else "")
        assert re.search(rf"^mindrl_recompute recomputes in the backward: {trained}$", table, re.M), out
        assert not re.search(r"^mindrl recomputes", table, re.M), out
        compiles = re.search(r"^mindrl graph compiles by step \(count, seconds\): \{'1': \[(\d+), ([\d.]+)\]", table,
                             re.M)
        assert compiles and int(compiles.group(1)) > 0, out  # the first step compiles the graphs, and is counted
        by_graph = re.search(r"^mindrl step 1 compiles by graph \(seconds\): (\{.*\})$", table, re.M)
        assert by_graph, out
        by_graph = ast.literal_eval(by_graph.group(1))
        assert "AccumulateGrad" in by_graph, by_graph  # the update's graph is among them, and they add up
        assert abs(sum(by_graph.values()) - float(compiles.group(2))) <= 0.1 * len(by_graph), (by_graph, compiles[0])
    assert "update_critic" in out and "reward_model" in out  # PPO's split names its stages



@pytest.mark.slow
def test_bench_real_profile_quick():
    """--profile: mindrl's side alone, its steady steps under MindSpore's profiler; the kernel time by graph part and
    by operator type comes from the profiler's own tables (the parts' shares add up to all of it), and the costliest
    scopes count every decoder layer as one."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_real.py"), "--quick", "--only", "grpo",
                           "--profile"], capture_output=True, text=True, timeout=900, cwd=REPO,
                          env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert not re.search(r"^trl ", out, re.M) and "ratio mindrl/trl" not in out, out  # TRL is not run
    block = out[out.index("mindrl under MindSpore's profiler, 1 steady steps (the profiler slows them"):]
    total = float(re.search(r"^kernel time: ([\d.]+) s per step in \d+ kernel launches", block, re.M).group(1))
    assert total > 0, block
    parts = re.findall(r"^  (forward and decode|backward|optimizer) +([\d.]+) s +([\d.]+)%$", block, re.M)
    assert {p[0] for p in parts} >= {"forward and decode", "backward"}, block
    assert abs(sum(float(p[2]) for p in parts) - 100) < 0.5, parts
    assert abs(sum(float(p[1]) for p in parts) - total) <= 0.002 * len(parts), (parts, total)
    assert re.search(r"^  MatMul +[\d.]+ +[\d.]+%", block, re.M), block
    scopes = re.findall(r"^ +[\d.]+ s +[\d.]+% +\d+ calls  (\S+)$", block, re.M)
    assert any(re.search(r"-(LayerBlock|PrefillBlock|DecodeBlock)/", x) for x in scopes), scopes  # every layer's
    assert any(x.startswith("Gradients/") for x in scopes), scopes
    assert not any(re.search(r"/\d+-DecoderLayer/|-op\d+", x) for x in scopes), scopes

@pytest.mark.slow
def test_bench_longtail_quick():
    """bench_longtail.py's mindrl sides at tiny sizes: the table, the rollout work of each side, and partial
    rollout's rounds and stale tokens."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_longtail.py"), "--quick", "--no-trl",
                           "--sides", "mindrl,mindrl_pool,mindrl_partial"],
                          capture_output=True, text=True, timeout=1200, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for side in ("mindrl", "mindrl_pool", "mindrl_partial"):
        row = re.search(rf"^{side} +([\d.]+)s +([\d.]+)s +([\d.]+) +(\d+)% +(\d+)% +([\d.]+)GB", out, re.M)
        assert row, out
        assert float(row.group(3)) > 0, row.group(0)
        work = re.search(rf"^{side} +rollout work, median per steady step: prefill_tokens (\d+), decode_steps (\d+)",
                         out, re.M)
        assert work and int(work.group(2)) > 0, out
    assert re.search(r"^mindrl_partial +rollout work.*rounds \d+", out, re.M), out
    assert re.search(r"^e2e_tps against mindrl: mindrl_pool [\d.]+x, mindrl_partial [\d.]+x", out, re.M), out


@pytest.mark.slow
def test_memory_phases_quick():
    """memory_phases.py prints resident memory around each graph's compile and first run; the peak it ends with is
    the largest it printed, and the update's graph is among the graphs it saw compile and run."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "memory_phases.py"), "--quick"],
                          capture_output=True, text=True, timeout=900, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    lines = re.findall(r"^(\s*(?:compile|run) \w+(?: #\d+)?) +rss +([\d.]+) -> +([\d.]+) +peak +([\d.]+) -> +([\d.]+)$",
                       out, re.M)
    names = [name.strip() for name, *_ in lines]
    assert "compile AccumulateGrad" in names and "run AccumulateGrad #1" in names, out
    assert "run ApplyGrad #1" in names, out
    for _, rss0, rss1, peak0, peak1 in lines:
        assert float(peak1) >= float(peak0) >= float(rss0) - 0.01 and float(peak1) >= float(rss1) - 0.01, out
    end = re.search(r"^end: rss ([\d.]+), peak ([\d.]+) GiB", out, re.M)
    assert end, out
    assert float(end.group(2)) >= max(float(line[4]) for line in lines) - 0.01, out
