"""MindSpeed-RL's rule verifiers under MindSpeed-RL's names, scoring as MindSpeed-RL's functions do.

The names in ``rl_config.verifier_function`` are MindSpeed-RL's vocabulary, so each of its names here takes the
answer out of the response the way MindSpeed-RL does, checks the same layout, and gives the same values. Read from
Ascend/MindSpeed-RL ``mindspeed_rl/models/rule_verifier.py`` (88bc30d6), ``models/math_dapo.py`` (12f91264),
``models/math_verify.py``, ``utils/math_eval_toolkit/parser.py`` and mathruler 0.1.0's ``grader.py``:

============================  ====================================================================  ===============
name                          what MindSpeed-RL computes                                            values
============================  ====================================================================  ===============
``acc``                       qwen's ``extract_answer(..., "math")`` on the response cut to the     1 / -0.5 / -1
                              assistant turn; right, wrong, or nothing extracted / no "boxed"       (cut: 0)
``math_17k_acc``              mathruler's ``extract_boxed_content`` (last ``\\boxed{``) graded      1 / 0
``acc_for_ppo``               the same as ``math_17k_acc``                                          1 / 0
``base_acc``                  ``math_17k_acc`` AND the response fully matches                       1 / 0
                              ``<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>``
``math_verify_reward``        that layout AND math-verify's ``math_metric`` (gold ``\\boxed{label}``) 1 / 0
``acc_for_dapo``              DAPO's Minerva check: last ``Answer: ...`` line in the last 300        1 / -1
                              characters, ``normalize_final_answer`` on both, string equality
``format``                    ``^<think>.*?</think>\\s*<answer>.*?</answer>$`` (DOTALL, MULTILINE)    1 / 0
``strict_format``             one each of ``<think>``, ``</think>``, ``<answer>``, ``\\boxed{..}``,   1 / -0.5
                              ``</answer>`` in that order, starting ``<think>``, ending ``</answer>``
``step``                      ``min(1, n / 3)`` for n step markers                                  0 .. 1
============================  ====================================================================  ===============

What differs, on purpose:

- The equivalence judgement. MindSpeed-RL grades an extracted answer with mathruler's ``grade_answer``
  (``math_17k_acc``, ``acc_for_ppo``, ``base_acc``) or qwen's ``math_equal`` (``acc``); here math-verify decides, in
  the timed ``MathVerifyPool`` (``verifiers.verify_prepared``). The extraction feeding it and the values are
  MindSpeed-RL's. Identical strings and two different integers are decided without math-verify. (So, for example,
  qwen's ``math_equal`` also takes 50 for a label of 5000 or 0.5, as a percentage; math-verify does not.)
- ``acc``'s extraction converts English number words ("two" -> "2") with the word2number package in MindSpeed-RL;
  here only a digit string is converted (leading zeros dropped), number words stay as they are.
- Time limits. MindSpeed-RL gives ``acc`` and ``strict_format`` 1 s each and scores an overrun 0.0. Here every
  reward call has ``verifier_timeout`` (an overrun is a failure, ``docs/rewards.md``), and a math-verify check cut by
  the timeout scores 0.0 for ``acc`` (its timeout value) and 0.0 for the others. The scans here are linear time.
- ``acc_for_dapo``: MindSpeed-RL switches to its strict-box check when ``multi_turn_enable`` is on; mindrl has no
  multi-turn rollout, so it is always the Minerva check (MindSpeed-RL's default).
"""
import re

from .verifiers import _quick_math_verdict, _spellings, r1_layout, register_reward, verify_prepared

# ---------------------------------------------------------------------------------------------
# layouts


def r1_answer_layout(text):
    """True when ``re.fullmatch(r"<think>.*</think>.*<answer>.*\\\\boxed\\{.*\\}.*</answer>", text, re.DOTALL)``
    would match (``base_acc``'s and ``math_verify_reward``'s format check), in linear time: the text starts with
    ``<think>``, ends with ``</answer>``, and between them ``</think>``, ``<answer>``, ``\\boxed{`` and ``}`` occur in
    that order (the leftmost choice of each leaves the most room for the rest, so it decides)."""
    if not (text.startswith("<think>") and text.endswith("</answer>")):
        return False
    pos, end = 7, len(text) - 9
    for literal in ("</think>", "<answer>", "\\boxed{", "}"):
        i = text.find(literal, pos, end)
        if i < 0:
            return False
        pos = i + len(literal)
    return True


_SPACES = re.compile(r"\s*")


