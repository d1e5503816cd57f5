"""Rewards contained: every reward call has verifier_timeout seconds, every value must be a finite number, a failure
scores rl_config.reward_fallback (or stops with an error naming the function and the sample), failures and timeouts
are counted, and verifier names are checked when the config is loaded (MindSpeed-RL's accepted where they mean the
same)."""
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from mindrl.config import ConfigError, load_train_config
from mindrl.rewards import RewardComputer, extract_math_answer, get_verifier, last_boxed, r1_format_reward
from mindrl.config.plan import plan_reward
from mindrl.rewards.computer import RewardError, build_reward_computer
from mindrl.rewards.containment import reward_value

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REWARDS = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from mindrl.rewards import register_reward

    @register_reward("sleepy")
    def sleepy(response, label):
        if response == "hang":
            if label:  # a child process in the worker's group: it must die with the worker
                child = subprocess.Popen(["sleep", "3600"])
                with open(label, "w") as fh:
                    fh.write(str(child.pid))
            time.sleep(3600)
        return 1.0

    @register_reward("liar")
    def liar(response, label):
        import numpy as np
        return {"str": "1.0", "none": None, "nan": float("nan"), "inf": float("-inf"), "list": [1.0],
                "np32": np.float32(0.25), "npbool": np.bool_(True), "int": 2, "bool": False}[response]

    @register_reward("raiser")
    def raiser(response, label):
        if response == "boom":
            raise ValueError("boom " + label)
        return 0.5

    @register_reward("crasher")
    def crasher(response, label):
        if response == "crash":
            os._exit(3)
        return 0.5

    def plain_hang(response, label):
        if response == "hang":
            time.sleep(3600)
        return 0.75
    """
)


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("rewards") / "contained.py"
    path.write_text(REWARDS)
    return str(path)


def within(seconds, fn, *args):
    """``fn(*args)`` in a thread: a broken timeout fails the test after ``seconds`` instead of hanging it."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = e

    th = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(seconds)
    if th.is_alive():
        pytest.fail(f"still running after {seconds}s: the per-call timeout did not fire")
    if "error" in box:
        raise box["error"]
    return box["value"], time.monotonic() - t0


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("value, want", [
    (1.0, 1.0), (0, 0.0), (True, 1.0), (False, 0.0), (np.float32(0.25), 0.25), (np.int64(3), 3.0),
    (np.bool_(True), 1.0), (-2, -2.0),
    ("1.0", None), (None, None), (float("nan"), None), (float("inf"), None), (np.float64("nan"), None),
    ([1.0], None), (np.array([1.0]), None), (10 ** 400, None), (1 + 0j, None),
])
def test_reward_value(value, want):
    got, why = reward_value(value)
    assert got == want
    assert (why is None) == (want is not None), why


# ---------------------------------------------------------------------------------------------
# a hanging reward


def test_hanging_reward_file_is_cut_and_its_worker_replaced(reward_file, tmp_path):
    marker = tmp_path / "child.pid"
    rc = RewardComputer(["sleepy", "last_number"], [1.0, 1.0], custom_reward_file=reward_file, timeout=1.0,
                        fallback=-1.0)
    try:
        assert rc.placement["sleepy"][0] == "worker"
        assert rc.placement["last_number"] == ("worker", {"attr": "mindrl.rewards.verifiers:last_number_reward"})
        rc.start()
        first = rc.reward_pool.pids()
        out, elapsed = within(30, rc, ["7", "hang", "145"], ["", str(marker), "145"])
        assert elapsed < 6.0, elapsed  # 1 s timeout + starting one worker
        np.testing.assert_array_equal(out.per_verifier["sleepy"], [1.0, -1.0, 1.0])
        np.testing.assert_array_equal(out.scores, [1.0, -1.0 + 0.0, 2.0])
        assert (out.failures, out.timeouts, out.math_timeouts) == (1, 1, 0)
        assert "'sleepy' failed on sample 1 (response 'hang', label '/" in out.failed[0].message()
        m = out.metrics()
        assert (m["grpo/rewards/failures"], m["grpo/rewards/timeouts"]) == (1, 1)
        # the hung worker is gone, with the child it started; a new one answers the next batch at once
        assert not any(alive(p) for p in first)
        assert not alive(int(marker.read_text()))
        assert rc.reward_pool.pids() and rc.reward_pool.pids() != first
        out, elapsed = within(30, rc, ["1"] * 256, ["1"] * 256)
        assert out.failures == 0 and out.per_verifier["sleepy"].tolist() == [1.0] * 256 and elapsed < 2.0
        live = rc.reward_pool.pids()
    finally:
        rc.close()
    assert not any(alive(p) for p in live)  # close() leaves no worker behind


