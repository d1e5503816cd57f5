"""MindSpeed-RL's verifier names score as MindSpeed-RL's functions do.

Every expected value below was worked out by reading MindSpeed-RL's code (mindspeed_rl/models/rule_verifier.py
@88bc30d6, models/math_dapo.py @12f91264, models/math_verify.py, utils/math_eval_toolkit/parser.py) and mathruler
0.1.0's grader.py, not by running mindrl; the comment on a row says why. Rows whose verdict needs the equivalence
judgement use answers that mathruler / qwen's math_equal and math-verify judge alike. The layout scans are also
checked against the regexes MindSpeed-RL runs, on random texts.
"""
import random
import re
import time

import numpy as np
import pytest

from mindrl.rewards import MathVerifyPool, RewardComputer, get_verifier
from mindrl.rewards import mindspeed_verifiers as ms
from mindrl.rewards.verifiers import NOT_PROVIDED, r1_layout

HANG = "\\boxed{9^{9^{9^{9}}}}"  # sympy evaluates this power tower for minutes without a timeout


@pytest.fixture(scope="module")
def pool():
    p = MathVerifyPool(num_workers=1, timeout=20.0)
    yield p
    p.close()


def scores(name, rows, pool):
    """The verifier's scores on ``rows`` (response, label, expected) in this process, with ``pool`` for math-verify."""
    fn = get_verifier(name)
    prepare = getattr(fn, "prepare", None)
    if prepare is None:
        return [fn(r, lab) for r, lab, _ in rows]
    from mindrl.rewards.verifiers import verify_prepared
    return verify_prepared([prepare(r, lab) for r, lab, _ in rows], pool)


def check(name, rows, pool):
    got = scores(name, rows, pool)
    bad = [(r, lab, want, g) for (r, lab, want), g in zip(rows, got) if g != want]
    assert not bad, f"{name}: (response, label, expected, got) {bad}"


# ---------------------------------------------------------------------------------------------
# math_17k_acc and acc_for_ppo: grade_answer(extract_boxed_content(response), label), 1 / 0

MATH_17K = [
    ("The sum is \\boxed{145}.", "145", 1.0),
    ("The sum is \\boxed{146}.", "145", 0.0),
    ("The sum is 145.", "145", 0.0),                          # no box: the answer is the string "None"
    ("no box at all", "None", 1.0),                            # ... which a label "None" equals
    ("\\boxed{3}, no: \\boxed{145}", "145", 1.0),              # the last box
    ("\\boxed{145}, no: \\boxed{3}", "145", 0.0),
    ("\\boxed{145}, then \\boxed{3", "145", 0.0),              # the last box is unclosed: "None", not the first box
    ("<think>\\boxed{145}</think><answer>146</answer>", "145", 1.0),  # a box outside <answer> counts
    ("\\fbox{145}", "145", 0.0),                               # only "\boxed{" is read
    ("\\boxed {145}", "145", 0.0),
    ("\\boxed{ 145 }", "145", 1.0),                            # stripped
    ("\\boxed{\\boxed{145}}", "145", 1.0),                     # rfind finds the inner box
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{0.51}", "0.5", 0.0),
    ("\\boxed{}", "145", 0.0),
]


@pytest.mark.parametrize("name", ["math_17k_acc", "acc_for_ppo"])
def test_math_17k_acc_and_acc_for_ppo(name, pool):
    check(name, MATH_17K, pool)


