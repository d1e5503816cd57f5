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


def wait_until_gone(tag, timeout):
    """Seconds until no process of the job is left, or (when some outlive ``timeout``) kill them and fail."""
    start = time.monotonic()
    while True:
        left = processes_with_tag(tag)
        if not left:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            details = describe(left)  # before the kill: a killed process's command line reads empty
            for pid in left:  # the test must not leak workers even when it fails
                os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"processes of the job survived for {timeout} s: {details}")
        time.sleep(0.1)


def describe(pids):
    """'pid (state, parent, kernel wait channel): command line' of each process, for failure messages."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/wchan") as fh:
                wchan = fh.read().strip()
        except OSError:
            out.append(f"{pid}: gone")
            continue
        out.append(f"{pid} ({fields[0]}, ppid {fields[1]}, {wchan or '-'}): {cmdline}")
    return out


def cmdline_of(pid) -> bytes:
    """A process's command line, or b"" when it has ended meanwhile (the launcher's subshells live for a moment)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def children(pid):
    """pids whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                pass
    return found


# Prefix of every command a test starts: SIGINT, SIGQUIT, SIGHUP and SIGTERM at their defaults, whatever the test
# runner inherited. A shell cannot trap a signal ignored at its start: pytest run as a script's '&' job ignores
# SIGINT, under nohup SIGHUP, and the launcher would then (rightly) not act on them. (coreutils' env, not a
# preexec_fn: this process has threads once mindspore is imported, and a fork then runs no Python safely.)
DEFAULT_SIGNALS = ["env", "--default-signal=INT,QUIT,HUP,TERM"]


def job_env(tmp_path, **extra):
    """Environment for one job: a free port, logs under tmp_path, and a unique tag every process inherits."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, MASTER_PORT=str(free_port()), LOG_DIR=str(tmp_path / "logs"), WORKERS_PER_NODE="2",
               NNODES="1", NODE_RANK="0", QUIET="1", GLOG_v="3", MINDRL_LAUNCH_TEST=tag)
    env.update(extra)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env, tag


def launch(tmp_path, script_text, *args, timeout=60, watch=None, signal_when_seen=None, command=None,
           gone_within=0, **extra_env):
    """Run the launcher on a script (or run ``command``, e.g. a wrapper script, in a new session).

    Returns (rc, stdout, stderr, elapsed, seconds from `watch` = (log name, text) appearing to the
    launcher's exit, log dir). With ``signal_when_seen`` = signal or callable(proc) the launcher gets
    that signal (or the callable runs) once `watch` is seen. Every process of the job, the launcher's
    watchdog included, must be gone within ``gone_within`` seconds of the launcher's exit: by default
    when it exits, since a launcher that is not SIGKILLed waits for all it started.
    """
    script = tmp_path / "job.py"
    script.write_text(script_text)
    log_dir = tmp_path / "logs"
    env, tag = job_env(tmp_path, **extra_env)
    start = time.monotonic()
    proc = subprocess.Popen(DEFAULT_SIGNALS + (command or ["bash", LAUNCHER, str(script), *args]), env=env,
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen_at = None
    try:
        while proc.poll() is None:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"launcher still running after {timeout} s: "
                                   f"{describe([proc.pid] + processes_with_tag(tag))}")
            if watch and seen_at is None:
                log = log_dir / watch[0]
                if log.exists() and watch[1] in log.read_text(errors="replace"):
                    seen_at = time.monotonic()
                    if callable(signal_when_seen):
                        signal_when_seen(proc)
                    elif signal_when_seen:
                        os.kill(proc.pid, signal_when_seen)
            time.sleep(0.1)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # the launcher's trap stops its job
            proc.wait(15)
        elapsed = time.monotonic() - start
        wait_until_gone(tag, gone_within)
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


RUN_GRPO = os.path.join(ROOT, "scripts", "run_grpo.sh")


def run_grpo_on_sleeper(tmp_path):
    """run_grpo.sh runs `python -m mindrl.cli train --config CONFIG` on each worker; a `mindrl` package in the
    working directory comes first on `python -m`'s path, so the workers run SLEEPER instead of training."""
    (tmp_path / "mindrl").mkdir()
    (tmp_path / "mindrl" / "__init__.py").write_text("")
    (tmp_path / "mindrl" / "cli.py").write_text(SLEEPER)
    (tmp_path / "cfg.yaml").write_text("{}\n")
    return {"CONFIG": "cfg.yaml"}