def think_answer_format(text):
    """True when ``re.match(r"^<think>.*?</think>\\s*<answer>.*?</answer>$", text, re.DOTALL | re.MULTILINE)``
    would match (MindSpeed-RL's ``format``), in linear time: the regex backtracks to every ``</think>`` and every
    ``</answer>``. ``$`` in MULTILINE mode is the end of the text or a newline."""
    if not text.startswith("<think>"):
        return False
    close = text.find("</think>", 7)
    while close >= 0:  # the first </think> that whitespace then <answer> follows
        opened = _SPACES.match(text, close + 8).end()
        if text.startswith("<answer>", opened):
            break
        close = text.find("</think>", opened)
    else:
        return False
    end = text.find("</answer>", opened + 8)
    while end >= 0:
        after = end + 9
        if after == len(text) or text[after] == "\n":
            return True
        end = text.find("</answer>", end + 1)
    return False


# ---------------------------------------------------------------------------------------------
# mathruler's boxed answer and its grading (math_17k_acc, acc_for_ppo, base_acc)

_BRACES = re.compile(r"[{}]")


def boxed_content(text):
    """mathruler's ``extract_boxed_content``: the content of the LAST ``\\boxed{`` (spelled exactly so: not
    ``\\fbox``, not ``\\boxed {``) up to its matching brace, stripped; the string ``"None"`` when the text has no
    ``\\boxed{`` or the last one is never closed (an earlier, closed box is not used then)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return "None"
    depth = 0
    for m in _BRACES.finditer(text, start + 7):
        if m.group() == "{":
            depth += 1
        elif depth == 0:
            return text[start + 7 : m.start()].strip()
        else:
            depth -= 1
    return "None"


def _reads_none(label):
    """mathruler's grade_answer("None", label): true when the label normalises to "none" (case, spaces, braces,
    dollars and ``\\text`` aside)."""
    return re.sub(r"\\text|[\s{}$]", "", label).lower() == "none"


def _graded(pred, label, right=1.0, wrong=0.0, cut=0.0):
    """The verdict on an extracted answer: ``right``/``wrong`` when the text decides it, else the pair for
    math-verify (scored ``right``, ``wrong``, or ``cut`` when the check was cut by the timeout)."""
    label = str(label).strip()
    if not pred.strip() or not label:
        return right if not pred.strip() and not label else wrong
    quick = _quick_math_verdict(pred, label)
    if quick is not None:
        return right if quick else wrong
    gold = _spellings(label, True)
    if (right, wrong, cut) != (1.0, 0.0, 0.0):
        gold = {"gold": gold, "scores": [right, wrong, cut]}
    return gold, _spellings(pred, True)


def math_17k_acc_prepare(response, label):
    """``math_17k_acc``'s text work: mathruler's boxed answer, graded 1 / 0."""
    pred = boxed_content(response)
    if pred == "None":  # mathruler's answer without a box: grade_answer takes it for a label that reads None only
        return 1.0 if _reads_none(str(label)) else 0.0
    return _graded(pred, label)


@register_reward("math_17k_acc", aliases=("acc_for_ppo",), _builtin=True)
def math_17k_acc(response, label):
    """MindSpeed-RL's ``math_17k_acc`` and ``acc_for_ppo``: 1.0 when the content of the last ``\\boxed{...}`` is the
    label's answer, else 0.0 (no box: 0.0)."""
    return verify_prepared([math_17k_acc_prepare(response, label)])[0]


math_17k_acc.prepare = math_17k_acc_prepare


def base_acc_prepare(response, label):
    """``base_acc``'s text work: 0.0 without the R1 layout, else as ``math_17k_acc``."""
    return math_17k_acc_prepare(response, label) if r1_answer_layout(response) else 0.0


def base_acc_score_batch(responses, labels, pool=None):
    """``base_acc`` for a batch in this process; ``pool`` is a ``MathVerifyPool``."""
    return verify_prepared([base_acc_prepare(r, lab) for r, lab in zip(responses, labels)], pool)


@register_reward("base_acc", _builtin=True)
def base_acc(response, label):
    """MindSpeed-RL's ``base_acc``: 1.0 when the response fully matches
    ``<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>`` and its last box holds the label's answer, else 0.0."""
    return base_acc_score_batch([response], [label])[0]


base_acc.prepare = base_acc_prepare


def math_verify_prepare(response, label):
    """``math_verify_reward``'s text work: 0.0 without the R1 layout, else math-verify's ``math_metric`` check of the
    whole response (expression and LaTeX targets) against ``\\boxed{label}`` (LaTeX target)."""
    if not r1_answer_layout(response):
        return 0.0
    return {"gold": "\\boxed{" + str(label) + "}", "gold_cfg": ["latex"], "pred_cfg": ["expr", "latex"]}, response


