"""The SFT and DPO benchmarks run end to end at tiny sizes (--quick: a tiny random LLaMA with SmolLM2's chat
template, 3 steps), mindrl and TRL (SFTTrainer, DPOTrainer) each in its own process, on the same tokens, and print
their table and ratio line with finite positive numbers and first-step figures that agree."""
import math
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# per benchmark: its table's first word, what a row is, and the first-step figure both sides print
CASES = {"sft": ("SFT", "rows", "loss"), "dpo": ("DPO", "pairs", "logps/chosen")}


@pytest.mark.slow
@pytest.mark.parametrize("bench", sorted(CASES))
def test_bench_quick(bench):
    pytest.importorskip("trl")
    title, unit, figure = CASES[bench]
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", f"bench_{bench}.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    table = out[out.index(f"\n{title} on "):]
    assert re.search(rf"^tokens: identical on both sides \((\d+)/\1 {unit} the same\)$", table, re.M), out
    first = {}
    for side in ("mindrl", "trl"):
        row = re.search(rf"^{side} +([\d.]+)s +([\d.]+)s +([\d.]+)s +([\d.]+) +([\d.]+)GB +(-?[\d.]+) ", table, re.M)
        assert row, out
        startup, step1, median, tps, peak, value = map(float, row.groups())
        assert all(math.isfinite(x) for x in (step1, median, tps, peak, value)), row.group(0)  # step 1: to 0.1 s
        assert step1 >= 0 and median > 0 and tps > 0 and 0.1 < peak < 24 and value != 0, row.group(0)
        first[side] = value
    ratio = re.search(rf"^ratio mindrl/trl {bench} e2e_tps: ([\d.]+)x; peak RSS mindrl/trl: ([\d.]+)x; "
                      rf"first-step {re.escape(figure)} mindrl (-?[\d.]+), trl (-?[\d.]+)", table, re.M)
    assert ratio, out
    assert all(math.isfinite(float(x)) and float(x) != 0 for x in ratio.groups()), ratio.group(0)
    # the same model, rows and loss: the first step's figures agree (float32, different kernels)
    assert abs(first["mindrl"] - first["trl"]) < 1e-3 * abs(first["trl"]), first
    assert re.search(r"^mindrl graph compiles by step \(count, seconds\): \{'1': \[\d+, ", table, re.M), out