def test_boxed_content_is_mathrulers():
    assert ms.boxed_content("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert ms.boxed_content("\\boxed{ x^{2} }") == "x^{2}"
    assert ms.boxed_content("\\boxed{1} \\boxed{2") == "None"
    assert ms.boxed_content("nothing") == "None"
    assert ms.boxed_content("\\fbox{3}") == "None"


# ---------------------------------------------------------------------------------------------
# base_acc: fullmatch of <think>.*</think>.*<answer>.*\boxed\{.*\}.*</answer> (DOTALL) AND math_17k_acc, 1 / 0

BASE_ACC = [
    ("<think>add</think><answer>so \\boxed{5}</answer>", "5", 1.0),
    ("<think>add</think> <answer>\\boxed{6}</answer>", "5", 0.0),           # wrong answer
    ("<think>add</think><answer>5</answer>", "5", 0.0),                       # no box
    ("<answer>\\boxed{5}</answer>", "5", 0.0),                                # no think block
    ("<think>a</think><answer>\\boxed{5}</answer> ok", "5", 0.0),           # text after </answer>
    ("<think>a</think><answer>\\boxed{5}</answer>\n", "5", 0.0),            # even a newline
    ("<think>a</think><answer>\\boxed{4} \\boxed{5}</answer>", "5", 1.0),   # two boxes pass; the last counts
    ("<think>a</think><answer>\\boxed{5} \\boxed{4}</answer>", "5", 0.0),
    ("<think>\\boxed{5}</think><answer>5</answer>", "5", 0.0),               # the box is outside the answer
    ("<think>a</think><think>b</think><answer>\\boxed{5}</answer>", "5", 1.0),  # repeated tags pass the regex
    ("<think>a\n</think>\n<answer>\n\\boxed{5}\n</answer>", "5", 1.0),       # DOTALL
    ("<think>a</think><answer>\\boxed{5</answer>", "5", 0.0),                # no "}" after the box
    ("<think>a</think><answer>\\boxed{1}</answer>\\boxed{5}</answer>", "5", 1.0),  # layout holds; last box is 5
    (" <think>a</think><answer>\\boxed{5}</answer>", "5", 0.0),              # must start with <think>
]


def test_base_acc(pool):
    check("base_acc", BASE_ACC, pool)


# ---------------------------------------------------------------------------------------------
# math_verify_reward: the same layout AND math-verify's math_metric(\boxed{label}, response), 1 / 0

def test_math_verify_reward(pool):
    check("math_verify_reward", [
        ("<think>a</think><answer>\\boxed{5}</answer>", "5", 1.0),
        ("<think>a</think><answer>\\boxed{6}</answer>", "5", 0.0),
        ("\\boxed{5}", "5", 0.0),                                                 # no layout
        ("<think>a</think><answer>\\boxed{\\frac{1}{2}}</answer>", "0.5", 1.0),
        ("<think>a</think>5<answer>\\boxed{5}</answer>\n", "5", 0.0),           # not ending with </answer>
    ], pool)


# ---------------------------------------------------------------------------------------------
# acc: qwen's extract_answer on the assistant turn, math_equal; 1 / -0.5 / -1, 0.0 when the worker fails

ACC = [
    ("\\boxed{145}", "145", 1.0),
    ("\\boxed{146}", "145", -0.5),
    ("The answer is 145", "145", -1.0),            # extracted, but no "boxed": -1
    ("nothing here", "145", -1.0),
    ("\\boxed{}", "145", -1.0),                    # extracted ""
    ("ends with boxed", "5", -1.0),                # nothing after the last "boxed"
    ("\\boxed{3} or \\boxed{145}", "145", 1.0),    # the last "boxed"
    ("\\boxed{145} or \\boxed{3}", "145", -0.5),
    ("\\boxed 145$ done", "145", 1.0),             # no brace: up to the next "$"
    ("\\boxed{145}<|im_start|>assistant\\boxed{7}", "145", -0.5),    # read from the assistant turn on
    ("\\boxed{145}<|im_end|>\\boxed{7}", "145", 1.0),                # cut at <|im_end|>
    ("\\boxed{7}</s>\\boxed{145}", "145", -0.5),                    # cut at </s>
    ("\\boxed{145}<|endoftext|>", "145", 1.0),
    ("The answer is 145<|im_end|> see \\boxed{1}", "145", -1.0),    # the box was cut away
    ("The final answer is $7$. I hope it is correct. \\boxed{145}", "145", -0.5),  # Minerva's line wins
    ("\\boxed{A}", "a", 1.0),                      # math_equal's first test ignores case
    ("\\boxed{5 cm}", "5", 1.0),                   # units stripped
    ("\\boxed{x=5}", "5", 1.0),
    ("\\boxed{3.00}", "3", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac1}", "1", 0.0),                # _fix_fracs raises IndexError: the worker's failure scores 0.0
    ("\\boxed{\\frac}", "1", 0.0),
    ("The answer is \\frac1", "1", 0.0),           # raises before the "boxed" test: 0.0, not -1
]


def test_acc(pool):
    check("acc", ACC, pool)


@pytest.mark.parametrize("text,want", [
    ("\\boxed{145}", "145"),
    ("so \\boxed{1/2}", "\x0crac{1}{2}"),         # _fix_a_slash_b writes "\frac" in a plain string: a form feed
    ("\\boxed{2/4}.", "\x0crac{2}{4}"),
    ("\\boxed{-1/2}", "\x0crac{-1}{2}"),
    ("\\boxed{01/2}", "01/2"),                     # int("01") prints as "1": not the same text, left alone
    ("\\boxed{3.50}", "3.50"),
    ("\\boxed{3.0x}", "3x"),
    ("\\boxed{\\frac12}", "\\frac12"),             # _fix_fracs returns its input when the piece has two characters
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\sqrt3}", "\\sqrt{3}"),
    ("\\boxed{10 \\text{ dollars}}", "10"),        # a trailing \text{...} is cut
    ("\\boxed{\\text{(A)}}", "(A)"),
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{5 cm}", "5"),                        # units between non-word characters go
    ("\\boxed{10 hours}", "10"),                   # "hour" + "s"
    ("\\boxed{7 q x}", "7"),                       # the unit "q ." is a regex: "." is any character
    ("\\boxed{a}", "a"),                           # a unit that would leave nothing stays
    ("\\boxed{\\$5}", "5"),
    ("\\boxed{50\\%}", "50"),
    ("\\boxed{007}", "7"),                         # a digit string read as a number (word2number's int())
    ("\\boxed{k = 4}", "4"),                       # a short left side of one "=" is dropped
    ("\\boxed{.5}", "0.5"),
    ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)"),
    ("\\boxed{\n1\n}", "1"),
    ("\\boxed{inf}", "\\infty"),
    ("The answer is: 12.", "12"),
    ("the final answer is 3/4", "\x0crac{3}{4}"),
    ("答案是 7\n\nmore", "7"),
    ("x 1,234 and 5.5 y", "5.5"),                  # the last number
    ("x -3 y", "-3"),
    ("no number", ""),
])
def test_acc_extraction(text, want):
    assert ms.extract_answer(text) == want


