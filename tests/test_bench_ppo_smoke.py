"""The PPO benchmark runs end to end at tiny sizes, both sides (the test extras pin trl==1.12.0, the newest TRL
with a PPO trainer), and prints its comparison lines."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench", "bench_ppo.py")


@pytest.mark.slow
def test_bench_ppo_quick():
    pytest.importorskip("trl")
    env = dict(os.environ, GLOG_v="3")
    proc = subprocess.run([sys.executable, BENCH, "--quick"], capture_output=True, text=True, timeout=900, cwd=REPO,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for side in ("mindrl", "trl"):
        row = [line for line in lines if line.startswith(f"{side} ") and "split" not in line]
        assert len(row) == 1 and float(row[0].split()[2]) > 0, proc.stdout
    assert any(line.startswith("mindrl split") and "update_critic" in line and "reward_model" in line
               for line in lines), proc.stdout
    assert any(line.startswith("trl split") and "'trl': '1.12.0'" in line for line in lines), proc.stdout
    ratio = [line for line in lines if line.startswith("ratio mindrl/trl e2e_tps:")]
    assert len(ratio) == 1 and float(ratio[0].rsplit(":", 1)[1].rstrip("x")) > 0, proc.stdout


def test_a_trl_without_ppo_is_named_before_anything_runs(tmp_path):
    """--trl-python pointing at an interpreter whose TRL lacks PPO: one clear message, nothing run."""
    fake = tmp_path / "trl"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '9.9.9'\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, BENCH, "--check-trl"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=env)
    assert proc.returncode != 0 and "TRL's PPO trainer is not available" in proc.stderr, proc.stderr
    assert "trl 9.9.9" in proc.stderr and "trl==1.12.0" in proc.stderr, proc.stderr