@pytest.mark.msrun
@pytest.mark.parametrize("entry, sig, status", [
    pytest.param(entry, sig, status, id=f"{entry}-{sig.name}") for entry, sig, status in [
        ("launcher", signal.SIGTERM, 143), ("launcher", signal.SIGINT, 130), ("launcher", signal.SIGHUP, 129),
        ("run_grpo", signal.SIGTERM, 143)]])
def test_signal_stops_every_process(tmp_path, entry, sig, status):
    """SIGTERM/SIGINT/SIGHUP to the launcher, or to run_grpo.sh (which execs it), stop msrun, its scheduler
    and every worker; launch() fails if any process of the job is left."""
    env, command = {}, None
    if entry == "run_grpo":
        env, command = run_grpo_on_sleeper(tmp_path), ["bash", RUN_GRPO]
    rc, out, err, elapsed, after_seen, _ = launch(tmp_path, SLEEPER, watch=("worker_1.log", "ready 1"),
                                                  signal_when_seen=sig, command=command, **env)
    assert rc == status, err
    assert f"interrupted by {sig.name}: stopping the job" in err
    assert after_seen is not None and after_seen < 8, f"{after_seen} s from {sig.name} to the launcher's exit"


def kill_launcher_and_msrun(proc):
    """SIGKILL the launcher and msrun at the same moment: nothing of theirs can clean up, only the watchdog."""
    msrun = [pid for pid in children(proc.pid) if b"/msrun\0" in cmdline_of(pid)]
    assert len(msrun) == 1, children(proc.pid)
    os.kill(msrun[0], signal.SIGSTOP)  # else the SIGINT the launcher's death sends msrun may beat our SIGKILL
    os.kill(proc.pid, signal.SIGKILL)
    os.kill(msrun[0], signal.SIGKILL)


@pytest.mark.msrun
@pytest.mark.parametrize("victims", ["run_grpo", "launcher_and_msrun"])
def test_sigkill_of_the_launcher_leaves_no_process(tmp_path, victims):
    """SIGKILL cannot be trapped. run_grpo.sh killed alone: msrun gets SIGINT from the kernel (pdeathsig) and
    kills its workers, and the watchdog sweeps the rest; killed together with msrun: the watchdog alone."""
    env = run_grpo_on_sleeper(tmp_path)
    kill = kill_launcher_and_msrun if victims == "launcher_and_msrun" else signal.SIGKILL
    rc, out, err, elapsed, after_seen, log_dir = launch(
        tmp_path, SLEEPER, watch=("worker_1.log", "ready 1"), signal_when_seen=kill, command=["bash", RUN_GRPO],
        gone_within=6, **env)
    assert rc == -signal.SIGKILL
    if victims == "launcher_and_msrun":
        assert "its watchdog is stopping the job" in (log_dir / "msrun_node0.log").read_text()