@register_reward("math_verify_reward", _builtin=True)
def math_verify_reward(response, label):
    """MindSpeed-RL's ``math_verify_reward``: 1.0 when the response has the R1 layout (as ``base_acc``) and
    math-verify finds in it the label's answer, else 0.0."""
    return verify_prepared([math_verify_prepare(response, label)])[0]


math_verify_reward.prepare = math_verify_prepare


# ---------------------------------------------------------------------------------------------
# acc: qwen's extract_answer (math_eval_toolkit/parser.py, data_name "math"), 1 / -0.5 / -1

_STOP_WORDS = ("</s>", "<|im_end|>", "<|endoftext|>")


def assistant_turn(sequence):
    """The text ``acc`` reads: from the first ``<|im_start|>assistant`` on (the marker kept), cut at each stop word
    in turn (``</s>``, ``<|im_end|>``, ``<|endoftext|>``), stripped where cut."""
    start = sequence.find("<|im_start|>assistant")
    text = sequence[start:] if start >= 0 else sequence
    for stop in _STOP_WORDS:
        if stop in text:
            text = text[: text.index(stop)].strip()
    return text


# units stripped from an answer by qwen's strip_string (mostly MathQA's), then each with an "s"; each is used as a
# regex between non-word characters, so its "." matches any character
_UNIT_TEXTS = [
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey", "prime",
    "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab", "way", "west",
    "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men", "soldier", "pie", "bc",
    "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2",
    "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "feet", "am", "pm",
    "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number", "kmph",
    "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³",
    "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g", "month", "km", "m", "cm", "mm",
    "apple", "liter", "loss", "yard", "pure", "year", "increase", "decrease", "d", "less", "Surface", "litre",
    "pi sq m", "s .", "metre", "meter", "inch",
]
_UNIT_TEXTS += [u + "s" for u in _UNIT_TEXTS]
# (pattern, a piece the text must contain for it to match: skips the regex on most answers)
_UNITS = [(re.compile(r"(^|\W)" + u + r"($|\W)"), max(u.split("."), key=len)) for u in _UNIT_TEXTS]

_VARIABLE_PREFIXES = ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to")
# "3.00x" -> "3x" and a trailing "3.00" -> "3"; the lookbehind and possessive runs keep these linear (a match can only
# start where a run of digits does, so they change nothing else)
_POINT_ZEROS = re.compile(r"(?<!\d)(\d++)\.0*+(\D)")
_POINT_ZEROS_END = re.compile(r"(?<!\d)(\d++)\.0*+$")
_SQRT_SHORT = re.compile(r"\\sqrt(\w+)")
_LAST_NUMBER = re.compile(r"-?\d*\.?\d+")
_CANONICAL_INT = re.compile(r"-?[1-9][0-9]*|0")


def _replace_braced(text, opener, repl):
    """``re.sub(re.escape(opener) + r"(.*?)\\}", ...)`` on a text without newlines, in linear time: each ``opener``
    up to the next ``}`` becomes ``repl(content)``, left to right."""
    out, pos = [], 0
    while True:
        i = text.find(opener, pos)
        j = text.find("}", i + len(opener)) if i >= 0 else -1
        if j < 0:
            break
        out += [text[pos:i], repl(text[i + len(opener) : j])]
        pos = j + 1
    return "".join(out) + text[pos:]


def _digit_string_as_int(text):
    """What word2number's ``word_to_num`` does to a plain digit string (``"05"`` -> ``"5"``); number words are not
    converted here."""
    t = text.replace("-", " ")
    if t.isdigit():
        try:
            return str(int(t))
        except ValueError:  # a digit int() refuses ("²"): word2number raises, the text stays
            return text
    return text


def _check_fracs(text):
    """qwen's ``_fix_fracs`` as MindSpeed-RL ships it leaves the text as it is, except that it raises IndexError when
    the first ``\\frac`` not followed by ``{`` is followed by fewer than two characters (``acc`` then scores 0.0)."""
    for piece in text.split("\\frac")[1:]:
        if piece[:1] != "{":
            if len(piece) < 2:
                raise IndexError("string index out of range")
            return


def _slash_fraction(text):
    """qwen's ``_fix_a_slash_b``: ``a/b`` with two integers (or parts containing ``sqrt``) becomes a fraction. Its
    source writes ``"\\frac{"`` in a plain string, so the result starts with a form feed and ``rac{``: that is what
    MindSpeed-RL grades, and what is graded here."""
    parts = text.split("/")
    if len(parts) != 2:
        return text
    for part in parts:  # int(part) must give back the same text; CPython refuses more than 4300 digits
        if "sqrt" not in part and not (_CANONICAL_INT.fullmatch(part) and len(part.lstrip("-")) <= 4300):
            return text
    return "\x0crac{" + parts[0] + "}{" + parts[1] + "}"