def test_hang_without_fallback_is_an_error_naming_function_and_sample(reward_file):
    spec = reward_file.replace("contained.py", "contained.py:plain_hang")
    rc = RewardComputer(["plain_hang"], [1.0], custom_reward_file=spec, timeout=1.0)
    try:
        assert rc.placement["plain_hang"] == ("worker", {"spec": spec})
        with pytest.raises(RewardError, match=r"'plain_hang' failed on sample 2 \(response 'hang', label ''\): no "
                                              r"result within verifier_timeout=1s.*reward_fallback"):
            within(30, rc, ["a", "b", "hang", "c"], ["", "", "", ""])
        out, _ = within(30, rc, ["a", "b"], ["", ""])  # the run's next batch still works
        assert out.scores.tolist() == [0.75, 0.75]
    finally:
        rc.close()


def test_reward_funcs_callable_times_out_in_a_worker(tmp_path, monkeypatch):
    (tmp_path / "slow_rewards_mod.py").write_text(
        "import time\n\ndef slow_reward(response, label):\n"
        "    if response == 'hang':\n        time.sleep(3600)\n    return 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from slow_rewards_mod import slow_reward
    plan = SimpleNamespace(verifiers=(("slow_reward", 2.0),), custom_reward_file=None, timeout=1.0, fallback=0.0)
    rc = build_reward_computer(plan, reward_funcs=[slow_reward])
    try:
        assert rc.placement["slow_reward"] == ("worker", {"attr": "slow_rewards_mod:slow_reward"})
        out, elapsed = within(30, rc, ["x", "hang", "y"], ["", "", ""])
        assert out.scores.tolist() == [1.0, 0.0, 1.0] and (out.failures, out.timeouts) == (1, 1)
        assert elapsed < 6.0
    finally:
        rc.close()


def test_unimportable_callable_times_out_in_a_thread():
    def make():
        def local_reward(response, label):  # a closure: no fresh interpreter can load it
            if response == "hang":
                time.sleep(3600)
            if response == "boom":
                raise KeyError(label)
            return len(response) / 10
        return local_reward

    plan = SimpleNamespace(verifiers=(("local_reward", 1.0),), custom_reward_file=None, timeout=1.0, fallback=-0.5)
    rc = build_reward_computer(plan, reward_funcs=[make()])
    try:
        assert rc.placement["local_reward"] == ("thread",) and rc.reward_pool is None
        out, elapsed = within(30, rc, ["abcd", "hang", "boom", "ab"], ["", "", "lbl", ""])
        np.testing.assert_allclose(out.scores, [0.4, -0.5, -0.5, 0.2])
        assert (out.failures, out.timeouts) == (2, 1) and elapsed < 4.0
        assert "raised KeyError('lbl')" in out.failed[1].why and "background thread" in out.failed[0].why
        assert rc._threads.abandoned == 1
        out, _ = within(30, rc, ["a" * 5] * 256, [""] * 256)  # the next batch runs in a new thread
        assert out.failures == 0 and np.allclose(out.scores, 0.5)
    finally:
        rc.close()


# ---------------------------------------------------------------------------------------------
# processes a reward call starts


# Each call starts a process in a new session and a daemon (double fork, setsid), both carrying the label (a
# marker unique to the test) on their command line; "hang" then hangs, "crash" kills its worker.
SPAWNER = textwrap.dedent("""
    import os, subprocess, sys, time
    from mindrl.rewards import register_reward

    def sleeper(marker):
        return [sys.executable, "-c", "import time; time.sleep(300)", marker]

    @register_reward("spawner")
    def spawner(response, label):
        subprocess.Popen(sleeper(label + "-session"), start_new_session=True)
        pid = os.fork()
        if pid == 0:  # the daemon: its parent exits at once, so it is nobody's child but init's (or a subreaper's)
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, sleeper(label + "-daemon"))
            os._exit(0)
        os.waitpid(pid, 0)
        if response == "hang":
            time.sleep(3600)
        if response == "crash":
            time.sleep(0.5)  # the daemon's exec has surely happened
            os._exit(3)
        return 1.0
    """)


def processes_with(marker):
    """Live processes whose command line holds ``marker``: 'pid: command line'."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and alive(int(pid)):
            found.append(f"{pid}: {cmdline}")
    return found


def gone_within(marker, seconds):
    """Fail (after killing them, so that the test leaks nothing) when processes with ``marker`` outlive ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for line in left:
        os.kill(int(line.split(":")[0]), 9)
    assert not left, f"processes a reward call started outlived it: {left}"


@pytest.mark.parametrize("case", ["returns", "hangs", "crashes"])
def test_processes_a_reward_call_starts_are_gone_when_it_ends(tmp_path, case):
    """Processes in a new session and daemons (double fork) that a reward call started are killed when the call
    ends, when it is cut by the timeout, and when it kills its worker."""
    (tmp_path / "spawning.py").write_text(SPAWNER)
    marker = f"mindrl-test-{os.getpid()}-{time.monotonic_ns()}"
    response = {"returns": "fine", "hangs": "hang", "crashes": "crash"}[case]
    rc = RewardComputer(["spawner"], [1.0], custom_reward_file=str(tmp_path / "spawning.py"), timeout=3.0,
                        fallback=0.0)
    try:
        out, _ = within(30, rc, [response, "fine"], [marker, marker + "-next"])
        assert out.scores.tolist() == ([1.0] if case == "returns" else [0.0]) + [1.0]
        gone_within(marker, 0.5)
        assert rc.reward_pool.pids()  # the worker lives on (a new one after a hang or a crash)
    finally:
        rc.close()


def test_a_run_leaves_no_process_its_rewards_started(tmp_path):
    """`mindrl train` with a custom reward that starts processes in new sessions and daemons on every call: exit 0,
    and none of them is left."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import as_overrides, make_grpo_workdir, tiny_run_settings
    d = make_grpo_workdir(tmp_path)
    marker = f"mindrl-test-{os.getpid()}-{time.monotonic_ns()}"
    (d / "spawning.py").write_text(SPAWNER + textwrap.dedent(f"""
        @register_reward("spawns")
        def spawns(response, label):
            return spawner("fine", {marker!r})
        """))
    settings = tiny_run_settings(d, d / "logs", **{
        "rl_config.verifier_function": "[last_number,spawns]", "rl_config.custom_reward_file": str(d / "spawning.py")})
    # output to a file, not a pipe: processes left holding a pipe would keep subprocess.run waiting for its end
    with open(tmp_path / "train.log", "w") as log:
        res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config",
                              os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")] + as_overrides(settings),
                             cwd=str(tmp_path), env=dict(os.environ, GLOG_v="3"), stdout=log, stderr=subprocess.STDOUT,
                             timeout=600)
    assert res.returncode == 0, (tmp_path / "train.log").read_text()[-3000:]
    gone_within(marker, 0)


# ---------------------------------------------------------------------------------------------
# lying, raising and crashing rewards


LIES = ["str", "none", "nan", "inf", "list"]
TRUTHS = {"np32": 0.25, "npbool": 1.0, "int": 2.0, "bool": 0.0}


@pytest.mark.parametrize("lie", LIES)
def test_lying_reward_is_refused_by_default(reward_file, lie):
    rc = RewardComputer(["liar"], [1.0], custom_reward_file=reward_file)
    try:
        with pytest.raises(RewardError, match=rf"reward function 'liar' failed on sample 1 \(response '{lie}', "
                                              rf"label ''\): returned "):
            rc(["int", lie, "int"], ["", "", ""])
    finally:
        rc.close()


def test_lying_reward_scores_the_fallback(reward_file):
    rc = RewardComputer(["liar"], [1.0], custom_reward_file=reward_file, fallback=-1.0)
    try:
        responses = list(TRUTHS) + LIES
        out = rc(responses, [""] * len(responses))
        want = [TRUTHS.get(r, -1.0) for r in responses]
        assert out.scores.tolist() == want and out.failures == len(LIES) and out.timeouts == 0
        whys = [f.why for f in out.failed]
        assert whys[0] == "returned str '1.0', expected a finite real number (bool, int or float)"
        assert whys[1].startswith("returned None") and whys[2] == "returned nan, not a finite number"
    finally:
        rc.close()


def test_raising_reward(reward_file):
    rc = RewardComputer(["raiser"], [1.0], custom_reward_file=reward_file)
    try:
        with pytest.raises(RewardError, match=r"'raiser' failed on sample 1 \(response 'boom', label 'x'\): raised "
                                              r"ValueError\('boom x'\)"):
            rc(["fine", "boom"], ["", "x"])
    finally:
        rc.close()
    rc = RewardComputer(["raiser"], [1.0], custom_reward_file=reward_file, fallback=0.0)
    try:
        out = rc(["fine", "boom", "fine"], ["", "x", ""])
        assert out.scores.tolist() == [0.5, 0.0, 0.5] and (out.failures, out.timeouts) == (1, 0)
    finally:
        rc.close()


def test_crashing_worker_is_replaced(reward_file):
    rc = RewardComputer(["crasher"], [1.0], custom_reward_file=reward_file, fallback=0.0)
    try:
        out, _ = within(30, rc, ["a", "crash", "b"], ["", "", ""])
        assert out.scores.tolist() == [0.5, 0.0, 0.5] and out.failures == 1 and out.timeouts == 0
        assert "exited with code 3" in out.failed[0].why
    finally:
        rc.close()


def test_two_workers_share_a_batch(reward_file):
    rc = RewardComputer(["sleepy"], [1.0], custom_reward_file=reward_file, timeout=1.0, fallback=0.0,
                        reward_workers=2)
    try:
        responses = ["a"] * 5 + ["hang"] + ["b"] * 4
        out, elapsed = within(30, rc, responses, [""] * 10)
        assert out.scores.tolist() == [1.0] * 5 + [0.0] + [1.0] * 4 and out.timeouts == 1 and elapsed < 6.0
        assert len(rc.reward_pool.pids()) == 2
    finally:
        rc.close()


def test_worker_that_cannot_load_is_a_clear_error(tmp_path):
    f = tmp_path / "only_here.py"
    f.write_text("import os\nfrom mindrl.rewards import register_reward\n"
                 "if os.getpid() != int(os.environ.get('TRAINER_PID', '0')):\n    raise ImportError('not here')\n"
                 "@register_reward('only_here')\ndef only_here(r, l):\n    return 1.0\n")
    os.environ["TRAINER_PID"] = str(os.getpid())
    try:
        rc = RewardComputer(["only_here"], [1.0], custom_reward_file=str(f))
        with pytest.raises(RewardError, match=r"reward worker did not start: cannot load.*not here.*only_here"):
            rc(["a"], [""])
        rc.close()
    finally:
        del os.environ["TRAINER_PID"]


# ---------------------------------------------------------------------------------------------
# built-ins are contained like any reward: in reward workers, with the same verdicts as in the trainer


BUILTIN_STYLE = textwrap.dedent(
    r"""
    import re
    from mindrl.rewards.verifiers import register_reward

    _BOXED = re.compile(r"\\boxed\{.*?\}")  # base_acc's regex as it was: quadratic on unclosed boxes

    @register_reward("old_one_box", _builtin=True)
    def old_one_box(response, label):
        return 1.0 if len(_BOXED.findall(response)) == 1 else 0.0
    """
)
UNCLOSED = "\\boxed{" * 40_000  # the regex above takes about a minute on it (first_boxes: microseconds)


@pytest.fixture
def builtin_style(tmp_path, monkeypatch):
    """A verifier registered as a built-in (module-level in an importable module, as mindrl's own are) whose regex
    backtracks for about a minute on ``UNCLOSED``; unregistered afterwards."""
    from mindrl.rewards import verifiers
    (tmp_path / "builtin_style_mod.py").write_text(BUILTIN_STYLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtin_style_mod  # noqa: F401 - registers old_one_box
    try:
        yield "old_one_box"
    finally:
        verifiers.VERIFIERS.pop("old_one_box", None)
        verifiers._BUILTIN.discard("old_one_box")
        sys.modules.pop("builtin_style_mod", None)


def test_hanging_builtin_is_abandoned_within_the_timeout_and_counted(builtin_style):
    """A regex holds the GIL while it backtracks, so no thread of the process running it could time it out: the
    built-ins run in reward workers, and a hung one is killed and replaced like a user's."""
    rc = RewardComputer([builtin_style, "last_number"], [1.0, 1.0], timeout=1.0, fallback=-1.0)
    try:
        assert rc.placement[builtin_style] == ("worker", {"attr": "builtin_style_mod:old_one_box"})
        rc.start()
        first = rc.reward_pool.pids()
        out, elapsed = within(30, rc, ["\\boxed{7}", UNCLOSED, "x 7"], ["7", "7", "7"])
        assert elapsed < 6.0, elapsed  # 1 s timeout + starting one worker
        np.testing.assert_array_equal(out.per_verifier[builtin_style], [1.0, -1.0, 0.0])
        np.testing.assert_array_equal(out.per_verifier["last_number"], [1.0, 0.0, 1.0])
        assert (out.failures, out.timeouts) == (1, 1)
        assert out.failed[0].message().startswith(f"reward function {builtin_style!r} failed on sample 1 (response "
                                                  f"'\\\\boxed{{")
        assert "no result within verifier_timeout=1s; the call was abandoned" in out.failed[0].why
        assert not any(alive(p) for p in first) and rc.reward_pool.replaced == 1
        out, _ = within(30, rc, ["\\boxed{1}"] * 8, ["1"] * 8)  # the new worker scores the next batch
        assert out.failures == 0 and out.per_verifier[builtin_style].tolist() == [1.0] * 8
    finally:
        rc.close()
    rc = RewardComputer([builtin_style], [1.0], timeout=1.0)  # reward_fallback: null stops, naming it
    try:
        with pytest.raises(RewardError, match=rf"'{builtin_style}' failed on sample 2 \(response .*\.\.\., label "
                                              r"''\): no result within verifier_timeout=1s"):
            within(30, rc, ["a", "b", UNCLOSED], ["", "", ""])
    finally:
        rc.close()


def test_builtins_are_fast_on_adversarial_text():
    """Each case was slow in the trainer at some commit; each is decided in well under the timeout now."""
    n = 100_000
    cases = [
        ("r1_format", "<think>a</think><answer>" + "x" * n + "</answer>y", "", 0.0),  # was quadratic (backtracking)
        ("r1_strict_format", "<think>\n" + "a\n" * n + "</think>\n<answer>\nx\n</answer>z", "", 0.0),
        ("last_number", "1," * n + "9" * n, "9", 0.0),
        ("math_acc", "<answer>" * (n // 8) + "\\boxed{7}", "7", 1.0),  # was quadratic (lazy regex per start)
        ("math_acc", "\\boxed{" + "9" * n + "}", "0" + "9" * n, 1.0),  # int() refuses > 4300 digits
        ("base_acc", UNCLOSED, "7", 0.0),  # was quadratic: about a minute (first_boxes)
        ("step", "Step 1" * n + "\n-" * n, "", 1.0),
    ]
    computers = {name: RewardComputer([name], [1.0], timeout=5.0) for name in dict.fromkeys(c[0] for c in cases)}
    try:
        for rc in computers.values():
            rc.reward_pool.start()  # not the math workers: these cases must not need them
        for name, text, label, want in cases:
            rc = computers[name]
            assert rc.placement[name][0] == "worker"
            t0 = time.perf_counter()
            out = rc([text], [label])
            assert time.perf_counter() - t0 < 1.0, name
            assert out.failures == 0 and out.scores.tolist() == [want], (name, out.failed)
            assert rc._pool is None or not rc._pool._workers  # decided without math-verify
    finally:
        for rc in computers.values():
            rc.close()


def _corpus(rng, n):
    parts = ["<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "}", "\\frac12", "0.5", "7", "-3", "1,234",
             "x+1", "\n", " ", "Step 1:", "First,", "\n- ", "$", "10-5", ".5", "\\boxed{7}"]
    texts = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 14))) for _ in range(n)]
    labels = [rng.choice(["7", "0.5", "\\frac12", "1234", "5", "-3", "x+1", ""]) for _ in range(n)]
    return texts, labels