def listening_socket(port=0):
    """A socket that holds 127.0.0.1:port (0: any free one), as another job's scheduler would."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.msrun
def test_a_port_in_use_is_refused_before_msrun(tmp_path):
    with listening_socket() as sock:
        port = sock.getsockname()[1]
        rc, out, err, elapsed, _, log_dir = launch(tmp_path, SLEEPER, timeout=20, MASTER_PORT=str(port))
    assert rc == 2, err
    assert err.strip().splitlines() == [
        f"msrun_launch: MASTER_PORT={port} is in use on 127.0.0.1 (another job or program holds it): "
        "set MASTER_PORT to a free port"]
    assert not (log_dir / "msrun_node0.log").exists()  # msrun never started


@pytest.mark.msrun
def test_a_second_job_on_the_default_port_gets_a_free_one(tmp_path):
    """MASTER_PORT unset on one machine while 8118 is taken (another job's scheduler): the job runs on a free port."""
    # The test holds 8118 itself when it can. When another test's job on the default port (the docs test starts
    # such jobs) holds it, that is the case under test too, but that job may let it go at any moment and the launcher
    # would then rightly take it: such a run shows nothing and is tried again.
    for attempt in range(20):
        try:
            holder = listening_socket(8118)
        except OSError:
            holder = None
        (tmp_path / str(attempt)).mkdir()
        try:
            rc, out, err, _, _, log_dir = launch(tmp_path / str(attempt), ALLREDUCE, timeout=90, MASTER_PORT="")
        finally:
            if holder is not None:
                holder.close()
        if holder is not None or "the default MASTER_PORT=8118 is in use" in err:
            break
    else:
        pytest.fail("20 tries and 8118 was neither free for the test to hold nor busy for the launcher")
    assert rc == 0, err
    picked = [line for line in err.splitlines() if "the default MASTER_PORT=8118 is in use" in line]
    assert len(picked) == 1, err
    port = picked[0].rsplit("using free port ", 1)[1]
    assert port.isdigit() and port != "8118"
    assert f"--master_port={port}" in err
    logs = "".join((log_dir / f"worker_{r}.log").read_text() for r in (0, 1))
    assert logs.count("sum [3.0, 3.0, 3.0]") == 2


# The scheduler runs the job's script too (up to init()): this one lets the test take the port first, as a second
# job started at the same moment would, after the launcher's check found it free.
SCHEDULER_LOSES_ITS_PORT = textwrap.dedent("""
    import os, pathlib, time
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        print("scheduler waiting", flush=True)
        while not pathlib.Path("port_taken").exists():
            time.sleep(0.05)
    from mindspore.communication import init
    init()
    time.sleep(120)
""")


@pytest.mark.msrun
def test_a_scheduler_that_cannot_bind_its_port_stops_the_job(tmp_path):
    """msrun's scheduler failing (its port taken): without the launcher's check the workers would wait for it in
    silence until the cluster timeout. Exit 1 within seconds, one line naming the port and what to do, the
    scheduler's log, and nothing left."""
    taken = []

    def take_port(_proc):
        taken.append(listening_socket(int(job_port)))
        (tmp_path / "port_taken").write_text("")

    job_port = str(free_port())
    try:
        rc, out, err, elapsed, after_seen, _ = launch(
            tmp_path, SCHEDULER_LOSES_ITS_PORT, timeout=60, watch=("scheduler.log", "scheduler waiting"),
            signal_when_seen=take_port, MASTER_PORT=job_port)
    finally:
        for sock in taken:
            sock.close()
    print(err)
    assert rc == 1, err
    lines = err.splitlines()
    first = next(i for i, line in enumerate(lines) if "msrun's scheduler exited" in line)
    assert lines[first] == (f"msrun_launch: msrun's scheduler exited: port {job_port} is in use on 127.0.0.1; set "
                            f"MASTER_PORT to a free port (log: {tmp_path / 'logs' / 'scheduler.log'}); last lines:")
    assert any("Traceback" in line for line in lines[first + 1:])  # the end of its log
    assert after_seen is not None and after_seen < 15, f"{after_seen} s from the port taken to the launcher's exit"


# A worker whose exit takes seconds after MindSpore's own exit handlers have let the scheduler go (an atexit
# handler registered before mindspore's runs after them; a busy machine tearing down a large process looks alike).
SLOW_EXIT = textwrap.dedent("""
    import atexit, time
    atexit.register(time.sleep, 8)
    import numpy as np
    import mindspore as ms
    from mindspore.communication import init, get_rank
    init()
    out = ms.ops.AllReduce()(ms.Tensor(np.full(3, get_rank() + 1, np.float32)))
    print("rank", get_rank(), "sum", out.asnumpy().tolist(), flush=True)
""")


def tag_of(proc):
    """The job's tag (MINDRL_LAUNCH_TEST) from the launcher's environment."""
    with open(f"/proc/{proc.pid}/environ") as fh:
        env = dict(item.split("=", 1) for item in fh.read().split("\0") if "=" in item)
    return env["MINDRL_LAUNCH_TEST"]


def state_of(pid):
    """A process's state letter (R, S, Z, ...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def role_of(pid):
    """A process's MS_ROLE (b"MS_SCHED", b"MS_WORKER"; msrun's `tail` log echoes carry a worker's too), or b""."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    except OSError:
        return b""
    return env.get(b"MS_ROLE", b"")


def scheduler_pid(tag):
    """The job's msrun scheduler: MS_ROLE=MS_SCHED in its environment and msrun its parent (not a child of it)."""
    for pid in processes_with_tag(tag):
        if role_of(pid) != b"MS_SCHED":
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            if b"msrun" in cmdline_of(parent):
                return pid
        except OSError:
            pass
    return None


@pytest.mark.msrun
def test_workers_that_exit_slowly_after_the_scheduler_finished_are_a_success(tmp_path):
    """The scheduler exits once every worker has finished with it; the workers may still take seconds to exit.
    That is a finished job (exit 0), not a scheduler lost under running workers (a CI run once failed so). The test
    checks it made that case: the scheduler seen exited (a zombie msrun has not reaped) while a worker still ran."""
    seen = {}

    def watch_scheduler(proc):
        tag = tag_of(proc)
        pid = seen["scheduler"] = scheduler_pid(tag)
        deadline = time.monotonic() + 60  # MindSpore's exit handlers come first, slow on a busy machine
        while pid and state_of(pid) and time.monotonic() < deadline:
            if state_of(pid) == "Z" and any(role_of(p) == b"MS_WORKER" and b"tail" not in cmdline_of(p)
                                            for p in processes_with_tag(tag)):
                seen["zombie_under_workers"] = True
                return
            time.sleep(0.05)

    rc, out, err, elapsed, _, log_dir = launch(tmp_path, SLOW_EXIT, timeout=90, watch=("worker_1.log", "rank 1 sum"),
                                               signal_when_seen=watch_scheduler)
    assert seen.get("scheduler"), "no scheduler found"
    assert seen.get("zombie_under_workers"), "the scheduler never exited before the workers: nothing was tested"
    assert rc == 0, err
    assert "job finished" in err and "scheduler exited" not in err
    for rank in (0, 1):
        assert f"rank {rank} sum [3.0, 3.0, 3.0]" in (log_dir / f"worker_{rank}.log").read_text()


@pytest.mark.msrun
def test_a_killed_scheduler_stops_the_job(tmp_path):
    """The scheduler killed while the workers run (they would wait for it until the cluster timeout): exit 1
    within seconds, the signal named, nothing left."""
    killed = []

    def kill_scheduler(proc):
        pid = scheduler_pid(tag_of(proc))
        assert pid, "no scheduler found"
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    rc, out, err, elapsed, after_seen, _ = launch(tmp_path, SLEEPER, watch=("worker_1.log", "ready 1"),
                                                  signal_when_seen=kill_scheduler)
    assert killed
    assert rc == 1, err
    assert "msrun's scheduler exited: it was killed by signal 9 while the workers still ran" in err
    assert after_seen is not None and after_seen < 15, f"{after_seen} s from the kill to the launcher's exit"


WRAPPER = 'bash "$1"\necho "wrapper: after run_grpo.sh"\n'  # a user's script that does not exec run_grpo.sh


@pytest.mark.msrun
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_wrapper_script_stops_the_job(tmp_path, sig):
    """Killing the outer script that started run_grpo.sh (by its pid only): the launcher sees its parent exit
    and stops the job."""
    env = run_grpo_on_sleeper(tmp_path)
    (tmp_path / "wrapper.sh").write_text(WRAPPER)
    rc, out, err, elapsed, after_seen, _ = launch(
        tmp_path, SLEEPER, watch=("worker_1.log", "ready 1"), signal_when_seen=sig,
        command=["bash", str(tmp_path / "wrapper.sh"), RUN_GRPO], **env)
    assert rc == -sig
    assert "the launcher's parent" in err and "exited: stopping the job" in err
    assert "wrapper: after" not in out


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return int(next(line for line in fh if line.startswith("PPid:")).split()[1])
    except (OSError, StopIteration):
        return 0


def stub_repo(tmp_path, msrun_body):
    """A copy of the launch scripts without a .venv and a fake msrun first on PATH: (env, scripts dir)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "msrun").write_text("#!/bin/sh\n" + msrun_body)
    (fake_bin / "msrun").chmod(0o755)
    repo_copy = tmp_path / "repo"  # so that the launcher does not activate the real .venv in front of the stub
    (repo_copy / "scripts").mkdir(parents=True)
    for name in ("run_grpo.sh", "msrun_launch.sh"):
        (repo_copy / "scripts" / name).write_text(open(os.path.join(ROOT, "scripts", name)).read())
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "WORKERS_PER_NODE", "NPUS_PER_NODE", "GPUS_PER_NODE")}
    env.update(PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}", LOG_DIR=str(tmp_path / "logs"), QUIET="1",
               ARGS_OUT=str(tmp_path / "args.txt"), MASTER_PORT=str(free_port()))  # the launcher checks it is free
    return env, repo_copy / "scripts"


def stub_msrun_pid(tmp_path, proc, timeout=20):
    """The pid a stub msrun started as 'echo $$ > "$ARGS_OUT"' wrote, once it has (failing if ``proc`` exits or
    ``timeout`` seconds pass first)."""
    out = tmp_path / "args.txt"
    deadline = time.monotonic() + timeout
    while not out.exists() or not out.read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None, "the stub msrun never started"
        time.sleep(0.1)
    return int(out.read_text())


@pytest.mark.parametrize("how", ["nohup", "STOP_WITH_PARENT=0"])
def test_detached_launcher_outlives_its_parent(tmp_path, how):
    """nohup (SIGHUP ignored) or STOP_WITH_PARENT=0: the job is meant to outlive the shell that started it."""
    env, scripts = stub_repo(tmp_path, 'echo $$ > "$ARGS_OUT"; exec sleep 60\n')
    tag = uuid.uuid4().hex
    env["MINDRL_LAUNCH_TEST"] = tag
    prefix = "nohup " if how == "nohup" else "STOP_WITH_PARENT=0 "
    (tmp_path / "wrapper.sh").write_text(f'{prefix}bash "{scripts}/msrun_launch.sh" job.py\n')
    proc = subprocess.Popen(DEFAULT_SIGNALS + ["bash", str(tmp_path / "wrapper.sh")], env=env, cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        msrun = stub_msrun_pid(tmp_path, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        time.sleep(2)  # several of the launcher's polls
        left = processes_with_tag(tag)
        assert msrun in left, "the detached job was stopped with its parent"
        launcher = [pid for pid in left if b"msrun_launch.sh\0job.py" in cmdline_of(pid)]
        # the launcher's own subshells (a command substitution, a poll) carry its command line for a moment; one
        # may end between the listing and this look at its parent (then it reads 0: gone, not a launcher)
        launcher = [pid for pid in launcher if parent_of(pid) and parent_of(pid) not in launcher]
        assert len(launcher) == 1
        os.kill(launcher[0], signal.SIGTERM)
        wait_until_gone(tag, 5)
    finally:
        for pid in processes_with_tag(tag):
            os.kill(pid, signal.SIGKILL)


def test_bad_environment_is_refused_before_msrun(tmp_path):
    env = dict(os.environ, NNODES="2", NODE_RANK="2", LOG_DIR=str(tmp_path / "logs"))
    res = subprocess.run(["bash", LAUNCHER, "job.py"], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "NODE_RANK=2 must be < NNODES=2" in res.stderr
    res = subprocess.run(["bash", LAUNCHER], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "SCRIPT [ARGS...]" in res.stdout  # no script: usage


def test_run_grpo_passes_config_and_overrides(tmp_path):
    """run_grpo.sh hands `python -m mindrl.cli train --config ... overrides` to the launcher (stubbed msrun)."""
    env, scripts = stub_repo(tmp_path, 'echo "$@" > "$ARGS_OUT"\n')
    (tmp_path / "cfg.yaml").write_text("{}\n")
    env.update(CONFIG="cfg.yaml", NNODES="2", NODE_RANK="1", WORKERS_PER_NODE="3", MASTER_ADDR="node0.invalid",
               MASTER_PORT="9001")
    res = subprocess.run(["bash", str(scripts / "run_grpo.sh"), "rl_config.train_iters=3"], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "args.txt").read_text().split()
    assert args == ["--worker_num=6", "--local_worker_num=3", "--master_addr=node0.invalid", "--master_port=9001",
                    "--node_rank=1", f"--log_dir={tmp_path / 'logs'}", "--join=True", "python", "-m", "mindrl.cli",
                    "train", "--config", "cfg.yaml", "rl_config.train_iters=3"]


@pytest.mark.parametrize("given, local", [({"NPUS_PER_NODE": "3"}, 3), ({"GPUS_PER_NODE": "4"}, 4),
                                          ({"WORKERS_PER_NODE": "3", "NPUS_PER_NODE": "03"}, 3), ({}, 2)])
def test_npus_and_gpus_per_node_name_the_worker_count(tmp_path, given, local):
    env, scripts = stub_repo(tmp_path, 'echo "$@" > "$ARGS_OUT"\n')
    (tmp_path / "cfg.yaml").write_text("{}\n")
    env.update(CONFIG="cfg.yaml", NNODES="2", **given)
    res = subprocess.run(["bash", str(scripts / "run_grpo.sh")], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "args.txt").read_text().split()
    assert args[:2] == [f"--worker_num={2 * local}", f"--local_worker_num={local}"]


@pytest.mark.parametrize("given, named", [
    ({"WORKERS_PER_NODE": "2", "NPUS_PER_NODE": "4"}, ("WORKERS_PER_NODE=2", "NPUS_PER_NODE=4")),
    ({"NPUS_PER_NODE": "8", "GPUS_PER_NODE": "4"}, ("NPUS_PER_NODE=8", "GPUS_PER_NODE=4")),
    ({"WORKERS_PER_NODE": "2", "GPUS_PER_NODE": "1"}, ("WORKERS_PER_NODE=2", "GPUS_PER_NODE=1"))])
@pytest.mark.parametrize("script", ["run_grpo.sh", "msrun_launch.sh"])
def test_disagreeing_worker_counts_are_refused(tmp_path, given, named, script):
    env, scripts = stub_repo(tmp_path, 'echo "$@" > "$ARGS_OUT"\n')
    (tmp_path / "cfg.yaml").write_text("{}\n")
    env.update(CONFIG="cfg.yaml", **given)
    res = subprocess.run(["bash", str(scripts / script), "job.py"], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and all(name in lines[0] for name in named), res.stderr
    assert not (tmp_path / "args.txt").exists()  # refused before msrun


@pytest.mark.parametrize("ignored", [(signal.SIGINT,), (signal.SIGHUP,), (signal.SIGINT, signal.SIGHUP),
                                     (signal.SIGTERM,)], ids=["INT", "HUP", "INT+HUP", "TERM"])
def test_signals_ignored_at_start_are_named_and_the_job_still_stops(tmp_path, ignored):
    """A launcher started with SIGINT ignored (a script's '&' job), SIGHUP ignored (nohup) or SIGTERM ignored cannot
    trap them: it says so at start, those signals leave the job running, and SIGTERM stops it (exit 143, nothing
    left); with SIGTERM ignored, SIGKILL of the launcher does (its watchdog stops the job)."""
    env, scripts = stub_repo(tmp_path, 'echo $$ > "$ARGS_OUT"; exec sleep 60\n')
    tag = uuid.uuid4().hex
    env["MINDRL_LAUNCH_TEST"] = tag
    names = [sig.name for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM) if sig in ignored]
    ignore = "--ignore-signal=" + ",".join(name[3:] for name in names)
    proc = subprocess.Popen(DEFAULT_SIGNALS + [ignore, "bash", str(scripts / "msrun_launch.sh"), "job.py"], env=env,
                            cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stub_msrun_pid(tmp_path, proc)
        for sig in ignored:
            os.kill(proc.pid, sig)
        time.sleep(1.5)  # three of the launcher's polls
        assert proc.poll() is None, f"the launcher acted on an ignored signal (exit {proc.returncode})"
        term_ignored = signal.SIGTERM in ignored
        os.kill(proc.pid, signal.SIGKILL if term_ignored else signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        notice = [line for line in err.splitlines() if "ignored (inherited" in line]
        assert len(notice) == 1 and notice[0].startswith(f"msrun_launch: {' and '.join(names)} ignored"), err
        if term_ignored:
            assert proc.returncode == -signal.SIGKILL
            assert "SIGKILL of this launcher will" in notice[0]
            # msrun gets SIGINT from the kernel (pdeathsig); what ignores it too, the watchdog's SIGKILL stops
            wait_until_gone(tag, 8)
        else:
            assert proc.returncode == 143, err
            assert "SIGTERM will" in notice[0]
            wait_until_gone(tag, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in processes_with_tag(tag):
            os.kill(pid, signal.SIGKILL)


def test_a_launcher_that_cannot_trap_sigterm_still_exits(tmp_path):
    """Started with SIGTERM ignored, so is its watchdog: the launcher's exit does not wait on a watchdog that
    ignores the SIGTERM it is sent (it gets SIGKILL after a second), and nothing is left."""
    env, scripts = stub_repo(tmp_path, 'exit 0\n')
    tag = uuid.uuid4().hex
    env["MINDRL_LAUNCH_TEST"] = tag
    res = subprocess.run(DEFAULT_SIGNALS + ["--ignore-signal=TERM", "bash", str(scripts / "msrun_launch.sh"),
                                            "job.py"], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0 and "job finished" in res.stderr, res.stderr
    wait_until_gone(tag, 1)