def strip_answer(text):
    """qwen's ``strip_string(text)`` (units not skipped), step for step; number words aside
    (``_digit_string_as_int``)."""
    s = str(text).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = _replace_braced(s, "\\begin{array}{", lambda _: "\\begin{pmatrix}")
    s = s.replace("\\end{array}", "\\end{pmatrix}").replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    if s.endswith("}") and "\\text{" in s:  # a trailing \text{unit}: cut from the first \text{ on, unless that is all
        cut = s[: s.find("\\text{")].strip()
        s = cut or s
    for _ in range(2):
        for pattern, piece in _UNITS:
            if piece in s:
                s = pattern.sub(r"\1\2", s) or s
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\(", "").replace("\\)", "")
    s = _digit_string_as_int(s)
    s = _replace_braced(s, "\\text{", lambda inner: inner)
    for prefix in _VARIABLE_PREFIXES:
        s = s.replace(prefix, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = _replace_braced(s, "\\mbox{", lambda _: "")
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = _POINT_ZEROS_END.sub(r"\1", _POINT_ZEROS.sub(r"\1\2", s))
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s).replace(" ", "")
    _check_fracs(s)
    return _slash_fraction(s)


def _balanced_tail(tail):
    """The text after ``tail``'s opening ``{`` up to its matching ``}``, or all of it when that never comes."""
    depth = 1
    for m in _BRACES.finditer(tail, 1):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return tail[1 : m.start()]
    return tail[1:]


def extract_answer(text):
    """qwen's ``extract_answer(text, "math")``: Minerva's "final answer is $...$. I hope" if present, else what
    follows the last "boxed" (its braced content, or up to a ``$``), else after "he answer is" / "final answer is" /
    "答案是", else the last number; then one newline run, a leading ":", a trailing "." and "/" are dropped and
    ``strip_answer`` normalises it. May raise (``_check_fracs``), as MindSpeed-RL's does."""
    text = text.replace("\u043a\u0438", "")
    if "final answer is $" in text and "$. I hope" in text:
        pred = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif "boxed" in text:
        tail = text.rpartition("boxed")[2]
        if not tail:
            return ""
        pred = _balanced_tail(tail) if tail[0] == "{" else tail.split("$")[0].strip()
    elif "he answer is" in text:
        pred = text.rpartition("he answer is")[2].strip()
    elif "final answer is" in text:
        pred = text.rpartition("final answer is")[2].strip()
    elif "答案是" in text:
        pred = text.split("答案是")[1].strip().split("\n\n")[0].strip()
    else:
        numbers = _LAST_NUMBER.findall(text.replace(",", ""))
        pred = numbers[-1] if numbers else ""
    pred = re.sub(r"\n\s*", "", pred)
    if pred[:1] == ":":
        pred = pred[1:]
    if pred[-1:] == ".":
        pred = pred[:-1]
    if pred[-1:] == "/":
        pred = pred[:-1]
    return strip_answer(pred)


def acc_prepare(response, label):
    """``acc``'s text work: -1.0 when nothing is extracted or the turn has no "boxed", 0.0 when the extraction raises
    (MindSpeed-RL catches it so), 1.0 for the same text as the label (case aside), else the pair for math-verify,
    scored 1.0 / -0.5 (0.0 when cut by the timeout)."""
    text = assistant_turn(response)
    try:
        pred = extract_answer(text)
    except Exception:  # noqa: BLE001 - MindSpeed-RL's acc scores any failure of its worker 0.0
        return 0.0
    if not pred or "boxed" not in text:
        return -1.0
    if pred.strip().lower() == str(label).strip().lower():
        return 1.0
    return _graded(pred, label, right=1.0, wrong=-0.5, cut=0.0)


def acc_score_batch(responses, labels, pool=None):
    """``acc`` for a batch in this process; ``pool`` is a ``MathVerifyPool``."""
    return verify_prepared([acc_prepare(r, lab) for r, lab in zip(responses, labels)], pool)


@register_reward("acc", _builtin=True)
def acc(response, label):
    """MindSpeed-RL's ``acc``: 1.0 right, -0.5 wrong, -1.0 when no answer was extracted or the response (cut to the
    assistant turn) has no "boxed"."""
    return acc_score_batch([response], [label])[0]


acc.prepare = acc_prepare