# ---------------------------------------------------------------------------------------------
# acc_for_dapo: math_dapo.compute_score (Minerva), 1 / -1

ACC_FOR_DAPO = [
    ("Answer: 145", "145", 1.0),
    ("Answer: 146", "145", -1.0),
    ("The answer is 145", "145", -1.0),                    # no "Answer:": [INVALID]
    ("answer : 145", "145", 1.0),                          # any case, spaces around the colon
    ("Answer:\n145", "145", 1.0),                          # \s* crosses the newline
    ("Answer: 7\nAnswer: 145", "145", 1.0),                # the last one
    ("Answer: 145\nAnswer: 7", "145", -1.0),
    ("Answer: 145\n" + "x" * 300, "145", -1.0),            # beyond the last 300 characters
    ("Answer: 145\n" + "x" * 289, "145", -1.0),            # 301 characters: the window starts at "nswer"
    ("Answer: 145\n" + "x" * 288, "145", 1.0),             # exactly 300
    ("Answer: 145 and so on", "145", -1.0),                 # the rest of the line is part of the answer
    ("y" * 1000 + "Answer: 145", "145", 1.0),
    ("Answer: $\\frac12$", "\\frac{1}{2}", 1.0),
    ("Answer: \\boxed{\\frac{1}{2}}", "\\frac12", 1.0),
    ("Answer: \\boxed{\\frac{1}{2}}", "0.5", -1.0),        # strings, not math
    ("Answer: x = 5", "5", 1.0),
    ("Answer: 1,000", "1000", 1.0),
    ("Answer: 1,000.5", "1000.5", -1.0),                   # commas go only from an all-digit number
    ("Answer: 5.", "5", -1.0),
    ("Answer: $5$.", "5", 1.0),
    ("Answer: 10 dollars", "10", 1.0),
    ("Answer: \\text{(A)}", "(A)", 1.0),
    ("Answer: 90^\\circ", "90", 1.0),
    ("Answer: 3 \\text{ cm}", "3", 1.0),
    ("Answer: 2\\sqrt3", "2\\sqrt{3}", 1.0),
    ("**Answer:** 145", "145", -1.0),                      # "**" is part of the answer
]


def test_acc_for_dapo(pool):
    check("acc_for_dapo", ACC_FOR_DAPO, pool)