def test_builtins_in_workers_score_what_they_score_in_the_trainer():
    """Every built-in through the reward workers (two of them, so shares and order matter) against the same function
    called here, float for float; math_acc and base_acc against their batch form in this process."""
    from mindrl.rewards import MathVerifyPool
    from mindrl.rewards.mindspeed_verifiers import base_acc_score_batch
    from mindrl.rewards.verifiers import math_score_batch
    texts, labels = _corpus(random.Random(3), 300)
    names = ["last_number", "format", "strict_format", "step", "math_acc", "base_acc"]
    rc = RewardComputer(names, [1.0, 0.5, 0.25, 0.125, 2.0, 1.5], reward_workers=2)
    pool = MathVerifyPool(timeout=5.0)
    try:
        out = rc(texts, labels)
        want = {n: [get_verifier(n)(t, lab) for t, lab in zip(texts, labels)] for n in names[:4]}
        want["math_acc"] = math_score_batch(texts, labels, pool=pool)
        want["base_acc"] = base_acc_score_batch(texts, labels, pool=pool)
        assert out.failures == 0 and out.math_timeouts == 0 and pool.timeouts == 0
        for name in names:
            assert out.per_verifier[name].tolist() == np.float32(want[name]).tolist(), name
        total = sum(w * np.array(want[n], np.float64) for n, w in zip(names, rc.weights))
        assert out.scores.tolist() == total.astype(np.float32).tolist()
        assert 0 < sum(want["math_acc"]) < len(texts)  # the corpus has both verdicts
    finally:
        rc.close()
        pool.close()


