"""Two nodes on one machine: each "node" is a network namespace with its own address on a veth pair, and
runs its own msrun (--node_rank 0/1, 2 workers each). Same-host msruns on one address both start a scheduler
and the second fails to bind, so the namespaces are what makes this a faithful two-node launch.
Needs root and iproute2; skipped otherwise."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "parallel_worker.py")
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
SUBNET = "10.213.7"  # the test's own hosts, inside namespaces this test creates and deletes


def _ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = str(os.getpid())
    a, b = f"mrA{tag}", f"mrB{tag}"
    va, vb = f"vA{tag}"[:15], f"vB{tag}"[:15]
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a)
        _ip("link", "set", vb, "netns", b)
        for ns, dev, host in ((a, va, 1), (b, vb, 2)):
            _ip("addr", "add", f"{SUBNET}.{host}/24", "dev", dev, ns=ns)
            _ip("link", "set", dev, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
    except subprocess.CalledProcessError as err:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {err.stderr.decode().strip()}")
    yield a, b
    for ns in (a, b):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


@pytest.mark.slow
@pytest.mark.msrun
def test_two_node_grpo_step(two_hosts, tmp_path, tmp_path_factory):
    from conftest import make_grpo_workdir
    d = make_grpo_workdir(tmp_path_factory.mktemp("twonode"))
    (d / "digits.py").write_text("from mindrl.rewards import register_reward\n\n@register_reward('chars')\n"
                                 "def chars(response, label):\n    return sum(ord(c) % 7 for c in response) / 40.0\n")
    from conftest import as_overrides, tiny_run_settings
    over = as_overrides(tiny_run_settings(d, d / "logs", **{
        "rl_config.micro_batch_size": 4, "rl_config.verifier_function": "[chars]", "rl_config.verifier_weight": "[1.0]",
        "generate_config.infer_tensor_parallel_size": 2, "actor_config.tensor_model_parallel_size": 1}))
    env = dict(os.environ, GLOG_v="3", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    msrun = os.path.join(os.path.dirname(sys.executable), "msrun")
    procs = []
    for node, ns in enumerate(two_hosts):
        cmd = ["ip", "netns", "exec", ns, msrun, "--worker_num=4", "--local_worker_num=2",
               f"--master_addr={SUBNET}.1", "--master_port=8129", f"--node_rank={node}",
               f"--log_dir={tmp_path / f'node{node}'}", "--join=True", "--cluster_time_out=120",
               WORKER, "grpo", str(tmp_path / "metrics.json"), CONFIG, *over]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        logs = ""
        for node in (0, 1):
            for f in sorted((tmp_path / f"node{node}").glob("worker_*.log")):
                logs += f"--- {f}\n" + f.read_text()[-2000:]
        pytest.fail(f"msrun exit codes {codes}\n{logs}")
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["actor/grad_norm"] > 0 and m["actor/pg_loss"] == m["actor/pg_loss"]
    # MindSpeed-RL's e2e_tps divides by world size: 4 ranks over the two nodes
    # of the batch's longest prompt and response (log_max_throughput, MindSpeed-RL's default)
    tokens = (m["response_length/max"] + m["prompt_length/max"]) * 4 * 4 / 4
    assert m["e2e_tps"] == pytest.approx(tokens / m["timing/all"], rel=1e-6)
