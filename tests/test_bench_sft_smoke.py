"""The SFT benchmark runs end to end at tiny sizes (--quick: a tiny random LLaMA with SmolLM2's chat template, 3
steps), `mindrl sft` and TRL's SFTTrainer each in its own process, on the same tokens, and prints its table and
ratio line with finite positive numbers."""
import math
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_bench_sft_quick():
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_sft.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    table = out[out.index("\nSFT on "):]
    assert re.search(r"^tokens: identical on both sides \((\d+)/\1 rows the same\)$", table, re.M), out
    losses = {}
    for side in ("mindrl", "trl"):
        row = re.search(rf"^{side} +([\d.]+)s +([\d.]+)s +([\d.]+)s +([\d.]+) +([\d.]+)GB +([\d.]+) ", table, re.M)
        assert row, out
        startup, first, median, tps, peak, loss = map(float, row.groups())
        assert all(math.isfinite(x) for x in (first, median, tps, peak, loss)), row.group(0)
        assert first > 0 and median > 0 and tps > 0 and 0.1 < peak < 24 and loss > 0, row.group(0)
        losses[side] = loss
    ratio = re.search(r"^ratio mindrl/trl sft e2e_tps: ([\d.]+)x; peak RSS mindrl/trl: ([\d.]+)x; "
                      r"first-step loss mindrl ([\d.]+), trl ([\d.]+)$", table, re.M)
    assert ratio, out
    assert all(math.isfinite(float(x)) and float(x) > 0 for x in ratio.groups()), ratio.group(0)
    # the same model, rows and loss: the first step's losses agree (float32, different kernels)
    assert abs(losses["mindrl"] - losses["trl"]) < 1e-3 * losses["trl"], losses
    assert re.search(r"^mindrl graph compiles by step \(count, seconds\): \{'1': \[\d+, ", table, re.M), out
