"""scripts/msrun_launch.sh: a failing rank is named and the whole job is stopped within seconds."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "msrun_launch.sh")

FAILING = textwrap.dedent("""
    import numpy as np
    import mindspore as ms
    from mindspore.communication import init, get_rank
    init()
    if get_rank() == 1:
        raise ValueError("boom on purpose")
    out = ms.ops.AllReduce()(ms.Tensor(np.ones(4, np.float32)))  # rank 0 waits here for rank 1
    print("rank 0 was not stopped", out, flush=True)
""")

ALLREDUCE = textwrap.dedent("""
    import sys
    import numpy as np
    import mindspore as ms
    from mindspore.communication import init, get_rank
    init()
    out = ms.ops.AllReduce()(ms.Tensor(np.full(3, get_rank() + 1, np.float32)))
    print("rank", get_rank(), "sum", out.asnumpy().tolist(), "args", sys.argv[1:], flush=True)
""")


SLEEPER = textwrap.dedent("""
    import time
    from mindspore.communication import init, get_rank
    init()
    print("ready", get_rank(), flush=True)
    time.sleep(120)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_with_tag(tag):
    """pids of live processes whose environment carries our tag (the job's workers and scheduler)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if tag.encode() not in fh.read():
                    continue
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(pid))
    return found


def launch(tmp_path, script_text, *args, timeout=60, watch=None, signal_when_seen=None):
    """Run the launcher on a script.

    Returns (rc, stdout, stderr, elapsed, seconds from `watch` = (log name, text) appearing to the
    launcher's exit, log dir). With ``signal_when_seen`` the launcher gets that signal once `watch` is seen.
    """
    script = tmp_path / "job.py"
    script.write_text(script_text)
    log_dir = tmp_path / "logs"
    tag = f"MINDRL_LAUNCH_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, MASTER_PORT=str(free_port()), LOG_DIR=str(log_dir), WORKERS_PER_NODE="2", NNODES="1",
               NODE_RANK="0", QUIET="1", GLOG_v="3", MINDRL_LAUNCH_TEST=tag.split("=", 1)[1])
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    start = time.monotonic()
    proc = subprocess.Popen(["bash", LAUNCHER, str(script), *args], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen_at = None
    try:
        while proc.poll() is None:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"launcher still running after {timeout} s")
            if watch and seen_at is None:
                log = log_dir / watch[0]
                if log.exists() and watch[1] in log.read_text(errors="replace"):
                    seen_at = time.monotonic()
                    if signal_when_seen:
                        os.kill(proc.pid, signal_when_seen)
            time.sleep(0.1)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # the launcher's trap stops its job
            proc.wait(15)
    elapsed = time.monotonic() - start
    left = processes_with_tag(tag.split("=", 1)[1])
    for pid in left:  # the test must not leak workers even when it fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the job survived the launcher: {left}"
    after_seen = None if seen_at is None else time.monotonic() - seen_at
    return proc.returncode, out, err, elapsed, after_seen, log_dir


@pytest.mark.msrun
def test_failing_rank_is_reported_and_job_stopped(tmp_path):
    rc, out, err, elapsed, after_seen, log_dir = launch(
        tmp_path, FAILING, watch=("worker_1.log", "Traceback (most recent call last)"))
    print(err)
    print(f"launcher exited after {elapsed:.1f} s, {after_seen} s after the traceback appeared")
    assert rc == 1
    assert "rank 1 failed" in err
    assert "boom on purpose" in err
    # (whether rank 0's AllReduce returns before it is killed depends on load: a CPU AllReduce can return
    # once its peer died. What matters is checked above and in launch(): exit 1, the rank named, no process
    # of the job left behind.)
    # plain msrun needs ~39 s; startup (imports + cluster) is most of what is left
    assert elapsed < 30, f"launcher took {elapsed:.1f} s"
    assert after_seen is not None and after_seen < 8, f"{after_seen} s from the traceback to the launcher's exit"


@pytest.mark.msrun
def test_successful_allreduce_exits_zero(tmp_path):
    rc, out, err, elapsed, _, log_dir = launch(tmp_path, ALLREDUCE, "--flag", "x y")
    assert rc == 0, err
    assert "job finished" in err and str(log_dir) in err
    for rank in (0, 1):
        text = (log_dir / f"worker_{rank}.log").read_text()
        assert f"rank {rank} sum [3.0, 3.0, 3.0] args ['--flag', 'x y']" in text


@pytest.mark.msrun
def test_sigterm_stops_every_process(tmp_path):
    rc, out, err, elapsed, after_seen, _ = launch(tmp_path, SLEEPER, watch=("worker_1.log", "ready 1"),
                                                  signal_when_seen=signal.SIGTERM)
    assert rc == 130, err
    assert "interrupted" in err
    assert after_seen is not None and after_seen < 8, f"{after_seen} s from SIGTERM to the launcher's exit"


def test_bad_environment_is_refused_before_msrun(tmp_path):
    env = dict(os.environ, NNODES="2", NODE_RANK="2", LOG_DIR=str(tmp_path / "logs"))
    res = subprocess.run(["bash", LAUNCHER, "job.py"], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "NODE_RANK=2 must be < NNODES=2" in res.stderr
    res = subprocess.run(["bash", LAUNCHER], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "SCRIPT [ARGS...]" in res.stdout  # no script: usage


def test_run_grpo_passes_config_and_overrides(tmp_path):
    """run_grpo.sh hands `python -m mindrl.cli train --config ... overrides` to the launcher (stubbed msrun)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "msrun").write_text("#!/bin/sh\necho \"$@\" > \"$ARGS_OUT\"\n")
    (fake_bin / "msrun").chmod(0o755)
    (tmp_path / "cfg.yaml").write_text("{}\n")
    repo_copy = tmp_path / "repo"  # a copy of the scripts without a .venv, so PATH keeps the fake msrun
    (repo_copy / "scripts").mkdir(parents=True)
    for name in ("run_grpo.sh", "msrun_launch.sh"):
        (repo_copy / "scripts" / name).write_text(open(os.path.join(ROOT, "scripts", name)).read())
    env = dict(os.environ, PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}", CONFIG="cfg.yaml",
               ARGS_OUT=str(tmp_path / "args.txt"), LOG_DIR=str(tmp_path / "logs"), NNODES="2", NODE_RANK="1",
               WORKERS_PER_NODE="3", MASTER_ADDR="node0.invalid", MASTER_PORT="9001", QUIET="1")
    env.pop("VIRTUAL_ENV", None)
    res = subprocess.run(["bash", str(repo_copy / "scripts" / "run_grpo.sh"), "rl_config.train_iters=3"], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "args.txt").read_text().split()
    assert args == ["--worker_num=6", "--local_worker_num=3", "--master_addr=node0.invalid", "--master_port=9001",
                    "--node_rank=1", f"--log_dir={tmp_path / 'logs'}", "--join=True", "python", "-m", "mindrl.cli",
                    "train", "--config", "cfg.yaml", "rl_config.train_iters=3"]
