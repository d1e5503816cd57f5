"""The rollout benchmark runs end to end (tiny sizes) and prints its comparison lines."""
import os
import subprocess
import sys

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