@pytest.mark.parametrize("text,want", [
    ("1 \\text{and} 2", "12"),                  # \text{and} -> "," then an all-digit number loses its commas
    ("x = \\$5.00", "5.00"),
    ("$x^2$ and $y$", "x^2"),                   # the first $...$ of the line
    ("$a$\n$b$ c", "a\nb"),                     # per line
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # greedy to the last brace
    ("\\fracab", "\\frac{a}{b}"),
    ("\\frac1{2}", "\\frac{1}{{}2}"),           # the shortcut rule takes any second character
    ("\\sqrt2", "\\sqrt{2}"),
    ("10 \\text{ m}", "10"),                    # "\text{m}" -> "\text{}", removed
    ("5 \\mbox{ cm}", "5"),
    ("an apple", "apple"),
    ("\\$1,000", "1000"),
    ("1,000.5", "1,000.5"),
    ("\\overline{12}", "12"),
    ("a = 3 = 4", "4"),
    ("$\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("5.$", "5"),                               # ".$" -> "$"
    ("\\textbf{7} points", "7"),
    ("[INVALID]", "[INVALID]"),
])
def test_normalize_final_answer(text, want):
    assert ms.normalize_final_answer(text) == want


# ---------------------------------------------------------------------------------------------
# format: re.match(r"^<think>.*?</think>\s*<answer>.*?</answer>$", c, re.DOTALL | re.MULTILINE), 1 / 0

FORMAT = [
    ("<think>a</think><answer>42</answer>", 1.0),
    ("<think>a</think>\n\n<answer>42</answer>", 1.0),
    ("<think>a</think>42", 0.0),                                  # R1 plain text: no (r1_format says yes)
    ("<think>a</think><answer>42</answer>\nmore", 1.0),           # $ matches before a newline (MULTILINE)
    ("<think>a</think><answer>42</answer> more", 0.0),
    ("<think>a</think><answer>42</answer>\n", 1.0),
    (" <think>a</think><answer>42</answer>", 0.0),
    ("<think>a</think> x <answer>42</answer>", 0.0),
    ("<think>a</think>x</think> <answer>1</answer>", 1.0),        # a later </think> may be the one
    ("<think>a</think><answer></answer>", 1.0),                   # empty answer passes
    ("<think></think><answer>1</answer><answer>2</answer>", 1.0),
    ("<answer>1</answer>", 0.0),
    ("<think>a</think><answer>1</answer>x</answer>", 1.0),
]


@pytest.mark.parametrize("text,want", FORMAT)
def test_format(text, want):
    assert get_verifier("format")(text, "") == want


# ---------------------------------------------------------------------------------------------
# strict_format: _validate_response_structure, 1 / -0.5

STRICT_FORMAT = [
    ("<think>a</think><answer>\\boxed{5}</answer>", 1.0),
    ("<think>a</think>text<answer>\\boxed{\\frac{1}{2}}</answer>", 1.0),   # \boxed\{.*?\} finds one box
    ("<think>\nwhy\n</think>\n<answer>\n42\n</answer>", -0.5),          # no box (r1_strict_format says yes)
    ("<think>a</think><answer>\\boxed{4} \\boxed{5}</answer>", -0.5),   # two boxes
    ("<think>a</think><answer>\\boxed{\n5}</answer>", -0.5),            # the box is not closed on its line
    ("<think>\\boxed{5}</think><answer>5</answer>", -0.5),               # box outside the answer
    ("<think>a</think><answer>\\boxed{5}</answer>\n", -0.5),            # must end with </answer>
    ("<think>a</think><think>b</think><answer>\\boxed{5}</answer>", -0.5),
    ("<think>a</think><answer>\\boxed{5}</answer></answer>", -0.5),
]


@pytest.mark.parametrize("text,want", STRICT_FORMAT)
def test_strict_format(text, want):
    assert get_verifier("strict_format")(text, "") == want


def test_mindrls_former_format_checks_keep_their_meaning_under_r1_names():
    r1_format, r1_strict = get_verifier("r1_format"), get_verifier("r1_strict_format")
    assert r1_format("<think>a</think>42", "") == 1.0 and get_verifier("format")("<think>a</think>42", "") == 0.0
    text = "<think>\nwhy\n</think>\n<answer>\n42\n</answer>"
    assert r1_strict(text, "") == 1.0 and get_verifier("strict_format")(text, "") == -0.5
    assert get_verifier("math_acc") is get_verifier("deepscaler_acc")
    assert get_verifier("acc") is not get_verifier("math_acc")
    assert get_verifier("math_17k_acc") is get_verifier("acc_for_ppo")
    assert "acc_for_ppo" not in NOT_PROVIDED


# ---------------------------------------------------------------------------------------------
# the scans against the regexes MindSpeed-RL runs

R1_REGEX = re.compile(r"<think>.*</think>.*<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
FORMAT_REGEX = r"^<think>.*?</think>\s*<answer>.*?</answer>$"


def validate_structure(text):
    """MindSpeed-RL's _validate_response_structure, restated: each tag once (the box by the lazy regex), in order,
    starting with <think> and ending with </answer>."""
    boxes = re.findall(r"\\boxed\{.*?\}", text)
    first_box = re.search(r"\\boxed\{.*?\}", text)
    pos = [text.find("<think>"), text.find("</think>"), text.find("<answer>"),
           first_box.start() if first_box else -1, text.find("</answer>")]
    counts = [text.count("<think>"), text.count("</think>"), text.count("<answer>"), len(boxes),
              text.count("</answer>")]
    return (counts == [1] * 5 and pos == sorted(pos) and text.startswith("<think>") and text.endswith("</answer>"))


def test_scans_agree_with_mindspeed_rls_regexes():
    rng = random.Random(7)
    parts = ["<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "}", "{", "5", " ", "\n", "\t", "x",
             "<think>a</think>", "<answer>\\boxed{1}</answer>"]
    for _ in range(30_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        assert ms.r1_answer_layout(text) == bool(R1_REGEX.fullmatch(text)), text
        assert ms.think_answer_format(text) == bool(re.match(FORMAT_REGEX, text, re.DOTALL | re.MULTILINE)), text
        assert r1_layout(text) == validate_structure(text), text


def test_linear_rewrites_agree_with_the_regexes_they_replace():
    rng = random.Random(8)
    parts = ["1", "0", ".", "x", " ", "$", "\n", "\\text{", "}", "a", "00"]
    for _ in range(30_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        flat = text.replace("\n", "")  # strip_string removes newlines before these run
        assert ms._POINT_ZEROS.sub(r"\1\2", flat) == re.sub(r"(\d+)\.0*([^\d])", r"\1\2", flat), flat
        assert ms._POINT_ZEROS_END.sub(r"\1", flat) == re.sub(r"(\d+)\.0*$", r"\1", flat), flat
        assert ms._replace_braced(flat, "\\text{", lambda s: s) == re.sub(r"\\text\{(.*?)\}", r"\1", flat), flat
        assert ms._between_first_dollars(text) == re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", text), text


def test_scans_are_fast_on_adversarial_text():
    n = 100_000
    texts = ["\\boxed{" + "1" * n, "\\boxed{" + "a " * (n // 2), "\\boxed{" + "\\text{" * (n // 6),
             "\\boxed{" + "1." * (n // 2), "<think>" + "</think> " * (n // 9) + "x",
             "<think></think><answer>" + "</answer>x" * (n // 10), "\\boxed{" * (n // 7),
             "<think>" + "</think><answer>\\boxed{" * (n // 24) + "</answer>", "Answer:" + " " * n]
    for text in texts:
        for name in ["acc", "math_17k_acc", "base_acc", "math_verify_reward", "acc_for_dapo", "format",
                     "strict_format", "step"]:
            fn = get_verifier(name)
            t0 = time.perf_counter()
            (getattr(fn, "prepare", None) or fn)(text, "1")
            assert time.perf_counter() - t0 < 1.0, (name, text[:40])


# ---------------------------------------------------------------------------------------------
# values of checks cut by the timeout, and the names through the reward workers


def test_a_cut_check_scores_mindspeed_rls_timeout_value():
    """MindSpeed-RL's acc scores 0.0 when its worker overruns (not -0.5); the others score a cut check 0.0."""
    p = MathVerifyPool(num_workers=1, timeout=1.0)
    try:
        got = ms.acc_score_batch([HANG, "\\boxed{146}"], ["1", "145"], pool=p)
        assert got == [0.0, -0.5] and p.timeouts == 1
        assert p.verify_batch_detail([("1", HANG), ("2", "\\boxed{2}")]) == [None, True]
    finally:
        p.close()


NAMES = ["acc", "math_17k_acc", "acc_for_ppo", "base_acc", "math_verify_reward", "acc_for_dapo", "format",
         "strict_format", "step"]


def test_mindspeed_names_score_the_same_in_reward_workers(pool):
    rows = MATH_17K + BASE_ACC + ACC + ACC_FOR_DAPO
    texts, labels = [r for r, _, _ in rows], [lab for _, lab, _ in rows]
    rc = RewardComputer(NAMES, [1.0] * len(NAMES), reward_workers=1)
    try:
        out = rc(texts, labels)
        assert out.failures == 0 and out.math_timeouts == 0
        for name in NAMES:
            want = scores(name, [(t, lab, None) for t, lab in zip(texts, labels)], pool)
            assert out.per_verifier[name].tolist() == np.float32(want).tolist(), name
    finally:
        rc.close()