# ---------------------------------------------------------------------------------------------
# acc_for_dapo: DAPO's math_dapo.compute_score, Minerva style

# normalize_final_answer's tables (from Minerva, via DAPO and MindSpeed-RL), applied in this order
DAPO_SUBSTITUTIONS = [
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
]
DAPO_REMOVED_EXPRESSIONS = [
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue", "points",
    "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges", "students",
    "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
    "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
]
_TEXT = re.compile(r"\\text\{(.*?)\}")
_TEXTBF = re.compile(r"\\textbf\{(.*?)\}")
_OVERLINE = re.compile(r"\\overline\{(.*?)\}")
_BOXED_GREEDY = re.compile(r"\\boxed\{(.*)\}")
_FRAC_SHORT = re.compile(r"frac([^{])(.)")
_SQRT_SHORT_DAPO = re.compile(r"sqrt([^{])")
_MINERVA_ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


def _between_first_dollars(text):
    """Each line with two ``$`` or more becomes ``$`` + what lies between its first two + ``$`` (what
    ``re.sub(r"(.*?)(\\$)(.*?)(\\$)(.*)", "$\\\\3$", text)`` does: ``.`` stops at newlines)."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        a = line.find("$")
        b = line.find("$", a + 1) if a >= 0 else -1
        if b >= 0:
            lines[k] = "$" + line[a + 1 : b] + "$"
    return "\n".join(lines)


def normalize_final_answer(final_answer):
    """DAPO's (Minerva's) ``normalize_final_answer``, giving the same strings: the part after the last ``=``, the
    substitution and removal tables in order, the math between the first ``$...$`` of a line, ``\\text{}``,
    ``\\textbf{}``, ``\\overline{}`` and ``\\boxed{}`` unwrapped, ``\\fracab`` -> ``\\frac{a}{b}``, ``\\sqrta`` ->
    ``\\sqrt{a}``, ``$`` dropped, and commas dropped from a number that is all digits."""
    s = final_answer.split("=")[-1]
    for before, after in DAPO_SUBSTITUTIONS:
        s = s.replace(before, after)
    for expr in DAPO_REMOVED_EXPRESSIONS:
        s = s.replace(expr, "")
    s = _between_first_dollars(s)
    for wrapper in (_TEXT, _TEXTBF, _OVERLINE, _BOXED_GREEDY):
        s = wrapper.sub(r"\1", s)
    s = _FRAC_SHORT.sub(r"frac{\1}{\2}", s)
    s = _SQRT_SHORT_DAPO.sub(r"sqrt{\1}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def minerva_answer(response):
    """The answer DAPO reads: the last ``Answer: ...`` (any case) in the response's last 300 characters, else
    ``"[INVALID]"``; normalised."""
    found = _MINERVA_ANSWER.findall(response[-300:])
    return normalize_final_answer(found[-1] if found else "[INVALID]")


@register_reward("acc_for_dapo", _builtin=True)
def acc_for_dapo(response, label):
    """MindSpeed-RL's ``acc_for_dapo`` (DAPO's ``compute_score``): 1.0 when the last ``Answer: ...`` line in the
    last 300 characters normalises to the same string as the label, else -1.0."""
    return 1.0 if minerva_answer(response) == normalize_final_answer(str(label)) else -1.0


# ---------------------------------------------------------------------------------------------
# format, strict_format, step


@register_reward("format", _builtin=True)
def format_reward(response, label=None):
    """MindSpeed-RL's ``format``: 1.0 when the response starts with ``<think>``, has a ``</think>``, whitespace,
    ``<answer>``, and a ``</answer>`` that ends a line, else 0.0 (``think_answer_format``)."""
    return 1.0 if think_answer_format(response) else 0.0


@register_reward("strict_format", _builtin=True)
def strict_format_reward(response, label=None):
    """MindSpeed-RL's ``strict_format``: 1.0 when the response has exactly one each of ``<think>``, ``</think>``,
    ``<answer>``, ``\\boxed{...}`` (closed on its line) and ``</answer>``, in that order, starting with ``<think>``
    and ending with ``</answer>`` (``r1_layout``), else -0.5."""
    return 1.0 if r1_layout(response) else -0.5


_STEP_MARKERS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")


@register_reward("step", _builtin=True)
def reasoning_steps(response, label=None):
    """MindSpeed-RL's ``step``: min(1, n / 3) for n step markers ("Step 1:", "2." at the very start, a line starting
    "-" or "*", First/Second/Next/Finally followed by a comma)."""
    return min(1.0, len(_STEP_MARKERS.findall(response)) / 3.0)
