"""Ctrl-C and SIGTERM (issue 23 item 1, issue 22 item 11): the first signal lets the step finish, saves it, writes the
report and prints the command that resumes; the run exits 130 (SIGINT) or 143 (SIGTERM). A second signal stops at
once with one line. The printed command runs as printed and continues the same trajectory."""
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
ENV = dict(os.environ, GLOG_v="3", PYTHONPATH=ROOT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("interrupt"))


def train_args(d, runs, **over):
    from conftest import as_overrides, tiny_run_settings
    settings = tiny_run_settings(d, runs / "<run_id>", **{"rl_config.train_iters": 6,
                                                           "actor_config.save": "<run_dir>/ckpt", **over})
    return [sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(settings)


def rows(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def start(args, log):
    # a session of its own: the signal goes to its whole process group, as Ctrl-C in a terminal does
    return subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_after(proc, runs, step, signum, timeout=600):
    """Send ``signum`` to the run's process group once its metrics.jsonl holds ``step``; its exit status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = [os.path.join(runs, d) for d in os.listdir(runs) if d != "latest"] if os.path.isdir(runs) else []
        if any(r.get("step", 0) >= step for d in dirs for r in rows(d)):
            os.killpg(proc.pid, signum)
            break
        time.sleep(0.2)
    return proc.wait(timeout=timeout)


def run_dir_of(runs):
    return next(os.path.join(runs, d) for d in os.listdir(runs) if d != "latest")


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_the_printed_command_resumes_the_same_run(workdir, tmp_path):
    # 12 steps of a fraction of a second each: the run must still be going when the signal lands after step 2 (a
    # 6-step run was once over before a busy machine delivered it)
    runs, log, steps = tmp_path / "runs", tmp_path / "stopped.log", 12
    rc = stop_after(start(train_args(workdir, runs, **{"rl_config.train_iters": steps}), log), str(runs), 2,
                    signal.SIGINT)
    out = log.read_text()
    assert rc == 130, out[-3000:]
    run = run_dir_of(str(runs))
    stopped_at = max(r["step"] for r in rows(run))
    assert 2 <= stopped_at < steps
    assert "SIGINT (Ctrl-C) received: finishing step" in out
    assert f"stopped by SIGINT after step {stopped_at} of {steps}" in out
    checkpoint = os.path.join(run, "ckpt", f"iter_{stopped_at:07d}")
    assert os.path.isfile(os.path.join(checkpoint, "manifest.json"))
    assert os.path.isfile(os.path.join(run, "report.png")) and os.path.isfile(os.path.join(run, "report.md"))
    command = out.split("Resume with:\n", 1)[1].splitlines()[0].strip()
    assert command == (f"mindrl train --config {run}/config.yaml actor_config.finetune=false "
                       f"actor_config.load={checkpoint}")

    # the command as printed (mindrl is `python -m mindrl.cli` here)
    argv = shlex.split(command)
    resumed = subprocess.run([sys.executable, "-m", "mindrl.cli"] + argv[1:], cwd=ROOT, env=ENV, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.splitlines()[0] == f"run directory: {run} (resumed at step {stopped_at})"
    got = rows(run)
    assert [r["step"] for r in got] == list(range(1, steps + 1))  # each step once

    # the same trajectory as a run never stopped: a new run of the stopped run's config.yaml (issue 23 item 3: a
    # saved config reruns, in a directory of its own beside the first)
    reference = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", f"{run}/config.yaml"],
                               cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]
    other = reference.stdout.splitlines()[0].split("run directory: ", 1)[1]
    assert other != run and os.path.dirname(other) == os.path.dirname(run)
    want = rows(other)
    for a, b in zip(got, want):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/entropy", "response_length/mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(workdir, tmp_path):
    runs, log = tmp_path / "runs", tmp_path / "term.log"
    proc = start(train_args(workdir, runs, **{"rl_config.train_iters": 40}), log)
    rc = stop_after(proc, str(runs), 1, signal.SIGTERM)
    out = log.read_text()
    assert rc == 143, out[-3000:]
    run = run_dir_of(str(runs))
    step = max(r["step"] for r in rows(run))
    assert f"stopped by SIGTERM after step {step} of 40" in out
    assert os.path.isdir(os.path.join(run, "ckpt", f"iter_{step:07d}"))


SCRIPT = textwrap.dedent("""
    import sys, time
    from mindrl.trainer import interrupt
    interrupt.install("mindrl train")
    interrupt.listen(lambda: "finishing step 3 of 9", "the steps after the newest checkpoint are lost", True)
    print("ready", flush=True)
    while interrupt.requested() is None:
        time.sleep(0.05)
    print("requested", interrupt.requested(), flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("first,second,code", [(signal.SIGINT, signal.SIGINT, 130),
                                               (signal.SIGTERM, signal.SIGTERM, 143),
                                               (signal.SIGTERM, signal.SIGINT, 130)])
def test_a_second_signal_stops_at_once_with_one_line(first, second, code):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(first)
    assert proc.stdout.readline().split() == ["requested", str(int(first))]
    proc.send_signal(second)
    assert proc.wait(timeout=10) == code
    err = proc.stderr.read().splitlines()
    assert err[0].startswith(f"mindrl train: {'SIGINT (Ctrl-C)' if first == signal.SIGINT else 'SIGTERM'} received: "
                             f"finishing step 3 of 9")
    assert len(err) == 2 and err[1].endswith("again: stopped at once; the steps after the newest checkpoint are lost")


def test_ranks_agree_on_the_stop():
    """Each rank sees its own signals; at a step boundary they all stop if any rank was asked to (SIGINT first)."""
    from mindrl.trainer import interrupt

    class Sum:  # the exchange's all_sum over two ranks whose requests are `others` and this one's
        def __init__(self, others):
            self.others = np.asarray(others, np.float32)

        def all_sum(self, x):
            return x + self.others
    interrupt._state.requested = None
    assert interrupt.agreed(Sum([0, 0]), 2) is None
    assert interrupt.agreed(Sum([0, 1]), 2) == signal.SIGTERM
    interrupt._state.requested = signal.SIGTERM
    assert interrupt.agreed(Sum([1, 0]), 2) == signal.SIGINT
    interrupt._state.requested = None
