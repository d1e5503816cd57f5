"""mindrl.rewards: verifiers, the math worker pool with its timeout, RewardComputer, custom files."""
import subprocess
import sys
import os
import textwrap
import threading
import time

import numpy as np
import pytest

from mindrl.rewards import (
    MathVerifyPool,
    RewardComputer,
    extract_math_answer,
    get_verifier,
    last_boxed,
    last_number,
    last_number_reward,
    math_score_batch,
    r1_format_reward,
    r1_strict_format_reward,
)

HANG = "\\boxed{9^{9^{9^{9}}}}"  # sympy evaluates this power tower for minutes without a timeout


def call_with_deadline(pool, pairs, seconds=20.0):
    """pool.verify_batch(pairs) in a thread: if the timeout mechanism is broken the test fails after
    `seconds` instead of hanging on the pathological item for minutes."""
    box = {}
    th = threading.Thread(target=lambda: box.update(r=pool.verify_batch(pairs)), daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        for w in list(pool._workers):  # stop our own stuck workers before failing
            w.proc.kill()
        pytest.fail(f"verify_batch still running after {seconds}s: the per-item timeout did not fire")
    return box["r"]


@pytest.fixture(scope="module")
def pool():
    p = MathVerifyPool(num_workers=1, timeout=20.0)
    yield p
    p.close()


# ---------------------------------------------------------------------------------------------
# math


def test_math_equivalence(pool):
    cases = [
        ("The answer is \\boxed{0.5}.", "\\frac12", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("first \\boxed{3}, no wait: \\boxed{\\frac{\\sqrt{2}}{2}}", "$\\sqrt2/2$", 1.0),  # last box counts
        ("<think>maybe 7</think><answer>\\frac{3}{6}</answer>", "0.5", 1.0),
        ("\\boxed{x+1}", "1+x", 1.0),
        ("\\boxed{0.51}", "\\frac12", 0.0),
        ("\\boxed{3} then \\boxed{4}", "3", 0.0),
        ("no answer at all", "5", 0.0),
        ("", "5", 0.0),
        ("\\boxed{145}", "145", 1.0),  # decided without the pool
        ("\\boxed{146}", "145", 0.0),
    ]
    got = math_score_batch([c[0] for c in cases], [c[1] for c in cases], pool=pool)
    assert got == [c[2] for c in cases]
    assert pool.timeouts == 0
    assert get_verifier("deepscaler_acc") is get_verifier("math_acc")  # mindrl's alias
    # MindSpeed-RL's names score as MindSpeed-RL does (test_mindspeed_verifiers.py)
    for name in ["acc", "math_17k_acc", "base_acc"]:
        assert get_verifier(name) is not get_verifier("math_acc")


def test_answer_extraction():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\sqrt{x^{2}}}") == "\\sqrt{x^{2}}"
    assert last_boxed("cut off \\boxed{\\frac{1}{2") is None
    assert last_boxed("nothing") is None
    # the answer block wins over a box outside it
    assert extract_math_answer("<answer>\\boxed{7}</answer> \\boxed{8}") == ("\\boxed{7}", "7")
    assert extract_math_answer("x <answer> 12 </answer>") == (" 12 ", " 12 ")


def test_pathological_answer_is_cut_by_timeout():
    p = MathVerifyPool(num_workers=1, timeout=1.0)
    try:
        p.start()
        t0 = time.monotonic()
        got = call_with_deadline(p, [("1", HANG), ("$\\frac12$", "\\boxed{0.5}")])
        elapsed = time.monotonic() - t0
        assert got == [False, True]  # the worker was replaced and the next item still checked
        assert p.timeouts == 1
        assert elapsed < 10.0, elapsed  # 1 s timeout + one worker restart

        # no signals in the caller: works from a non-main thread too (call_with_deadline uses one)
        assert call_with_deadline(p, [("2", "\\boxed{2}"), ("1", HANG)]) == [True, False]
        assert p.timeouts == 2
    finally:
        p.close()


def test_inner_math_verify_timeout_avoids_restart():
    # with timeout >= 3 s math-verify's own alarm (1 s here) ends the item inside the worker
    p = MathVerifyPool(num_workers=1, timeout=3.0)
    try:
        assert p.inner_timeout == 1
        p.start()
        t0 = time.monotonic()
        assert call_with_deadline(p, [("1", HANG), ("3", "\\boxed{3}")]) == [False, True]
        assert p.timeouts == 0 and time.monotonic() - t0 < 2.9
    finally:
        p.close()


def test_reward_computer_counts_math_timeouts():
    rc = RewardComputer(["math_acc"], [1.0], timeout=1.0)
    try:
        out = rc([HANG, "\\boxed{2}"], ["1", "2"])
        assert out.scores.tolist() == [0.0, 1.0]
        assert out.math_timeouts == 1
        assert out.metrics()["grpo/rewards/math_timeouts"] == 1
    finally:
        rc.close()


# ---------------------------------------------------------------------------------------------
# r1_format and r1_strict_format (mindrl's; MindSpeed-RL's format and strict_format: test_mindspeed_verifiers.py)


@pytest.mark.parametrize(
    "text",
    [
        "<think>reasoning</think><answer>42</answer>",
        "  <think>\nlong\nthought\n</think>\n\n<answer> 42 </answer>\n",
        "<think>r1 style</think>\nThe answer is 42.",
        "<think></think>42",
    ],
)
def test_format_positive(text):
    assert r1_format_reward(text) == 1.0
    assert get_verifier("r1_format")(text, "") == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "<answer>42</answer>",  # no think block
        "<think>unclosed <answer>42</answer>",
        "<think>a</think><think>b</think><answer>1</answer>",  # think twice
        "<think>a</think>",  # nothing after it
        "<think>a</think><answer></answer>",  # empty answer
        "<think>a</think><answer>1</answer> trailing text",
        "<think>a</think><answer>1</answer><answer>2</answer>",
        "preamble <think>a</think><answer>1</answer>",
    ],
)
def test_format_negative(text):
    assert r1_format_reward(text) == 0.0