def test_a_batch_costs_one_reply_line(monkeypatch):
    """Values come through shared memory (containment.Board): a batch sends one request and reads one line back (a
    line per call cost 5.4 ms per 512 calls of last_number on 2 loaded cores, the calls themselves 0.7 ms)."""
    from mindrl.rewards.workers import WorkerProcess
    rc = RewardComputer(["last_number"], [1.0])
    try:
        rc.start()
        sent, read = [], []
        real_send, real_pop = WorkerProcess.send, WorkerProcess.pop_line
        monkeypatch.setattr(WorkerProcess, "send", lambda w, msg: (sent.append(msg), real_send(w, msg))[1])
        monkeypatch.setattr(WorkerProcess, "pop_line", lambda w: (lambda m: (read.append(m) if m else None, m)[1])(
            real_pop(w)))
        n = 3000  # beyond the board's first size: it grows
        out = rc([f"{i}<end>" for i in range(n)], [str(i % 7) for i in range(n)])
        assert out.scores.tolist() == [float(i == i % 7) for i in range(n)]
        assert len(sent) == 1 and len(read) == 1 and read[0]["done"] == n, (len(sent), read[:3])
    finally:
        rc.close()


def test_first_boxes_agrees_with_the_regex():
    from mindrl.rewards.verifiers import first_boxes
    boxed = re.compile(r"\\boxed\{.*?\}")
    rng = random.Random(1)
    parts = ["\\boxed{", "}", "\n", "a", "\\boxed", "{", "\\boxed{}", " "]
    for _ in range(20_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        assert first_boxes(text) == [m.start() for m in boxed.finditer(text)][:2], text


def _regex_extract(response):
    """extract_math_answer as it was, with a regex (quadratic on many unclosed tags): the reference."""
    tags = re.findall(r"<answer>(.*?)</answer>", response, re.S)
    region = tags[-1] if tags else response
    boxed = last_boxed(region)
    if boxed is not None:
        return "\\boxed{" + boxed + "}", boxed
    return region, (region if tags else None)


def _regex_format(response):
    """r1_format_reward as it was, with a regex (quadratic on a long answer): the reference."""
    once = lambda t, tag: t.count(f"<{tag}>") == 1 and t.count(f"</{tag}>") == 1  # noqa: E731
    text = response.strip()
    if not (text.startswith("<think>") and once(text, "think")):
        return 0.0
    rest = text.split("</think>", 1)[1].strip()
    if not rest:
        return 0.0
    if "<answer>" in rest or "</answer>" in rest:
        return 1.0 if once(rest, "answer") and re.fullmatch(r"<answer>(.*\S.*)</answer>", rest, re.S) else 0.0
    return 1.0


def test_linear_scans_agree_with_the_regexes():
    rng = random.Random(0)
    parts = ["<answer>", "</answer>", "a", "\\boxed{1}", " ", "<think>", "</think>", "\n", "<think>x</think>"]
    for _ in range(5000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert extract_math_answer(text) == _regex_extract(text), text
        assert r1_format_reward(text) == _regex_format(text), text


# ---------------------------------------------------------------------------------------------
# verifier names at config load


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working directory with the files a minimal config needs, and two reward files."""
    monkeypatch.chdir(tmp_path)
    files = {"model_configs/tiny.yaml": "hidden_size: 8\n", "tok/tokenizer.json": "{}", "train.mindrecord": "",
             "train.mindrecord.db": "", "broken.py": "def f(:\n",
             "mine.py": "from mindrl.rewards import register_reward\n\n"
                        "@register_reward('mine_from_file')\ndef f(r, l):\n    return 1.0\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def config(ws, **rl):
    data = {"actor_config": {"model": "model_configs/tiny.yaml", "tokenizer_name_or_path": "tok"},
            "data": {"path": "train.mindrecord"}, "rl_config": rl}
    (ws / "cfg.yaml").write_text(yaml.safe_dump(data))
    return "cfg.yaml"


def one_error(ws, **rl):
    with pytest.raises(ConfigError) as info:
        load_train_config(config(ws, **rl))
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_unknown_verifier_is_refused_at_load(ws):
    line = one_error(ws, verifier_function=["acc", "last_numbr"], verifier_weight=[1.0, 1.0])
    assert line.startswith("cfg.yaml: rl_config.verifier_function: unknown verifier 'last_numbr' "
                           "(did you mean 'last_number'?); valid names: ")
    assert "math_acc" in line and "format" in line


def test_a_mindspeed_name_without_equivalent_is_refused_with_the_reason(ws, monkeypatch):
    from mindrl.rewards import verifiers
    load_train_config(config(ws, verifier_function=["acc_for_ppo"]))  # every MindSpeed-RL name is provided now
    monkeypatch.setitem(verifiers.NOT_PROVIDED, "peer_only", "is a peer's verifier with no equivalent; use math_acc")
    line = one_error(ws, verifier_function=["peer_only"])
    assert line.startswith("cfg.yaml: rl_config.verifier_function: 'peer_only' is a peer's verifier with no equivalent")
    assert "valid names: " in line


def test_mindspeed_base_acc_and_step_load(ws):
    cfg = load_train_config(config(ws, verifier_function=["base_acc", "step"], verifier_weight=[1.0, 0.1]))
    assert cfg.rl_config.verifier_function == ["base_acc", "step"]


def test_mindspeed_alias_is_accepted_and_mapped(ws):
    cfg = load_train_config(config(ws, verifier_function=["acc_for_ppo", "format", "strict_format"],
                                   verifier_weight=[1.0, 0.5, 0.5]))
    assert cfg.rl_config.verifier_function == ["acc_for_ppo", "format", "strict_format"]  # kept as written
    rc = build_reward_computer(plan_reward(cfg))
    try:
        assert rc.fns[0] is get_verifier("math_17k_acc")  # MindSpeed-RL's acc_for_ppo is its math_17k_acc
        out = rc(["<think>x</think><answer>\\boxed{145}</answer>", "<think>x</think>145"], ["145", "145"])
        assert out.per_verifier["acc_for_ppo"].tolist() == [1.0, 0.0]
        assert out.scores.tolist() == [2.0, -0.25]  # strict_format scores -0.5 without the layout
    finally:
        rc.close()


def test_custom_file_names_count_at_load(ws):
    cfg = load_train_config(config(ws, verifier_function=["mine_from_file"], custom_reward_file="mine.py"))
    assert cfg.rl_config.reward_fallback is None
    line = one_error(ws, verifier_function=["mine_from_fil"], custom_reward_file="mine.py")
    assert "unknown verifier 'mine_from_fil' (did you mean 'mine_from_file'?)" in line
    # file.py:func and package.module:func name their function: nothing is executed to learn it
    load_train_config(config(ws, verifier_function=["g"], custom_reward_file="mine.py:g"))
    load_train_config(config(ws, verifier_function=["h"], custom_reward_file="notinstalled.mod:h"))
    line = one_error(ws, verifier_function=["acc"], custom_reward_file="broken.py")
    assert line.startswith("cfg.yaml: rl_config.custom_reward_file: cannot load ") and "SyntaxError" in line


def test_reward_fallback_key(ws):
    cfg = load_train_config(config(ws, reward_fallback=-1))
    assert cfg.rl_config.reward_fallback == -1.0 and isinstance(cfg.rl_config.reward_fallback, float)
    rc = build_reward_computer(plan_reward(cfg))
    assert rc.fallback == -1.0 and rc.timeout == 5.0
    line = one_error(ws, reward_fallback=float("nan"))
    assert line.startswith("cfg.yaml: rl_config.reward_fallback: ")


def test_cli_refuses_unknown_verifier_before_anything_is_built(ws):
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", config(ws, verifier_function=
                         ["acc_for_ppp"])], cwd=ws, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, GLOG_v="3", PYTHONPATH=ROOT))
    assert res.returncode == 2, res.stderr[-2000:]
    assert ("cfg.yaml: rl_config.verifier_function: unknown verifier 'acc_for_ppp' (did you mean 'acc_for_ppo'?)"
            in res.stderr)
    assert time.monotonic() - t0 < 30


# ---------------------------------------------------------------------------------------------
# the trainer logs the counts


def test_train_step_logs_failures_and_timeouts(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import as_overrides, make_grpo_workdir, tiny_run_settings
    from mindrl.trainer import RLTrainer
    d = make_grpo_workdir(tmp_path)
    (d / "flaky.py").write_text(textwrap.dedent(f"""
        import os, time
        from mindrl.rewards import register_reward

        @register_reward("flaky")
        def flaky(response, label):
            if not os.path.exists({str(d / "hung_once")!r}):  # the first call hangs, every call fails
                open({str(d / "hung_once")!r}, "w").close()
                time.sleep(3600)
            raise RuntimeError("always")
        """))
    settings = tiny_run_settings(d, d / "logs", **{
        "rl_config.verifier_function": "[flaky,last_number]", "rl_config.custom_reward_file": str(d / "flaky.py"),
        "rl_config.verifier_timeout": 1.0, "rl_config.reward_fallback": 0.0})
    t = RLTrainer(load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                                    as_overrides(settings)))
    try:
        m = t.train_step()
    finally:
        t.rewards.close()
    rows = t.cfg.rl_config.global_batch_size * t.cfg.rl_config.n_samples_per_prompt
    assert (m["grpo/rewards/failures"], m["grpo/rewards/timeouts"], m["grpo/rewards/math_timeouts"]) == (rows, 1, 0)
    assert m["grpo/rewards/flaky/mean"] == 0.0 and not any(k.startswith("dapo/") for k in m)
