"""What runs before the run's topology exists (preflight, the compile cache's key) reads the launcher's place from
parallel.topology, and without loading MindSpore."""
import os
import subprocess
import sys

import pytest

from mindrl.parallel.topology import Topology, launch_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_VARS = ("MS_WORKER_NUM", "RANK_SIZE", "RANK_ID", "MS_ROLE")


@pytest.mark.parametrize("env, want", [
    ({}, Topology(0, 1)),                                                       # one process
    ({"MS_WORKER_NUM": "4", "RANK_ID": "2", "MS_ROLE": "MS_WORKER"}, Topology(2, 4)),  # an msrun worker
    ({"MS_WORKER_NUM": "4", "RANK_ID": "0", "MS_ROLE": "MS_SCHED"}, Topology(0, 4, scheduler=True)),
    ({"RANK_SIZE": "8", "RANK_ID": "5"}, Topology(5, 8)),                      # a rank-table launch
])
def test_launch_topology_reads_the_launchers_place(monkeypatch, env, want):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launch_topology() == want


def test_preflights_place_needs_no_mindspore():
    code = ("import sys; from mindrl.parallel.topology import launch_topology; import mindrl.trainer.preflight; "
            "launch_topology(); print('mindspore' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