def test_strict_format():
    assert r1_strict_format_reward("<think>\nwhy\n</think>\n<answer>\n42\n</answer>") == 1.0
    assert r1_strict_format_reward("<think>why</think><answer>42</answer>") == 0.0
    assert r1_strict_format_reward("<think>\nwhy\n</think>\n42") == 0.0
    assert r1_strict_format_reward("<think>\na\n</think>\n<answer>\n1\n</answer>\n<answer>\n2\n</answer>") == 0.0


# ---------------------------------------------------------------------------------------------
# last number


def test_last_number():
    from decimal import Decimal

    assert last_number("53+93-01=145") == Decimal(145)
    assert last_number("so 10-5") == Decimal(5)  # binary minus is not a sign
    assert last_number("it is -7.") == Decimal(-7)
    assert last_number("total: 1,234,567 apples") == Decimal(1234567)
    assert last_number("1, 2, 3") == Decimal(3)
    assert last_number("pi ~ 3.14") == Decimal("3.14")
    assert last_number("none") is None
    cases = [
        ("145<end>", "145", 1.0),
        ("=145", "145", 1.0),
        ("145.0", "145", 1.0),
        ("145 or 146", "145", 0.0),
        ("1,000", "1000", 1.0),
        ("14", "145", 0.0),
        ("1450", "145", 0.0),
        ("", "145", 0.0),
        ("0.1", "0.10", 1.0),
        ("0.3", "0.30000001", 0.0),  # exact, no float rounding
    ]
    for resp, label, want in cases:
        assert last_number_reward(resp, label) == want, (resp, label)


# ---------------------------------------------------------------------------------------------
# RewardComputer


