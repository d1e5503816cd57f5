"""The rollout benchmark runs end to end (tiny sizes) and prints its comparison lines."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_bench_generate_quick():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_generate.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ratios = [line for line in proc.stdout.splitlines() if line.startswith("ratio mindrl/transformers [")]
    assert len(ratios) == 4, proc.stdout
    for workload in ("greedy", "eos ids", "sample n=8", "log-probs"):
        assert any(workload in line for line in ratios), (workload, ratios)
    for line in ratios:
        assert float(line.rsplit(":", 1)[1]) > 0
    assert "rows identical" in proc.stdout  # greedy outputs are checked against transformers


@pytest.mark.slow
def test_profile_grpo_quick():
    """The profiling script runs bench_grpo's mindrl side under MindSpore's profiler and prints kernel time by graph
    part and by operator type; the shares are read from the profiler's own tables, so they add up to the total."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "profile_grpo.py"), "--quick", "--top", "100"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    total = float(next(x for x in lines if x.startswith("kernel time:")).split()[2])
    start = lines.index(next(x for x in lines if x.startswith("by operator type")))
    end = lines.index(next(x for x in lines if x.startswith("by scope")))  # then the costliest kernels by scope
    rows = [x.split() for x in lines[start + 2:end] if x.startswith("  ")]
    assert any(re.search(r"-(LayerBlock|PrefillBlock|DecodeBlock)/", x) for x in lines[end + 1:]), lines[end:]
    types = {r[0]: float(r[1]) for r in rows}
    # a decoder's time is its matmuls: MatMul (the projections) and BatchMatMul (attention, rotary); which of the two
    # leads depends on the model's size and on what else the machine runs, so their sum is compared with the rest
    matmuls = types.get("MatMul", 0.0) + types.get("BatchMatMul", 0.0)
    assert types.get("MatMul", 0.0) > 0 and matmuls > max(v for k, v in types.items() if "MatMul" not in k)
    assert abs(sum(types.values()) - total) <= 0.002 * len(types) + 1e-3
    parts = {x.split()[0]: float(x.split()[-3]) for x in lines if x.startswith("  ") and x.strip()[:4] in
             ("forw", "back", "opti")}
    assert parts["backward"] > 0 and abs(sum(parts.values()) - total) <= 0.003
    assert "timing/rollout" in proc.stdout and "timing/update" in proc.stdout


@pytest.mark.slow
def test_bench_memory_quick():
    """The memory benchmark's four sides train the same model on the same tokens: mindrl's first loss equals
    PyTorch's (an independent implementation), recompute changes no loss, and the speed ratios are printed."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_memory.py"), "--quick"],
                          capture_output=True, text=True, timeout=900, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {x.split()[0]: x.split() for x in proc.stdout.splitlines() if x.split() and x.split()[0] in
            ("mindrl", "mindrl+recompute", "torch", "torch+checkpointing")}
    assert len(rows) == 4, proc.stdout
    losses = {k: float(v[-1]) for k, v in rows.items()}
    assert abs(losses["mindrl"] - losses["torch"]) < 1e-4 * abs(losses["torch"])
    assert "losses with and without recompute identical: True" in proc.stdout
    assert sum(x.startswith("ratio ") for x in proc.stdout.splitlines()) == 2


@pytest.mark.slow
def test_compile_layer_sharing_quick():
    """The layer-sharing experiment builds the same two-layer model three ways; the script itself exits non-zero
    when the ways' losses or gradients differ, and prints one row per way."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "compile_layer_sharing.py"), "--layers", "2",
                           "--calls", "2"], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rows = {x.split()[0]: x.split()[1:] for x in proc.stdout.splitlines()
            if x.split() and x.split()[0] in ("per_layer_cells", "shared_cell", "layer_graphs")
            and x.split()[1] != "against"}
    assert len(rows) == 3, proc.stdout
    for way, cols in rows.items():
        assert float(cols[0].rstrip("s")) > 0 and float(cols[1].rstrip("s")) > 0, (way, cols)
    assert proc.stdout.count(": the same") == 2, proc.stdout


@pytest.mark.slow
def test_profile_compile_phases():
    """--phases reads MindSpore's own compile profile: the top-level actions named and timed, the longest passes;
    --set applies a compile switch MindSpore has and refuses a name it does not."""
    script = os.path.join(REPO, "bench", "profile_compile.py")
    proc = subprocess.run([sys.executable, script, "--layers", "2", "--graphs", "1", "--phases", "--set",
                           "ENABLE_FIX_CODE_LINE=0"], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(group 8, ENABLE_FIX_CODE_LINE=0)" in proc.stdout.splitlines()[0], proc.stdout
    line = next((x for x in proc.stdout.splitlines() if x.startswith("one compile under MindSpore's compile profile")),
                None)
    assert line, proc.stdout
    total = float(re.search(r"profile, ([\d.]+) s: ", line).group(1))
    assert total > 0 and "type_inference" in line and "optimize" in line and "the longest passes: " in line, line
    bad = subprocess.run([sys.executable, script, "--set", "NO_SUCH_SWITCH=1"], capture_output=True, text=True,
                         timeout=600, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert bad.returncode != 0 and "not a MindSpore compile switch: NO_SUCH_SWITCH" in bad.stderr, bad.stderr[-2000:]


def test_matmul_rates_quick():
    """matmul_rates.py: each layer shape in both directions, its forward and its backward's two products, timed on
    both sides; the ratio printed is MindSpore's rate over PyTorch's, and the summary is their geometric mean."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "matmul_rates.py"), "--quick"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^(\d+) x (\d+) +(forward x@W|backward dx=dy@W\^T|backward dW=x\^T@dy) +([\d.]+) +([\d.]+) "
                      r"+([\d.]+)x$", proc.stdout, re.M)
    assert sorted({(r[0], r[1]) for r in rows}) == [("128", "64"), ("64", "128")], proc.stdout
    assert len(rows) == 6, proc.stdout
    # each figure is printed to 2 decimals, so a slow rate (0.28 GFLOP/s on a busy machine) bounds its ratio only
    # to an interval: the printed ratio and the summary must lie in the intervals the printed rates allow
    lows, highs = [], []
    for *_, ms_rate, pt_rate, ratio in rows:
        ms, pt, r = float(ms_rate), float(pt_rate), float(ratio)
        assert ms > 0 and pt > 0
        low = max((ms - 0.005) / (pt + 0.005), r - 0.005)
        high = min((ms + 0.005) / (pt - 0.005) if pt > 0.005 else np.inf, r + 0.005)
        assert low <= high, (rows, ms, pt, r)  # the printed ratio is MindSpore's rate over PyTorch's
        lows.append(low)
        highs.append(high)
    summary = re.search(r"^ratio mindspore/pytorch: geometric mean ([\d.]+)x, lowest ([\d.]+)x, highest ([\d.]+)x$",
                        proc.stdout, re.M)
    assert summary, proc.stdout
    geo, lowest, highest = (float(g) for g in summary.groups())
    geo_low, geo_high = (float(np.exp(np.mean(np.log(np.maximum(b, 1e-9))))) for b in (lows, highs))
    assert geo_low - 0.005 <= geo <= geo_high + 0.005, (summary.group(0), geo_low, geo_high)
    assert min(lows) - 0.005 <= lowest <= min(highs) + 0.005 and max(lows) - 0.005 <= highest <= max(highs) + 0.005
    assert float(summary.group(2)) <= float(summary.group(1)) <= float(summary.group(3))
