"""The real-model benchmark runs end to end at tiny sizes (--quick: a tiny random LLaMA with SmolLM2's chat template),
GRPO and PPO, mindrl and TRL each in its own process, and prints its comparison lines."""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_bench_real_quick():
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_real.py"), "--quick"],
                          capture_output=True, text=True, timeout=1200, cwd=REPO, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for algo in ("GRPO", "PPO"):
        table = out[out.index(f"\n{algo} on "):]
        for side in ("mindrl", "trl"):
            row = re.search(rf"^{side} +([\d.]+)s +([\d.]+)s +([\d.]+)s +([\d.]+) +([\d.]+)GB", table, re.M)
            assert row, out
            startup, first, median, tps, peak = map(float, row.groups())
            assert first > 0 and median > 0 and tps > 0 and 0.1 < peak < 24, row.group(0)
        ratio = re.search(rf"^ratio mindrl/trl {algo.lower()} e2e_tps: ([\d.]+)x; peak RSS mindrl/trl: ([\d.]+)x",
                          table, re.M)
        assert ratio and float(ratio.group(1)) > 0, out
        compiles = re.search(r"^mindrl graph compiles by step \(count, seconds\): \{'1': \[(\d+), ", table, re.M)
        assert compiles and int(compiles.group(1)) > 0, out  # the first step compiles the graphs, and is counted
    assert "update_critic" in out and "reward_model" in out  # PPO's split names its stages