def test_weighted_sum_and_per_verifier_scores():
    responses = [
        "<think>add</think><answer>145</answer>",  # right, formatted
        "<think>add</think><answer>146</answer>",  # wrong, formatted
        "145",  # right, unformatted
        "nothing",  # wrong, unformatted
    ]
    labels = ["145", "145", "145", "145"]
    rc = RewardComputer(["last_number", "format"], [1.0, 0.25])
    out = rc(responses, labels)
    correct = np.array([1.0, 0.0, 1.0, 0.0])
    formatted = np.array([1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(out.scores, [1.25, 0.25, 1.0, 0.0])
    np.testing.assert_allclose(out.scores, 1.0 * correct + 0.25 * formatted)
    assert out.scores.dtype == np.float32
    np.testing.assert_array_equal(out.per_verifier["last_number"], correct)
    np.testing.assert_array_equal(out.per_verifier["format"], formatted)
    m = out.metrics()
    assert m["grpo/rewards/last_number/mean"] == 0.5
    assert m["grpo/rewards/format/mean"] == 0.5
    assert m["grpo/rewards/mean"] == pytest.approx(0.625)


def test_reward_computer_validation():
    with pytest.raises(ValueError, match=r"verifier_function: unknown verifier 'bogus'.*format.*last_number.*math_acc"):
        RewardComputer(["format", "bogus"], [1.0, 1.0])
    with pytest.raises(ValueError, match="verifier_function.*verifier_weight"):
        RewardComputer(["format", "last_number"], [1.0])
    with pytest.raises(ValueError, match="twice"):
        RewardComputer(["format", "format"], [1.0, 1.0])


def test_custom_reward_file_decorator(tmp_path):
    f = tmp_path / "my_rewards.py"
    f.write_text(
        textwrap.dedent(
            """
            from mindrl.rewards import register_reward

            @register_reward("short_answer")
            def short_answer(response, label):
                return 1.0 if len(response) <= 5 else 0.0
            """
        )
    )
    rc = RewardComputer(["short_answer", "last_number"], [2.0, 1.0], custom_reward_file=str(f))
    out = rc(["145", "the answer is 145"], ["145", "145"])
    np.testing.assert_allclose(out.scores, [2.0 * 1 + 1.0 * 1, 2.0 * 0 + 1.0 * 1])


def test_a_reward_file_runs_once_per_process_for_the_config_check_and_the_trainer(tmp_path):
    """The config check executes a plain reward file to learn its names; building the rewards must not run it again
    (its top-level code may download, print or count), unless the file changed."""
    f = tmp_path / "counted_rewards.py"
    runs = tmp_path / "runs.txt"
    f.write_text(textwrap.dedent(f"""
        import os
        from mindrl.rewards import register_reward
        with open({str(runs)!r}, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")

        @register_reward("counted_short")
        def counted_short(response, label):
            return 1.0 if len(response) <= 5 else 0.0
        """))
    from mindrl.rewards.custom import check_verifier_names
    assert check_verifier_names(["counted_short"], str(f)) == []
    def runs_here():  # reward worker processes load the file themselves: count this process's runs
        return runs.read_text().splitlines().count(str(os.getpid()))

    rc = RewardComputer(["counted_short"], [1.0], custom_reward_file=str(f))
    assert runs_here() == 1
    np.testing.assert_allclose(rc(["12", "123456"], ["", ""]).scores, [1.0, 0.0])
    f.write_text(f.read_text().replace("<= 5", "<= 6"))
    os.utime(f, ns=(os.stat(f).st_atime_ns, os.stat(f).st_mtime_ns + 10**9))  # changed: it runs again
    rc = RewardComputer(["counted_short"], [1.0], custom_reward_file=str(f))
    assert runs_here() == 2
    np.testing.assert_allclose(rc(["12", "123456"], ["", ""]).scores, [1.0, 1.0])


def test_custom_reward_file_function_spec(tmp_path, monkeypatch):
    f = tmp_path / "plain.py"
    f.write_text("def has_please(response, label):\n    return float('please' in response)\n")
    rc = RewardComputer(["has_please"], [0.5], custom_reward_file=f"{f}:has_please")
    np.testing.assert_allclose(rc(["please", "no"], ["", ""]).scores, [0.5, 0.0])
    # package.module:function
    (tmp_path / "rewardpkg").mkdir()
    (tmp_path / "rewardpkg" / "__init__.py").write_text("")
    (tmp_path / "rewardpkg" / "mod.py").write_text("def exact(response, label):\n    return float(response == label)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = RewardComputer(["exact"], [1.0], custom_reward_file=["rewardpkg.mod:exact"])
    np.testing.assert_allclose(rc(["a", "b"], ["a", "a"]).scores, [1.0, 0.0])
    with pytest.raises(ValueError, match="no function 'missing'"):
        RewardComputer(["x"], [1.0], custom_reward_file=f"{f}:missing")


def test_custom_reward_cannot_shadow_builtin(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("from mindrl.rewards import register_reward\nregister_reward('format')(lambda r, l: 1.0)\n")
    with pytest.raises(ValueError, match="built-in"):
        RewardComputer(["format"], [1.0], custom_reward_file=str(f))


def test_custom_reward_error_names_the_function(tmp_path):
    f = tmp_path / "boom.py"
    f.write_text("def boom(response, label):\n    raise KeyError('x')\n")
    rc = RewardComputer(["boom"], [1.0], custom_reward_file=f"{f}:boom")
    with pytest.raises(RuntimeError, match="'boom' failed on sample 0"):
        rc(["a"], ["b"])


def test_import_is_cheap():
    code = "import sys, mindrl.rewards; print(any(m in sys.modules for m in ('mindspore', 'math_verify', 'sympy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("response,want", [
    ("no steps here", 0.0),
    ("Step 1: add", 1 / 3),
    ("Step 1: add. Step 2: subtract", 2 / 3),
    ("1. first line\n2. second line", 1 / 3),        # only the string's first line counts as ^\d+\. (no MULTILINE)
    ("First, a\n- b\n* c\nFinally, d", 1.0),          # four markers, capped at 1
])
def test_step_is_mindspeed_rls(response, want):
    from mindrl.rewards.verifiers import get_verifier
    assert get_verifier("step")(response, None) == pytest.approx(want)
